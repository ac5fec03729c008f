"""The blocking client: ``Producer``, ``Consumer`` and ``Admin`` over plain sockets, no reactor.

For scripts and Spark workers. The producer runs one background I/O thread (the caller's
``send`` only appends to a batch, so sending overlaps with producing); the consumer and admin
do their I/O on the caller's thread. The logic is the pure ``ProducerCore`` and
``ConsumerCore``; this module only moves bytes and waits.
"""

from __future__ import annotations

import random
import selectors
import socket
import threading
import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import TypeVar

from mqbroker.client import admin, connectors
from mqbroker.client.backoff import Backoff
from mqbroker.client.blocking_group import GroupMembership, resolve_callback
from mqbroker.client.cluster import ClusterView
from mqbroker.client.connection import (
    BlockingConnection,
    BrokerUnavailableError,
    parse_address,
)
from mqbroker.client.group_member import (
    AssignmentChange,
    AutoCommit,
    GroupMember,
    GroupSettings,
    apply_change,
    known_positions,
    revoked_positions,
)
from mqbroker.client.consumer import ConsumerConfig, ConsumerCore, Message, OffsetReset, TopicPartition
from mqbroker.client.partitioner import StickyPartitioner, partition_for_key
from mqbroker.client.producer import ProducerBatch, ProducerConfig, ProducerCore, ProducePlan, RecordMetadata, parse_acks
from mqbroker.client.security import ClientSecurity
from mqbroker.connectors.model import ConnectorDescription
from mqbroker.errors import BrokerError, RequestTimedOutError, error_for_code
from mqbroker.protocols.native.messages import (
    Acks,
    AclBinding,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    DeleteAclsRequest,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    FetchResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    MetadataRequest,
    MetadataResponse,
    OngoingPartitionReassignment,
    ReassignablePartition,
    ReassignableTopic,
    UserUpsertion,
)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


T = TypeVar("T")


class _Cluster:
    """Connections by node id and the metadata view, for one thread's use."""

    def __init__(
        self, bootstrap: str | Sequence[str], client_id: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        addresses = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        self.bootstrap = [parse_address(address) for address in addresses]
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self.view = ClusterView()
        self.connections: dict[int, BlockingConnection] = {}
        self._any: BlockingConnection | None = None

    def any_connection(self) -> BlockingConnection:
        """A connection to some broker (bootstrap first, then known brokers)."""
        if self._any is not None:
            return self._any
        errors = []
        candidates = self.bootstrap + [address for node in self.view.node_ids if (address := self.view.address(node))]
        for host, port in candidates:
            try:
                self._any = BlockingConnection(host, port, self.client_id, self.timeout_s, self.security)
                return self._any
            except BrokerUnavailableError as error:
                errors.append(str(error))
        raise BrokerUnavailableError("no broker reachable: " + "; ".join(errors))

    def connection(self, node_id: int) -> BlockingConnection:
        """The connection to broker ``node_id``, opened on first use."""
        connection = self.connections.get(node_id)
        if connection is None:
            address = self.view.address(node_id)
            if address is None:
                raise BrokerUnavailableError(f"broker {node_id} is not in the cluster metadata")
            connection = BlockingConnection(address[0], address[1], self.client_id, self.timeout_s, self.security)
            self.connections[node_id] = connection
        return connection

    def refresh(self, topics: Iterable[str] | None, auto_create: bool = True) -> MetadataResponse:
        """Ask a broker for metadata about ``topics`` (None: all) and update the view."""
        names = None if topics is None else tuple(sorted(set(topics)))
        request = MetadataRequest(topics=names, allow_auto_topic_creation=auto_create)
        try:
            response = self.any_connection().request(request, self.timeout_s)
        except BrokerUnavailableError:
            self.drop_any()
            raise
        assert isinstance(response, MetadataResponse)
        self.view.update(response, _now_ms())
        return response

    def drop(self, node_id: int) -> None:
        """Forget a broken connection (the next use reconnects)."""
        connection = self.connections.pop(node_id, None)
        if connection is not None:
            connection.close()
            if connection is self._any:
                self._any = None

    def drop_any(self) -> None:
        """Forget the broken bootstrap connection."""
        if self._any is not None and self._any not in self.connections.values():
            self._any.close()
        self._any = None

    def close(self) -> None:
        """Close every connection."""
        self.drop_any()
        for node_id in list(self.connections):
            self.drop(node_id)


class RecordFuture:
    """The delivery outcome of one record: ``result()`` waits for its ``RecordMetadata``."""

    __slots__ = ("_batch", "_index", "_timestamp_ms")

    def __init__(self, batch: ProducerBatch, index: int, timestamp_ms: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp_ms = timestamp_ms

    def done(self) -> bool:
        """True once the record is acknowledged or failed."""
        return self._batch.done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait (up to ``timeout`` seconds) and return where the record landed, or raise its error."""
        waiter = self._batch.waiter
        assert isinstance(waiter, threading.Event)
        if not waiter.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout}s")
        return self._batch.metadata(self._index, self._timestamp_ms)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait and return the record's error, or None if it was written."""
        try:
            self.result(timeout)
        except BrokerError as error:
            return error
        return None


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
    ) -> None:
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
        ).validated()
        rng = random.Random(seed)
        self._core = ProducerCore(self._config, rng, new_waiter=threading.Event)
        self._sticky = StickyPartitioner(rng)
        self._max_block_s = max_block_ms / 1000
        self._cluster = _Cluster(bootstrap, client_id, request_timeout_ms / 1000, security)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._io_error: BaseException | None = None
        if enable_idempotence:
            identity = self._cluster.any_connection().request(InitProducerIdRequest(), self._cluster.timeout_s)
            assert isinstance(identity, InitProducerIdResponse)
            self._core.set_producer_identity(identity.producer_id, identity.producer_epoch)
        self._core.on_batch_full = self._batch_full
        self._io = _ProducerIO(self._core, self._cluster, self._lock, self._changed)
        self._thread = threading.Thread(target=self._io.run, name="mqbroker-producer-io", daemon=True)
        self._thread.start()

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
    ) -> RecordFuture:
        """Queue one record; the future resolves to its ``RecordMetadata`` once acknowledged."""
        if partition is None:
            count = self._cluster.view.partition_count(topic)
            if count is None:
                count = self._wait_for_topic(topic)
            partition = partition_for_key(key, count) if key is not None else self._sticky.partition(topic, count)
        now_ms = _now_ms()  # the batch's age counts from now, whatever timestamp the record carries
        if timestamp_ms is None:
            timestamp_ms = now_ms
        core = self._core
        with self._lock:
            if self._closed:
                raise RuntimeError("send() on a closed producer")
            if core.queued_bytes > self._config.buffer_bytes_max:
                self._wait_for_buffer_space()
            batch, index = core.append(topic, partition, timestamp_ms, key, value, headers, now_ms)
        if index == 0:
            self._io.wake()  # a new batch: its linger timer starts, and the previous one is due
        return RecordFuture(batch, index, timestamp_ms)

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

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._core.flush()
            self._io.wake()
            while self._core.has_pending:
                if self._io.error is not None:
                    raise self._io.error
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"flush did not finish within {timeout}s")
                self._changed.wait(0.05 if remaining is None else min(remaining, 0.05))
                if self._core.has_pending:
                    self._core.flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the I/O thread and close the connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
            self._io.stop()
            self._thread.join()
            self._cluster.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _ProducerIO:
    """The producer's I/O thread: drains the core, writes requests, reads replies, fires futures."""

    def __init__(
        self, core: ProducerCore, cluster: _Cluster, lock: threading.Lock, changed: threading.Condition
    ) -> None:
        self.core = core
        self.cluster = cluster
        self.lock = lock
        self.changed = changed
        self.error: BaseException | None = None
        self._selector = selectors.DefaultSelector()
        self._wake_reader, self._wake_writer = _socket_pair()
        self._selector.register(self._wake_reader, selectors.EVENT_READ, None)
        self._pending: dict[tuple[int, int], ProducePlan] = {}
        self._registered: dict[int, BlockingConnection] = {}
        self._running = True
        self._awake = False

    def wake(self) -> None:
        """Make the I/O thread look at the core again now."""
        if not self._awake:
            self._awake = True
            self._wake_writer.send(b"\0")

    def stop(self) -> None:
        """End the loop (after the current iteration)."""
        self._running = False
        self._wake_writer.send(b"\0")

    def run(self) -> None:
        """The loop: refresh metadata, drain, send, wait for replies or the next deadline."""
        try:
            while self._running:
                self._step()
        except BaseException as error:  # surfaced to flush() and close(); the thread must not die silently
            self.error = error
            with self.lock:
                self.changed.notify_all()
            raise
        finally:
            self._selector.close()
            self._wake_reader.close()
            self._wake_writer.close()

    def _step(self) -> None:
        now_ms = _now_ms()
        core = self.core
        with self.lock:
            self._awake = False
            stale = set(core.stale_topics)
            finished = core.expire(now_ms)
        if stale:
            self._refresh(stale)
        with self.lock:
            plans = core.drain(now_ms, self.cluster.view.leader)
            deadline_ms = core.next_deadline_ms(now_ms)
        self._resolve(finished)
        for plan in plans:
            self._send(plan, now_ms)
        timeout_s = None if deadline_ms is None else max(0.0, (deadline_ms - _now_ms()) / 1000)
        if core.stale_topics:
            timeout_s = 0.05 if timeout_s is None else min(timeout_s, 0.05)
        for key, _ in self._selector.select(timeout_s):
            if key.data is None:
                self._wake_reader.recv(4096)
            else:
                self._receive(key.data)

    def _refresh(self, topics: set[str]) -> None:
        try:
            self.cluster.refresh(topics)
        except BrokerError:
            return  # retried on the next iteration, 50 ms later
        with self.lock:
            self.core.stale_topics -= topics - set(self.cluster.view.stale_topics)
            self.changed.notify_all()

    def _send(self, plan: ProducePlan, now_ms: int) -> None:
        try:
            connection = self._connection(plan.node_id)
            correlation_id = connection.send(plan.request())
        except BrokerUnavailableError as error:
            self._connection_lost(plan.node_id, error)
            with self.lock:
                finished = self.core.plan_failed(plan, error, now_ms)
            self._resolve(finished)
            return
        if plan.acks == Acks.NONE:
            with self.lock:
                finished = self.core.plan_completed(plan, None, now_ms)
            self._resolve(finished)
            return
        self._pending[plan.node_id, correlation_id] = plan

    def _connection(self, node_id: int) -> BlockingConnection:
        connection = self.cluster.connection(node_id)
        if node_id not in self._registered:
            connection.socket.settimeout(None)
            connection.socket.setblocking(False)
            self._selector.register(connection.socket, selectors.EVENT_READ, node_id)
            self._registered[node_id] = connection
        return connection

    def _receive(self, node_id: int) -> None:
        connection = self._registered[node_id]
        try:
            responses = connection.receive()
        except BlockingIOError:
            return
        except BrokerUnavailableError as error:
            self._connection_lost(node_id, error)
            return
        now_ms = _now_ms()
        finished: list[ProducerBatch] = []
        with self.lock:
            for event in responses:
                plan = self._pending.pop((node_id, event.correlation_id))
                finished += self.core.plan_completed(plan, event.response, now_ms)
        self._resolve(finished)

    def _connection_lost(self, node_id: int, error: BrokerError) -> None:
        connection = self._registered.pop(node_id, None)
        if connection is not None:
            self._selector.unregister(connection.socket)
        self.cluster.drop(node_id)
        lost = [key for key in self._pending if key[0] == node_id]
        now_ms = _now_ms()
        finished: list[ProducerBatch] = []
        with self.lock:
            for key in lost:
                finished += self.core.plan_failed(self._pending.pop(key), error, now_ms)
        self._resolve(finished)

    def _resolve(self, finished: list[ProducerBatch]) -> None:
        for batch in finished:
            waiter = batch.waiter
            assert isinstance(waiter, threading.Event)
            waiter.set()
        if finished:
            with self.lock:
                self.changed.notify_all()


def _socket_pair() -> tuple[socket.socket, socket.socket]:
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    return reader, writer


class Consumer:
    """Reads partitions from their leaders; ``poll`` returns ``Message``s in offset order.

    Without ``group_id`` it reads every partition of ``topics`` (or what ``assign`` names).
    With ``group_id`` it joins the group and reads the partitions the group assigns it
    (``topics`` or a ``pattern``); a background thread heartbeats. Committing is at-least-once
    by default: auto-commit commits the positions of the previous ``poll`` (records the
    application has processed) every ``auto_commit_interval_ms``, on revocation and on close.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "localhost:9393",
        *,
        group_id: str | None = None,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        group_instance_id: str | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool | None = None,
        auto_commit_interval_ms: int = 5_000,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        on_assigned: Callable[[set[TopicPartition]], None] | None = None,
        on_revoked: Callable[[set[TopicPartition]], None] | None = None,
        on_lost: Callable[[set[TopicPartition]], None] | None = None,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        partition_max_bytes: int = 8 * 1024 * 1024,
        request_timeout_ms: int = 30_000,
        client_id: str = "mqbroker-consumer",
        security: ClientSecurity | None = None,
    ) -> None:
        if group_id is None and (enable_auto_commit or pattern is not None or group_instance_id is not None):
            raise ValueError("enable_auto_commit, pattern and group_instance_id need a group_id")
        self._core = ConsumerCore(
            ConsumerConfig(
                auto_offset_reset=OffsetReset(auto_offset_reset),
                fetch_max_wait_ms=fetch_max_wait_ms,
                fetch_min_bytes=fetch_min_bytes,
                fetch_max_bytes=fetch_max_bytes,
                partition_max_bytes=partition_max_bytes,
            )
        )
        self._cluster = _Cluster(bootstrap, client_id, request_timeout_ms / 1000 + fetch_max_wait_ms / 1000, security)
        self._admin = _AdminCalls(self._cluster)
        topics = list(topics)
        self._group: GroupMembership | None = None
        if group_id is not None:
            settings = GroupSettings(
                group_id=group_id, group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
                max_poll_interval_ms=max_poll_interval_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            )
            self._group = GroupMembership(
                GroupMember(settings, topics), bootstrap=self._cluster.bootstrap, client_id=client_id,
                request_timeout_s=request_timeout_ms / 1000, pattern=re.compile(pattern) if pattern else None,
                security=security,
            )
            self._auto_commit = AutoCommit(auto_commit_interval_ms if enable_auto_commit is not False else None, _now_ms())
            self._on_assigned = resolve_callback(on_assigned)
            self._on_revoked = resolve_callback(on_revoked)
            self._on_lost = resolve_callback(on_lost)
        elif topics:
            self._cluster.refresh(topics)
            self.assign(
                (topic, partition)
                for topic in topics
                for partition in range(self._cluster.view.partition_count(topic) or 0)
            )

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these ``(topic, partition)`` pairs."""
        self._core.assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads."""
        return self._core.assignment()

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        self._core.seek(partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read the partitions (default: all assigned) from their first record."""
        for partition in partitions or self._core.assignment():
            self._core.seek_to_beginning(partition)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read only records produced from now on."""
        for partition in partitions or self._core.assignment():
            self._core.seek_to_end(partition)

    def seek_to_timestamp(self, partition: TopicPartition, timestamp_ms: int) -> None:
        """Read ``partition`` from its first record at or after ``timestamp_ms``."""
        self._core.seek_to_timestamp(partition, timestamp_ms)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record ``poll`` returns for ``partition``."""
        self._resolve_resets()
        position = self._core.position(partition)
        assert position is not None
        return position

    # -- groups ------------------------------------------------------------------------------

    def _membership(self) -> GroupMembership:
        if self._group is None:
            raise ValueError("committing needs a group: create the Consumer with group_id=...")
        return self._group

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition) and wait."""
        wanted = known_positions(self._core, self._core.assignment()) if offsets is None else offsets
        if wanted:
            self._membership().commit(wanted)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None) -> Future[None]:
        """Commit without waiting; the future holds the outcome (commits stay in order)."""
        wanted = known_positions(self._core, self._core.assignment()) if offsets is None else offsets
        return self._membership().commit_async(wanted)

    def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of ``partition`` (None when nothing is committed)."""
        return self._membership().committed([partition])[partition]

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching ``partitions`` (still assigned; heartbeats go on)."""
        unassigned = set(partitions) - self._core.assignment()
        if unassigned:
            raise ValueError(f"cannot pause partitions not assigned to this consumer: {sorted(unassigned)}")
        self._core.paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch paused ``partitions`` again."""
        self._core.paused.difference_update(partitions)

    def paused(self) -> set[TopicPartition]:
        """The partitions paused now."""
        return set(self._core.paused)

    def _group_step(self) -> None:
        """Apply the membership's assignment changes and auto-commit when due (on the poll thread)."""
        group = self._group
        if group is None:
            return
        changes = group.take_changes()
        for change in changes:
            self._apply(group, change)
        if changes:
            group.changes_applied(len(changes))
        if self._auto_commit.due(_now_ms()):
            positions = known_positions(self._core, self._core.assignment())
            if positions:
                group.commit_async(positions)  # a refused auto-commit is repeated by the next one

    def _apply(self, group: GroupMembership, change: AssignmentChange) -> None:
        """Revoke (commit first), drop lost partitions, start reading new ones from their commits."""
        if change.revoked:
            self._on_revoked(set(change.revoked))
            positions = revoked_positions(self._core, change) if self._auto_commit.enabled else {}
            if positions:
                try:
                    group.commit(positions)
                except BrokerError:
                    pass  # the generation ended meanwhile: the new owner starts from the last commit
        if change.lost:
            self._on_lost(set(change.lost))
        apply_change(self._core, change, group.committed(change.assigned) if change.assigned else {})
        if change.assigned:
            self._on_assigned(set(change.assigned))

    def poll(self, timeout: float = 1.0) -> list[Message]:
        """Return the next messages, waiting up to ``timeout`` seconds for some to arrive."""
        deadline = time.monotonic() + timeout
        while True:
            self._group_step()
            self._refresh_stale()
            self._resolve_resets()
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            messages = self._fetch_once(remaining_ms)
            if messages or time.monotonic() >= deadline:
                return messages

    def _refresh_stale(self) -> None:
        if self._core.stale_topics:
            topics = set(self._core.stale_topics)
            self._core.stale_topics.clear()
            try:
                self._cluster.refresh(topics, auto_create=False)
            except BrokerUnavailableError:
                self._core.stale_topics.update(topics)  # that broker is gone (and dropped): the next poll asks another

    def _resolve_resets(self) -> None:
        requests = self._core.reset_requests()
        if not requests:
            return
        for (topic, partition), timestamp_ms in requests.items():
            offset = self._admin.list_offset(topic, partition, timestamp_ms)
            self._core.reset_resolved((topic, partition), timestamp_ms, offset)

    def _fetch_once(self, max_wait_ms: int) -> list[Message]:
        plans = self._core.fetch_plans(self._cluster.view.leader)
        sent = []
        for plan in plans:
            try:
                connection = self._cluster.connection(plan.node_id)
                correlation_id = connection.send(plan.request(max_wait_ms))
            except BrokerUnavailableError:
                self._cluster.drop(plan.node_id)
                self._core.fetch_failed(plan)
                continue
            sent.append((plan, connection, correlation_id))
        messages: list[Message] = []
        for plan, connection, correlation_id in sent:
            try:
                response = connection.await_response(correlation_id, self._cluster.timeout_s)
            except BrokerError:
                self._cluster.drop(plan.node_id)
                self._core.fetch_failed(plan)
                continue
            assert isinstance(response, FetchResponse)
            messages += self._core.fetch_completed(plan, response)
        if not sent and not messages:
            time.sleep(min(max_wait_ms, 100) / 1000)  # nothing fetchable yet: do not spin
        return messages

    def close(self) -> None:
        """Commit (with auto-commit), leave the group (static members stay) and close the connections."""
        try:
            if self._group is not None:
                if self._auto_commit.enabled:
                    try:
                        self.commit()
                    except BrokerError:
                        pass  # not a member any more: nothing of ours to commit
                self._group.close()
        finally:
            self._cluster.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _AdminCalls:
    """Admin requests sent on the caller's thread: topic operations to any broker, partition ones to leaders."""

    def __init__(self, cluster: _Cluster) -> None:
        self.cluster = cluster
        self._backoff = Backoff(initial_ms=50, max_ms=1000)
        self._rng = random.Random()

    def retrying(self, call: Callable[[], T], topic: str | None = None) -> T:
        """Run ``call`` again after retriable errors (a new controller or leader, a lost connection).

        Gives up at the request timeout. With ``topic``, its leaders are looked up again before a retry.
        """
        deadline = time.monotonic() + self.cluster.timeout_s
        attempt = 0
        while True:
            try:
                return call()
            except BrokerError as error:
                attempt += 1
                delay_s = self._backoff.delay_ms(attempt, self._rng) / 1000
                if not error.retriable or time.monotonic() + delay_s >= deadline:
                    raise
                if topic is not None:
                    self.cluster.view.invalidate(topic)
                time.sleep(delay_s)

    def any_broker(self, request: object) -> object:
        try:
            return self.cluster.any_connection().request(request, self.cluster.timeout_s)
        except BrokerUnavailableError:
            self.cluster.drop_any()
            raise

    def leader(self, topic: str, partition: int, request: object) -> object:
        """Send ``request`` to the partition's leader, looked up again if unknown or shown stale."""
        node_id = self.cluster.view.leader(topic, partition)
        if node_id < 0 or topic in self.cluster.view.stale_topics:  # stale: a NOT_LEADER reply, see ``retrying``
            self.cluster.refresh([topic], auto_create=False)
            node_id = self.cluster.view.leader(topic, partition)
            if node_id < 0:
                error = self.cluster.view.topic_error(topic)
                raise error or BrokerUnavailableError(f"{topic}-{partition} has no leader")
        try:
            return self.cluster.connection(node_id).request(request, self.cluster.timeout_s)
        except BrokerUnavailableError:
            self.cluster.drop(node_id)
            raise

    def list_offset(self, topic: str, partition: int, timestamp_ms: int) -> int:
        request = admin.list_offsets_request(topic, partition, timestamp_ms)
        return self.retrying(
            lambda: admin.list_offsets_result(self.leader(topic, partition, request)), topic  # type: ignore[arg-type]
        )


class Admin:
    """Topic and partition administration: create, delete, describe, alter, offsets, metadata."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "localhost:9393",
        *,
        request_timeout_ms: int = 30_000,
        client_id: str = "mqbroker-admin",
        security: ClientSecurity | None = None,
    ) -> None:
        self._cluster = _Cluster(bootstrap, client_id, request_timeout_ms / 1000, security)
        self._calls = _AdminCalls(self._cluster)

    def create_topics(
        self,
        names: Iterable[str],
        partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str] | None = None,
    ) -> None:
        """Create topics (partitions and replication -1: the broker's defaults)."""
        request = admin.create_topics_request(names, partitions, replication_factor, configs)
        self._calls.retrying(lambda: admin.create_topics_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def delete_topics(self, names: Iterable[str]) -> None:
        """Delete topics and all their data."""
        request = admin.delete_topics_request(names)
        self._calls.retrying(lambda: admin.delete_topics_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def create_partitions(self, topic: str, total_count: int) -> None:
        """Grow ``topic`` to ``total_count`` partitions."""
        request = admin.create_partitions_request(topic, total_count)
        self._calls.retrying(lambda: admin.create_partitions_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def describe_configs(self, topic: str) -> dict[str, str | None]:
        """The topic's effective configuration."""
        request = admin.describe_configs_request(topic)
        return self._calls.retrying(lambda: admin.describe_configs_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def alter_configs(self, topic: str, set_configs: dict[str, str], delete_configs: Iterable[str] = ()) -> None:
        """Set some config keys of ``topic`` and reset others to their defaults."""
        request = admin.alter_configs_request(topic, set_configs, delete_configs)
        self._calls.retrying(lambda: admin.alter_configs_result(self._calls.any_broker(request)))  # type: ignore[arg-type]

    def describe_quorum(self) -> DescribeQuorumResponse:
        """The controller quorum and brokers as one broker sees them."""
        return self._calls.any_broker(DescribeQuorumRequest())  # type: ignore[return-value]

    def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Store ACLs in the cluster metadata (needs ALTER on the cluster)."""
        self._calls.any_broker(CreateAclsRequest(creations=tuple(bindings)))

    def delete_acls(self, bindings: Iterable[AclBinding]) -> None:
        """Remove exactly these ACLs."""
        self._calls.any_broker(DeleteAclsRequest(deletions=tuple(bindings)))

    def describe_acls(self) -> list[AclBinding]:
        """Every ACL (needs DESCRIBE on the cluster)."""
        response = self._calls.any_broker(DescribeAclsRequest())
        assert isinstance(response, DescribeAclsResponse)
        return list(response.acls)

    def upsert_user(self, name: str, password: str, *, create: bool) -> None:
        """Create a user (``create``) or change its password; the broker stores only salted SCRAM keys."""
        self._alter_users(AlterUserScramCredentialsRequest(
            upsertions=(UserUpsertion(name=name, password=password, create=int(create)),), deletions=()))

    def remove_user(self, name: str) -> None:
        """Delete a user."""
        self._alter_users(AlterUserScramCredentialsRequest(upsertions=(), deletions=(name,)))

    def list_users(self) -> list[str]:
        """Every user name."""
        response = self._calls.any_broker(DescribeUserScramCredentialsRequest())
        assert isinstance(response, DescribeUserScramCredentialsResponse)
        return [user.name for user in response.users]

    def create_connector(self, name: str, config: dict[str, str]) -> None:
        """Create connector ``name`` (needs ALTER on the cluster); the broker checks ``config`` first."""
        self._calls.any_broker(connectors.create_connector_request(name, config))

    def alter_connector(self, name: str, action: str) -> None:
        """``action`` is ``pause``, ``resume`` or ``delete``."""
        self._calls.any_broker(connectors.alter_connector_request(name, action))

    def describe_connectors(self, names: Sequence[str] | None = None) -> list[ConnectorDescription]:
        """Connectors with their tasks' status and metrics (None: every connector)."""
        response = self._calls.any_broker(connectors.describe_connectors_request(names))
        return connectors.describe_connectors_result(response)  # type: ignore[arg-type]

    def _alter_users(self, request: AlterUserScramCredentialsRequest) -> None:
        response = self._calls.any_broker(request)
        assert isinstance(response, AlterUserScramCredentialsResponse)
        for result in response.results:
            if result.error_code:
                raise error_for_code(result.error_code, result.error_message or f"user {result.name!r}: refused")

    def reassign_partition(self, topic: str, partition: int, replicas: Sequence[int]) -> None:
        """Start moving a partition to ``replicas`` (the first is the preferred leader); returns at once.

        The new replicas copy the log while producers and consumers go on; once all are in sync
        the others leave. ``list_reassignments`` shows the moves still in progress.
        """
        request = AlterPartitionReassignmentsRequest(topics=(ReassignableTopic(name=topic, partitions=(
            ReassignablePartition(partition_index=partition, replicas=tuple(replicas)),)),))

        def start() -> None:
            response = self._calls.any_broker(request)
            assert isinstance(response, AlterPartitionReassignmentsResponse)
            for result in response.topics[0].partitions:
                if result.error_code:
                    raise error_for_code(result.error_code, result.error_message or f"{topic}-{partition}: refused")

        self._calls.retrying(start)

    def list_reassignments(self, topics: Iterable[str] = ()) -> dict[tuple[str, int], OngoingPartitionReassignment]:
        """The reassignments in progress by (topic, partition) (of ``topics``; empty: of every topic)."""
        response = self._calls.any_broker(ListPartitionReassignmentsRequest(topics=tuple(topics)))
        assert isinstance(response, ListPartitionReassignmentsResponse)
        return {(topic.name, ongoing.partition_index): ongoing for topic in response.topics for ongoing in topic.partitions}

    def metadata(self, topics: Iterable[str] | None = None) -> MetadataResponse:
        """Brokers and partition leaders of ``topics`` (None: every topic); creates nothing."""
        return self._cluster.refresh(topics, auto_create=False)

    def list_topics(self) -> list[str]:
        """Names of every topic."""
        return sorted(topic.name for topic in self.metadata().topics)

    def describe_topics(self, topics: Iterable[str]) -> dict[str, int]:
        """Partition count of each topic (raises if one does not exist)."""
        response = self.metadata(topics)
        counts = {}
        for topic in response.topics:
            admin.raise_for_topic(topic)
            counts[topic.name] = len(topic.partitions)
        return counts

    def list_offset(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """Earliest (-2), latest (-1) or the first offset at or after ``timestamp_ms``."""
        return self._calls.list_offset(topic, partition, timestamp_ms)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> int:
        """Delete records below ``before_offset``; return the new log start offset."""
        request = admin.delete_records_request(topic, partition, before_offset)
        return self._calls.retrying(
            lambda: admin.delete_records_result(self._calls.leader(topic, partition, request)), topic  # type: ignore[arg-type]
        )

    def close(self) -> None:
        """Close the connections."""
        self._cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
