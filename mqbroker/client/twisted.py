"""The Twisted client: Deferred-returning producer, consumer and admin over the same pure cores.

The reactor is passed in. Each broker connection is a ``NativeClientProtocol`` that moves bytes
between the transport and a sans-I/O ``ClientConnection``; requests return Deferreds fired by
correlation id. Connections are opened through endpoints on first use and reopened after a loss.
"""

from __future__ import annotations

import pathlib
import random
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail, maybeDeferred, succeed
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol, wrapClientTLS
from twisted.internet.interfaces import IReactorTCP, IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker.client import admin
from mqbroker.client.cluster import ClusterView
from mqbroker.client.connection import BrokerUnavailableError, parse_address, raise_for_error_response
from mqbroker.client.consumer import ConsumerConfig, ConsumerCore, Message, OffsetReset, TopicPartition
from mqbroker.client.group_member import (
    AssignmentChange,
    AutoCommit,
    GroupMember,
    GroupSettings,
    apply_change,
    known_positions,
    revoked_positions,
)
from mqbroker.client.partitioner import StickyPartitioner, partition_for_key
from mqbroker.client.security import ClientSecurity, sasl_steps
from mqbroker.client.producer import ProducerBatch, ProducerConfig, ProducerCore, ProducePlan, RecordMetadata, parse_acks
from mqbroker.client.twisted_group import TwistedGroupMembership
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.connection import ClientConnection, ConnectionFailed
from mqbroker.protocols.native.messages import (
    Acks,
    ApiVersionsRequest,
    CoordinatorType,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)


#: Pause after a metadata refresh before draining again (bounds the retry rate if it failed).
_REFRESH_PAUSE_S = 0.05

#: A rebalance callback; it may return a Deferred (or other awaitable) the consumer waits for.
RebalanceCallback = Callable[[set[TopicPartition]], "Awaitable[None] | None"]


class NativeClientProtocol(Protocol):
    """Bytes <-> ``ClientConnection``; each request's Deferred fires with its response."""

    def __init__(self, client_id: str) -> None:
        self.codec = ClientConnection(client_id)
        self._waiting: dict[int, Deferred[Any]] = {}
        self.lost: Deferred[None] = Deferred()

    def request(self, request: object) -> Deferred[Any]:
        """Send ``request``; fire with its response (None for one that expects none)."""
        correlation_id, data = self.codec.send_request(request)
        self.transport.write(data)
        if correlation_id not in self.codec.inflight_correlation_ids:
            return succeed(None)
        waiting: Deferred[Any] = Deferred()
        self._waiting[correlation_id] = waiting
        return waiting

    def dataReceived(self, data: bytes) -> None:
        """Feed the codec; fire the Deferreds of completed responses."""
        for event in self.codec.receive_data(data):
            if isinstance(event, ConnectionFailed):
                self.transport.loseConnection()
                return
            waiting = self._waiting.pop(event.correlation_id)
            try:
                waiting.callback(raise_for_error_response(event.response))
            except BrokerError as error:
                waiting.errback(Failure(error))

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        """Fail every request still waiting."""
        waiting, self._waiting = self._waiting, {}
        for deferred in waiting.values():
            deferred.errback(Failure(BrokerUnavailableError(f"connection lost: {reason.getErrorMessage()}")))
        self.lost.callback(None)


class _TwistedCluster:
    """Connections by node id and the metadata view, reactor-driven."""

    def __init__(self, reactor: IReactorTCP, bootstrap: str | Sequence[str], client_id: str,
                 security: ClientSecurity | None = None) -> None:
        addresses = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
        self.reactor = reactor
        self.security = security
        self.bootstrap = [parse_address(address) for address in addresses]
        self.client_id = client_id
        self.view = ClusterView()
        self._connected: dict[Any, NativeClientProtocol] = {}
        self._waiters: dict[Any, list[Deferred[NativeClientProtocol]]] = {}

    def _connect(self, key: Any, host: str, port: int) -> Deferred[NativeClientProtocol]:
        connected = self._connected.get(key)
        if connected is not None:
            return succeed(connected)
        waiter: Deferred[NativeClientProtocol] = Deferred()
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.append(waiter)
            return waiter
        self._waiters[key] = [waiter]
        protocol = NativeClientProtocol(self.client_id)
        Deferred.fromCoroutine(self._open(key, host, port, protocol))
        return waiter

    async def _open(self, key: Any, host: str, port: int, protocol: NativeClientProtocol) -> None:
        """Connect and negotiate versions, then hand the connection to everyone waiting for it."""
        outcome: Any
        try:
            await connectProtocol(self._endpoint(host, port), protocol)
            protocol.codec.use_broker_versions(await protocol.request(ApiVersionsRequest()))
            if self.security is not None and self.security.sasl_mechanism:
                await self._authenticate(protocol, self.security)
        except BrokerError as error:  # e.g. SASL_AUTHENTICATION_FAILED: the broker's own answer, as it is
            protocol.transport.loseConnection()
            outcome = Failure(error)
        except Exception as error:  # every connect failure is reported to the waiters as one typed error
            outcome = Failure(BrokerUnavailableError(f"cannot connect to {host}:{port}: {error}"))
        else:
            outcome = protocol
            self._connected[key] = protocol
            protocol.lost.addCallback(lambda _: self._connected.pop(key, None))
        for waiter in self._waiters.pop(key):
            waiter.callback(outcome)

    def _endpoint(self, host: str, port: int) -> Any:
        """TCP, or TLS when the security settings ask for it (the server's certificate must name ``host``)."""
        endpoint = HostnameEndpoint(self.reactor, host, port)
        security = self.security
        if security is None or security.ssl_context is None:
            return endpoint
        from mqbroker.security.tls import client_options  # TLS support is loaded only by clients that use it

        options = client_options(host, *(pathlib.Path(path) if path else None
                                         for path in (security.tls_ca, security.tls_cert, security.tls_key)))
        return wrapClientTLS(options, endpoint)

    @staticmethod
    async def _authenticate(protocol: NativeClientProtocol, security: ClientSecurity) -> None:
        """SaslHandshake, then SaslAuthenticate steps until the exchange completes (typed errors on refusal)."""
        await protocol.request(SaslHandshakeRequest(mechanism=security.sasl_mechanism or ""))
        steps = sasl_steps(security)
        message = next(steps)
        while True:
            response = await protocol.request(SaslAuthenticateRequest(auth_bytes=message))
            try:
                message = steps.send(response.auth_bytes)
            except StopIteration:
                return

    def connection(self, node_id: int | None) -> Deferred[NativeClientProtocol]:
        """The connection to ``node_id`` (None: the first bootstrap broker)."""
        if node_id is None:
            host, port = self.bootstrap[0]
            return self._connect(None, host, port)
        address = self.view.address(node_id)
        if address is None:
            return fail(BrokerUnavailableError(f"broker {node_id} is not in the cluster metadata"))
        return self._connect(node_id, *address)

    async def request(self, node_id: int | None, request: object) -> Any:
        """Send ``request`` to ``node_id`` and wait for the response."""
        connection = await self.connection(node_id)
        return await connection.request(request)

    async def refresh(self, topics: Iterable[str] | None, auto_create: bool = True) -> MetadataResponse:
        """Ask for metadata about ``topics`` (None: all) and update the view."""
        names = None if topics is None else tuple(sorted(set(topics)))
        response = await self.request(None, MetadataRequest(topics=names, allow_auto_topic_creation=auto_create))
        self.view.update(response, int(self.reactor.seconds() * 1000))  # type: ignore[attr-defined]
        return response

    async def coordinator_request(self, role: str, request: object,
                                  key_type: CoordinatorType = CoordinatorType.GROUP) -> Any:
        """Send ``request`` to the group coordinator (``key_type`` SHARE: the share group's host) over the
        connection named ``role``."""
        key = ("coordinator", role)
        connection = self._connected.get(key)
        if connection is None:  # look the group's coordinator up again for every new connection
            found = await self.request(None, FindCoordinatorRequest(key=request.group_id,  # type: ignore[attr-defined]
                                                                    key_type=key_type))
            assert isinstance(found, FindCoordinatorResponse)
            connection = await self._connect(key, found.host, found.port)
        return await connection.request(request)

    def drop_coordinator(self, role: str) -> None:
        """Close the coordinator connection named ``role``; its waiting requests fail."""
        protocol = self._connected.pop(("coordinator", role), None)
        if protocol is not None:
            protocol.transport.loseConnection()

    async def all_topics(self) -> MetadataResponse:
        """Metadata of every topic."""
        return await self.refresh(None, auto_create=False)

    def close(self) -> None:
        """Close every open connection."""
        for protocol in list(self._connected.values()):
            protocol.transport.loseConnection()
        self._connected.clear()


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
    ) -> None:
        parsed_acks = parse_acks(acks)
        if enable_idempotence is None:
            enable_idempotence = parsed_acks != Acks.NONE
        config = ProducerConfig(
            acks=parsed_acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
            compression=compression,
            enable_idempotence=enable_idempotence,
        )
        self._reactor = reactor
        self._random = rng or random.Random()
        self._core = ProducerCore(config, self._random, new_waiter=list)
        self._sticky = StickyPartitioner(self._random)
        self._cluster = _TwistedCluster(reactor, bootstrap, client_id, security)
        self._timer: Any = None
        self._ready: Deferred[None] | None = None
        self._flushes: list[Deferred[None]] = []

    def _clock(self) -> IReactorTime:
        return self._reactor  # type: ignore[return-value]

    def _now_ms(self) -> int:
        return int(self._clock().seconds() * 1000)

    async def _prepare(self, topic: str) -> int:
        if self._core.needs_producer_id:
            if self._ready is None:
                self._ready = Deferred.fromCoroutine(self._init_producer_id())
            await self._ready
        count = self._cluster.view.partition_count(topic)
        while count is None:
            await self._cluster.refresh([topic])
            count = self._cluster.view.partition_count(topic)
            error = self._cluster.view.topic_error(topic)
            if count is None and error is not None and not error.retriable and error.code != 3:
                raise error
        return count

    async def _init_producer_id(self) -> None:
        identity = await self._cluster.request(None, InitProducerIdRequest())
        if self._core.needs_producer_id:
            self._core.set_producer_identity(identity.producer_id, identity.producer_epoch)

    async def _send(
        self, topic: str, value: bytes | None, key: bytes | None, headers: Any, partition: int | None, timestamp_ms: int | None
    ) -> RecordMetadata:
        count = await self._prepare(topic)
        if partition is None:
            partition = partition_for_key(key, count) if key is not None else self._sticky.partition(topic, count)
        now_ms = self._now_ms()
        timestamp = now_ms if timestamp_ms is None else timestamp_ms
        batch, index = self._core.append(topic, partition, timestamp, key, value, headers, now_ms)
        delivered: Deferred[None] = Deferred()
        batch.waiter.append(delivered)  # type: ignore[attr-defined]
        self._schedule()
        await delivered
        return batch.metadata(index, timestamp)

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Deferred[RecordMetadata]:
        """Queue one record; fire with its ``RecordMetadata`` once acknowledged."""
        return Deferred.fromCoroutine(self._send(topic, value, key, headers, partition, timestamp_ms))

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
        self._resolve(self._core.plan_completed(plan, None if plan.acks == Acks.NONE else response, self._now_ms()))
        self._drain()

    def _failed(self, failure: Failure, plan: ProducePlan) -> None:
        error = failure.value if isinstance(failure.value, BrokerError) else BrokerUnavailableError(str(failure.value))
        self._resolve(self._core.plan_failed(plan, error, self._now_ms()))
        self._drain()

    def _resolve(self, finished: list[ProducerBatch]) -> None:
        for batch in finished:
            for delivered in batch.waiter:  # type: ignore[attr-defined]
                delivered.callback(None)

    def _check_flushes(self) -> None:
        if not self._core.has_pending:
            flushes, self._flushes = self._flushes, []
            for flushed in flushes:
                flushed.callback(None)
        elif self._flushes:
            self._core.flush()
            self._schedule()

    def flush(self) -> Deferred[None]:
        """Fire once everything queued so far is acknowledged (or failed)."""
        flushed: Deferred[None] = Deferred()
        self._flushes.append(flushed)
        self._core.flush()
        self._drain()
        return flushed

    async def _close(self) -> None:
        await self.flush()
        self._cluster.close()

    def close(self) -> Deferred[None]:
        """Flush, then close the connections."""
        return Deferred.fromCoroutine(self._close())


class TwistedConsumer:
    """``poll`` returns a Deferred firing with the next ``Message``s of the assigned partitions.

    Without ``group_id`` it reads what ``assign_topics`` or ``assign`` names. With ``group_id``
    it joins the group and reads the partitions the group assigns it (``topics`` or a
    ``pattern``), heartbeating on the reactor's clock; assignment changes are applied at the
    start of each ``poll``, when the records of the previous one are processed, so auto-commit
    (the default) is at-least-once. Rebalance callbacks may return Deferreds.
    """

    log = Logger()

    def __init__(
        self,
        reactor: IReactorTCP,
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
        on_assigned: RebalanceCallback | None = None,
        on_revoked: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
        fetch_max_wait_ms: int = 500,
        client_id: str = "mqbroker-consumer",
        security: ClientSecurity | None = None,
    ) -> None:
        if group_id is None and (enable_auto_commit or pattern is not None or group_instance_id is not None):
            raise ValueError("enable_auto_commit, pattern and group_instance_id need a group_id")
        self._core = ConsumerCore(
            ConsumerConfig(auto_offset_reset=OffsetReset(auto_offset_reset), fetch_max_wait_ms=fetch_max_wait_ms)
        )
        self._reactor = reactor
        self._cluster = _TwistedCluster(reactor, bootstrap, client_id, security)
        self._group: TwistedGroupMembership | None = None
        self._auto_commit = AutoCommit(None, 0)
        self._callbacks: dict[str, RebalanceCallback | None] = {
            "assigned": on_assigned, "revoked": on_revoked, "lost": on_lost,
        }
        if group_id is not None:
            settings = GroupSettings(
                group_id=group_id, group_instance_id=group_instance_id, session_timeout_ms=session_timeout_ms,
                max_poll_interval_ms=max_poll_interval_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            )
            self._group = TwistedGroupMembership(
                GroupMember(settings, topics), links=self._cluster, clock=self._clock(),
                pattern=re.compile(pattern) if pattern else None,
            )
            self._auto_commit = AutoCommit(
                auto_commit_interval_ms if enable_auto_commit is not False else None, self._now_ms()
            )

    def _clock(self) -> IReactorTime:
        return self._reactor  # type: ignore[return-value]

    def _now_ms(self) -> int:
        return int(self._clock().seconds() * 1000)

    def assign_topics(self, topics: Iterable[str]) -> Deferred[None]:
        """Read every partition of ``topics`` (no group)."""
        return Deferred.fromCoroutine(self._subscribe(topics))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions."""
        self._core.assign(partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        self._core.seek(partition, offset)

    def seek_to_beginning(self, partition: TopicPartition) -> None:
        """Read ``partition`` from its first record next."""
        self._core.seek_to_beginning(partition)

    def seek_to_end(self, partition: TopicPartition) -> None:
        """Read only new records of ``partition``."""
        self._core.seek_to_end(partition)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads."""
        return self._core.assignment()

    # -- groups ------------------------------------------------------------------------------

    def _membership(self) -> TwistedGroupMembership:
        if self._group is None:
            raise ValueError("committing needs a group: create the TwistedConsumer with group_id=...")
        return self._group

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> Deferred[None]:
        """Commit ``offsets`` (default: the positions of every assigned partition); commits stay in order."""
        wanted = known_positions(self._core, self._core.assignment()) if offsets is None else offsets
        if not wanted:
            return succeed(None)
        return self._membership().commit(wanted)

    def committed(self, partition: TopicPartition) -> Deferred[int | None]:
        """Fire with the group's committed offset of ``partition`` (None when nothing is committed)."""
        looked_up = self._membership().committed([partition])
        return looked_up.addCallback(lambda found: found[partition])

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

    async def _group_step(self, group: TwistedGroupMembership) -> None:
        """Apply the membership's assignment changes and auto-commit when due."""
        changes = group.take_changes()
        for change in changes:
            await self._apply(group, change)
        if changes:
            group.changes_applied(len(changes))
        if self._auto_commit.due(self._now_ms()):
            positions = known_positions(self._core, self._core.assignment())
            if positions:
                group.commit(positions).addErrback(self._auto_commit_refused)

    def _auto_commit_refused(self, failure: Failure) -> None:
        failure.trap(BrokerError)
        # The next auto-commit (or the revocation commit) repeats it.
        self.log.info("auto-commit refused: {error}", error=failure.value)

    async def _apply(self, group: TwistedGroupMembership, change: AssignmentChange) -> None:
        """Revoke (commit first), drop lost partitions, start reading new ones from their commits."""
        if change.revoked:
            await self._callback("revoked", change.revoked)
            positions = revoked_positions(self._core, change) if self._auto_commit.enabled else {}
            if positions:
                try:
                    await group.commit(positions)
                except BrokerError as error:
                    # The generation ended meanwhile: the new owner starts from the last commit.
                    self.log.info("commit of revoked partitions refused: {error}", error=error)
        if change.lost:
            await self._callback("lost", change.lost)
        apply_change(self._core, change, await group.committed(change.assigned) if change.assigned else {})
        if change.assigned:
            await self._callback("assigned", change.assigned)

    async def _callback(self, name: str, partitions: frozenset[TopicPartition]) -> None:
        callback = self._callbacks[name]
        if callback is not None:
            await maybeDeferred(callback, set(partitions))

    async def _resolve_resets(self) -> None:
        if self._core.stale_topics:
            topics = set(self._core.stale_topics)
            self._core.stale_topics.clear()
            await self._cluster.refresh(topics, auto_create=False)
        for (topic, partition), timestamp_ms in self._core.reset_requests().items():
            node_id = self._cluster.view.leader(topic, partition)
            if node_id < 0:
                await self._cluster.refresh([topic], auto_create=False)
                node_id = self._cluster.view.leader(topic, partition)
            response = await self._cluster.request(node_id, admin.list_offsets_request(topic, partition, timestamp_ms))
            self._core.reset_resolved((topic, partition), timestamp_ms, admin.list_offsets_result(response))

    async def _position(self, partition: TopicPartition) -> int:
        await self._resolve_resets()
        position = self._core.position(partition)
        assert position is not None
        return position

    def position(self, partition: TopicPartition) -> Deferred[int]:
        """Fire with the offset of the next record ``poll`` returns for ``partition``."""
        return Deferred.fromCoroutine(self._position(partition))

    async def _poll(self) -> list[Message]:
        if self._group is not None:
            await self._group_step(self._group)
        await self._resolve_resets()
        plans = self._core.fetch_plans(self._cluster.view.leader)
        if not plans and self._group is not None:  # nothing to read yet: wait for an assignment
            await self._group.wait_for_change(self._core.config.fetch_max_wait_ms / 1000)
            return []
        messages: list[Message] = []
        for plan in plans:
            try:
                response = await self._cluster.request(plan.node_id, plan.request())
            except BrokerError:
                self._core.fetch_failed(plan)
                continue
            assert isinstance(response, FetchResponse)
            messages += self._core.fetch_completed(plan, response)
        return messages

    def poll(self) -> Deferred[list[Message]]:
        """Fetch once (long-polling up to ``fetch_max_wait_ms``); fire with the messages."""
        return Deferred.fromCoroutine(self._poll())

    async def _close(self) -> None:
        try:
            if self._group is not None:
                if self._auto_commit.enabled and self._group.error is None:
                    try:
                        await self.commit()
                    except BrokerError as error:
                        self.log.info("final commit refused (not a member any more): {error}", error=error)
                await self._group.close()
        finally:
            self._cluster.close()

    def close(self) -> Deferred[None]:
        """Commit (with auto-commit), leave the group (static members stay) and close the connections."""
        return Deferred.fromCoroutine(self._close())


class TwistedAdmin:
    """Topic administration returning Deferreds."""

    def __init__(self, reactor: IReactorTCP, bootstrap: str | Sequence[str] = "localhost:9393", *,
                 security: ClientSecurity | None = None) -> None:
        self._cluster = _TwistedCluster(reactor, bootstrap, "mqbroker-admin", security)

    async def _call(self, request: object, read: Any) -> Any:
        return read(await self._cluster.request(None, request))

    def create_topics(self, names: Iterable[str], partitions: int = -1, replication_factor: int = -1) -> Deferred[None]:
        """Create topics."""
        request = admin.create_topics_request(names, partitions, replication_factor, None)
        return Deferred.fromCoroutine(self._call(request, admin.create_topics_result))

    def delete_topics(self, names: Iterable[str]) -> Deferred[None]:
        """Delete topics."""
        return Deferred.fromCoroutine(self._call(admin.delete_topics_request(names), admin.delete_topics_result))

    def create_partitions(self, topic: str, total_count: int) -> Deferred[None]:
        """Grow a topic."""
        request = admin.create_partitions_request(topic, total_count)
        return Deferred.fromCoroutine(self._call(request, admin.create_partitions_result))

    def metadata(self, topics: Iterable[str] | None = None) -> Deferred[MetadataResponse]:
        """Brokers and leaders of ``topics`` (None: every topic)."""
        return Deferred.fromCoroutine(self._cluster.refresh(topics, auto_create=False))

    def close(self) -> None:
        """Close the connections."""
        self._cluster.close()
