"""``IRaftStorage`` in memory: for tests, simulations and a throwaway single node."""

from __future__ import annotations

from collections.abc import Sequence

from zope.interface import implementer

from mqbroker.raft.log import IRaftStorage, StoredEntries
from mqbroker.raft.messages import Configuration, Entry, HardState, Snapshot, SnapshotMetadata


@implementer(IRaftStorage)
class MemoryRaftStorage(StoredEntries):
    """Raft state kept in lists; "durable" means it survives the ``RaftCore`` that used it."""

    def __init__(self, configuration: Configuration | None = None) -> None:
        """Start empty; a bootstrap ``configuration`` becomes the snapshot at index 0."""
        self._hard_state = HardState()
        self._snapshot = Snapshot(metadata=SnapshotMetadata(configuration=configuration or Configuration()))
        self._entries: list[Entry] = []


    def save(self, hard_state: HardState | None, entries: Sequence[Entry], snapshot: Snapshot | None) -> None:
        """Keep a ``Ready``'s snapshot, entries and hard state, in that order."""
        if snapshot is not None:
            self._snapshot = snapshot
            self._entries = []
        if entries:
            first = entries[0].index
            assert self.first_index() <= first <= self.last_index() + 1, "a gap in the stored log"
            del self._entries[first - self.first_index() :]
            self._entries.extend(entries)
        if hard_state is not None:
            self._hard_state = hard_state

    def compact(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` and drop the entries up to its index."""
        index = snapshot.metadata.index
        assert self.first_index() <= index <= self.last_index(), "compacting outside the stored log"
        assert self.term(index) == snapshot.metadata.term
        del self._entries[: index + 1 - self.first_index()]
        self._snapshot = snapshot
