"""Every call the connectors make into the broker, in one thin module over ``IBroker``.

Tasks and the runtime never hold an ``IBroker`` themselves: they use a ``ConnectorBroker``, so a
change of the broker API's signatures (an ``Acks`` enum, a fetch request value) is adapted here
alone. Two brokers are behind it: the *routing* broker (the front ends' one: each partition is
served where it is led) for the data connectors read and write, and the *local* broker for the
writes that must fail once this broker no longer leads the partition (a task's progress and
status in ``__connectors``: that failure is what fences a deposed owner).

The runtime acts as the internal principal ``Service:connectors`` (a super user, like the MQTT
and AMQP front ends' own principals) for the connectors' own topic ``__connectors``; a
connector's tasks act as the principal that created it (``acting_as``), so they read and write
only what their creator may (who may create connectors is checked by the admin service). Consumer-group calls for a group coordinated by another broker are forwarded to it over
the broker's peer connections (``IBroker`` serves groups on their coordinator only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred

from mqbroker import errors
from mqbroker.groups.messages import OffsetCommitRequest, PartitionCommit
from mqbroker.groups.model import TopicPartition
from mqbroker.interfaces import IBroker
from mqbroker.model import (
    IsolationLevel,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Acks,
    FetchPosition,
    FetchRequest,
    FetchResult,
    PartitionMetadata,
    Principal,
    ProduceResult,
    ProducerIdentity,
    TopicSpec,
)
from mqbroker.protocols.native import messages as m

CONNECTORS_PRINCIPAL = Principal("Service", "connectors")
#: How long a produce may wait for the in-sync replicas.
PRODUCE_TIMEOUT_MS = 30_000
#: Forwarded group requests give up after this long (the peer connection is dropped then).
GROUP_REQUEST_WAIT_S = 10.0

#: Sends a native request to broker ``node_id`` and fires with its response (``PeerConnections.request``).
Forward = Callable[[int, object, float], "Deferred[Any]"]


class ConnectorBroker:
    """The broker as the connectors see it: typed, awaitable calls as ``Service:connectors``."""

    def __init__(self, *, broker: IBroker, local: IBroker, node_id: int, forward: Forward | None = None,
                 principal: Principal = CONNECTORS_PRINCIPAL) -> None:
        self._broker = broker
        self._local = local
        self._forward = forward
        self.node_id = node_id
        self.principal = principal

    def acting_as(self, principal: Principal) -> ConnectorBroker:
        """The same broker with every call authorized as ``principal`` (a connector's tasks)."""
        return ConnectorBroker(broker=self._broker, local=self._local, node_id=self.node_id, forward=self._forward,
                               principal=principal)

    # -- data ------------------------------------------------------------------------------

    async def produce(self, topic: str, partition: int, records: bytes) -> ProduceResult:
        """Append ``records`` at the partition's leader, durable on every in-sync replica (acks=all)."""
        return await self._broker.produce(self.principal, topic, partition, records, Acks.ALL, PRODUCE_TIMEOUT_MS)

    async def produce_local(self, topic: str, partition: int, records: bytes) -> ProduceResult:
        """Append on this broker only: fails with ``NotLeaderError`` once it does not lead the partition."""
        return await self._local.produce(self.principal, topic, partition, records, Acks.ALL, PRODUCE_TIMEOUT_MS)

    async def fetch(self, positions: Sequence[FetchPosition], max_wait_ms: int, max_bytes: int,
                    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> list[FetchResult]:
        """Whole batches from each position up to the high watermark, or with READ_COMMITTED up to the last stable
        offset with the aborted transactions listed (``reading.read_committed`` drops them); long-polls up to
        ``max_wait_ms``."""
        request = FetchRequest(positions=tuple(positions), wait_ms_max=max_wait_ms, response_bytes_min=1,
                               response_bytes_max=max_bytes, isolation_level=isolation_level)
        return list(await self._broker.fetch(self.principal, request))

    async def earliest_offset(self, topic: str, partition: int) -> int:
        """The partition's log start offset."""
        found = await self._broker.list_offset(self.principal, topic, partition, EARLIEST_TIMESTAMP)
        return int(found.offset)

    async def latest_offset(self, topic: str, partition: int) -> int:
        """The partition's high watermark."""
        found = await self._broker.list_offset(self.principal, topic, partition, LATEST_TIMESTAMP)
        return int(found.offset)

    async def producer_identity(self) -> ProducerIdentity:
        """A fresh idempotent producer id and epoch."""
        return await self._broker.init_producer_id(self.principal, None)

    # -- topics ----------------------------------------------------------------------------

    async def partitions(self, topic: str, auto_create: bool = False) -> tuple[PartitionMetadata, ...]:
        """The topic's partitions with their leaders; raises the topic's error (e.g. it does not exist)."""
        described = await self._broker.metadata(self.principal, [topic], auto_create)
        for found in described.topics:
            if found.name == topic:
                if found.error is not None:
                    raise found.error
                return found.partitions
        raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")

    async def topic_names(self) -> list[str]:
        """Every topic of this cluster."""
        described = await self._broker.metadata(self.principal, None, False)
        return [topic.name for topic in described.topics if topic.error is None]

    async def create_topic(self, spec: TopicSpec) -> bool:
        """Create ``spec``; False if it exists already."""
        try:
            await self._broker.create_topic(self.principal, spec, False)
        except errors.TopicAlreadyExistsError:
            return False
        return True

    async def topic_configs(self, topic: str) -> dict[str, str]:
        """The topic's effective configuration."""
        return dict(await self._broker.describe_configs(self.principal, topic))

    async def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], delete_configs: Sequence[str]) -> None:
        """Set and reset topic configuration keys."""
        await self._broker.alter_configs(self.principal, topic, set_configs, delete_configs)

    async def grow_topic(self, topic: str, total_count: int) -> None:
        """Give ``topic`` ``total_count`` partitions."""
        await self._broker.create_partitions(self.principal, topic, total_count)

    # -- consumer groups (at their coordinator) ----------------------------------------------

    async def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """Every committed offset of ``group_id`` in this cluster."""
        coordinator = await self._broker.find_coordinator(self.principal, group_id)
        if coordinator.node_id == self.node_id:
            found = await self._local.fetch_offsets(self.principal, group_id, None)
            return {(tp.topic, tp.partition): committed.offset for tp, committed in found.items() if committed is not None}
        response = await self._forwarded(coordinator.node_id, m.OffsetFetchRequest(group_id=group_id, topics=None))
        committed = {}
        for topic in response.topics:
            for partition in topic.partitions:
                if partition.error_code:
                    raise errors.error_for_code(partition.error_code, partition.error_message or "offset fetch refused")
                if partition.committed_offset >= 0:
                    committed[topic.name, partition.partition_index] = partition.committed_offset
        return committed

    async def commit_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit ``offsets`` for ``group_id`` as a standalone (memberless) commit.

        Refused with ``UnknownMemberIdError`` while the group has members in this cluster.
        """
        coordinator = await self._broker.find_coordinator(self.principal, group_id)
        if coordinator.node_id == self.node_id:
            commits = tuple(PartitionCommit(topic_partition=TopicPartition(topic, partition), offset=offset)
                            for (topic, partition), offset in offsets.items())
            await self._local.commit_offsets(self.principal, OffsetCommitRequest(group_id=group_id, offsets=commits))
            return
        by_topic: dict[str, list[m.OffsetCommitPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(m.OffsetCommitPartition(partition_index=partition,
                                                                          committed_offset=offset))
        request = m.OffsetCommitRequest(group_id=group_id, topics=tuple(
            m.OffsetCommitTopic(name=topic, partitions=tuple(partitions)) for topic, partitions in by_topic.items()))
        response = await self._forwarded(coordinator.node_id, request)
        for topic in response.topics:
            for partition in topic.partitions:
                if partition.error_code:
                    raise errors.error_for_code(partition.error_code, partition.error_message or "offset commit refused")

    async def _forwarded(self, node_id: int, request: object) -> Any:
        if self._forward is None:
            raise errors.CoordinatorNotAvailableError("no connection to the group's coordinator in this broker")
        return await self._forward(node_id, request, GROUP_REQUEST_WAIT_S)
