# -*- test-case-name: tests.unit.storage.test_sync_state -*-
"""The partition log's durability: group commit's flushes, and the leader-epoch checkpoint written off the append path.

`DurableLog` is the part of `PartitionLog` that says what a crash may lose: `flush` (or an fsync
engine's `begin_flush`/`end_flush`) publishes the durable end (the bookkeeping is `sync_state`),
and `persist_epochs` writes the epoch changes appends keep in memory, so that `recovery_point`
can pass them. It is mixed into `PartitionLog` and works on that log's state under its lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from mqbroker.storage import fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.epochs import LeaderEpochCache
from mqbroker.storage.segment import Segment
from mqbroker.storage.sync_state import FlushTicket, SyncState


class DurableLog:
    """A partition log's flushes, durable end and recovery point, and the writing of its epoch cache."""

    # The partition log's state this part works on (set by `PartitionLog.__init__`).
    directory: str
    config: LogConfig
    epochs: LeaderEpochCache
    _lock: threading.Lock
    _segments: list[Segment]
    _end_offset: int
    _unsynced: SyncState
    _epochs_write_lock: threading.Lock
    _check_open: Callable[[], None]

    @property
    def durable_end_offset(self) -> int:
        """Every batch below this offset is on stable storage (fsynced)."""
        return self._unsynced.durable_end_offset

    @property
    def recovery_point(self) -> int:
        """Where recovery after a crash must start checking: the durable end, or the first epoch change not on disk."""
        durable_end = self._unsynced.durable_end_offset  # first: a batch it covers had its epoch assigned before
        unpersisted_from = self.epochs.unpersisted_from
        return durable_end if unpersisted_from is None else min(durable_end, unpersisted_from)

    def needs_flush(self, now_ms: int) -> bool:
        """True when unsynced appends are due: at once under `sync`, by flush.ms/flush.messages otherwise."""
        with self._lock:
            config = self.config
            return self._unsynced.due(config.flush_policy, config.flush_messages, config.flush_ms, now_ms)

    def has_unsynced(self) -> bool:
        """True when something written is covered by no fsync, finished or running (a flush would sync it)."""
        with self._lock:
            return self._unsynced.has_unsynced(self._end_offset)

    def flush(self) -> int:
        """fsync everything appended so far (lock not held during the fsync); return the durable end."""
        ticket = self.begin_flush()
        try:
            for handle in ticket.handles:
                fs.fsync(handle)
        except BaseException:
            self.end_flush(ticket, synced=False)
            raise
        return self.end_flush(ticket, synced=True)

    def begin_flush(self) -> FlushTicket:
        """Capture what an fsync must cover: descriptors to sync (the caller syncs them, then calls `end_flush`)."""
        with self._lock:
            self._check_open()
            return self._unsynced.capture(self.directory, self._segments[-1], self._end_offset)

    def end_flush(self, ticket: FlushTicket, synced: bool) -> int:
        """Release a flush's descriptors; if they were synced, publish its end as durable. Returns the durable end."""
        ticket.release()
        with self._lock:
            return self._unsynced.publish(ticket, synced)

    def persist_epochs(self) -> None:
        """Write the leader-epoch cache if it changed (it fsyncs: call it off the reactor).

        Until it is written, `recovery_point` stays at or below the first change, so recovery
        after a crash rebuilds the cache from the batches instead.
        """
        with self._lock:
            pending = self.epochs.pending()
        if pending is None:
            return
        with self._epochs_write_lock:
            self.epochs.write(pending)
        with self._lock:
            self.epochs.written(pending)

    def _write_epochs(self) -> None:
        """`persist_epochs` for a caller holding the log's lock (an append below a recovery point)."""
        with self._epochs_write_lock:
            self.epochs.persist()
