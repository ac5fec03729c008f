"""A queue's per-message state on top of its log topic: share-group semantics, pure.

Messages are records of the queue's log topic, read in offset order from a cursor. Each one
is *ready* (waiting for a consumer), *leased* (delivered, not yet settled) or *done* (acked,
dead-lettered, expired, dropped or purged). Ready messages go out lowest offset first, so a
requeued message is redelivered before newer ones. A requeued message keeps its delivery
count; reaching ``x-delivery-limit`` or a reject without requeue dead-letters it, as do
``x-message-ttl`` / the ``expiration`` property (checked when a delivery is attempted) and
``x-max-length`` (drop-head, counting ready messages only, as RabbitMQ does).

Only offsets are state; message contents are the adapter's opaque ``payload``. The done set
is a low watermark plus disjoint done ranges above it (an ack at the watermark advances it,
a purge adds one range), so the snapshot written to the internal compacted topic stays
small. After a restart the cursor restarts at the watermark and done offsets are skipped;
messages delivered before keep their delivery count and are flagged redelivered.

Dead-lettering marks a message done at once and hands it back in ``pop_dead_letters``; the
adapter republishes it to the queue's dead-letter exchange with ``x_death_headers``
(``queue_arguments.py``, which also parses the arguments that shape a queue).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import struct
from collections.abc import Hashable, Iterator
from typing import Any

from mqbroker.protocols.amqp.queue_arguments import DeathReason, QueuePolicy, QueueType

_SNAPSHOT_VERSION = 1
_SNAPSHOT_HEADER = struct.Struct(">BqqII")  # version, low watermark, last used ms, ranges, counts
_RANGE = struct.Struct(">qq")
_COUNT = struct.Struct(">qI")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueuedMessage:
    """One record of the queue's log, as far as the queue state cares."""

    offset: int
    timestamp_ms: int
    expiration_ms: int | None = None  # the message's own ``expiration`` property
    payload: Any = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """A message handed to a consumer."""

    message: QueuedMessage
    consumer: Hashable
    delivery_count: int  # including this delivery

    @property
    def redelivered(self) -> bool:
        """AMQP's redelivered flag: the message was delivered before."""
        return self.delivery_count > 1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetter:
    """A message leaving the queue for its dead-letter exchange (or dropped if it has none)."""

    message: QueuedMessage
    reason: DeathReason


def is_expired(policy: QueuePolicy, message: QueuedMessage, now_ms: int) -> bool:
    """Whether ``message`` outlived ``x-message-ttl`` or its own ``expiration`` by ``now_ms``."""
    ttls = [ttl for ttl in (policy.message_ttl_ms, message.expiration_ms) if ttl is not None]
    return bool(ttls) and now_ms - message.timestamp_ms >= min(ttls)


class RangeSet:
    """Disjoint half-open integer ranges, sorted; adjacent ranges merge."""

    __slots__ = ("_starts", "_ends")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def __len__(self) -> int:
        return len(self._starts)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(zip(self._starts, self._ends))

    def __contains__(self, value: int) -> bool:
        index = bisect.bisect_right(self._starts, value) - 1
        return index >= 0 and value < self._ends[index]

    def add(self, start: int, end: int) -> None:
        """Include ``[start, end)``."""
        if start >= end:
            return
        low = bisect.bisect_left(self._ends, start)  # first range that ends at or after start
        high = bisect.bisect_right(self._starts, end)  # ranges from here start after end
        if low < high:
            start = min(start, self._starts[low])
            end = max(end, self._ends[high - 1])
        self._starts[low:high] = [start]
        self._ends[low:high] = [end]

    def count_between(self, start: int, end: int) -> int:
        """How many integers of ``[start, end)`` are included."""
        return sum(max(0, min(end, e) - max(start, s)) for s, e in zip(self._starts, self._ends))

    def take_prefix(self, low: int) -> int:
        """Drop ranges below or touching ``low``; return the new low (their end, or ``low``)."""
        while self._starts and self._starts[0] <= low:
            low = max(low, self._ends[0])
            del self._starts[0], self._ends[0]
        return low


class QueueState:
    """The per-message state of one classic queue."""

    def __init__(self, *, policy: QueuePolicy, now_ms: int, low_watermark: int = 0) -> None:
        assert policy.queue_type is QueueType.CLASSIC, "stream queues keep no per-message state"
        self.policy = policy
        self.low_watermark = low_watermark  # every offset below is done
        self._done = RangeSet()  # done offsets above the watermark
        self.cursor = low_watermark  # next offset to read from the log
        self.log_end = low_watermark  # the log's next offset as last reported
        self._ready: dict[int, QueuedMessage] = {}
        self._ready_order: list[int] = []  # a heap of the ready offsets
        self._leases: dict[int, Lease] = {}
        self._delivery_counts: dict[int, int] = {}  # delivered at least once and not done
        self._dead_letters: list[DeadLetter] = []
        self.last_used_ms = now_ms

    # --- the log side --------------------------------------------------------------------

    def note_log_end(self, end_offset: int) -> None:
        """The log's next offset (high watermark) grew to ``end_offset``."""
        self.log_end = max(self.log_end, end_offset)

    def note_log_start(self, start_offset: int) -> None:
        """Records below ``start_offset`` were deleted from the log (retention): they are gone."""
        if start_offset > self.cursor:
            self._mark_done_range(self.cursor, start_offset)
            self.cursor = start_offset
        self._compact()

    def receive(self, messages: list[QueuedMessage]) -> None:
        """Messages read from the log starting at ``cursor``; done ones are skipped."""
        for message in messages:
            if message.offset < self.cursor:
                continue  # a fetch returns whole batches, which may start before the cursor
            self.cursor = message.offset + 1
            self.log_end = max(self.log_end, self.cursor)
            if message.offset < self.low_watermark or message.offset in self._done:
                continue
            self._make_ready(message)
        self._enforce_max_length()

    def skip_unreadable(self, first_offset: int, last_offset: int) -> None:
        """Offsets ``first_offset..last_offset`` of the log do not decode: done without a delivery, read past."""
        self._mark_done_range(first_offset, last_offset + 1)
        if first_offset <= self.cursor <= last_offset:
            self.cursor = last_offset + 1
            self.log_end = max(self.log_end, self.cursor)
        self._compact()

    @property
    def unread_count(self) -> int:
        """Messages in the log not read yet (and not already done)."""
        return max(0, self.log_end - self.cursor) - self._done.count_between(self.cursor, self.log_end)

    @property
    def ready_count(self) -> int:
        """Messages waiting for a consumer, read or not (queue.declare-ok's message count)."""
        return len(self._ready) + self.unread_count

    @property
    def ready_in_memory(self) -> int:
        """Ready messages already read from the log."""
        return len(self._ready)

    @property
    def leased_count(self) -> int:
        """Messages delivered and not settled."""
        return len(self._leases)

    # --- the consumer side ---------------------------------------------------------------

    def take(self, consumer: Hashable, now_ms: int) -> Lease | None:
        """Lease the next ready message to ``consumer`` (expired ones are dead-lettered on the way)."""
        self.last_used_ms = now_ms
        while self._ready_order:
            offset = heapq.heappop(self._ready_order)
            message = self._ready.pop(offset)
            if self._expired(message, now_ms):
                self._dead_letter(message, DeathReason.EXPIRED)
                continue
            count = self._delivery_counts.get(offset, 0) + 1
            self._delivery_counts[offset] = count
            lease = Lease(message=message, consumer=consumer, delivery_count=count)
            self._leases[offset] = lease
            return lease
        return None

    def expire(self, now_ms: int) -> None:
        """Dead-letter expired messages at the head of the ready list (RabbitMQ expires at the head)."""
        while self._ready_order and self._expired(self._ready[self._ready_order[0]], now_ms):
            offset = heapq.heappop(self._ready_order)
            self._dead_letter(self._ready.pop(offset), DeathReason.EXPIRED)

    def ack(self, offset: int) -> None:
        """The consumer processed the message: it is done."""
        lease = self._leases.pop(offset, None)
        if lease is None:
            return  # settled already (for example requeued by a consumer's loss, then acked late)
        self._finish(offset)

    def ack_all(self, offsets: list[int]) -> None:
        """``ack`` for many offsets (a multiple ack): runs of consecutive offsets become one done range."""
        done = sorted(offset for offset in offsets if self._leases.pop(offset, None) is not None)
        run_start = run_end = 0
        for offset in done:
            self._delivery_counts.pop(offset, None)
            if offset != run_end:
                self._mark_done_range(run_start, run_end)  # an empty range the first time
                run_start = offset
            run_end = offset + 1
        self._mark_done_range(run_start, run_end)
        self._compact()

    def requeue(self, offset: int) -> None:
        """Back to the ready list (nack/reject with requeue, or the consumer is gone)."""
        lease = self._leases.pop(offset, None)
        if lease is None:
            return
        limit = self.policy.delivery_limit
        if limit is not None and lease.delivery_count >= limit:
            self._dead_letter(lease.message, DeathReason.DELIVERY_LIMIT)
        else:
            self._make_ready(lease.message)
            self._enforce_max_length()

    def reject(self, offset: int) -> None:
        """Rejected without requeue: dead-lettered."""
        lease = self._leases.pop(offset, None)
        if lease is not None:
            self._dead_letter(lease.message, DeathReason.REJECTED)

    def release_consumer(self, consumer: Hashable) -> None:
        """A consumer is gone: requeue everything leased to it."""
        for offset in [offset for offset, lease in self._leases.items() if lease.consumer == consumer]:
            self.requeue(offset)

    def lease_holders(self) -> set[Hashable]:
        """Every consumer holding a lease."""
        return {lease.consumer for lease in self._leases.values()}

    def leased_to(self, consumer: Hashable) -> list[int]:
        """Offsets currently leased to ``consumer``."""
        return [offset for offset, lease in self._leases.items() if lease.consumer == consumer]

    def purge(self) -> int:
        """Drop every ready message, read or not; return how many."""
        dropped = self.ready_count
        for offset in self._ready_order:
            self._finish(offset)
        self._ready.clear()
        self._ready_order.clear()
        self._mark_done_range(self.cursor, self.log_end)
        self.cursor = max(self.cursor, self.log_end)
        self._compact()
        return dropped

    def pop_dead_letters(self) -> list[DeadLetter]:
        """Messages dead-lettered since the last call, oldest first."""
        dead, self._dead_letters = self._dead_letters, []
        return dead

    def touch(self, now_ms: int) -> None:
        """The queue was used (declared, consumed from, read with basic.get)."""
        self.last_used_ms = now_ms

    def unused_expired(self, now_ms: int, consumer_count: int) -> bool:
        """True when ``x-expires`` says this unused queue must be deleted."""
        expires_ms = self.policy.expires_ms
        return expires_ms is not None and consumer_count == 0 and now_ms - self.last_used_ms >= expires_ms

    def is_done(self, offset: int) -> bool:
        """Whether ``offset`` was acked, dead-lettered, expired, dropped or purged."""
        return offset < self.low_watermark or offset in self._done

    # --- internals -----------------------------------------------------------------------

    def _make_ready(self, message: QueuedMessage) -> None:
        assert message.offset not in self._ready and message.offset not in self._leases, message.offset
        self._ready[message.offset] = message
        heapq.heappush(self._ready_order, message.offset)

    def _expired(self, message: QueuedMessage, now_ms: int) -> bool:
        return is_expired(self.policy, message, now_ms)

    def _enforce_max_length(self) -> None:
        limit = self.policy.max_length
        if limit is None:
            return
        while self._ready_order and self.ready_count > limit:
            offset = heapq.heappop(self._ready_order)
            self._dead_letter(self._ready.pop(offset), DeathReason.MAXLEN)

    def _dead_letter(self, message: QueuedMessage, reason: DeathReason) -> None:
        self._dead_letters.append(DeadLetter(message=message, reason=reason))
        self._finish(message.offset)

    def _finish(self, offset: int) -> None:
        self._delivery_counts.pop(offset, None)
        self._mark_done_range(offset, offset + 1)
        self._compact()

    def _mark_done_range(self, start: int, end: int) -> None:
        self._done.add(max(start, self.low_watermark), end)

    def _compact(self) -> None:
        self.low_watermark = self._done.take_prefix(self.low_watermark)

    # --- snapshots -----------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The durable part of the state (done offsets, delivery counts, last use) as bytes."""
        counts = sorted(self._delivery_counts.items())
        parts = [_SNAPSHOT_HEADER.pack(_SNAPSHOT_VERSION, self.low_watermark, self.last_used_ms, len(self._done), len(counts))]
        parts += [_RANGE.pack(start, end) for start, end in self._done]
        parts += [_COUNT.pack(offset, count) for offset, count in counts]
        return b"".join(parts)

    @classmethod
    def restore(cls, snapshot: bytes, *, policy: QueuePolicy) -> QueueState:
        """Rebuild from ``snapshot``: the cursor restarts at the watermark; leases are forgotten.

        Raises ``ValueError`` (and nothing else) if ``snapshot`` is not one ``snapshot()`` wrote.
        """
        try:
            version, low, last_used_ms, ranges, counts = _SNAPSHOT_HEADER.unpack_from(snapshot)
            if version != _SNAPSHOT_VERSION:
                raise ValueError(f"queue state snapshot version {version} is unknown")
            state = cls(policy=policy, now_ms=last_used_ms, low_watermark=low)
            position = _SNAPSHOT_HEADER.size
            for _ in range(ranges):
                start, end = _RANGE.unpack_from(snapshot, position)
                state._done.add(start, end)
                position += _RANGE.size
            for _ in range(counts):
                offset, count = _COUNT.unpack_from(snapshot, position)
                state._delivery_counts[offset] = count
                position += _COUNT.size
        except struct.error as error:
            raise ValueError(f"queue state snapshot is truncated: {error}") from None
        if position != len(snapshot):
            raise ValueError(f"queue state snapshot has {len(snapshot) - position} trailing bytes")
        state._compact()
        return state
