"""``IRaftStorage`` in memory: for tests, simulations and a throwaway single node."""

from __future__ import annotations

from collections.abc import Sequence

from zope.interface import implementer

from mqbroker.raft.log import IRaftStorage
from mqbroker.raft.messages import Configuration, Entry, HardState, Snapshot, SnapshotMetadata


@implementer(IRaftStorage)
class MemoryRaftStorage:
    """Raft state kept in lists; "durable" means it survives the ``RaftCore`` that used it."""

    def __init__(self, configuration: Configuration | None = None) -> None:
        """Start empty; a bootstrap ``configuration`` becomes the snapshot at index 0."""
        self._hard_state = HardState()
        self._snapshot = Snapshot(metadata=SnapshotMetadata(configuration=configuration or Configuration()))
        self._entries: list[Entry] = []

    def hard_state(self) -> HardState:
        """The last saved term, vote and commit index."""
        return self._hard_state

    def snapshot(self) -> Snapshot:
        """The latest snapshot."""
        return self._snapshot

    def first_index(self) -> int:
        """The snapshot index + 1."""
        return self._snapshot.metadata.index + 1

    def last_index(self) -> int:
        """The index of the last entry."""
        return self._snapshot.metadata.index + len(self._entries)

    def term(self, index: int) -> int:
        """The term of the entry at ``index`` (or of the snapshot)."""
        offset = index - self.first_index()
        if offset == -1:
            return self._snapshot.metadata.term
        assert 0 <= offset < len(self._entries), (index, self.first_index(), self.last_index())
        return self._entries[offset].term

    def entries(self, low: int, high: int) -> list[Entry]:
        """The entries at ``[low, high)``."""
        first = self.first_index()
        assert first <= low <= high <= self.last_index() + 1
        return self._entries[low - first : high - first]

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
