"""The Raft log as the core sees it: durable storage behind ``IRaftStorage`` plus unstable entries.

Entries the core appends (or a snapshot it receives) are *unstable* until the node reports
them persisted through ``RaftCore.advance``; until then they live here and shadow whatever
storage holds at the same indexes. Index 0 (term 0) is the empty prefix every log shares;
after compaction, the snapshot's (index, term) stands in for the entries it replaced.
"""

from __future__ import annotations

from collections.abc import Sequence

from zope.interface import Interface

from mqbroker.raft.messages import Entry, HardState, Snapshot


class IRaftStorage(Interface):
    """Durable hard state, log entries and latest snapshot of one Raft node.

    The core only reads through the first six methods, always within range
    (``first_index() - 1 <= index <= last_index()``). The node writes through ``save`` and
    ``compact`` as ``Ready`` tells it to.
    """

    def hard_state() -> HardState:
        """The last saved term, vote and commit index."""

    def snapshot() -> Snapshot:
        """The latest snapshot (index 0 and empty data if there is none)."""

    def first_index() -> int:
        """The index of the first entry still stored: the snapshot index + 1."""

    def last_index() -> int:
        """The index of the last stored entry (the snapshot index if there are none)."""

    def term(index: int) -> int:
        """The term of the entry at ``index``; ``first_index() - 1`` gives the snapshot's term."""

    def entries(low: int, high: int) -> list[Entry]:
        """The entries at indexes ``[low, high)``, ``first_index() <= low <= high <= last_index() + 1``."""

    def save(hard_state: HardState | None, entries: Sequence[Entry], snapshot: Snapshot | None) -> None:
        """Durably store a ``Ready``: the snapshot replaces the whole log, then entries replace
        any stored at the same or later indexes, then the hard state; return only once durable."""

    def compact(snapshot: Snapshot) -> None:
        """Keep ``snapshot`` (taken by the application at an applied index) and drop the entries it covers."""


class StoredEntries:
    """The read side of ``IRaftStorage`` over a snapshot and the entries after it, kept in memory.

    Both storages hold their entries in memory (the file storage also writes them to disk), so
    they share these reads; subclasses set ``_hard_state``, ``_snapshot`` and ``_entries``.
    """

    _hard_state: HardState
    _snapshot: Snapshot
    _entries: list[Entry]

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


class RaftLog:
    """Entries and snapshot of one node, stable or not, with its commit and applied indexes."""

    def __init__(self, storage: IRaftStorage) -> None:
        self.storage = storage
        #: Index of the first unstable entry; storage holds every entry below it.
        self.unstable_offset = storage.last_index() + 1
        self.unstable_entries: list[Entry] = []
        #: A snapshot received from the leader and not yet persisted.
        self.unstable_snapshot: Snapshot | None = None
        self.committed = storage.first_index() - 1
        self.applied = storage.first_index() - 1

    def __repr__(self) -> str:
        return (
            f"RaftLog(first={self.first_index()}, last={self.last_index()}, committed={self.committed}, "
            f"applied={self.applied}, unstable_offset={self.unstable_offset})"
        )

    # ---- reading ---------------------------------------------------------------------------

    def first_index(self) -> int:
        """The index of the first entry available."""
        if self.unstable_snapshot is not None:
            return self.unstable_snapshot.metadata.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        """The index of the last entry (or of the snapshot, if the log is otherwise empty)."""
        if self.unstable_entries:
            return self.unstable_offset + len(self.unstable_entries) - 1
        if self.unstable_snapshot is not None:
            return self.unstable_snapshot.metadata.index
        return self.storage.last_index()

    def last_term(self) -> int:
        """The term of the last entry."""
        term = self.term(self.last_index())
        assert term is not None
        return term

    def term(self, index: int) -> int | None:
        """The term of the entry at ``index``, or None if it is compacted or not there."""
        if index < self.first_index() - 1 or index > self.last_index():
            return None
        if index >= self.unstable_offset:
            return self.unstable_entries[index - self.unstable_offset].term
        if self.unstable_snapshot is not None:
            assert index == self.unstable_snapshot.metadata.index
            return self.unstable_snapshot.metadata.term
        return self.storage.term(index)

    def matches(self, index: int, term: int) -> bool:
        """Whether this log has an entry at ``index`` with ``term``."""
        return self.term(index) == term

    def entries(self, low: int, high: int) -> list[Entry]:
        """Entries ``[low, high)``; ``low`` must not be compacted."""
        assert self.first_index() <= low <= high <= self.last_index() + 1, (low, high, self)
        stable = self.storage.entries(low, min(high, self.unstable_offset)) if low < self.unstable_offset else []
        start = max(low, self.unstable_offset) - self.unstable_offset
        stop = high - self.unstable_offset
        return stable + (self.unstable_entries[start:stop] if stop > start else [])

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Whether a log ending at (last_index, last_term) is at least as up to date as this one."""
        my_last_term = self.last_term()
        return last_term > my_last_term or (last_term == my_last_term and last_index >= self.last_index())

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The last entry at or below ``index`` whose term is at most ``term``: a likely match point."""
        while index > 0:
            my_term = self.term(index)
            if my_term is None:
                return index, 0
            if my_term <= term:
                return index, my_term
            index -= 1
        return 0, 0

    def next_committed_entries(self) -> list[Entry]:
        """Committed entries not yet handed to the application."""
        low = max(self.applied + 1, self.first_index())
        if self.committed < low:
            return []
        return self.entries(low, self.committed + 1)

    # ---- changing --------------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Append ``entries``, replacing any entries at their indexes and after."""
        if not entries:
            return
        first = entries[0].index
        assert first > self.committed, f"truncating committed entry {first} (committed {self.committed})"
        assert first <= self.last_index() + 1, "a gap in the log"
        if first <= self.unstable_offset:
            self.unstable_offset = first
            self.unstable_entries = list(entries)
        else:
            del self.unstable_entries[first - self.unstable_offset :]
            self.unstable_entries.extend(entries)

    def commit_to(self, index: int) -> None:
        """Raise the commit index (never lowers it)."""
        if index > self.committed:
            assert index <= self.last_index(), f"commit {index} beyond the log ({self})"
            self.committed = index

    def maybe_commit(self, index: int, term: int) -> bool:
        """Commit up to ``index`` if that entry is of ``term`` (a leader commits only its own term)."""
        if index > self.committed and self.term(index) == term:
            self.commit_to(index)
            return True
        return False

    def applied_to(self, index: int) -> None:
        """Record that the application has applied every entry up to ``index``."""
        assert self.applied <= index <= self.committed, (index, self)
        self.applied = index

    def stable_to(self, index: int, term: int) -> None:
        """Entries up to ``index`` are persisted (ignored if that entry was replaced since)."""
        if index < self.unstable_offset or self.term(index) != term:
            return
        del self.unstable_entries[: index + 1 - self.unstable_offset]
        self.unstable_offset = index + 1

    def stable_snapshot_to(self, index: int) -> None:
        """The unstable snapshot at ``index`` is persisted."""
        if self.unstable_snapshot is not None and self.unstable_snapshot.metadata.index == index:
            self.unstable_snapshot = None

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log with ``snapshot`` (a follower far behind its leader)."""
        index = snapshot.metadata.index
        assert index > self.committed
        self.unstable_snapshot = snapshot
        self.unstable_entries = []
        self.unstable_offset = index + 1
        self.committed = index
