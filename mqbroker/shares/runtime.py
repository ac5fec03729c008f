"""One share partition at run time: reading its log into the region, its batches in memory, its due records.

The host reads the partition's log from the region's end with long-poll fetches while the group
has members, one read at a time, and keeps the batches of the region in memory (a fetch returns
the whole batches that hold the records it acquired: the broker never re-encodes records; the
client keeps the acquired offsets). Records of a batch that carry a deliver-at time still ahead are
scheduled: each goes, as a one-record batch, into the on-disk delay index, and its delay entry
into ``__share_group_state``. A group's default delay holds the read position instead: a batch is
read into the region once its newest record is that old, so nothing waits in memory.

Due records come back from the index a bounded number at a time. What changed since the last
state write (the region's snapshot, delay entries) is handed out by ``pending_records``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.model import FetchResult
from mqbroker.records.header import iter_batches
from mqbroker.shares.data import ShareData
from mqbroker.shares.delay_index import DelayIndex, IndexedDelay
from mqbroker.shares.delays import delayed_records, may_hold_delays_anywhere, one_record_batch, record_batch_at
from mqbroker.shares.partition import SharePartition
from mqbroker.shares.partition_values import AcquiredRange, DeadLetter, DueEntry
from mqbroker.shares.state_records import (
    DelayKey,
    PartitionKey,
    StateRecord,
    delay_record,
    partition_record,
    tombstone,
)

#: Bytes one read of the log returns at most. What a read brings is taken in one reactor turn (~0.5 ms for 256 KiB of
#: small batches; 5-10 ms for 4 MiB, which held up a joining member's first lease write and every other connection).
READ_BYTES_MAX = 256 * 1024
#: How long a read waits for new records while the group has members.
READ_WAIT_MS = 500
#: Pause after a failed read (no leader, leader moved, topic missing).
READ_RETRY_S = 0.2


class BatchCache:
    """The record batches a share partition serves from: the region's, and one per due record."""

    def __init__(self) -> None:
        self._firsts: list[int] = []
        self._batches: list[tuple[int, int, bytes]] = []
        self._due: dict[int, bytes] = {}
        self.size_bytes = 0

    def add(self, first: int, last: int, batch: bytes) -> None:
        """A region batch (in offset order, after those held)."""
        assert not self._batches or first > self._batches[-1][1], (first, self._batches[-1])
        self._firsts.append(first)
        self._batches.append((first, last, batch))
        self.size_bytes += len(batch)

    def add_due(self, offset: int, batch: bytes) -> None:
        """A due record's one-record batch."""
        self._due[offset] = batch
        self.size_bytes += len(batch)

    def drop_due(self, offset: int) -> None:
        """A due record is done."""
        batch = self._due.pop(offset, None)
        if batch is not None:
            self.size_bytes -= len(batch)

    def drop_below(self, offset: int) -> None:
        """Forget the region batches wholly below ``offset``."""
        count = 0
        for _, last, batch in self._batches:
            if last >= offset:
                break
            self.size_bytes -= len(batch)
            count += 1
        if count:
            del self._batches[:count]
            del self._firsts[:count]

    def clear(self) -> None:
        """Forget every region batch (the log start moved past them)."""
        self.size_bytes -= sum(len(batch) for _, _, batch in self._batches)
        self._batches.clear()
        self._firsts.clear()

    def covering(self, ranges: list[AcquiredRange]) -> bytes:
        """The batches holding ``ranges``, each once, in offset order."""
        pieces: dict[int, bytes] = {}
        for acquired in ranges:
            due = self._due.get(acquired.first)
            if due is not None and acquired.first == acquired.last:
                pieces[acquired.first] = due
                continue
            index = max(0, bisect.bisect_right(self._firsts, acquired.first) - 1)
            while index < len(self._batches) and self._batches[index][0] <= acquired.last:
                first, last, batch = self._batches[index]
                if last >= acquired.first:
                    pieces.setdefault(first, batch)
                index += 1
        return b"".join(pieces[first] for first in sorted(pieces))


class HostedPartition:
    """A share partition served by this broker: state, batches, reads and due records."""

    log = Logger()

    def __init__(self, *, key: PartitionKey, index_id: int, state: SharePartition, data: ShareData,
                 clock: IReactorTime, index: DelayIndex, changed: Callable[[HostedPartition], None],
                 delay_ms: int = 0, reads_from: int | None = None) -> None:
        """``changed(self)`` is called after the state changed by itself (records read, due ones loaded).

        ``reads_from``: where the batch cache starts reading (the region's start after a restore).
        """
        self.key = key
        self.topic, self.partition = key.topic, key.partition
        self.index_id = index_id
        self.state = state
        self.delay_ms = delay_ms
        self.active = False  # read while the group has someone to deliver to
        self.cache = BatchCache()
        self.cache_end = state.end_offset if reads_from is None else reads_from
        self._data = data
        self._clock = clock
        self._index = index
        self._changed = changed
        self._reading = False
        self._stopped = False
        self._timer: IDelayedCall | None = None
        self._scheduled_batches: dict[int, bytes] = {}
        self._pending_delays: dict[int, StateRecord] = {}
        self._loading_due: set[int] = set()
        #: The log's end (high watermark) as of the last read.
        self.log_end = state.end_offset
        self.next_due_ms = index.next_deliver_at_ms(index_id)

    # -- reading the log ---------------------------------------------------------------------

    def read_ahead(self) -> None:
        """Read more of the log if the group wants records and the region has room (and no delay holds it)."""
        if self._reading or self._stopped or not self.active or self._timer_pending():
            return
        if self.state.room() <= 0 or self.cache.size_bytes >= limits.share_inflight_bytes_max:
            return
        self._reading = True
        wait_ms = READ_WAIT_MS if self.cache_end >= self.state.end_offset else 0
        read = self._data.read(self.topic, self.partition, self.cache_end, READ_BYTES_MAX, wait_ms)
        read.addCallbacks(self._read, self._read_failed)

    def _read(self, result: FetchResult) -> None:
        self._reading = False
        if self._stopped:
            return
        if result.error is not None:
            self._read_error(result)
            return
        self.log_end = max(self.log_end, result.high_watermark)
        if result.log_start_offset > self.cache_end:
            self._skip_to(result.log_start_offset)
        self._reading = True  # the state changes below must not start the next read from inside this one
        self._take(bytes(result.records))
        self._changed(self)
        self._reading = False
        if not self._timer_pending():
            self._timer = self._clock.callLater(0, self._wake)

    def _read_error(self, result: FetchResult) -> None:
        error = result.error
        if isinstance(error, errors.OffsetOutOfRangeError) and result.log_start_offset > self.cache_end:
            self._skip_to(result.log_start_offset)
            self._reading = True
            self._changed(self)
            self._reading = False
            self._retry_later(0)
            return
        if not isinstance(error, (errors.NotLeaderError, errors.LeaderNotAvailableError, errors.BrokerShuttingDownError)):
            self.log.warn("share group {group}: reading {topic}-{partition} at {offset} failed ({error}); retrying",
                          group=self.key.group_id, topic=self.topic, partition=self.partition, offset=self.cache_end,
                          error=error)
        self._retry_later(READ_RETRY_S)

    def _read_failed(self, failure: Any) -> None:
        self._reading = False
        if not self._stopped:
            self.log.failure("share group {group}: reading {topic}-{partition} failed; retrying", failure,
                             group=self.key.group_id, topic=self.topic, partition=self.partition)
            self._retry_later(READ_RETRY_S)

    def _retry_later(self, delay_s: float) -> None:
        if not self._timer_pending():
            self._timer = self._clock.callLater(delay_s, self._wake)

    def _timer_pending(self) -> bool:
        return self._timer is not None and self._timer.active()

    def _wake(self) -> None:
        self._timer = None
        self.read_ahead()

    def _skip_to(self, log_start_offset: int) -> None:
        """Retention deleted records the region had not read (or had not done): they are gone."""
        self.state.note_log_start(log_start_offset)
        if log_start_offset > self.cache_end:
            self.cache.clear()
            self.cache_end = max(log_start_offset, self.state.start_offset)

    def _take(self, records: bytes) -> None:
        """Batches read from ``cache_end`` on: cache them, and extend the region with the new ones."""
        now_ms = int(self._clock.seconds() * 1000)
        marked = may_hold_delays_anywhere(records)
        for position, header in iter_batches(records, check=False):
            last = header.last_offset
            if last < self.cache_end:
                continue  # a read returns whole batches: the first may start below what it asked for
            if last >= self.state.end_offset:
                if self.state.room() <= 0:
                    return
                ready_ms = header.max_timestamp + self.delay_ms
                if self.delay_ms and ready_ms > now_ms:
                    self._timer = self._clock.callLater((ready_ms - now_ms) / 1000.0, self._wake)
                    return  # the group's default delay holds the read position
                first = max(header.base_offset, self.state.end_offset)
                if header.is_control:
                    self.state.skip(first, last)
                    self.cache_end = last + 1
                    continue
                self._extend(records, position, header, first, now_ms, marked or bool(header.compression))
            if not header.is_control:
                self.cache.add(header.base_offset, last, records[position : position + header.size_bytes])
            self.cache_end = last + 1

    def _extend(self, records: bytes, position: int, header: Any, first: int, now_ms: int, marked: bool) -> None:
        """The region grows by the batch at ``position`` (``marked``: it may hold delays, else it certainly holds none)."""
        horizon_ms = now_ms + limits.share_delay_ms_max
        deliver_at = {}
        for record, at in delayed_records(records, position, header) if marked else ():
            if record.offset >= first and at > now_ms:
                deliver_at[record.offset] = min(at, horizon_ms)
                self._scheduled_batches[record.offset] = one_record_batch(record)
        self.state.extend(first, header.last_offset, now_ms, deliver_at)

    # -- due records -------------------------------------------------------------------------

    def load_due(self, now_ms: int) -> None:
        """Take the due entries of the delay index into memory, up to the bound."""
        room = limits.share_due_records_max - self.state.due_count - len(self._loading_due)
        if self.next_due_ms is None or self.next_due_ms > now_ms or room <= 0 or self._stopped:
            return
        for entry in self._index.take_due(now_ms, self.index_id, room):
            if entry.batch is not None:
                self.cache.add_due(entry.offset, entry.batch)
                self.state.add_due(entry.offset, entry.deliver_at_ms, entry.delivery_count)
            else:
                self._load_from_log(entry)
        self.next_due_ms = self._index.next_deliver_at_ms(self.index_id)

    def _load_from_log(self, entry: IndexedDelay) -> None:
        """A due record indexed from the replay, without its bytes: read it from the log."""
        self._loading_due.add(entry.offset)
        read = self._data.read(self.topic, self.partition, entry.offset, 1024 * 1024, 0)

        def loaded(result: FetchResult) -> None:
            self._loading_due.discard(entry.offset)
            if self._stopped:
                return
            if result.error is not None and not isinstance(result.error, errors.OffsetOutOfRangeError):
                self._index.add([entry])  # try again when it is next due
                self.next_due_ms = self._index.next_deliver_at_ms(self.index_id)
                return
            batch = None if result.error is not None else record_batch_at(bytes(result.records), entry.offset)
            if batch is None:  # deleted by retention or compaction: nothing left to deliver
                self._pending_delays[entry.offset] = tombstone(self._delay_key(entry.offset))
            else:
                self.cache.add_due(entry.offset, batch)
                self.state.add_due(entry.offset, entry.deliver_at_ms, entry.delivery_count)
            self._changed(self)

        read.addCallbacks(loaded, lambda failure: self._loading_due.discard(entry.offset))

    def _delay_key(self, offset: int) -> DelayKey:
        return DelayKey(self.key.group_id, self.topic, self.partition, offset)

    def note_log_end(self, log_end: int) -> None:
        """The log's end as just asked (records past the region count as ready for ``trim``)."""
        self.log_end = max(self.log_end, log_end)

    def trim(self, ready_records_max: int) -> None:
        """Keep at most ``ready_records_max`` records ready, counting those of the log not read yet (drop-head)."""
        self.state.trim(ready_records_max, max(0, self.log_end - self.state.end_offset))

    def lag(self) -> int:
        """Records not yet done, scheduled ones aside: unread ones plus those in flight."""
        return max(0, self.log_end - self.state.end_offset) + self.state.undone_count()

    def delay_keys(self) -> list[DelayKey]:
        """The delay entries this partition may have stored (to delete them with its group)."""
        offsets = set(self._index.offsets_from(self.index_id, 0)) | set(self.state.due_offsets())
        return [self._delay_key(offset) for offset in sorted(offsets)]

    # -- outputs -----------------------------------------------------------------------------

    def drain(self) -> list[DeadLetter]:
        """Take the state machine's outputs: index the scheduled records, note delay entries; dead letters out."""
        state = self.state
        if state.scheduled:
            rows = []
            for scheduled in state.scheduled:
                rows.append(IndexedDelay(self.index_id, scheduled.offset, scheduled.deliver_at_ms, 0,
                                         self._scheduled_batches.pop(scheduled.offset, None)))
                entry = DueEntry(scheduled.offset, scheduled.deliver_at_ms, 0)
                self._pending_delays[scheduled.offset] = delay_record(self.key, entry)
            self._index.add(rows)
            self.next_due_ms = self._index.next_deliver_at_ms(self.index_id)
            state.scheduled.clear()
        for offset in state.due_changed:
            entry = state.due_entry(offset)
            if entry is None:
                self.cache.drop_due(offset)
                self._pending_delays[offset] = tombstone(self._delay_key(offset))
            else:
                self._pending_delays[offset] = delay_record(self.key, entry)
        state.due_changed.clear()
        self.cache.drop_below(state.start_offset)
        dead, state.dead_letters = state.dead_letters, []
        return dead

    @property
    def dirty(self) -> bool:
        """Whether ``pending_records`` has something to write."""
        return self.state.changed or bool(self._pending_delays)

    def pending_records(self) -> list[StateRecord]:
        """Delay entries first, then the region's snapshot (a replay trusts an entry only if the snapshot agrees)."""
        records = list(self._pending_delays.values())
        self._pending_delays.clear()
        if self.state.changed:
            self.state.changed = False
            records.append(partition_record(self.key, self.state.snapshot()))
        return records

    def stop(self) -> None:
        """The hosting ended: no more reads or timers."""
        self._stopped = True
        if self._timer_pending():
            assert self._timer is not None
            self._timer.cancel()
