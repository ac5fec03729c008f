"""The source cluster as a mirror task reads it, over the Twisted native client (Twisted).

Fetches go to each partition's leader (one request per leader, in parallel) with the raw batches
kept as they are; a partition whose leader moved or died is looked up again on the next round.
Every failure to reach the cluster becomes a ``SourceUnavailableError``: the task backs off and
reports the outage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from zope.interface import Interface, implementer

from mqbroker import errors
from mqbroker.client import admin
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.client.security import ClientSecurity
from mqbroker.client.twisted.cluster import TwistedCluster
from mqbroker.connectors.mirror.settings import MirrorSettings
from mqbroker.connectors.task import OutageError
from mqbroker.protocols.native import messages as m
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
from mqbroker.records.isolation import committed_records

TopicPartition = tuple[str, int]


class SourceUnavailableError(OutageError):
    """The source cluster cannot be reached or refused a request: the mirror backs off and retries."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fetched:
    """One partition's fetch from the source: raw batches and its high watermark, or the error."""

    records: bytes = b""
    high_watermark: int = -1
    error: errors.BrokerError | None = None
    #: Where reading goes on when the source passed over what it did not hand out past ``records`` (transaction
    #: markers, aborted transactions); -1: right after ``records``.
    next_position: int = -1


class IMirrorSource(Interface):
    """The source cluster as a mirror task reads it: over the native protocol, or the Kafka protocol."""

    def close() -> None:
        """Close every connection."""

    async def topics() -> dict[str, int]:
        """Every topic of the source cluster with its partition count."""

    async def topic_configs(topic: str) -> dict[str, str]:
        """A source topic's effective configuration."""

    async def offset(topic: str, partition: int, timestamp_ms: int) -> int:
        """The earliest (-2) or latest (-1) offset of a source partition."""

    async def fetch(positions: Mapping[TopicPartition, int], wait_ms: int,
                    partition_bytes: int) -> dict[TopicPartition, Fetched]:
        """Committed records from each position (long-poll up to ``wait_ms``), as record batches."""

    async def groups() -> list[str]:
        """Every consumer group of the source cluster."""

    async def committed_offsets(group_id: str) -> dict[TopicPartition, int]:
        """Every offset ``group_id`` committed in the source cluster."""


@implementer(IMirrorSource)
class SourceCluster:
    """A mirror task's client of an mqbroker source cluster (native protocol)."""

    def __init__(self, reactor: Any, settings: MirrorSettings, client_id: str) -> None:
        security = settings.security
        client_security = None
        if security.tls or security.tls_ca or security.tls_cert or security.username:
            client_security = ClientSecurity.from_options(
                tls=security.tls, tls_ca=security.tls_ca, tls_cert=security.tls_cert, tls_key=security.tls_key,
                sasl_mechanism=security.sasl_mechanism, username=security.username, password=security.password)
        self._cluster = TwistedCluster(reactor, settings.source_bootstrap, client_id, client_security)
        self._now_ms = lambda: int(reactor.seconds() * 1000)

    def close(self) -> None:
        """Close every connection."""
        self._cluster.close()

    async def _request(self, node_id: int | None, request: object) -> Any:
        try:
            return await self._cluster.request(node_id, request)
        except BrokerUnavailableError as error:
            raise SourceUnavailableError(f"source cluster unreachable: {error}") from None

    async def topics(self) -> dict[str, int]:
        """Every topic of the source cluster with its partition count."""
        try:
            response = await self._cluster.refresh(None, auto_create=False)
        except BrokerUnavailableError as error:
            raise SourceUnavailableError(f"source cluster unreachable: {error}") from None
        return {topic.name: len(topic.partitions) for topic in response.topics if topic.error_code == 0}

    async def topic_configs(self, topic: str) -> dict[str, str]:
        """A source topic's effective configuration."""
        found = admin.describe_configs_result(await self._request(None, admin.describe_configs_request(topic)))
        return {key: value for key, value in found.items() if value is not None}

    async def offset(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The earliest (-2) or latest (-1) offset of a source partition, asked of its leader."""
        leader = await self._leader(topic, partition)
        response = await self._request(leader, admin.list_offsets_request(topic, partition, timestamp_ms))
        return admin.list_offsets_result(response)

    async def _leader(self, topic: str, partition: int) -> int:
        leader = self._cluster.view.leader(topic, partition)
        if leader < 0:
            await self._cluster.refresh([topic], auto_create=False)
            leader = self._cluster.view.leader(topic, partition)
            if leader < 0:
                raise SourceUnavailableError(f"source partition {topic}-{partition} has no leader")
        return leader

    async def fetch(self, positions: Mapping[TopicPartition, int], wait_ms: int,
                    partition_bytes: int) -> dict[TopicPartition, Fetched]:
        """Read committed batches from each position at its partition's leader (long-poll up to ``wait_ms``)."""
        by_leader: dict[int, list[TopicPartition]] = {}
        view = self._cluster.view
        stale = {topic for topic, partition in positions
                 if view.leader(topic, partition) < 0 or topic in view.stale_topics}
        if stale:
            try:
                await self._cluster.refresh(stale, auto_create=False)
            except BrokerUnavailableError as error:
                raise SourceUnavailableError(f"source cluster unreachable: {error}") from None
        for tp in positions:
            by_leader.setdefault(self._cluster.view.leader(*tp), []).append(tp)
        fetched: dict[TopicPartition, Fetched] = {}
        no_leader = by_leader.pop(-1, [])
        for tp in no_leader:
            fetched[tp] = Fetched(error=errors.LeaderNotAvailableError(f"source partition {tp[0]}-{tp[1]} has no leader"))
        rounds = [Deferred.fromCoroutine(self._fetch_from(leader, {tp: positions[tp] for tp in tps}, wait_ms,
                                                          partition_bytes))
                  for leader, tps in by_leader.items()]
        for answered in await gatherResults(rounds, consumeErrors=True):
            fetched.update(answered)
        return fetched

    async def _fetch_from(self, leader: int, positions: Mapping[TopicPartition, int], wait_ms: int,
                          partition_bytes: int) -> dict[TopicPartition, Fetched]:
        by_topic: dict[str, list[m.FetchPartition]] = {}
        for (topic, partition), offset in positions.items():
            by_topic.setdefault(topic, []).append(m.FetchPartition(partition_index=partition, fetch_offset=offset,
                                                                   partition_max_bytes=partition_bytes))
        request = m.FetchRequest(max_wait_ms=wait_ms, min_bytes=1, max_bytes=partition_bytes * len(positions),
                                 isolation_level=m.IsolationLevel.READ_COMMITTED,
                                 topics=tuple(m.FetchTopic(name=topic, partitions=tuple(partitions))
                                              for topic, partitions in by_topic.items()))
        try:
            response = await self._cluster.request(leader, request)
        except (BrokerUnavailableError, errors.BrokerError) as error:
            self._forget_leaders(positions)
            failed = error if isinstance(error, errors.BrokerError) else errors.LeaderNotAvailableError(str(error))
            return {tp: Fetched(error=failed) for tp in positions}
        fetched: dict[TopicPartition, Fetched] = {}
        for topic in response.topics:
            for result in topic.partitions:
                tp = (topic.name, result.partition_index)
                if result.error_code:
                    error = errors.error_for_code(result.error_code, result.error_message or "fetch refused")
                    if error.retriable:
                        self._forget_leaders([tp])
                    fetched[tp] = Fetched(error=error)
                else:
                    fetched[tp] = _committed(bytes(result.records), result.high_watermark,
                                             result.aborted_transactions)
        return fetched

    def _forget_leaders(self, partitions: Iterable[TopicPartition]) -> None:
        for topic in {topic for topic, _ in partitions}:
            self._cluster.view.invalidate(topic)

    async def groups(self) -> list[str]:
        """Every consumer group of the source cluster (each broker lists the groups it coordinates)."""
        await self._cluster.refresh([], auto_create=False)
        listed: set[str] = set()
        for node_id in self._cluster.view.node_ids:
            response = await self._request(node_id, m.ListGroupsRequest())
            listed.update(group.group_id for group in response.groups)
        return sorted(listed)

    async def committed_offsets(self, group_id: str) -> dict[TopicPartition, int]:
        """Every offset ``group_id`` committed in the source cluster."""
        try:
            response = await self._cluster.coordinator_request(f"group:{group_id}", m.OffsetFetchRequest(
                group_id=group_id, topics=None))
        except BrokerUnavailableError as error:
            raise SourceUnavailableError(f"source coordinator of {group_id!r} unreachable: {error}") from None
        finally:
            self._cluster.drop_coordinator(f"group:{group_id}")  # the coordinator may move before the next round
        return {(topic.name, partition.partition_index): partition.committed_offset
                for topic in response.topics for partition in topic.partitions
                if partition.error_code == 0 and partition.committed_offset >= 0}


def _committed(records: bytes, high_watermark: int, aborted: Any) -> Fetched:
    """A read_committed fetch result without the batches of the aborted transactions it lists."""
    if not aborted:
        return Fetched(records=records, high_watermark=high_watermark)
    try:
        kept = committed_records(records, [(item.producer_id, item.first_offset) for item in aborted])
        next_position = max((header.next_offset for _, header in iter_batches(records, check=False)), default=-1)
    except CorruptRecordError:
        return Fetched(records=records, high_watermark=high_watermark)  # the copy reads what frames, and skips the rest
    return Fetched(records=bytes(kept), high_watermark=high_watermark, next_position=next_position)
