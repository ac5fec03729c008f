"""Follower side of replication (Twisted): one long-polling replica fetch loop per leader broker.

For every broker that leads partitions this broker follows, a ``LeaderSession`` keeps one
native-protocol connection (a ``ClientService``: reconnects with backoff) and runs one fetch at a
time over it (so the bytes in flight are bounded by ``replica_fetch_response_max_bytes``). Each
fetch carries, per partition, the follower's log end, its last leader epoch (the leader checks
for divergence, KIP-279 style) and the leader epoch it believes current. Under the sync flush
policy the next fetch waits until what was appended is fsynced, so the offset the leader
records for this follower only ever counts durable data.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

from twisted.application.internet import ClientService
from twisted.internet.defer import CancelledError, Deferred, DeferredList, TimeoutError
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Factory
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mqbroker import limits
from mqbroker.client.backoff import PEER_RECONNECT
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.twisted import NativeClientProtocol
from mqbroker.config import dial_address
from mqbroker.errors import BrokerError, ErrorCode
from mqbroker.model import FetchResult
from mqbroker.protocols.native import messages as m
from mqbroker.records.errors import CorruptRecordError
from mqbroker.storage.errors import StorageError as StorageLayerError

PartitionKey = tuple[str, int]
#: Pause after a failed fetch (leader moved, connection lost) before the next one.
RETRY_BACKOFF_S = 0.1


class ReplicaSink(Protocol):
    """What the fetcher needs of the broker: positions, applying answers, durability."""

    def follower_position(self, key: PartitionKey) -> tuple[int, int] | None: ...

    def follower_append(self, key: PartitionKey, result: FetchResult) -> Any: ...

    def follower_reset(self, key: PartitionKey, leader_log_start_offset: int) -> bool: ...

    def wait_durable(self, partition_log: Any) -> Deferred[None]: ...


class ReplicaFetcher:
    """Keeps one ``LeaderSession`` per leader broker for the partitions this broker follows."""

    log = Logger()

    def __init__(
        self, *, node_id: int, reactor: IReactorTime, sink: ReplicaSink, address_of: Callable[[int], tuple[str, int] | None],
        fetch_wait_ms: int, partition_bytes_max: int, response_bytes_max: int,
        endpoint_for: Callable[[str, int], Any] | None = None,
        authenticate: Callable[[Any], Deferred[None]] | None = None,
    ) -> None:
        """``authenticate(protocol)`` logs a new connection in as this broker (inter-broker SCRAM), if given."""
        self.node_id = node_id
        self.authenticate = authenticate
        self._reactor = reactor
        self._sink = sink
        self._address_of = address_of
        #: How to reach a leader's native listener (host, port as registered): plain TCP, or TLS (inter-broker TLS).
        self.endpoint_for = endpoint_for or self._tcp_endpoint
        self._fetch_wait_ms = fetch_wait_ms
        self._partition_bytes_max = partition_bytes_max
        self._response_bytes_max = response_bytes_max
        self._sessions: dict[int, LeaderSession] = {}

    def follow(self, following: dict[PartitionKey, tuple[int, int]]) -> None:
        """Follow exactly these partitions: {(topic, partition): (leader id, leader epoch)}."""
        by_leader: dict[int, dict[PartitionKey, int]] = {}
        for key, (leader_id, epoch) in following.items():
            by_leader.setdefault(leader_id, {})[key] = epoch
        for leader_id in list(self._sessions):
            session = self._sessions[leader_id]
            if leader_id not in by_leader or session.address != self._address_of(leader_id):
                session.stop()
                del self._sessions[leader_id]
        for leader_id, partitions in by_leader.items():
            session = self._sessions.get(leader_id)
            if session is None:
                address = self._address_of(leader_id)
                if address is None:
                    continue
                session = LeaderSession(fetcher=self, leader_id=leader_id, address=address)
                self._sessions[leader_id] = session
                session.start()
            session.partitions = partitions

    def stop(self) -> None:
        """Stop every session (broker shutdown)."""
        self.follow({})

    def _tcp_endpoint(self, host: str, port: int) -> Any:
        return HostnameEndpoint(self._reactor, dial_address(host), port)


class LeaderSession:
    """One connection to one leader and the fetch loop over it."""

    log = Logger()

    def __init__(self, *, fetcher: ReplicaFetcher, leader_id: int, address: tuple[str, int]) -> None:
        self.fetcher = fetcher
        self.leader_id = leader_id
        self.address = address
        self.partitions: dict[PartitionKey, int] = {}
        self.running = False
        endpoint = fetcher.endpoint_for(*address)
        factory = Factory.forProtocol(lambda: NativeClientProtocol(f"replica-{fetcher.node_id}"))
        self._service = ClientService(endpoint, factory, retryPolicy=PEER_RECONNECT.retry_policy(random.Random()),
                                      clock=fetcher._reactor)
        self._negotiated: set[int] = set()
        #: Partitions whose last answer was refused, and the reactor time they may be fetched again.
        self._held: dict[PartitionKey, float] = {}

    def start(self) -> None:
        """Connect and start fetching."""
        self.running = True
        self._service.startService()
        loop = Deferred.fromCoroutine(self._run())
        loop.addErrback(lambda failure: self.log.failure("replica fetch loop from broker {leader} ended", failure,
                                                         leader=self.leader_id))

    def stop(self) -> None:
        """Stop fetching and close the connection."""
        self.running = False
        self._service.stopService()

    async def _run(self) -> None:
        reactor = self.fetcher._reactor
        while self.running:
            if not self.partitions:
                await deferLater(reactor, RETRY_BACKOFF_S, lambda: None)
                continue
            try:
                progressed = await self._fetch_once()
            except CancelledError:
                if self.running:
                    raise
                return  # stop() cancelled the wait for a connection: the session ended, nothing failed
            except (BrokerError, TimeoutError, ConnectionError) as error:
                if self.running:
                    self.log.debug("replica fetch from broker {leader} failed: {error}", leader=self.leader_id, error=error)
                progressed = False
            except (StorageLayerError, CorruptRecordError) as error:  # a batch the log refused (stale or damaged)
                self.log.warn("replica fetch from broker {leader}: {error}", leader=self.leader_id, error=error)
                progressed = False
            except Exception:  # a bug: say so, and keep replicating the leader's other partitions
                self.log.failure("replica fetch from broker {leader} failed unexpectedly; fetching again",
                                 leader=self.leader_id)
                progressed = False
            if not progressed and self.running:
                await deferLater(reactor, RETRY_BACKOFF_S, lambda: None)

    async def _fetch_once(self) -> bool:
        """One fetch round; False when nothing useful came back (back off before the next)."""
        fetcher = self.fetcher
        protocol = await self._service.whenConnected()
        if id(protocol) not in self._negotiated:
            protocol.codec.use_broker_versions(await protocol.request(m.ApiVersionsRequest()))
            if fetcher.authenticate is not None:
                try:
                    await fetcher.authenticate(protocol)
                except BrokerError as error:
                    self.log.warn("replica fetcher could not log in to broker {leader}: {error}",
                                  leader=self.leader_id, error=error)
                    protocol.transport.abortConnection()
                    raise
            self._negotiated.add(id(protocol))
        sent = dict(self.partitions)
        request = self._request(sent)
        if request is None:
            return False
        pending = protocol.request(request)
        pending.addTimeout(fetcher._fetch_wait_ms / 1000.0 + limits.peer_request_slack_s, fetcher._reactor,
                           onTimeoutCancel=lambda result, timeout: self._drop(protocol, timeout))
        response = await pending
        appended: dict[PartitionKey, Any] = {}
        progressed = False
        for topic in response.topics:
            for result in topic.partitions:
                key = (topic.name, result.partition_index)
                if self.partitions.get(key) != sent.get(key) or key not in sent:
                    continue  # leadership changed while the fetch was out: the answer is stale
                if result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and result.log_start_offset >= 0:
                    progressed = fetcher._sink.follower_reset(key, result.log_start_offset) or progressed
                    continue
                if result.error_code:
                    continue
                try:
                    partition_log = fetcher._sink.follower_append(key, _as_fetch_result(topic.name, result))
                except (StorageLayerError, CorruptRecordError) as error:  # stale or damaged: this partition only
                    self.log.warn("replica fetch of {topic}-{partition} from broker {leader}: {error}", topic=key[0],
                                  partition=key[1], leader=self.leader_id, error=error)
                    self._held[key] = fetcher._reactor.seconds() + RETRY_BACKOFF_S  # not asked again at once
                    continue
                progressed = True
                if partition_log is not None:
                    appended[key] = partition_log
        if appended:
            await self._wait_durable(appended, sent)
        return progressed

    async def _wait_durable(self, appended: dict[PartitionKey, Any], sent: dict[PartitionKey, int]) -> None:
        """Wait until what this fetch appended is on disk. A log closed meanwhile (its partition deleted, or moved
        off this broker) is no longer followed: its failed fsync is nobody's concern. Any other failure fails the
        fetch (the caller backs off and fetches again)."""
        keys = list(appended)
        results = await DeferredList([self.fetcher._sink.wait_durable(appended[key]) for key in keys],
                                     consumeErrors=True)
        for key, (succeeded, failure) in zip(keys, results):
            if not succeeded and self.partitions.get(key) == sent[key]:
                failure.raiseException()

    def _drop(self, protocol: NativeClientProtocol, timeout: float) -> Any:
        """A fetch got no answer in time: the leader is paused or cut off; reconnect."""
        protocol.transport.abortConnection()
        raise BrokerUnavailableError(f"no replica fetch answer from broker {self.leader_id} within {timeout:.1f}s")

    def _request(self, sent: dict[PartitionKey, int]) -> m.FetchRequest | None:
        fetcher = self.fetcher
        by_topic: dict[str, list[m.FetchPartition]] = {}
        if self._held:
            now = fetcher._reactor.seconds()
            self._held = {key: until for key, until in self._held.items() if until > now}
        for (topic, partition), epoch in sorted(sent.items()):
            if (topic, partition) in self._held:
                continue
            position = fetcher._sink.follower_position((topic, partition))
            if position is None:
                continue
            fetch_offset, last_fetched_epoch = position
            by_topic.setdefault(topic, []).append(m.FetchPartition(
                partition_index=partition, current_leader_epoch=epoch, fetch_offset=fetch_offset,
                last_fetched_epoch=last_fetched_epoch, partition_max_bytes=fetcher._partition_bytes_max,
            ))
        if not by_topic:
            return None
        return m.FetchRequest(
            replica_id=fetcher.node_id, max_wait_ms=fetcher._fetch_wait_ms, min_bytes=1,
            max_bytes=fetcher._response_bytes_max,
            topics=tuple(m.FetchTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
        )


def _as_fetch_result(topic: str, result: m.FetchPartitionResult) -> FetchResult:
    return FetchResult(
        topic=topic, partition=result.partition_index, records=result.records, high_watermark=result.high_watermark,
        log_start_offset=result.log_start_offset, diverging_epoch=result.diverging_epoch,
        diverging_end_offset=result.diverging_end_offset,
    )
