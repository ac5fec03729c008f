# -*- test-case-name: tests.unit.storage.test_sync_state -*-
"""What a partition log's next fsync must cover, and the end it makes durable: group commit's bookkeeping.

Between fsyncs a log collects here what changed: sealed segments (their `.log` and their
three indexes), the active segment's `.txnindex` when an abort was indexed (so every entry of a
marker below the durable end is durable too), the directory when a segment was created or deleted, and how many messages wait
(the active segment is always synced). `capture` turns that into a `FlushTicket` of descriptors
for whoever runs the fsyncs (the log itself, or an fsync engine); `publish` moves the durable
end once they succeeded, unless a truncation replaced what was captured (the generation).
Not thread-safe on its own: the partition log calls it under its lock.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from mqbroker.storage.segment import Segment


class FlushTicket(NamedTuple):
    """One fsync in progress: the descriptors to sync and the end they make durable."""

    handles: list[int]
    end_offset: int
    generation: int


class SyncState:
    """The unsynced changes of one partition log and its durable end offset."""

    def __init__(self, durable_end_offset: int) -> None:
        #: Every batch below this offset is on stable storage.
        self.durable_end_offset = durable_end_offset
        #: Changes when the log is truncated, so an fsync that raced it publishes nothing.
        self.generation = 0
        self._sealed: list[Segment] = []
        #: Segments whose `.txnindex` got entries since the last capture.
        self._txn_indexed: list[Segment] = []
        self._directory_changed = False
        self._messages = 0
        self._since_ms: int | None = None

    def appended(self, messages: int, now_ms: int) -> None:
        """``messages`` were written to the active segment."""
        self._messages += messages
        if self._since_ms is None:
            self._since_ms = now_ms

    def txn_indexed(self, segment: Segment) -> None:
        """An aborted transaction was added to ``segment``'s `.txnindex` (written, not yet synced)."""
        if segment not in self._txn_indexed:
            self._txn_indexed.append(segment)

    def sealed(self, segment: Segment) -> None:
        """``segment`` stopped being active and a new one was created beside it."""
        self._sealed.append(segment)
        self._directory_changed = True

    def removed(self, segments: list[Segment]) -> None:
        """``segments`` were deleted: they need no fsync of their own, their directory does."""
        self.replaced(segments)
        self._directory_changed = True

    def replaced(self, segments: list[Segment]) -> None:
        """``segments`` were replaced by fsynced rewrites (compaction): they need no fsync of their own."""
        self._sealed = [segment for segment in self._sealed if segment not in segments]
        self._txn_indexed = [segment for segment in self._txn_indexed if segment not in segments]

    def truncated(self, end_offset: int) -> None:
        """The log was cut to end at ``end_offset``: what a running fsync captured may be gone."""
        self.durable_end_offset = min(self.durable_end_offset, end_offset)
        self.generation += 1
        self._directory_changed = True

    def restarted(self, offset: int) -> None:
        """The log was emptied to go on from ``offset``: nothing below it is left to lose."""
        self._sealed = []
        self._txn_indexed = []
        self.durable_end_offset = offset
        self.generation += 1
        self._directory_changed = True

    def due(self, flush_policy: str, flush_messages: int, flush_ms: int, now_ms: int) -> bool:
        """True when unsynced appends are due: at once under `sync`, by flush.ms/flush.messages otherwise."""
        if self._messages == 0 or self._since_ms is None:
            return False
        if flush_policy == "sync":
            return True
        return self._messages >= flush_messages or now_ms - self._since_ms >= flush_ms

    def capture(self, directory: str, active: Segment, end_offset: int) -> FlushTicket:
        """Descriptors covering everything written so far; the changes start collecting afresh."""
        handles = [segment.duplicate_handle() for segment in self._sealed]
        for segment in self._sealed:
            indexes = (segment.offset_index, segment.time_index, segment.txn_index)
            handles += [os.open(index.path, os.O_RDONLY) for index in indexes]
        handles += [os.open(segment.txn_index.path, os.O_RDONLY) for segment in self._txn_indexed
                    if segment not in self._sealed]
        handles.append(active.duplicate_handle())
        if self._directory_changed:
            handles.append(os.open(directory, os.O_RDONLY))
        self._sealed = []
        self._txn_indexed = []
        self._directory_changed = False
        self._messages = 0
        self._since_ms = None
        return FlushTicket(handles, end_offset, self.generation)

    def publish(self, ticket: FlushTicket, synced: bool) -> int:
        """After a flush: if it synced and no truncation intervened, its end is durable. Returns the durable end."""
        if synced and ticket.generation == self.generation and ticket.end_offset > self.durable_end_offset:
            self.durable_end_offset = ticket.end_offset
        return self.durable_end_offset
