"""Which consumer groups this broker coordinates (tx-light): those of the offsets partitions it leads.

A group belongs to one ``__consumer_offsets`` partition (``offsets_partition``); the broker leading
that partition coordinates it. When this broker becomes a partition's leader it waits until
everything in the partition's log is replicated (below the high watermark), replays it into a
fresh ``GroupService``, and serves the partition's groups; when the leadership moves away, the
service stops. Coordinator appends go through the broker's replicated (acks=all) append. A batch
or record of the partition that does not decode is counted, logged and skipped by the replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mqbroker import errors, limits
from mqbroker.config import BrokerConfig
from mqbroker.groups import messages as group_messages
from mqbroker.groups.coordinator import GroupCoordinator
from mqbroker.groups.offsets import OffsetStore
from mqbroker.groups.service import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_CONFIGS,
    CoordinatedPartitions,
    GroupService,
    offsets_partition,
    read_offsets_records,
)
from mqbroker.interfaces import IClusterView
from mqbroker.model import BrokerEndpoint, TopicSpec
from mqbroker.records.readable import SKIPPED_LOG_FORMAT, UnreadableBatch, UnreadableTally
from mqbroker.replication.leadership import LeaderPartition
from mqbroker.replication.replica_manager import ReplicaManager
from mqbroker.storage.manager import LogManager

#: Appends a batch to a partition with acks=all: (topic, partition, records, timeout_ms) -> fires once replicated.
ReplicatedAppend = Callable[[str, int, bytes, int], "Deferred[None]"]


class GroupHosting:
    """Runs a ``GroupService`` for each ``__consumer_offsets`` partition this broker leads."""

    log = Logger()

    def __init__(
        self, *, config: BrokerConfig, clock: IReactorTime, cluster: IClusterView, logs: LogManager,
        replicas: ReplicaManager, append_replicated: ReplicatedAppend, offsets_replication_factor: int,
        unreadable: UnreadableTally | None = None,
    ) -> None:
        """``offsets_replication_factor``: how many live brokers ``__consumer_offsets`` waits for (error messages);
        ``unreadable`` counts what the replay skips (the broker's metric)."""
        self._config = config
        self._unreadable = unreadable or UnreadableTally()
        self._clock = clock
        self._cluster = cluster
        self._logs = logs
        self._replicas = replicas
        self._append_replicated = append_replicated
        self._offsets_replication_factor = offsets_replication_factor
        #: The offsets partitions this broker leads and coordinates (None until the topic is in the image).
        self._coordinators: CoordinatedPartitions[GroupService] | None = None
        self._new_member_id: Callable[[str], str] | None = None
        self._stopped = False

    def offsets_topic_spec(self) -> TopicSpec:
        """``__consumer_offsets`` as configured (compacted, ``offsets_topic_partitions`` partitions)."""
        return TopicSpec(name=OFFSETS_TOPIC, partitions=self._config.offsets_topic_partitions,
                         configs=dict(OFFSETS_TOPIC_CONFIGS))

    def start(self, new_member_id: Callable[[str], str]) -> None:
        """Coordinate from now on, naming new members with ``new_member_id`` (call ``sync_coordinators`` next)."""
        self._new_member_id = new_member_id

    # -- which partitions ------------------------------------------------------------------

    def sync_coordinators(self) -> None:
        """Coordinate exactly the offsets partitions this broker leads, each for its current leader epoch."""
        if self._new_member_id is None or self._stopped:
            return  # not started yet, or stopped
        if self._coordinators is None:
            # Created by another broker, the topic may reach this broker's image a moment after the creation returned.
            record = self._cluster.topic(OFFSETS_TOPIC)
            if record is None:
                return
            self._coordinators = CoordinatedPartitions[GroupService](len(record.partitions))
        coordinators = self._coordinators
        for partition in range(coordinators.partition_count):
            leader = self._replicas.leading((OFFSETS_TOPIC, partition))
            epoch = None if leader is None else leader.leader_epoch
            if coordinators.epoch_of(partition) == epoch:
                continue
            coordinators.resign(partition)
            if leader is not None:
                coordinators.loading(partition, leader.leader_epoch)
                self._load_offsets_partition(partition, leader)

    def _load_offsets_partition(self, partition: int, leader: LeaderPartition) -> None:
        """Serve the partition's groups once everything in its log is replicated (below the high watermark).

        A new leader may hold records its followers lack; replaying them before they are
        committed could resurrect offsets the failed leader never acknowledged.
        """
        end_offset = self._logs.get(OFFSETS_TOPIC, partition).log_end_offset
        committed = leader.wait_for_high_watermark(end_offset - 1, 1, limits.offsets_commit_timeout_ms_max)
        committed.addCallbacks(lambda _: self._serve_offsets_partition(partition, leader),
                               self._offsets_load_failed, errbackArgs=(partition, leader))

    def _offsets_load_failed(self, failure: Any, partition: int, leader: LeaderPartition) -> None:
        failure.trap(errors.BrokerError)
        if self._coordinating(partition, leader):  # timed out while still leading: keep waiting
            self._load_offsets_partition(partition, leader)

    def _coordinating(self, partition: int, leader: LeaderPartition) -> bool:
        """``leader`` still leads ``partition`` and the coordinators still expect it."""
        return (self._coordinators is not None and self._replicas.leading((OFFSETS_TOPIC, partition)) is leader
                and self._coordinators.epoch_of(partition) == leader.leader_epoch and not self._stopped)

    def _serve_offsets_partition(self, partition: int, leader: LeaderPartition) -> None:
        """Replay the partition up to its high watermark and start its groups' coordinator."""
        if not self._coordinating(partition, leader):
            return
        coordinators, new_member_id = self._coordinators, self._new_member_id
        assert coordinators is not None and new_member_id is not None, "set before any partition loads"
        partition_log = self._logs.get(OFFSETS_TOPIC, partition)
        records = read_offsets_records(partition_log, leader.high_watermark, partition=partition,
                                       skipped=self._skip_unreadable)
        store = OffsetStore.replay(records, skipped=lambda record, error: self._skip_unreadable(UnreadableBatch(
            topic=OFFSETS_TOPIC, partition=partition, first_offset=record.offset, last_offset=record.offset,
            error=error)))
        coordinator = GroupCoordinator(config=self._group_config(), partitions_per_topic=self._partitions_of,
                                       new_member_id=new_member_id, store=store,
                                       now_ms=int(self._clock.seconds() * 1000))
        service = GroupService(coordinator=coordinator, clock=self._clock, append=self._append_offsets,
                               offsets_partitions=coordinators.partition_count)
        coordinators.serve(partition, leader.leader_epoch, service)
        self.log.info("coordinating the groups of {topic}-{partition} at epoch {epoch} ({count} group(s) loaded)",
                      topic=OFFSETS_TOPIC, partition=partition, epoch=leader.leader_epoch,
                      count=len(store.group_ids()))

    def _skip_unreadable(self, batch: UnreadableBatch) -> None:
        self.log.warn(SKIPPED_LOG_FORMAT, **self._unreadable.skipped("offsets loader", batch))

    def _group_config(self) -> group_messages.GroupConfig:
        config = self._config
        return group_messages.GroupConfig(
            session_timeout_ms_min=config.group_min_session_timeout_ms,
            session_timeout_ms_max=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            offsets_retention_ms=config.offsets_retention_ms,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
        )

    def _partitions_of(self, topic: str) -> int:
        record = self._cluster.topic(topic)
        return len(record.partitions) if record is not None else 0

    def _append_offsets(self, partition: int, records: bytes) -> Deferred[None]:
        """Append a coordinator batch to ``__consumer_offsets``; fires once the in-sync replicas have it."""
        appended = self._append_replicated(OFFSETS_TOPIC, partition, records, limits.offsets_commit_timeout_ms_max)
        return appended.addErrback(_leadership_lost_to_not_coordinator)

    # -- serving ---------------------------------------------------------------------------

    def service_for(self, group_id: str) -> GroupService:
        """The service coordinating ``group_id`` here (NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE otherwise)."""
        return self._running().service_for(group_id)

    def services(self) -> list[GroupService]:
        """Every group service running here (COORDINATOR_NOT_AVAILABLE before the offsets topic exists)."""
        return self._running().services()

    def partition_of(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition holding ``group_id`` (COORDINATOR_NOT_AVAILABLE before it exists)."""
        return self._running().partition_of(group_id)

    def transaction_ended(self, partition: int, producer_id: int, committed: bool) -> None:
        """A transaction marker is durable in ``partition``: its group coordinator applies or drops the offsets.

        A partition still loading needs nothing: its replay reads the marker.
        """
        if self._coordinators is not None:
            for service in self._coordinators.serving(partition):
                service.transaction_ended(producer_id, committed)

    def coordinator_of(self, group_id: str) -> BrokerEndpoint:
        """The broker leading the group's offsets partition (COORDINATOR_NOT_AVAILABLE if none is live)."""
        record = self._cluster.topic(OFFSETS_TOPIC)
        if record is None:
            raise self._offsets_topic_missing()
        partition = offsets_partition(group_id, len(record.partitions))
        leader_id = record.partitions[partition].leader_id
        broker = self._cluster.image.brokers.get(leader_id)
        if broker is None or broker.fenced:
            raise errors.CoordinatorNotAvailableError(
                f"{OFFSETS_TOPIC}-{partition} (group {group_id!r}) has no live leader right now; retry"
            )
        return BrokerEndpoint(node_id=broker.node_id, host=broker.host, port=broker.port,
                              listeners=broker.listeners)

    def _running(self) -> CoordinatedPartitions[GroupService]:
        if self._coordinators is None:
            raise self._offsets_topic_missing()
        return self._coordinators

    def _offsets_topic_missing(self) -> errors.BrokerError:
        return errors.CoordinatorNotAvailableError(
            f"{OFFSETS_TOPIC} does not exist yet (it is created once "
            f"{self._offsets_replication_factor} brokers are live); retry"
        )

    def topics_changed(self, names: Sequence[str]) -> None:
        """Topics were created or grew: their groups rebalance."""
        if self._coordinators is not None:
            for service in self._coordinators.services():
                service.topics_changed(names)

    def group_lags(self) -> dict[tuple[str, str, int], int]:
        """Lag per (group, topic, partition) with a committed offset: high watermark minus committed (metrics)."""
        if self._coordinators is None:
            return {}
        lags = {}
        local = set(self._logs.partitions())  # in a cluster, only partitions this broker hosts have a log here
        committed_offsets = [item for service in self._coordinators.services()
                             for item in service.committed_offsets().items()]
        for group_id, offsets in committed_offsets:
            for topic_partition, committed in offsets.items():
                if committed is None or (topic_partition.topic, topic_partition.partition) not in local:
                    continue
                end = self._replicas.high_watermark(self._logs.get(*topic_partition))
                lags[group_id, topic_partition.topic, topic_partition.partition] = max(0, end - committed.offset)
        return lags

    def stop(self) -> None:
        """Stop every group service (shutdown)."""
        self._stopped = True
        if self._coordinators is not None:
            self._coordinators.stop()


def _leadership_lost_to_not_coordinator(failure: Any) -> Any:
    """An offsets append that lost its partition's leadership means this broker no longer coordinates the group."""
    failure.trap(errors.NotLeaderError, errors.FencedLeaderEpochError)
    raise errors.NotCoordinatorError(f"{failure.getErrorMessage()} (the group's coordinator moved; find it again)")
