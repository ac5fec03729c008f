# -*- test-case-name: tests.unit.storage.test_sync_state -*-
"""What a partition log's next fsync must cover, and the end it makes durable: group commit's bookkeeping.

Between fsyncs a log collects here what changed: sealed segments (their `.log` and their
three indexes), the active segment's `.txnindex` when an abort was indexed (so every entry of a
marker below the durable end is durable too), the directory when a segment was created or
deleted, and how many messages wait (the active segment is synced whenever anything is).
`capture` turns that into a `FlushTicket` of descriptors for whoever runs the fsyncs (the log
itself, or an fsync engine); `publish` moves the durable end once they succeeded, unless a
truncation replaced what was captured (the generation), and hands a failed flush's changes back
to the next one. A log whose every write is durable captures an empty ticket: an fsync of
nothing new is never asked of the disk (`has_unsynced` lets the group-commit flusher leave such
a log out of its round altogether).
Not thread-safe on its own: the partition log calls it under its lock.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from mqbroker.storage.segment import Segment
from mqbroker.storage.segment_files import SegmentFile


class FlushTicket(NamedTuple):
    """One fsync in progress: the descriptors to sync and the end they make durable."""

    handles: list[int]
    end_offset: int
    generation: int
    #: Whether it syncs the directory (handed back to the next flush if it fails).
    directory_changed: bool = False
    #: Segment files whose pinned descriptors are among ``handles`` (unpinned by `release`).
    pinned: tuple[SegmentFile, ...] = ()
    #: Descriptors opened for this flush alone, indexes and the directory (closed by `release`).
    opened: tuple[int, ...] = ()

    def release(self) -> None:
        """The fsyncs are done (or given up): unpin and close the ticket's descriptors."""
        for handle in self.opened:
            os.close(handle)
        for log_file in self.pinned:
            log_file.unpin()


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
        #: Captured tickets not yet published: while one runs, the durable end may still move.
        self._in_flight = 0

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

    def has_unsynced(self, end_offset: int) -> bool:
        """True when something written is covered by no fsync, finished or running (``end_offset``: the log end)."""
        if self._messages or self._sealed or self._txn_indexed or self._directory_changed:
            return True
        return self._in_flight == 0 and self.durable_end_offset < end_offset

    def capture(self, directory: str, active: Segment, end_offset: int) -> FlushTicket:
        """Descriptors covering everything written so far (none when all of it is durable); changes collect afresh."""
        if not self.has_unsynced(end_offset) and self._in_flight == 0:  # all of it durable already
            self._in_flight += 1
            return FlushTicket([], end_offset, self.generation)
        if self._sealed or self._txn_indexed or self._directory_changed:
            ticket = self._capture_changes(directory, active, end_offset)
        else:  # nearly every flush: the active segment's .log alone
            log_file = active.log_file
            ticket = FlushTicket([log_file.pin()], end_offset, self.generation, pinned=(log_file,))
        self._sealed = []
        self._txn_indexed = []
        self._directory_changed = False
        self._messages = 0
        self._since_ms = None
        self._in_flight += 1
        return ticket

    def _capture_changes(self, directory: str, active: Segment, end_offset: int) -> FlushTicket:
        """``capture``'s ticket when segments were sealed, transactions indexed or the directory changed."""
        directory_changed = self._directory_changed
        pinned = tuple(segment.log_file for segment in [*self._sealed, active])
        opened = [os.open(index.path, os.O_RDONLY)
                  for s in self._sealed for index in (s.offset_index, s.time_index, s.txn_index)]
        opened += [os.open(segment.txn_index.path, os.O_RDONLY) for segment in self._txn_indexed
                   if segment not in self._sealed]
        if directory_changed:
            opened.append(os.open(directory, os.O_RDONLY))
        handles = []
        try:
            for log_file in pinned:
                handles.append(log_file.pin())
        except BaseException:
            FlushTicket([], 0, 0, pinned=pinned[: len(handles)], opened=tuple(opened)).release()
            raise
        handles += opened
        return FlushTicket(handles, end_offset, self.generation, directory_changed, pinned, tuple(opened))

    def publish(self, ticket: FlushTicket, synced: bool) -> int:
        """After a flush: if it synced and no truncation intervened, its end is durable. Returns the durable end.

        After a failed flush `has_unsynced` holds until another succeeds (its directory sync is
        handed on; a sealed segment's `.log` was synced when it was sealed).
        """
        self._in_flight -= 1
        if not synced:
            self._directory_changed = self._directory_changed or ticket.directory_changed
        if synced and ticket.generation == self.generation and ticket.end_offset > self.durable_end_offset:
            self.durable_end_offset = ticket.end_offset
        return self.durable_end_offset
