"""Which share groups this broker hosts: those of the ``__share_group_state`` partitions it leads.

The consumer groups' pattern (``groups.hosting``): a share group belongs to one state partition
(``state_partition``), and the broker leading that partition hosts the whole group, its state
machines, delay index and push dispatcher. When this broker becomes a state partition's leader
it waits until the partition's log is replicated (below the high watermark), replays it into a
fresh ``ShareService`` and serves; when the leadership moves (or a new epoch starts) the service
resigns and its members find the new host. State appends are replicated (acks=all).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mqbroker import errors
from mqbroker.config import BrokerConfig
from mqbroker.groups.hosting import ReplicatedAppend
from mqbroker.groups.service import CoordinatedPartitions
from mqbroker.interfaces import IClusterView
from mqbroker.model import BrokerEndpoint, TopicSpec
from mqbroker.replication.leadership import LeaderPartition
from mqbroker.replication.replica_manager import ReplicaManager
from mqbroker.shares.data import ShareData
from mqbroker.shares.delay_index import DelayIndex
from mqbroker.shares.messages import ShareMetrics
from mqbroker.shares.push_hosting import PushFactory
from mqbroker.shares.replay import replay_state
from mqbroker.shares.service import ShareService
from mqbroker.shares.state_records import (
    STATE_TOPIC,
    STATE_TOPIC_CONFIGS,
    state_partition,
)
from mqbroker.storage.manager import LogManager

#: How long a state append waits for the in-sync replicas.
STATE_WRITE_TIMEOUT_MS = 5_000
#: Where the delay indexes live, under the data directory (derived data, rebuilt at each hosting).
DELAY_INDEX_DIRECTORY = "share-delays"


class ShareHosting:
    """Runs a ``ShareService`` for each ``__share_group_state`` partition this broker leads."""

    log = Logger()

    def __init__(self, *, config: BrokerConfig, clock: IReactorTime, cluster: IClusterView, logs: LogManager,
                 replicas: ReplicaManager, append_replicated: ReplicatedAppend, replication_factor: int) -> None:
        self._config = config
        self._clock = clock
        self._cluster = cluster
        self._logs = logs
        self._replicas = replicas
        self._append_replicated = append_replicated
        self._replication_factor = replication_factor
        self._hosted: CoordinatedPartitions[ShareService] | None = None
        self._data: ShareData | None = None
        self._new_member_id: Callable[[str], str] | None = None
        self._push_factory: PushFactory | None = None
        self._stopped = False

    def state_topic_spec(self) -> TopicSpec:
        """``__share_group_state`` as configured (compacted, ``share_state_topic_partitions`` partitions)."""
        return TopicSpec(name=STATE_TOPIC, partitions=self._config.share_state_topic_partitions,
                         configs=dict(STATE_TOPIC_CONFIGS))

    def start(self, data: ShareData, new_member_id: Callable[[str], str], push_factory: PushFactory | None) -> None:
        """Host from now on, reading data through ``data`` (call ``sync`` next)."""
        self._data = data
        self._new_member_id = new_member_id
        self._push_factory = push_factory

    def sync(self) -> None:
        """Host exactly the state partitions this broker leads, each for its current leader epoch."""
        if self._data is None or self._stopped:
            return
        if self._hosted is None:
            record = self._cluster.topic(STATE_TOPIC)
            if record is None:
                return
            self._hosted = CoordinatedPartitions[ShareService](len(record.partitions), topic=STATE_TOPIC,
                                                               partition_of=state_partition)
        hosted = self._hosted
        for partition in range(hosted.partition_count):
            leader = self._replicas.leading((STATE_TOPIC, partition))
            epoch = None if leader is None else leader.leader_epoch
            if hosted.epoch_of(partition) == epoch:
                continue
            hosted.resign(partition)
            if leader is not None:
                hosted.loading(partition, leader.leader_epoch)
                self._load(partition, leader)

    def _load(self, partition: int, leader: LeaderPartition) -> None:
        """Serve once everything in the partition's log is replicated (a new leader may hold records it must not trust)."""
        end_offset = self._logs.get(STATE_TOPIC, partition).log_end_offset
        committed = leader.wait_for_high_watermark(end_offset - 1, 1, STATE_WRITE_TIMEOUT_MS)
        committed.addCallbacks(lambda _: self._serve(partition, leader), self._load_failed,
                               errbackArgs=(partition, leader))

    def _load_failed(self, failure: Any, partition: int, leader: LeaderPartition) -> None:
        failure.trap(errors.BrokerError)
        if self._hosting(partition, leader):
            self._load(partition, leader)

    def _hosting(self, partition: int, leader: LeaderPartition) -> bool:
        return (self._hosted is not None and self._replicas.leading((STATE_TOPIC, partition)) is leader
                and self._hosted.epoch_of(partition) == leader.leader_epoch and not self._stopped)

    def _serve(self, partition: int, leader: LeaderPartition) -> None:
        """Replay the partition up to its high watermark and start its groups' service."""
        if not self._hosting(partition, leader):
            return
        assert self._hosted is not None and self._data is not None and self._new_member_id is not None
        index = DelayIndex(os.path.join(self._config.data_dir, DELAY_INDEX_DIRECTORY, f"state-{partition}.sqlite3"))
        replayed = replay_state(self._logs.get(STATE_TOPIC, partition), leader.high_watermark, index)
        service = ShareService(state_partition=partition, clock=self._clock, data=self._data,
                               append=lambda batch: self._append(partition, batch), index=index, replayed=replayed,
                               new_member_id=self._new_member_id, push_factory=self._push_factory)
        self._hosted.serve(partition, leader.leader_epoch, service)
        self.log.info("hosting the share groups of {topic}-{partition} at epoch {epoch} ({count} group(s) loaded)",
                      topic=STATE_TOPIC, partition=partition, epoch=leader.leader_epoch,
                      count=len(replayed.definitions))

    def _append(self, partition: int, batch: bytes) -> Deferred[None]:
        appended = self._append_replicated(STATE_TOPIC, partition, batch, STATE_WRITE_TIMEOUT_MS)
        return appended.addErrback(_leadership_lost)

    # -- serving ---------------------------------------------------------------------------------

    def service_for(self, group_id: str) -> ShareService:
        """The service hosting ``group_id`` here (NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE otherwise)."""
        return self._running().service_for(group_id)

    def services(self) -> list[ShareService]:
        """Every share service running here."""
        return self._running().services() if self._hosted is not None else []

    def coordinator_of(self, group_id: str) -> BrokerEndpoint:
        """The broker leading the group's state partition (COORDINATOR_NOT_AVAILABLE if none is live)."""
        record = self._cluster.topic(STATE_TOPIC)
        if record is None:
            raise self._state_topic_missing()
        partition = state_partition(group_id, len(record.partitions))
        broker = self._cluster.image.brokers.get(record.partitions[partition].leader_id)
        if broker is None or broker.fenced:
            raise errors.CoordinatorNotAvailableError(
                f"{STATE_TOPIC}-{partition} (share group {group_id!r}) has no live leader right now; retry")
        return BrokerEndpoint(node_id=broker.node_id, host=broker.host, port=broker.port, listeners=broker.listeners)

    def _running(self) -> CoordinatedPartitions[ShareService]:
        if self._hosted is None:
            raise self._state_topic_missing()
        return self._hosted

    def _state_topic_missing(self) -> errors.BrokerError:
        return errors.CoordinatorNotAvailableError(
            f"{STATE_TOPIC} does not exist yet (it is created once {self._replication_factor} brokers are live); retry")

    def metrics(self) -> ShareMetrics:
        """Lag, leased records and dead letters of the share groups hosted here."""
        metrics = ShareMetrics()
        for service in self.services():
            service.metrics(metrics)
        return metrics

    def stop(self) -> None:
        """Stop every share service (shutdown)."""
        self._stopped = True
        if self._hosted is not None:
            self._hosted.stop()


def _leadership_lost(failure: Any) -> Any:
    """A state append that lost its partition's leadership means this broker no longer hosts the group."""
    failure.trap(errors.NotLeaderError, errors.FencedLeaderEpochError)
    raise errors.NotCoordinatorError(f"{failure.getErrorMessage()} (the share group's host moved; find it again)")
