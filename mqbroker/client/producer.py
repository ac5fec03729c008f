"""The producer's logic, without I/O: batching, idempotent sequence numbers, retries, in-flight bounds.

``ProducerCore`` is driven by a driver (``blocking/``, ``twisted/``) that owns sockets and
the clock:

1. ``append`` puts a record into its partition's open batch builder and returns the batch and
   the record's index in it. This is the per-record path, so it does nothing else.
2. ``drain(now_ms)`` closes batches whose ``linger_ms`` passed and whose partition has no closed
   batch waiting to be sent (or which are full, or flushed),
   assigns idempotent sequence numbers on their first send, and returns one ``ProducePlan`` per
   leader, within the in-flight bound of each connection.
3. The driver sends each plan and reports back with ``plan_completed`` (the reply's
   per-partition outcome) or ``plan_failed`` (the connection broke). Those return the batches
   that are now finished; the driver fires their futures (one per batch: a record's metadata is
   the batch's base offset plus the record's index).
4. Retriable errors put a batch back at the head of its partition's queue, in sequence order,
   after an exponential backoff; a batch older than ``delivery_timeout_ms`` fails. A batch whose
   leader failed (not leader, connection lost) has its topic's metadata looked up every
   ``LEADER_POLL_INTERVAL_MS`` meanwhile and goes at once when another leader is named.

Ordering: with idempotence (the default) the broker refuses a batch whose sequence does not
follow the last one it stored, so up to ``max_in_flight`` (at most 5, the broker remembers the
last 5 batches per producer) requests per connection still land in order, and a retried batch
is stored once. Without idempotence a retry can reorder batches unless ``max_in_flight`` is 1.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence

from mqbroker.client.batch_records import BatchRecords
from mqbroker.client.producer_batch import DeliveryCounts, ProducerBatch, ProducePlan
from mqbroker.client.producer_config import COMPRESSION_CODECS, ProducerConfig
from mqbroker.errors import BrokerError, ErrorCode, InvalidRequestError, RequestTimedOutError, error_for_code
from mqbroker.protocols.native.codec import ErrorResponse
from mqbroker.protocols.native.messages import ProduceResponse
from mqbroker.records.header import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE

#: Sequence numbers wrap to 0 after int32 max (as the broker's check expects).
_SEQUENCE_MODULUS = 1 << 31
#: Errors after which the client's view of partition leaders must be refreshed.
STALE_METADATA_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
    }
)
#: While a batch waits to be retried after its leader failed, metadata is looked up this often:
#: once it names another leader the batch goes at once (the backoff was for the old leader).
LEADER_POLL_INTERVAL_MS = 100
#: Retried although the broker does not mark them retriable: a topic may be being created.
_RETRIED_CODES = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


#: A transactional producer's first record for a partition waits this long (at most ``linger_ms``) before the
#: partition is added to the transaction, so partitions written to together are added in one request, one durable
#: coordinator write; their batches are held until the addition anyway, and go out at ``linger_ms`` or a flush.
ADD_PARTITIONS_GATHER_MS = 1
#: ``gates_open_ms`` while no gated partition has an open batch.
_NEVER_MS = 1 << 62

class ProducerCore:
    """Sans-I/O producer: records in, produce plans out, replies in, finished batches out."""

    def __init__(
        self,
        config: ProducerConfig,
        rng: random.Random,
        new_waiter: Callable[[], object] = object,
    ) -> None:
        self.config = config.validated()
        self._random = rng
        self._new_waiter = new_waiter
        self._compression = COMPRESSION_CODECS[config.compression]
        self._batch_size = config.batch_size
        self._open: dict[tuple[str, int], ProducerBatch] = {}
        self._queues: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self._next_sequence: dict[tuple[str, int], int] = {}
        #: Sent batches not yet finished, per partition (to tell a real sequence gap from a retry's).
        self._unacknowledged: dict[tuple[str, int], list[ProducerBatch]] = {}
        self._in_flight: dict[int, int] = {}
        #: Partitions whose next batch is ready but its leader has max_in_flight requests out:
        #: a reply, not a timer, lets them go on (so they set no deadline: no busy loop).
        self._waiting_for_slot: set[tuple[str, int]] = set()
        #: Partitions whose batches wait until the transaction coordinator lists them (AddPartitionsToTxn).
        self.gated: set[tuple[str, int]] = set()
        #: When ``gates_due`` next turns true by the clock: the earliest gated open batch's gathering ends (a
        #: driver whose I/O runs on another thread makes sure it runs then, see the blocking ``Producer.send``).
        self.gates_open_ms = _NEVER_MS
        #: Transaction version 2: transactional batches ask their partition leader to add the partition.
        self.adds_to_transaction = False
        self._flushing = False
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        #: Bytes in closed batches not yet finished (the buffer bound ``send`` respects).
        self.queued_bytes = 0
        #: Topics whose leaders must be looked up again before their batches can be routed.
        self.stale_topics: set[str] = set()
        self._next_leader_poll_ms = 0
        #: The first batch failure since the driver last took it (a transaction with one cannot commit).
        self.failure: BrokerError | None = None
        #: Records acknowledged and failed so far (finished batches only).
        self.delivered = DeliveryCounts()
        #: Called with (topic, partition) when a partition's batch fills (the sticky partitioner).
        self.on_batch_full: Callable[[str, int], None] = _ignore_batch_full

    # -- the per-record path ---------------------------------------------------------------

    def append(
        self,
        topic: str,
        partition: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        now_ms: int,
    ) -> tuple[ProducerBatch, int]:
        """Add one record to the partition's open batch; return the batch and the record's index.

        A batch never grows past ``batch_size``: a record that would not fit goes into a new
        batch (a single record larger than ``batch_size`` gets a batch of its own).
        """
        batch = self._open.get((topic, partition))
        if batch is not None:
            index = batch.builder.append_within(timestamp_ms, key, value, headers, self._batch_size)
            if index >= 0:
                batch.record_count = index + 1
                return batch, index
            self._close((topic, partition), batch)
            self.on_batch_full(topic, partition)
        batch = self._open_batch(topic, partition, now_ms)
        try:
            batch.builder.append_within(timestamp_ms, key, value, headers, self._batch_size)  # a new batch takes it
        except BaseException:  # a record it cannot encode (a value not bytes): refused, and adds nothing
            self._drop_empty((topic, partition), batch)
            raise
        batch.record_count = 1
        return batch, 0

    def append_values(
        self, topic: str, partition: int, timestamp_ms: int, values: Sequence[bytes], start: int, now_ms: int
    ) -> tuple[ProducerBatch, int, int]:
        """Add keyless, headerless records holding ``values[start:]`` to the partition's open batch, as many
        as fit; return the batch, the index of the first record added and how many were added (at least one).

        A batch that fills up is closed (``on_batch_full`` is called), so the caller moves on to the next
        batch, or another partition, with the rest. The records are encoded in runs, without Python code
        per record (``BatchRecords.append_values``).
        """
        key = (topic, partition)
        batch = self._open.get(key) or self._open_batch(topic, partition, now_ms)
        first = batch.record_count
        try:
            count = batch.builder.append_values(timestamp_ms, values, start, self._batch_size)
            if not count:  # the open batch had no room left: the records go into a new one
                self._close(key, batch)
                self.on_batch_full(topic, partition)
                batch = self._open_batch(topic, partition, now_ms)
                first = 0
                count = batch.builder.append_values(timestamp_ms, values, start, self._batch_size)
        except BaseException:  # a value it cannot encode (None): refused
            self._drop_empty(key, batch)
            raise
        batch.record_count = first + count
        if start + count < len(values):
            self._close(key, batch)
            self.on_batch_full(topic, partition)
        return batch, first, count

    def _drop_empty(self, key: tuple[str, int], batch: ProducerBatch) -> None:
        """Forget ``batch`` if it was opened for records that were refused: an empty batch cannot be built."""
        if not batch.builder.records_count:
            del self._open[key]

    def _open_batch(self, topic: str, partition: int, now_ms: int) -> ProducerBatch:
        assert not self.needs_producer_id, "appending before InitProducerId answered"
        key = (topic, partition)
        base_sequence = self._next_sequence.get(key, 0) if self.config.enable_idempotence else NO_SEQUENCE
        builder = BatchRecords(
            compression=self._compression,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=base_sequence,
            is_transactional=self.config.transactional_id is not None,
        )
        batch = ProducerBatch(topic, partition, builder, base_sequence, now_ms, self._new_waiter())
        self._open[key] = batch
        if key in self.gated:
            self.gates_open_ms = min(self.gates_open_ms, now_ms + min(ADD_PARTITIONS_GATHER_MS, self.config.linger_ms))
        return batch

    # -- sending ----------------------------------------------------------------------------

    @property
    def needs_producer_id(self) -> bool:
        """True while idempotence is on and InitProducerId has not answered yet."""
        return self.config.enable_idempotence and self.producer_id == NO_PRODUCER_ID

    def set_producer_identity(self, producer_id: int, producer_epoch: int) -> None:
        """Take the id and epoch InitProducerId allocated; sequences restart at 0."""
        assert not self._open and not self.has_pending, "a new producer identity while batches are pending"
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._next_sequence.clear()

    def flush(self) -> None:
        """Send every open batch at the next ``drain`` without waiting for ``linger_ms`` (nothing open: nothing to
        do, so a record appended after the flush waits for its linger as usual)."""
        if self._open:
            self._flushing = True

    def drain(self, now_ms: int, leader_of: Callable[[str, int], int]) -> list[ProducePlan]:
        """Close due batches and return the produce requests to send now, one per leader node."""
        self._close_due(now_ms)
        self._waiting_for_slot.clear()
        plans: dict[int, ProducePlan] = {}
        plan_bytes: dict[int, int] = {}
        awaiting_leader: set[str] = set()
        for key, queue in self._queues.items():
            if not queue or key in self.gated:
                continue
            batch = queue[0]
            node_id = leader_of(batch.topic, batch.partition)
            if batch.retry_at_ms > now_ms:
                if not batch.awaiting_leader:
                    continue
                if node_id < 0 or node_id == batch.sent_to:
                    awaiting_leader.add(batch.topic)
                    continue
                batch.retry_at_ms = now_ms  # a new leader: the backoff was meant for the failed one
            if node_id < 0:
                self.stale_topics.add(batch.topic)
                continue
            plan = plans.get(node_id)
            if plan is None:
                if self._in_flight.get(node_id, 0) >= self.config.max_in_flight:
                    self._waiting_for_slot.add(key)
                    continue
                plan = ProducePlan(
                    node_id=node_id, acks=int(self.config.acks), timeout_ms=self.config.request_timeout_ms, batches=[],
                    transactional_id=self.config.transactional_id, add_to_transaction=self.adds_to_transaction,
                )
                plans[node_id] = plan
                plan_bytes[node_id] = 0
                self._in_flight[node_id] = self._in_flight.get(node_id, 0) + 1
            if not batch.payload:
                batch.payload = batch.builder.build()  # a retry resends the very same bytes
            if plan.batches and plan_bytes[node_id] + len(batch.payload) > self.config.request_bytes_max:
                continue
            queue.popleft()
            batch.sent_to = node_id
            batch.awaiting_leader = False
            plan.batches.append(batch)
            plan_bytes[node_id] += len(batch.payload)
            self._unacknowledged.setdefault(key, []).append(batch)
        if awaiting_leader and now_ms >= self._next_leader_poll_ms:
            self.stale_topics |= awaiting_leader
            self._next_leader_poll_ms = now_ms + LEADER_POLL_INTERVAL_MS
        return list(plans.values())

    def next_deadline_ms(self, now_ms: int) -> int | None:
        """When ``drain`` next has something to do (None: nothing waits but replies)."""
        if self._flushing and self._open:
            return now_ms
        deadlines = [batch.created_ms + self.config.linger_ms for key, batch in self._open.items()
                     if not self._queues.get(key)]
        deadlines.extend(
            queue[0].retry_at_ms for key, queue in self._queues.items() if queue and key not in self._waiting_for_slot
        )
        if any(queue and queue[0].awaiting_leader for queue in self._queues.values()):
            deadlines.append(max(now_ms, self._next_leader_poll_ms))
        if self.gated:
            deadlines.extend(self._gate_deadlines_ms())
        return min(deadlines, default=None)

    def gates_due(self, now_ms: int) -> bool:
        """True when the gated partitions should be added to the transaction now: a batch of one is ready to send
        (full, or flushing), or has gathered records for ``ADD_PARTITIONS_GATHER_MS`` (or ``linger_ms``, if less),
        so the partitions an application writes to in quick succession go in one AddPartitionsToTxn."""
        return self._flushing or any(self._queues.get(key) for key in self.gated) or any(
            now_ms >= deadline_ms for deadline_ms in self._gate_deadlines_ms())

    def open_gates(self, keys: set[tuple[str, int]]) -> None:
        """These partitions were added to the transaction: their batches may go, the open ones at once (the
        addition took the place of ``linger_ms``), so their records travel while the application writes more."""
        self.gated -= keys
        for key in keys:
            batch = self._open.get(key)
            if batch is not None and not self._queues.get(key):
                self._close(key, batch)
        self.gates_open_ms = min(self._gate_deadlines_ms(), default=_NEVER_MS)

    def _gate_deadlines_ms(self) -> list[int]:
        gather_ms = min(ADD_PARTITIONS_GATHER_MS, self.config.linger_ms)
        return [batch.created_ms + gather_ms for key, batch in self._open.items() if key in self.gated]

    def in_flight(self, node_id: int) -> int:
        """Produce requests sent to ``node_id`` and not yet answered."""
        return self._in_flight.get(node_id, 0)

    @property
    def pending_records(self) -> int:
        """Records not acknowledged or failed yet: in open, queued and in-flight batches."""
        batches = [*self._open.values(), *(batch for queue in self._queues.values() for batch in queue),
                   *(batch for pending in self._unacknowledged.values() for batch in pending)]
        return sum(batch.record_count for batch in batches)

    @property
    def has_pending(self) -> bool:
        """True while any record waits to be sent or acknowledged."""
        return bool(self._open) or any(self._queues.values()) or any(self._unacknowledged.values())

    def _close_due(self, now_ms: int) -> None:
        # A batch whose partition still has a closed batch waiting to be sent (in-flight bound
        # reached, backoff) stays open and keeps growing (as Kafka's accumulator does): closing it
        # at linger would queue ever more small batches, one per request, behind a slow leader.
        linger_ms = self.config.linger_ms
        due = [key for key, batch in self._open.items()
               if self._flushing or (now_ms - batch.created_ms >= linger_ms and not self._queues.get(key))]
        for key in due:
            self._close(key, self._open[key])
        self._flushing = False

    def _close(self, key: tuple[str, int], batch: ProducerBatch) -> None:
        del self._open[key]
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append(batch)
        batch.size_bytes = batch.builder.size_bytes
        self.queued_bytes += batch.size_bytes
        if batch.base_sequence >= 0:
            self._next_sequence[key] = (batch.base_sequence + batch.record_count) % _SEQUENCE_MODULUS

    # -- replies -----------------------------------------------------------------------------

    def plan_completed(
        self, plan: ProducePlan, response: ProduceResponse | ErrorResponse | None, now_ms: int
    ) -> list[ProducerBatch]:
        """Apply a produce reply (``None`` for acks=0, which has none); return finished batches."""
        self._in_flight[plan.node_id] -= 1
        finished: list[ProducerBatch] = []
        if isinstance(response, ErrorResponse):
            error = error_for_code(response.error_code, response.error_message or "produce request failed")
            for batch in plan.batches:
                self._retry_or_fail(batch, error, now_ms, finished)
            return finished
        outcomes = {} if response is None else _outcomes(response)
        for batch in plan.batches:
            if response is None:
                self._succeed(batch, -1, -1, finished)
                continue
            outcome = outcomes.get((batch.topic, batch.partition))
            if outcome is None:
                missing = InvalidRequestError(f"the reply has no result for {batch.topic}-{batch.partition}")
                self._fail(batch, missing, finished)
            else:
                self._apply_outcome(batch, *outcome, now_ms, finished)
        return finished

    def plan_failed(self, plan: ProducePlan, error: BrokerError, now_ms: int) -> list[ProducerBatch]:
        """The request was lost (connection broken, timed out): retry its batches if time allows."""
        self._in_flight[plan.node_id] -= 1
        finished: list[ProducerBatch] = []
        for batch in plan.batches:
            self.stale_topics.add(batch.topic)
            batch.awaiting_leader = True
            self._retry_or_fail(batch, error, now_ms, finished)
        return finished

    def fail_gated(self, keys: set[tuple[str, int]], error: BrokerError) -> list[ProducerBatch]:
        """The coordinator refused to list these partitions: fail their unsent batches; return them."""
        self.gated -= keys
        finished: list[ProducerBatch] = []
        for key in keys:
            if key in self._open:
                self._close(key, self._open[key])
            queue = self._queues.get(key)
            while queue:
                self._fail(queue.popleft(), error, finished)
        self.gates_open_ms = min(self._gate_deadlines_ms(), default=_NEVER_MS)
        return finished

    def fail_pending(self, error: BrokerError) -> list[ProducerBatch]:
        """Fail every unfinished batch, open, queued or in flight (the driver is closing); return them."""
        for key in list(self._open):
            self._close(key, self._open[key])
        finished: list[ProducerBatch] = []
        for queue in self._queues.values():
            while queue:
                self._fail(queue.popleft(), error, finished)
        for pending in self._unacknowledged.values():
            for batch in list(pending):
                self._fail(batch, error, finished)
        self._in_flight.clear()
        return finished

    def expire(self, now_ms: int) -> list[ProducerBatch]:
        """Fail queued batches older than ``delivery_timeout_ms``."""
        deadline_ms = now_ms - self.config.delivery_timeout_ms
        finished: list[ProducerBatch] = []
        for queue in self._queues.values():
            while queue and queue[0].created_ms <= deadline_ms:
                batch = queue.popleft()
                error = RequestTimedOutError(
                    f"{batch.record_count} records for {batch.topic}-{batch.partition} were not acknowledged "
                    f"within delivery_timeout_ms={self.config.delivery_timeout_ms}"
                )
                self._fail(batch, error, finished)
        return finished

    def _apply_outcome(
        self,
        batch: ProducerBatch,
        code: int,
        message: str | None,
        base_offset: int,
        log_append_time_ms: int,
        now_ms: int,
        finished: list[ProducerBatch],
    ) -> None:
        if code == ErrorCode.NONE:
            self._succeed(batch, base_offset, log_append_time_ms, finished)
            return
        if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
            self._succeed(batch, -1, -1, finished)  # written before; its offsets are no longer known
            return
        error = error_for_code(code, message or f"producing to {batch.topic}-{batch.partition} failed")
        if code in STALE_METADATA_CODES:
            self.stale_topics.add(batch.topic)
            batch.awaiting_leader = True
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self._earlier_batch_unfinished(batch):
            error.retriable = True  # the gap is an earlier batch being retried, not a lost record
        self._retry_or_fail(batch, error, now_ms, finished)

    def _earlier_batch_unfinished(self, batch: ProducerBatch) -> bool:
        key = (batch.topic, batch.partition)
        queued = self._queues.get(key, ())
        return any(
            other is not batch and _sequence_before(other.base_sequence, batch.base_sequence)
            for other in (*self._unacknowledged.get(key, ()), *queued)
        )

    def _retry_or_fail(
        self, batch: ProducerBatch, error: BrokerError, now_ms: int, finished: list[ProducerBatch]
    ) -> None:
        batch.attempts += 1
        delay_ms = self.config.backoff.delay_ms(batch.attempts, self._random)
        retriable = error.retriable or error.code in _RETRIED_CODES
        if not retriable or now_ms + delay_ms - batch.created_ms > self.config.delivery_timeout_ms:
            self._fail(batch, error, finished)
            return
        self._forget_unacknowledged(batch)
        batch.retry_at_ms = now_ms + delay_ms
        queue = self._queues[batch.topic, batch.partition]
        position = 0  # keep the queue in sequence order so retries resend in order
        while position < len(queue) and _sequence_before(queue[position].base_sequence, batch.base_sequence):
            position += 1
        queue.insert(position, batch)

    def _succeed(
        self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int, finished: list[ProducerBatch]
    ) -> None:
        batch.base_offset = base_offset
        batch.log_append_time_ms = log_append_time_ms
        self.delivered.acknowledged += batch.record_count
        self._finish(batch, finished)

    def _fail(self, batch: ProducerBatch, error: BrokerError, finished: list[ProducerBatch]) -> None:
        batch.error = error
        if self.failure is None:
            self.failure = error
        self.delivered.failed += batch.record_count
        if self.delivered.first_error is None:
            self.delivered.first_error = error
        self._finish(batch, finished)

    def _finish(self, batch: ProducerBatch, finished: list[ProducerBatch]) -> None:
        batch.done = True
        batch.builder = None  # free the encoded records: futures may keep the batch alive
        batch.payload = b""
        self.queued_bytes -= batch.size_bytes
        self._forget_unacknowledged(batch)
        finished.append(batch)

    def _forget_unacknowledged(self, batch: ProducerBatch) -> None:
        pending = self._unacknowledged.get((batch.topic, batch.partition))
        if pending and batch in pending:
            pending.remove(batch)


def _outcomes(response: ProduceResponse) -> dict[tuple[str, int], tuple[int, str | None, int, int]]:
    """Per partition: (error code, message, base offset, log append time)."""
    return {
        (topic.name, result.partition_index): (
            result.error_code,
            result.error_message,
            result.base_offset,
            result.log_append_time_ms,
        )
        for topic in response.topics
        for result in topic.partitions
    }


def _sequence_before(left: int, right: int) -> bool:
    """True if sequence ``left`` comes before ``right`` (both -1 without idempotence: never)."""
    if left < 0 or right < 0:
        return False
    return 0 < (right - left) % _SEQUENCE_MODULUS < _SEQUENCE_MODULUS // 2


def _ignore_batch_full(topic: str, partition: int) -> None:
    """Default ``on_batch_full``: nothing to do without a sticky partitioner."""

