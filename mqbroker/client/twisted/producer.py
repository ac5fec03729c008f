"""The Twisted ``TwistedProducer``: ``send`` returns a Deferred; batching as the blocking producer.

The pure ``ProducerCore`` batches; a reactor timer drains it at each batch's deadline. A ``send`` whose topic is
known goes straight into its batch (no coroutine: tests/integration/test_twisted_send_cost.py); each batch keeps its
records' Deferreds with their index and timestamp, and fires them in order with their metadata when it finishes.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IReactorTCP, IReactorTime
from twisted.python.failure import Failure

from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.partitioner import StickyPartitioner, partition_for_key
from mqbroker.client.producer import ProducerCore
from mqbroker.client.producer_batch import DeliveryCounts, ProducerBatch, ProducePlan, RecordMetadata
from mqbroker.client.producer_config import ProducerConfig, parse_acks
from mqbroker.client.security import ClientSecurity
from mqbroker.client.twisted.cluster import TwistedCluster
from mqbroker.client.group_member import ConsumerGroupMetadata
from mqbroker.client.transaction_requests import TransactionRequests
from mqbroker.client.transaction_state import TopicPartition
from mqbroker.client.twisted.transactions import TwistedTransactions
from mqbroker.errors import BrokerError, InvalidTxnStateError, RequestTimedOutError
from mqbroker.protocols.native.messages import Acks, InitProducerIdRequest

#: Pause after a metadata refresh before draining again (bounds the retry rate if it failed).
_REFRESH_PAUSE_S = 0.05
#: A ``RecordMetadata`` made from a tuple of its fields without the named tuple's Python ``__new__`` (one per record).
_new_metadata = tuple.__new__
#: A batch's waiter, flat: per record its Deferred, index and timestamp; ``send_many`` adds a Deferred, -1, 0 per
#: batch run, fired with None. (Flat: a tuple per record would be one more object for the garbage collector to
#: walk while the record waits for its acknowledgement.)
_Waiters = list[Any]


class TwistedProducer:
    """``send`` returns a Deferred firing with ``RecordMetadata``; batching as the blocking producer."""

    def __init__(
        self,
        reactor: IReactorTCP,
        bootstrap: str | Sequence[str] = "localhost:9393",
        *,
        acks: int | str = "all",
        linger_ms: int = 5,
        batch_size: int = 256 * 1024,
        compression: str = "none",
        enable_idempotence: bool | None = None,
        client_id: str = "mqbroker-producer",
        rng: random.Random | None = None,
        security: ClientSecurity | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        max_block_ms: int = 60_000,
    ) -> None:
        """``transactional_id``: a transactional producer (``init_transactions`` first, then ``send`` between
        ``begin_transaction`` and ``commit_transaction``/``abort_transaction``, as the blocking ``Producer``)."""
        parsed_acks = parse_acks(acks)
        if enable_idempotence is None:
            enable_idempotence = parsed_acks != Acks.NONE
        config = ProducerConfig(
            acks=parsed_acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
            compression=compression,
            enable_idempotence=enable_idempotence,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
        ).validated()
        self._reactor = reactor
        self._random = rng or random.Random()
        self._core = ProducerCore(config, self._random, new_waiter=list)
        self._sticky = StickyPartitioner(self._random)
        self._sticky_partitions = self._sticky.sticky
        self._core.on_batch_full = self._batch_full
        self._cluster = TwistedCluster(reactor, bootstrap, client_id, security)
        self._partition_counts = self._cluster.view.partition_counts
        self._seconds = self._clock().seconds
        #: Whether a ``send`` for a known topic may append at once: the producer id is there (or not needed), no
        #: transaction must admit the partition first, and the producer is open.
        self._appends_directly = False
        #: The metadata refresh under way per topic ``send`` waits for (one request however many sends wait).
        self._refreshes: dict[str, Deferred[Any]] = {}
        self._timer: Any = None
        self._ready: Deferred[None] | None = None
        self._flushes: list[Deferred[None]] = []
        self._closed = False
        self._transactions: TwistedTransactions | None = None
        if transactional_id is not None:
            self._transactions = TwistedTransactions(
                clock=self._clock(), cluster=self._cluster, deadline_s=max_block_ms / 1000,
                requests=TransactionRequests(transactional_id, transaction_timeout_ms),
                flush=self.flush, take_failure=self._take_failure, set_identity=self._core.set_producer_identity)

    # -- transactions (a producer made with a transactional_id) -------------------------------

    def _transactional(self, name: str) -> TwistedTransactions:
        if self._transactions is None:
            raise InvalidTxnStateError(f"{name}() needs a transactional producer: create it with transactional_id=...")
        return self._transactions

    def init_transactions(self) -> Deferred[None]:
        """Register the transactional id: fences older producers with it and ends what they left open."""
        return self._transactional("init_transactions").init()

    def begin_transaction(self) -> None:
        """Start a transaction (no broker call)."""
        self._transactional("begin_transaction").tracker.begin()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_metadata: ConsumerGroupMetadata
    ) -> Deferred[None]:
        """Commit a consumer's ``offsets`` (the next offsets to read) with the transaction."""
        return self._transactional("send_offsets_to_transaction").send_offsets(offsets, group_metadata)

    def commit_transaction(self) -> Deferred[None]:
        """Send everything queued, then commit; fails if any record of the transaction failed (abort then)."""
        return self._transactional("commit_transaction").end(committed=True)

    def abort_transaction(self) -> Deferred[None]:
        """Abort: the transaction's records stay invisible to read_committed consumers."""
        return self._transactional("abort_transaction").end(committed=False)

    def _take_failure(self) -> BrokerError | None:
        failure, self._core.failure = self._core.failure, None
        return failure

    def _clock(self) -> IReactorTime:
        return self._reactor  # type: ignore[return-value]

    def _now_ms(self) -> int:
        return int(self._clock().seconds() * 1000)

    async def _prepare(self, topic: str) -> int:
        if self._core.needs_producer_id and self._transactions is None:
            if self._ready is None:
                self._ready = Deferred.fromCoroutine(self._init_producer_id())
            await self._ready
        count = self._partition_counts.get(topic)
        while count is None:
            refresh = self._refreshes.get(topic)
            if refresh is None:
                refresh = self._refreshes[topic] = Deferred.fromCoroutine(self._cluster.refresh([topic]))
                refresh.addBoth(self._refreshed, topic)
            await refresh
            count = self._partition_counts.get(topic)
            error = self._cluster.view.topic_error(topic)
            if count is None and error is not None and not error.retriable and error.code != 3:
                raise error
        return count

    def _batch_full(self, topic: str, partition: int) -> None:
        self._sticky.batch_closed(topic, partition, self._partition_counts.get(topic) or 1)

    def _refreshed(self, result: object, topic: str) -> object:
        del self._refreshes[topic]
        return result

    async def _init_producer_id(self) -> None:
        identity = await self._cluster.request(None, InitProducerIdRequest())
        if self._core.needs_producer_id:
            self._core.set_producer_identity(identity.producer_id, identity.producer_epoch)

    async def _send(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Any, partition: int | None, timestamp_ms: int | None
    ) -> RecordMetadata:
        if self._closed:
            raise RuntimeError("send() on a closed producer")
        count = await self._prepare(topic)
        if partition is None:
            partition = partition_for_key(key, count) if key is not None else self._sticky.partition(topic, count)
        if self._transactions is not None:
            await self._transactions.before_send(topic, partition)
        elif not self._closed:
            self._appends_directly = True  # (the producer id is there: ``_prepare`` waited for it)
        now_ms = self._now_ms()
        timestamp = now_ms if timestamp_ms is None else timestamp_ms
        batch, index = self._core.append(topic, partition, timestamp, key, value, headers, now_ms)
        delivered: Deferred[RecordMetadata] = Deferred()
        batch.waiter += (delivered, index, timestamp)  # type: ignore[attr-defined]
        self._schedule()
        return await delivered

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Deferred[RecordMetadata]:
        """Queue one record; fire with its ``RecordMetadata`` once acknowledged (or with its batch's error)."""
        # The per-record path: every call here counts (tests/integration/test_twisted_send_cost.py).
        count = self._partition_counts.get(topic)
        if count is None or not self._appends_directly:
            return Deferred.fromCoroutine(self._send(topic, value, key, headers, partition, timestamp_ms))
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, count)
            else:
                partition = self._sticky_partitions.get(topic)
                if partition is None or partition >= count:
                    partition = self._sticky.partition(topic, count)
        now_ms = int(self._seconds() * 1000)
        if timestamp_ms is None:
            timestamp_ms = now_ms
        try:
            batch, index = self._core.append(topic, partition, timestamp_ms, key, value, headers, now_ms)
        except Exception:  # a record it cannot encode: its Deferred fails, as the coroutine's would
            return fail()
        delivered: Deferred[RecordMetadata] = Deferred()
        batch.waiter += (delivered, index, timestamp_ms)  # type: ignore[attr-defined]
        if index == 0:
            self._schedule()  # a new batch (an earlier open one is in the timer's or a reply's hands already)
        return delivered

    async def _send_many(
        self, topic: str, values: Sequence[bytes], partition: int | None, timestamp_ms: int | None
    ) -> list[RecordMetadata]:
        if self._closed:
            raise RuntimeError("send_many() on a closed producer")
        count = await self._prepare(topic)
        now_ms = self._now_ms()
        timestamp = now_ms if timestamp_ms is None else timestamp_ms
        spans: list[tuple[ProducerBatch, int, int]] = []
        delivered: list[Deferred[None]] = []
        position = 0
        while position < len(values):
            target = self._sticky.partition(topic, count) if partition is None else partition
            if self._transactions is not None:
                await self._transactions.before_send(topic, target)
            batch, first, added = self._core.append_values(topic, target, timestamp, values, position, now_ms)
            spans.append((batch, first, added))
            delivered.append(Deferred())
            batch.waiter += (delivered[-1], -1, 0)  # type: ignore[attr-defined]
            position += added
        self._schedule()
        for done in delivered:
            await done
        return [batch.metadata(index, timestamp) for batch, first, added in spans for index in range(first, first + added)]

    def send_many(
        self, topic: str, values: Sequence[bytes], partition: int | None = None, timestamp_ms: int | None = None,
    ) -> Deferred[list[RecordMetadata]]:
        """Queue one keyless, headerless record per value, in order, with one timestamp; fire with every record's
        ``RecordMetadata`` (in the order of the values) once all are acknowledged, or with the first failure.

        The bulk form of ``send``: the records are encoded in runs with no Python code per record (see the
        blocking ``Producer.send_many``).
        """
        return Deferred.fromCoroutine(self._send_many(topic, values, partition, timestamp_ms))

    def _schedule(self) -> None:
        if self._timer is not None and self._timer.active():
            return
        deadline_ms = self._core.next_deadline_ms(self._now_ms())
        if deadline_ms is None:
            return
        delay_s = max(0.0, (deadline_ms - self._now_ms()) / 1000)
        self._timer = self._clock().callLater(delay_s, self._drain)

    def _drain(self) -> None:
        self._timer = None
        if self._closed:
            return
        now_ms = self._now_ms()
        self._resolve(self._core.expire(now_ms))
        if self._core.stale_topics:
            topics = set(self._core.stale_topics)
            self._core.stale_topics.clear()
            refreshed = Deferred.fromCoroutine(self._cluster.refresh(topics))
            refreshed.addBoth(lambda _: self._clock().callLater(_REFRESH_PAUSE_S, self._drain))
            return
        for plan in self._core.drain(now_ms, self._cluster.view.leader):
            Deferred.fromCoroutine(self._cluster.request(plan.node_id, plan.request())).addCallbacks(
                self._completed, self._failed, callbackArgs=(plan,), errbackArgs=(plan,)
            )
        self._schedule()
        self._check_flushes()

    def _completed(self, response: Any, plan: ProducePlan) -> None:
        if self._closed:
            return  # its batches failed when the producer closed
        self._resolve(self._core.plan_completed(plan, None if plan.acks == Acks.NONE else response, self._now_ms()))
        self._drain()

    def _failed(self, failure: Failure, plan: ProducePlan) -> None:
        if self._closed:
            return  # its batches failed when the producer closed
        error = failure.value if isinstance(failure.value, BrokerError) else BrokerUnavailableError(str(failure.value))
        self._resolve(self._core.plan_failed(plan, error, self._now_ms()))
        self._drain()

    def _resolve(self, finished: list[ProducerBatch]) -> None:
        """Fire the Deferreds of each finished batch's records, in order: with its metadata, or its error."""
        for batch in finished:
            waiters: _Waiters = batch.waiter  # type: ignore[assignment]
            if batch.error is not None:
                for delivered in waiters[::3]:
                    delivered.errback(batch.error)
                continue
            topic, partition, base_offset, appended_ms = (
                batch.topic, batch.partition, batch.base_offset, batch.log_append_time_ms)
            for delivered, index, timestamp_ms in zip(waiters[::3], waiters[1::3], waiters[2::3]):
                if index < 0:
                    delivered.callback(None)
                else:
                    delivered.callback(_new_metadata(RecordMetadata, (
                        topic, partition, -1 if base_offset < 0 else base_offset + index,
                        timestamp_ms if appended_ms < 0 else appended_ms)))

    def _check_flushes(self) -> None:
        if not self._core.has_pending:
            flushes, self._flushes = self._flushes, []
            for flushed in flushes:
                flushed.callback(None)
        elif self._flushes:
            self._core.flush()
            self._schedule()

    def delivery_counts(self) -> DeliveryCounts:
        """How many records sent so far were acknowledged and how many failed (a copy; records still in
        flight are in neither count)."""
        return dataclasses.replace(self._core.delivered)

    def flush(self, timeout: float | None = None) -> Deferred[int]:
        """Fire with 0 once everything queued so far is acknowledged or failed; or, after ``timeout``
        seconds, with how many records are still unfinished."""
        flushed: Deferred[Any] = Deferred()
        self._flushes.append(flushed)
        self._core.flush()
        self._drain()
        flushed.addCallback(lambda _: 0)
        if timeout is not None:
            flushed.addTimeout(timeout, self._clock(),
                               onTimeoutCancel=lambda result, timeout: self._core.pending_records)
        return flushed

    async def _close(self, timeout: float | None) -> None:
        await self.flush(timeout)
        self._closed = True
        self._appends_directly = False
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        abandoned = RequestTimedOutError(
            f"the producer was closed (close(timeout={timeout})) before these records were acknowledged")
        self._resolve(self._core.fail_pending(abandoned))
        self._cluster.close()

    def close(self, timeout: float | None = None) -> Deferred[None]:
        """Flush (up to ``timeout`` seconds; None: until everything is acknowledged), then close the
        connections; records still unfinished then fail with ``RequestTimedOutError``."""
        return Deferred.fromCoroutine(self._close(timeout))
