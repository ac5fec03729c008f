"""The blocking ``Producer``: ``send`` appends to a batch; a background I/O thread sends it.

The caller's ``send`` only appends to the pure ``ProducerCore`` under a lock, so producing
overlaps with sending; ``ProducerIO`` (``producer_io.py``) drains the core, talks to the
partition leaders and completes each batch's ``RecordFuture``s, whose callbacks run as
``delivery.py`` describes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
import time
from time import time_ns
from collections.abc import Iterator, Mapping, Sequence

from mqbroker import limits
from mqbroker.client.blocking.cluster import BlockingCluster, wall_clock_ms
from mqbroker.client.blocking.delivery import IMMEDIATE, POLL, Deliveries, DeliveryCallback, RecordFuture, RecordsFuture
from mqbroker.client.blocking.producer_io import ProducerIO
from mqbroker.client.partitioner import StickyPartitioner, partition_for_key
from mqbroker.client.producer import ProducerCore
from mqbroker.client.producer_batch import DeliveryCounts, ProducerBatch
from mqbroker.client.producer_config import ProducerConfig, parse_acks
from mqbroker.client.security import ClientSecurity
from mqbroker import errors
from mqbroker.client.blocking.transactions import CoordinatorCalls, ProducerTransactions
from mqbroker.client.group_member import ConsumerGroupMetadata
from mqbroker.client.transaction_requests import TransactionRequests
from mqbroker.client.transaction_state import TopicPartition
from mqbroker.errors import RequestTimedOutError
from mqbroker.protocols.native.messages import Acks, InitProducerIdRequest, InitProducerIdResponse


class Producer:
    """Sends records to partition leaders in batches; ``send`` returns a ``RecordFuture``."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "localhost:9393",
        *,
        acks: int | str = "all",
        linger_ms: int = 5,
        batch_size: int = 256 * 1024,
        compression: str = "none",
        enable_idempotence: bool | None = None,
        max_in_flight: int = 5,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        buffer_bytes_max: int = 64 * 1024 * 1024,
        max_block_ms: int = 60_000,
        client_id: str = "mqbroker-producer",
        seed: int | None = None,
        security: ClientSecurity | None = None,
        delivery_callbacks: str = IMMEDIATE,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
    ) -> None:
        """``transactional_id``: a transactional producer (call ``init_transactions`` first, then send inside
        ``begin_transaction`` ... ``commit_transaction``/``abort_transaction``, or ``with producer.transaction()``)."""
        self._deliveries = Deliveries(delivery_callbacks)
        self._poll_mode = self._deliveries.mode == POLL
        parsed_acks = parse_acks(acks)
        if enable_idempotence is None:
            enable_idempotence = parsed_acks != Acks.NONE  # on by default wherever it can be
        self._config = ProducerConfig(
            acks=parsed_acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
            compression=compression,
            enable_idempotence=enable_idempotence,
            max_in_flight=max_in_flight,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            buffer_bytes_max=buffer_bytes_max,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
        ).validated()
        rng = random.Random(seed)
        self._core = ProducerCore(self._config, rng, new_waiter=self._deliveries.new_batch)
        self._sticky = StickyPartitioner(rng)
        self._sticky_partitions = self._sticky.sticky
        self._buffer_bytes_max = self._config.buffer_bytes_max
        self._max_block_s = max_block_ms / 1000
        self._cluster = BlockingCluster(bootstrap, client_id, request_timeout_ms / 1000, security)
        self._partition_counts = self._cluster.view.partition_counts
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._transactions: ProducerTransactions | None = None
        #: The ``core.gates_open_ms`` a send last let the I/O thread take its turn for.
        self._gates_served_ms = -1
        if transactional_id is not None:
            calls = CoordinatorCalls(bootstrap=self._cluster.bootstrap, client_id=client_id,
                                     timeout_s=request_timeout_ms / 1000, deadline_s=self._max_block_s, security=security)
            self._transactions = ProducerTransactions(TransactionRequests(transactional_id, transaction_timeout_ms),
                                                      calls, self)
        elif enable_idempotence:
            identity = self._cluster.any_connection().request(InitProducerIdRequest(), self._cluster.timeout_s)
            assert isinstance(identity, InitProducerIdResponse)
            self._core.set_producer_identity(identity.producer_id, identity.producer_epoch)
        self._core.on_batch_full = self._batch_full
        self._io = ProducerIO(self._core, self._cluster, self._lock, self._changed,
                              None if self._transactions is None else self._transactions.add_waiting_partitions)
        self._thread = threading.Thread(target=self._io.run, name="mqbroker-producer-io", daemon=True)
        self._thread.start()

    # -- transactions (a producer made with a transactional_id) -------------------------------

    def _transactional(self, name: str) -> ProducerTransactions:
        if self._transactions is None:
            raise errors.InvalidTxnStateError(f"{name}() needs a transactional producer: create it with "
                                              "transactional_id=...")
        return self._transactions

    def init_transactions(self) -> None:
        """Register the transactional id with its coordinator: fences any older producer with the same id and
        aborts (or finishes) the transaction it left open. Call once, before the first transaction."""
        self._transactional("init_transactions").init()

    def begin_transaction(self) -> None:
        """Start a transaction: the records sent until it commits become visible together, or not at all."""
        self._transactional("begin_transaction").tracker.begin()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_metadata: ConsumerGroupMetadata
    ) -> None:
        """Commit a consumer's ``offsets`` (the next offsets to read) with the transaction
        (``group_metadata``: ``Consumer.group_metadata()``)."""
        self._transactional("send_offsets_to_transaction").send_offsets(offsets, group_metadata)

    def commit_transaction(self) -> None:
        """Send everything queued, then commit; raises if any record of the transaction failed (abort it then)."""
        self._transactional("commit_transaction").end(committed=True)

    def abort_transaction(self) -> None:
        """Abort: the transaction's records stay invisible to read_committed consumers, its offsets unused."""
        self._transactional("abort_transaction").end(committed=False)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Producer]:
        """``with producer.transaction():`` begins, commits on success, aborts when the block raises."""
        self.begin_transaction()
        try:
            yield self
        except BaseException:
            self.abort_transaction()
            raise
        self.commit_transaction()

    def _batch_full(self, topic: str, partition: int) -> None:
        count = self._cluster.view.partition_count(topic)
        self._sticky.batch_closed(topic, partition, count or 1)

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> RecordFuture:
        """Queue one record; the future resolves to its ``RecordMetadata`` once acknowledged.

        ``on_delivery(error, metadata)`` is called once the record is written (``error`` None)
        or has failed (``metadata`` None), on the thread ``delivery_callbacks`` chose.
        """
        # The per-record path: every call here counts (tests/integration/test_producer_send_cost.py).
        if partition is None:
            count = self._partition_counts.get(topic)
            if count is None:
                count = self._wait_for_topic(topic)
            if key is not None:
                partition = partition_for_key(key, count)
            else:
                partition = self._sticky_partitions.get(topic)
                if partition is None or partition >= count:
                    partition = self._sticky.partition(topic, count)
        transactions = self._transactions
        if transactions is not None:
            admitted = (topic, partition)
            if admitted not in transactions.sendable:
                transactions.before_send(topic, partition)
        if self._poll_mode and self._deliveries.queued > limits.delivery_callbacks_queued_max:
            self._deliveries.run_queued()  # poll mode, and nobody polls: serve them here, still the caller's thread
        now_ms = time_ns() // 1_000_000  # (wall_clock_ms) the batch's age counts from now, whatever the timestamp
        if timestamp_ms is None:
            timestamp_ms = now_ms
        core = self._core
        lock = self._lock
        lock.acquire()  # (not ``with``: its __enter__ and __exit__ lookups cost as much as the rest of the locking)
        try:
            if self._closed:
                raise RuntimeError("send() on a closed producer")
            if core.queued_bytes > self._buffer_bytes_max:
                self._wait_for_buffer_space()
            if transactions is not None and admitted not in transactions.sendable:
                raise transactions.send_refused()  # checked after the wait: end() may have begun
            batch, index = core.append(topic, partition, timestamp_ms, key, value, headers, now_ms)
        finally:
            lock.release()
        if index == 0:
            self._io.wake()  # a new batch: its linger timer starts, and the previous one is due
        if transactions is not None and now_ms > core.gates_open_ms:  # (a whole millisecond gathered)
            self._let_io_open_gates()
        future = RecordFuture(batch, index, timestamp_ms)
        if on_delivery is not None:
            future.add_delivery_callback(on_delivery)
        return future

    def send_many(
        self, topic: str, values: Sequence[bytes], partition: int | None = None, timestamp_ms: int | None = None,
    ) -> RecordsFuture:
        """Queue one keyless record per value, in order, with one timestamp; the future covers them all.

        The bulk form of ``send`` for values without keys or headers: the records are encoded in runs with
        no Python code per record, and one future stands for all of them (``RecordsFuture.counts`` and
        ``result``), so it is several times faster per record. Records go to ``partition``, or, without
        one, to the sticky partition of ``topic``, which moves on each time a batch fills up (as ``send``).
        """
        count = None
        if partition is None:
            count = self._cluster.view.partition_count(topic) or self._wait_for_topic(topic)
        now_ms = wall_clock_ms()
        if timestamp_ms is None:
            timestamp_ms = now_ms
        spans: list[tuple[ProducerBatch, int, int]] = []
        core = self._core
        transactions = self._transactions
        position = 0
        while position < len(values):
            target = partition if count is None else self._sticky.partition(topic, count)
            if transactions is not None and (topic, target) not in transactions.sendable:
                transactions.before_send(topic, target)
            with self._lock:
                if self._closed:
                    raise RuntimeError("send_many() on a closed producer")
                if core.queued_bytes > self._config.buffer_bytes_max:
                    self._wait_for_buffer_space()
                if transactions is not None and (topic, target) not in transactions.sendable:
                    raise transactions.send_refused()  # checked after the wait: end() may have begun
                batch, first, added = core.append_values(topic, target, timestamp_ms, values, position, now_ms)
            spans.append((batch, first, added))
            position += added
            self._io.wake()
            if transactions is not None and now_ms > core.gates_open_ms:  # (a whole millisecond gathered)
                self._let_io_open_gates()
        return RecordsFuture(spans, timestamp_ms)

    def _let_io_open_gates(self) -> None:
        """The partitions new to the transaction gathered their records: let the I/O thread send their first
        batches now, so the transaction opens at their leaders while the application goes on sending (once per
        gathering: should the I/O thread not get to it in time, it opens them on its own). ``send`` calls it once
        the clock (whole milliseconds) passed ``gates_open_ms``: one turn for the partitions a transaction starts
        writing to together, none for a transaction sent within a millisecond (its commit flushes at once)."""
        gates_open_ms = self._core.gates_open_ms
        if gates_open_ms != self._gates_served_ms and threading.current_thread() is not self._thread:
            self._gates_served_ms = gates_open_ms  # (a delivery callback on the I/O thread cannot wait for it)
            self._io.take_turn(limits.producer_io_turn_wait_ms_max / 1000)

    def poll(self, timeout: float = 0.0) -> int:
        """Run the delivery callbacks of records completed since the last call, in this thread; wait up to
        ``timeout`` seconds for one when none is ready. Returns how many ran (always 0 unless the producer
        was made with ``delivery_callbacks="poll"``: otherwise they run on the I/O thread as records complete)."""
        if not self._poll_mode:
            return 0
        return self._deliveries.run_queued(timeout)

    def _wait_for_topic(self, topic: str) -> int:
        deadline = time.monotonic() + self._max_block_s
        with self._lock:
            self._core.stale_topics.add(topic)
            self._io.wake()
            while (count := self._cluster.view.partition_count(topic)) is None:
                error = self._cluster.view.topic_error(topic)
                if error is not None and not error.retriable and error.code != 3:
                    raise error
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RequestTimedOutError(f"no metadata for topic {topic!r} within max_block_ms")
                self._changed.wait(min(remaining, 0.1))
                self._core.stale_topics.add(topic)
                self._io.wake()
        return count

    def _wait_for_buffer_space(self) -> None:
        deadline = time.monotonic() + self._max_block_s
        while self._core.queued_bytes > self._config.buffer_bytes_max:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimedOutError("the producer's buffer stayed full for max_block_ms")
            self._changed.wait(remaining)

    def delivery_counts(self) -> DeliveryCounts:
        """How many records sent so far were acknowledged and how many failed (a copy; records still in
        flight are in neither count)."""
        with self._lock:
            return dataclasses.replace(self._core.delivered)

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued now and wait until it is acknowledged or failed, up to ``timeout`` seconds
        (None: as long as it takes). Returns how many records are still unfinished (0: all of them are).

        In poll mode it also runs the delivery callbacks meanwhile, as ``poll`` does; once it returns 0,
        every callback of the records sent before it has run.
        """
        self._refuse_on_io_thread("flush")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._core.flush()
        self._io.wake()
        while True:
            self.poll()
            with self._lock:
                if self._io.error is not None:
                    raise self._io.error
                if not self._core.has_pending and not self._io.resolving_records:
                    break  # (checked without counting: a transaction's commit wakes here after every reply)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return self._core.pending_records + self._io.resolving_records
                self._changed.wait(0.05 if remaining is None else min(remaining, 0.05))
                if self._core.has_pending:
                    self._core.flush()  # records sent while flushing go at once too
        self.poll()  # the callbacks of the last batches, queued before they counted as resolved
        return 0

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds; None: until everything is acknowledged), stop the I/O thread and
        close the connections. Records still unfinished then fail with ``RequestTimedOutError``; every
        delivery callback has run when ``close`` returns (in poll mode, here)."""
        if self._closed:
            return
        self._refuse_on_io_thread("close")
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
            self._io.stop()
            self._thread.join()
            if self._transactions is not None:
                self._transactions.close()
            abandoned = RequestTimedOutError(
                f"the producer was closed (close(timeout={timeout})) before these records were acknowledged")
            self._io.resolve(self._io.finishing(self._core.fail_pending(abandoned)))
            self._cluster.close()
            self.poll()

    def _refuse_on_io_thread(self, name: str) -> None:
        """``flush`` and ``close`` wait for the I/O thread: from one of its callbacks they would wait forever."""
        if threading.current_thread() is self._thread:
            raise RuntimeError(f"{name}() called from a delivery callback on the producer's I/O thread would wait "
                               "for itself; create the Producer with delivery_callbacks='poll' to run callbacks "
                               "in your own thread")

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

