"""The broker core: one protocol-independent implementation of ``IBroker``.

"tx-light": it returns Deferreds and schedules through an injected clock, but does no I/O of
its own beyond calling the storage library (appends on this thread, fsync through the
``Flusher``'s thread pool). The produce and fetch paths handle whole record batches: no
per-record work happens here.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, FirstError, fail, gatherResults, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from mqbroker import errors
from mqbroker.core.topic_config import (
    BROKER_TOPIC_CONFIG_DEFAULTS,
    PRODUCER_ID_BLOCK_SIZE,
    log_config_for,
    validate_broker_topic_configs,
    validate_topic_name,
)
from mqbroker.config import BrokerConfig
from mqbroker.cluster.controlplane import ControlPlane
from mqbroker.durability.flusher import Flusher
from mqbroker.groups.service import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_CONFIGS,
    CoordinatedPartitions,
    GroupService,
    offsets_partition,
    read_offsets_records,
)
from mqbroker.groups import messages as group_messages
from mqbroker.groups.coordinator import GroupCoordinator
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import OffsetStore
from mqbroker.interfaces import IAuthorizer, IBroker
from mqbroker.replication.leadership import LeaderPartition
from mqbroker.limits import fetch_response_bytes_max, fetch_wait_ms_max, partitions_per_topic_max, produce_timeout_ms_max
from mqbroker.cluster.metadata import AlterPartition, MetadataImage, PartitionState
from mqbroker.replication.decisions import diverging_epoch, truncation_offset
from mqbroker.model import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    BrokerEndpoint,
    ClusterMetadata,
    FetchPosition,
    FetchResult,
    OffsetAndTimestamp,
    Operation,
    PartitionMetadata,
    PartitionReassignment,
    Principal,
    ProduceResult,
    ProducerIdentity,
    ResourceType,
    TopicMetadata,
    TopicSpec,
)
from mqbroker.storage import errors as storage_errors
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from mqbroker.records.batch import read_header
from mqbroker.storage.manager import LogManager

#: acks=all produces that give no timeout wait this long for the ISR.
PRODUCE_TIMEOUT_MS_DEFAULT = 30_000
#: How long a ``__consumer_offsets`` append waits for the in-sync replicas (Kafka's offsets.commit.timeout.ms).
OFFSETS_COMMIT_TIMEOUT_MS = 5_000

_STORAGE_TO_BROKER_ERROR: dict[type[Exception], Callable[[str], errors.BrokerError]] = {
    storage_errors.CorruptRecordError: errors.CorruptMessageError,
    storage_errors.OffsetOutOfRangeError: errors.OffsetOutOfRangeError,
    storage_errors.RecordTooLargeError: errors.MessageTooLargeError,
    storage_errors.LogClosedError: errors.UnknownTopicOrPartitionError,
    storage_errors.InvalidConfigError: errors.InvalidConfigError,
    storage_errors.OutOfOrderSequenceError: errors.OutOfOrderSequenceError,
    storage_errors.DuplicateSequenceError: errors.DuplicateSequenceError,
    storage_errors.InvalidProducerEpochError: errors.InvalidProducerEpochError,
    storage_errors.UnknownPartitionError: errors.UnknownTopicOrPartitionError,
}


def broker_error(error: Exception) -> errors.BrokerError:
    """Translate a storage error into the broker error reported to clients."""
    if isinstance(error, errors.BrokerError):
        return error
    for storage_type, broker_type in _STORAGE_TO_BROKER_ERROR.items():
        if isinstance(error, storage_type):
            return broker_type(str(error))
    raise error


#: Defaults for compacted internal topics (offsets, MQTT and AMQP state), as Kafka's
#: ``offsets.topic.segment.bytes`` does for its offsets topic.
INTERNAL_COMPACTED_TOPIC_CONFIGS = {"segment.bytes": str(16 * 1024 * 1024), "segment.ms": str(3_600_000)}


@implementer(IBroker)
class Broker:
    """A single broker's data plane: topics, partition logs, long-poll fetches, producer ids."""

    log = Logger()

    def __init__(
        self,
        *,
        config: BrokerConfig,
        clock: IReactorTime,
        logs: LogManager,
        control: ControlPlane,
        flusher_factory: Callable[[Callable[[Iterable[PartitionLog]], None]], Flusher],
        authorizer: IAuthorizer,
    ) -> None:
        self._config = config
        self._clock = clock
        self._logs = logs
        self._control = control
        control.partition_removed = self._partition_removed
        self._authorizer = authorizer
        self._flusher = flusher_factory(self._on_durable)
        self._fetch_waiters: dict[PartitionLog, set[_PendingFetch]] = {}
        self._next_producer_id = 0
        self._producer_id_block_end = 0
        self._stopping = False
        #: The offsets partitions this broker leads and coordinates (None until ``start_groups`` found the topic).
        self._coordinators: CoordinatedPartitions | None = None
        self._new_member_id: Callable[[str], str] | None = None
        #: Internal topic creations waiting for enough live brokers: (count needed, waiter).
        self._live_broker_waiters: list[tuple[int, Deferred[None]]] = []
        #: Partitions this broker leads, by (topic, partition) and by log.
        self._leaders: dict[tuple[str, int], LeaderPartition] = {}
        self._leader_of_log: dict[PartitionLog, LeaderPartition] = {}
        #: The leader's high watermark as last reported to this broker while following.
        self._follower_high_watermarks: dict[tuple[str, int], int] = {}
        #: Told which partitions to follow from which leader (None: no replication, e.g. in unit tests).
        self.fetcher: Any = None
        control.partitions_changed = self._partitions_changed
        self.produced_bytes = 0
        self.produced_records = 0
        self.fetched_bytes = 0

    # -- helpers ---------------------------------------------------------------------------

    def now_ms(self) -> int:
        """The broker clock in milliseconds."""
        return int(self._clock.seconds() * 1000)

    def _authorize(self, principal: Principal, operation: Operation, resource: ResourceType, name: str) -> None:
        if not self._authorizer.authorize(principal, operation, resource, name):
            denied = {
                ResourceType.TOPIC: errors.TopicAuthorizationError,
                ResourceType.GROUP: errors.GroupAuthorizationError,
                ResourceType.CLUSTER: errors.ClusterAuthorizationError,
                ResourceType.TRANSACTIONAL_ID: errors.ClusterAuthorizationError,
            }[resource]
            raise denied(f"{principal} may not {operation.value} {resource.value} {name!r}")

    def _log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        return log_config_for(self._config.topic_defaults, overrides)

    def _all_logs(self) -> list[PartitionLog]:
        return self._logs.logs()

    def _partition_log(self, topic: str, partition: int) -> PartitionLog:
        """The local log of a partition this broker leads; others answer NOT_LEADER_OR_FOLLOWER."""
        record = self._control.topic(topic)
        if record is None:
            raise errors.UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist; create it with `mqbroker topics create {topic}` "
                "or enable auto_create_topics"
            )
        if not 0 <= partition < len(record.partitions):
            raise errors.UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0..{len(record.partitions) - 1}; partition {partition} does not exist"
            )
        state = record.partitions[partition]
        leader = self._leaders.get((topic, partition))
        if state.leader_id != self._config.node_id or leader is None:
            raise errors.NotLeaderError(
                f"{topic}-{partition} is led by broker {state.leader_id}, not broker {self._config.node_id};"
                " refresh metadata and retry there"
            )
        return self._logs.get(topic, partition)

    def _leader(self, topic: str, partition: int) -> tuple[PartitionLog, LeaderPartition]:
        """The log and leader state of a partition this broker leads (NOT_LEADER_OR_FOLLOWER otherwise)."""
        partition_log = self._partition_log(topic, partition)
        return partition_log, self._leaders[(topic, partition)]

    def _partition_removed(self, topic: str, partition: int) -> None:
        """The control plane is about to delete a local partition: answer the fetches waiting on it."""
        partition_log = self._logs.get(topic, partition)
        waiters = self._fetch_waiters.get(partition_log)
        if waiters:
            for pending in list(waiters):
                pending.complete()

    def _ensure_topic(self, name: str, auto_create: bool) -> Deferred[None]:
        """Fire once ``name`` exists, creating it with the defaults if allowed (auto-creation)."""
        if self._control.topic(name) is not None or not (auto_create and self._config.auto_create_topics):
            return succeed(None)
        try:
            validate_topic_name(name)
        except errors.BrokerError as error:
            return fail(error)
        created = self._create_topic_now(TopicSpec(name=name))
        created.addErrback(lambda failure: failure.trap(errors.TopicAlreadyExistsError))
        return created

    def high_watermark(self, partition_log: PartitionLog) -> int:
        """The end of what consumers may see: what every in-sync replica holds (durably, under the sync policy)."""
        leader = self._leader_of_log.get(partition_log)
        if leader is not None:
            return leader.high_watermark
        return self._leader_end(partition_log)

    @staticmethod
    def _leader_end(partition_log: PartitionLog) -> int:
        """The leader's own contribution to the high watermark: its durable end under the sync policy."""
        if partition_log.config.flush_policy == "sync":
            return partition_log.durable_end_offset
        return partition_log.log_end_offset

    def _replication_progress(self, partition_log: PartitionLog) -> None:
        """Something moved (an fsync, a follower, the ISR): advance the high watermark, wake readers."""
        leader = self._leader_of_log.get(partition_log)
        if leader is None:
            self._wake_fetches(partition_log)  # a log nobody leads here is read up to its own durable end
        else:
            leader.advance(self._leader_end(partition_log), lambda: self._wake_fetches(partition_log))

    def _min_insync_replicas(self, topic: str) -> int:
        record = self._control.topic(topic)
        configured = (record.configs if record is not None else {}).get("min.insync.replicas")
        if configured is None:
            configured = self._config.topic_defaults.get("min.insync.replicas", "1")
        return int(configured)

    @staticmethod
    def _check_enough_replicas(leader: LeaderPartition, min_insync: int) -> None:
        """An acks=all write is refused, before anything is appended, while the ISR is too small."""
        if len(leader.replicas.isr) < min_insync:
            raise errors.NotEnoughReplicasError(
                f"{leader.name} has {len(leader.replicas.isr)} in-sync replica(s) "
                f"{sorted(leader.replicas.isr)}, fewer than min.insync.replicas={min_insync}; nothing was written"
            )

    # -- produce ---------------------------------------------------------------------------

    def produce(
        self, principal: Principal, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int
    ) -> Deferred[ProduceResult]:
        """Append a client's batches; see ``IBroker.produce``."""
        if self._control.topic(topic) is None and self._authorizer.authorize(
            principal, Operation.WRITE, ResourceType.TOPIC, topic
        ):
            ensured = self._ensure_topic(topic, auto_create=True)
            ensured.addCallback(lambda _: self._produce(principal, topic, partition, records, acks, timeout_ms))
            return ensured
        return self._produce(principal, topic, partition, records, acks, timeout_ms)

    def _produce(
        self, principal: Principal, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int
    ) -> Deferred[ProduceResult]:
        try:
            if self._stopping:
                raise errors.BrokerShuttingDownError("the broker is shutting down; retry on another broker")
            if acks not in (0, 1, -1):
                raise errors.InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {acks}")
            self._authorize(principal, Operation.WRITE, ResourceType.TOPIC, topic)
            partition_log, leader = self._leader(topic, partition)
            min_insync = self._min_insync_replicas(topic)
            if acks == -1:
                self._check_enough_replicas(leader, min_insync)
            appended = partition_log.append(records, self.now_ms(), leader_epoch=leader.leader_epoch)
        except Exception as error:  # storage errors become typed broker errors; others propagate
            return fail(broker_error(error))
        result = ProduceResult(
            base_offset=appended.base_offset,
            last_offset=appended.last_offset,
            log_append_time_ms=appended.log_append_time_ms,
            log_start_offset=appended.log_start_offset,
        )
        if not appended.duplicate:
            self.produced_bytes += len(records)
            self.produced_records += appended.last_offset - appended.base_offset + 1
        sync = self._appended(partition_log)
        if acks == 0 or (acks == 1 and not sync):
            return succeed(result)
        if acks == 1:
            waited = self._flusher.wait_durable(partition_log, appended.last_offset)
        else:
            timeout_ms = min(timeout_ms, produce_timeout_ms_max) if timeout_ms > 0 else PRODUCE_TIMEOUT_MS_DEFAULT
            waited = leader.wait_for_high_watermark(appended.last_offset, min_insync, timeout_ms)
        waited.addCallback(lambda _: result)
        return waited

    def _appended(self, partition_log: PartitionLog) -> bool:
        """After a leader's append: schedule the fsync (``sync`` policy, returns True) or advance the
        high watermark now; wake the followers long-polling for new batches."""
        sync = partition_log.config.flush_policy == "sync"
        if sync:
            self._flusher.request_flush(partition_log)
        else:
            self._replication_progress(partition_log)
        self._wake_fetches(partition_log, followers_only=True)  # consumers wait for the high watermark
        return sync

    def _on_durable(self, logs: Iterable[PartitionLog]) -> None:
        for partition_log in logs:
            self._replication_progress(partition_log)

    # -- fetch -----------------------------------------------------------------------------

    def fetch(
        self,
        principal: Principal,
        positions: Sequence[FetchPosition],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
    ) -> Deferred[list[FetchResult]]:
        """Read batches for several partitions, long-polling; see ``IBroker.fetch``."""
        return self._fetch(principal, -1, positions, max_wait_ms, min_bytes, max_bytes)

    def replica_fetch(
        self,
        principal: Principal,
        replica_id: int,
        positions: Sequence[FetchPosition],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
    ) -> Deferred[list[FetchResult]]:
        """A follower's long-poll fetch; see ``IBroker.replica_fetch``."""
        try:
            self._authorize(principal, Operation.ALTER, ResourceType.CLUSTER, "kafka-cluster")
        except errors.BrokerError as error:
            return fail(error)
        now_ms = self.now_ms()
        for position in positions:
            self._record_follower_position(replica_id, position, now_ms)
        return self._fetch(principal, replica_id, positions, max_wait_ms, min_bytes, max_bytes)

    def _record_follower_position(self, replica_id: int, position: FetchPosition, now_ms: int) -> None:
        """A follower holds everything below its fetch offset (if its log agrees with ours up to there)."""
        key = (position.topic, position.partition)
        leader = self._leaders.get(key)
        if leader is None or position.current_leader_epoch != leader.leader_epoch:
            return
        partition_log = self._logs.get(*key)
        if position.offset > partition_log.log_end_offset or self._divergence(partition_log, position) is not None:
            return
        leader.replicas.follower_fetched(replica_id, position.offset, partition_log.log_end_offset, now_ms)
        self._replication_progress(partition_log)

    @staticmethod
    def _divergence(partition_log: PartitionLog, position: FetchPosition) -> tuple[int, int] | None:
        end_offset = partition_log.log_end_offset
        diverged = diverging_epoch(lambda epoch: partition_log.epochs.end_offset_for(epoch, end_offset),
                                   position.last_fetched_epoch, position.offset)
        if diverged is None and position.offset > end_offset:
            diverged = (partition_log.epochs.latest_epoch, end_offset)  # a follower ahead of us: cut to our end
        return diverged

    def _fetch(
        self, principal: Principal, replica_id: int, positions: Sequence[FetchPosition], max_wait_ms: int,
        min_bytes: int, max_bytes: int,
    ) -> Deferred[list[FetchResult]]:
        max_bytes = min(max_bytes, fetch_response_bytes_max) if max_bytes > 0 else fetch_response_bytes_max
        results = self._read_all(principal, positions, max_bytes, replica_id)
        available = sum(len(r.records) for r in results)
        if max_wait_ms <= 0 or available >= max(min_bytes, 1) or any(r.error or r.diverging_end_offset >= 0 for r in results):
            return succeed(results)
        pending = _PendingFetch(self, principal, positions, min_bytes, max_bytes, replica_id)
        pending.logs = [self._partition_log(p.topic, p.partition) for p in positions]
        for partition_log in pending.logs:
            self._fetch_waiters.setdefault(partition_log, set()).add(pending)
        pending.timer = self._clock.callLater(min(max_wait_ms, fetch_wait_ms_max) / 1000.0, pending.complete)
        return pending.deferred

    def _read_all(
        self, principal: Principal, positions: Sequence[FetchPosition], max_bytes: int, replica_id: int = -1
    ) -> list[FetchResult]:
        results = []
        remaining = max_bytes
        for position in positions:
            if replica_id >= 0:
                result = self._read_for_follower(position, remaining, first=not results)
            else:
                result = self._read_one(principal, position, remaining, first=not results)
            remaining = max(0, remaining - len(result.records))
            results.append(result)
        return results

    def _read_for_follower(self, position: FetchPosition, remaining: int, first: bool) -> FetchResult:
        """Batches up to the log end for a follower, or where its log diverged from ours."""
        topic, partition = position.topic, position.partition
        try:
            partition_log, leader = self._leader(topic, partition)
            if position.current_leader_epoch != leader.leader_epoch:
                stale = position.current_leader_epoch < leader.leader_epoch
                raise (errors.FencedLeaderEpochError if stale else errors.NotLeaderError)(
                    f"{topic}-{partition}: the follower is at leader epoch {position.current_leader_epoch}, "
                    f"this leader at {leader.leader_epoch}"
                )
            if position.offset < partition_log.log_start_offset:  # retention or delete-records passed the follower
                return FetchResult(topic=topic, partition=partition, high_watermark=leader.high_watermark,
                                   log_start_offset=partition_log.log_start_offset,
                                   error=errors.OffsetOutOfRangeError(
                                       f"{topic}-{partition}: the follower's offset {position.offset} is below the "
                                       f"log start {partition_log.log_start_offset}; start again from there"))
            diverged = self._divergence(partition_log, position)
            if diverged is not None:
                return FetchResult(topic=topic, partition=partition, high_watermark=leader.high_watermark,
                                   log_start_offset=partition_log.log_start_offset,
                                   diverging_epoch=diverged[0], diverging_end_offset=diverged[1])
            limit = min(position.max_bytes, remaining) if not first else position.max_bytes
            records = b""
            if position.offset < partition_log.log_end_offset and limit > 0:
                records = partition_log.read(position.offset, limit).records
            return FetchResult(topic=topic, partition=partition, records=records, high_watermark=leader.high_watermark,
                               log_start_offset=partition_log.log_start_offset)
        except Exception as error:  # reported in this partition's result; other partitions go on
            return FetchResult(topic=topic, partition=partition, error=broker_error(error))

    def _read_one(self, principal: Principal, position: FetchPosition, remaining: int, first: bool) -> FetchResult:
        topic, partition = position.topic, position.partition
        try:
            self._authorize(principal, Operation.READ, ResourceType.TOPIC, topic)
            partition_log = self._partition_log(topic, partition)
            high_watermark = self.high_watermark(partition_log)
            start = partition_log.log_start_offset
            if position.offset < start or position.offset > partition_log.log_end_offset:
                raise errors.OffsetOutOfRangeError(
                    f"offset {position.offset} is outside {topic}-{partition}'s range "
                    f"{start}..{partition_log.log_end_offset}; seek to the beginning or end"
                )
            records = b""
            limit = min(position.max_bytes, remaining) if not first else position.max_bytes
            if position.offset < high_watermark and limit > 0:
                records = partition_log.read(position.offset, limit, max_offset=high_watermark).records
            self.fetched_bytes += len(records)
            return FetchResult(
                topic=topic, partition=partition, records=records,
                high_watermark=high_watermark, log_start_offset=start,
            )
        except Exception as error:  # reported in this partition's result; other partitions go on
            return FetchResult(topic=topic, partition=partition, error=broker_error(error))

    def _wake_fetches(self, partition_log: PartitionLog, followers_only: bool = False) -> None:
        """Let long-polling fetches of ``partition_log`` answer if they now can (only followers' after an append)."""
        waiters = self._fetch_waiters.get(partition_log)
        if waiters:
            for pending in list(waiters):
                if not followers_only or pending.replica_id >= 0:
                    pending.try_complete()

    def _forget_fetch(self, pending: _PendingFetch) -> None:
        for partition_log in pending.logs:
            waiters = self._fetch_waiters.get(partition_log)
            if waiters is not None:
                waiters.discard(pending)
                if not waiters:
                    del self._fetch_waiters[partition_log]

    # -- offsets and metadata -------------------------------------------------------------

    def list_offset(self, principal: Principal, topic: str, partition: int, timestamp_ms: int) -> Deferred[OffsetAndTimestamp]:
        """Find an offset by position or time; see ``IBroker.list_offset``."""
        try:
            self._authorize(principal, Operation.DESCRIBE, ResourceType.TOPIC, topic)
            partition_log = self._partition_log(topic, partition)
            if timestamp_ms == EARLIEST_TIMESTAMP:
                return succeed(OffsetAndTimestamp(offset=partition_log.log_start_offset))
            if timestamp_ms == LATEST_TIMESTAMP:
                return succeed(OffsetAndTimestamp(offset=self.high_watermark(partition_log)))
            if timestamp_ms < 0:
                raise errors.InvalidTimestampError(f"timestamp {timestamp_ms} is neither -1, -2 nor a time in ms")
            found = partition_log.offset_for_timestamp(timestamp_ms)
            if found is None or found >= self.high_watermark(partition_log):
                return succeed(OffsetAndTimestamp(offset=-1))
            return succeed(OffsetAndTimestamp(offset=found, timestamp_ms=timestamp_ms))
        except Exception as error:
            return fail(broker_error(error))

    def metadata(self, principal: Principal, topics: Sequence[str] | None, allow_auto_create: bool) -> Deferred[ClusterMetadata]:
        """Describe the brokers and the topics from the metadata image; see ``IBroker.metadata``."""
        if topics is None or not allow_auto_create:
            return succeed(self._describe(principal, topics))
        missing = [name for name in topics if self._control.topic(name) is None
                   and self._authorizer.authorize(principal, Operation.DESCRIBE, ResourceType.TOPIC, name)]
        ensured = gatherResults([self._ensure_topic(name, auto_create=True) for name in missing], consumeErrors=True)
        ensured.addErrback(lambda failure: failure.trap(FirstError))  # each topic's error shows in its entry
        ensured.addCallback(lambda _: self._describe(principal, topics, validate_names=self._config.auto_create_topics))
        return ensured

    def _describe(self, principal: Principal, topics: Sequence[str] | None, validate_names: bool = False) -> ClusterMetadata:
        image = self._control.image
        names = sorted(image.topics) if topics is None else list(topics)
        described = []
        for name in names:
            try:
                self._authorize(principal, Operation.DESCRIBE, ResourceType.TOPIC, name)
                record = image.topics.get(name)
                if record is None:
                    if validate_names:
                        validate_topic_name(name)
                    raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                partitions = tuple(
                    PartitionMetadata(partition=number, leader_id=state.leader_id, leader_epoch=state.leader_epoch,
                                      replicas=tuple(state.replicas), isr=tuple(state.isr))
                    for number, state in enumerate(record.partitions)
                )
                described.append(TopicMetadata(name=name, partitions=partitions, internal=name.startswith("__")))
            except errors.BrokerError as error:
                described.append(TopicMetadata(name=name, error=error))
        brokers = tuple(
            BrokerEndpoint(node_id=broker.node_id, host=broker.host, port=broker.port, listeners=broker.listeners)
            for _, broker in sorted(image.brokers.items()) if not broker.fenced
        )
        return ClusterMetadata(
            cluster_id=self._config.cluster_id, controller_id=self._control.node.leader_id, brokers=brokers,
            topics=tuple(described),
        )

    # -- admin ------------------------------------------------------------------------------

    def create_topic(self, principal: Principal, spec: TopicSpec, validate_only: bool) -> Deferred[None]:
        """Create a topic through the controller; see ``IBroker.create_topic``."""
        try:
            self._authorize(principal, Operation.CREATE, ResourceType.TOPIC, spec.name)
            if self._control.topic(spec.name) is not None:
                raise errors.TopicAlreadyExistsError(f"topic {spec.name!r} already exists")
            self._check_topic_spec(spec)
            if validate_only:
                return succeed(None)
            return self._create_topic_now(spec)
        except Exception as error:
            return fail(broker_error(error))

    def _check_topic_spec(self, spec: TopicSpec) -> None:
        validate_topic_name(spec.name)
        partitions = self._config.default_partitions if spec.partitions == -1 else spec.partitions
        if not 1 <= partitions <= partitions_per_topic_max:
            raise errors.InvalidPartitionsError(f"a topic needs 1..{partitions_per_topic_max} partitions, got {partitions}")
        replication = self._replication_factor(spec)
        live = len(self._control.image.live_brokers())
        if self._is_internal_default(spec):
            live = max(live, replication)  # its creation waits for that many live brokers
        if not 1 <= replication <= max(live, 1):
            raise errors.InvalidReplicationFactorError(
                f"replication factor {replication} needs that many live brokers; {live} are live"
            )
        validate_broker_topic_configs(spec.configs)
        self._log_config(spec.configs)

    def _create_topic_now(self, spec: TopicSpec) -> Deferred[None]:
        """Propose the topic (an internal one once enough brokers are live to hold all its replicas)."""
        if not self._is_internal_default(spec):
            return self._propose_topic(spec)
        if "compact" in spec.configs.get("cleanup.policy", ""):
            # Only sealed segments are compacted: small segments keep internal state compact.
            spec = dataclasses.replace(spec, configs={**INTERNAL_COMPACTED_TOPIC_CONFIGS, **spec.configs})
        needed = self._replication_factor(spec)
        if len(self._control.image.live_brokers()) < needed:
            self.log.info("creating internal topic {topic} once {count} brokers are live (replication factor)",
                          topic=spec.name, count=needed)
        ready = self._when_live_brokers(needed)
        ready.addCallback(lambda _: self._propose_topic(spec))
        return ready

    def _propose_topic(self, spec: TopicSpec) -> Deferred[None]:
        """Propose the topic; the control plane creates the local logs of the partitions this broker hosts."""
        self._check_topic_spec(spec)
        partitions = self._config.default_partitions if spec.partitions == -1 else spec.partitions
        created = self._control.create_topic(spec.name, partitions, dict(spec.configs), self._replication_factor(spec))
        created.addCallback(lambda _: self._topics_changed([spec.name]))
        return created

    def _replication_factor(self, spec: TopicSpec) -> int:
        """The spec's factor, else the default; internal topics get ``internal_replication_factor``."""
        if spec.replication_factor != -1:
            return spec.replication_factor
        if spec.name.startswith("__"):
            return self.internal_replication_factor()
        return self._config.default_replication_factor

    def internal_replication_factor(self) -> int:
        """Replicas of internal topics: ``offsets_topic_replication_factor``, at most one per controller voter.

        Every broker is a voter, so a single-broker cluster uses 1, whatever the setting.
        """
        return max(1, min(self._config.offsets_topic_replication_factor, len(self._control.voters)))

    @staticmethod
    def _is_internal_default(spec: TopicSpec) -> bool:
        """An internal topic (``__`` prefix) created with the internal replication factor."""
        return spec.name.startswith("__") and spec.replication_factor == -1

    def _when_live_brokers(self, count: int) -> Deferred[None]:
        """Fire once at least ``count`` brokers are registered and unfenced."""
        if len(self._control.image.live_brokers()) >= count:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._live_broker_waiters.append((count, waiter))
        return waiter

    def _wake_live_broker_waiters(self, image: MetadataImage) -> None:
        live = len(image.live_brokers())
        ready = [waiter for count, waiter in self._live_broker_waiters if count <= live]
        self._live_broker_waiters = [(count, waiter) for count, waiter in self._live_broker_waiters if count > live]
        for waiter in ready:
            waiter.callback(None)

    def _topics_changed(self, names: list[str]) -> None:
        if self._coordinators is not None:
            for service in self._coordinators.services():
                service.topics_changed(names)

    def delete_topic(self, principal: Principal, name: str) -> Deferred[None]:
        """Delete a topic and its data everywhere; see ``IBroker.delete_topic``."""
        try:
            self._authorize(principal, Operation.DELETE, ResourceType.TOPIC, name)
            if self._control.topic(name) is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            return self._control.delete_topic(name)
        except Exception as error:
            return fail(broker_error(error))

    def describe_configs(self, principal: Principal, topic: str) -> Deferred[dict[str, str]]:
        """Return the topic's effective configuration; see ``IBroker.describe_configs``."""
        try:
            self._authorize(principal, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic)
            record = self._control.topic(topic)
            if record is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            effective = self._log_config(record.configs).to_mapping()
            effective.update(BROKER_TOPIC_CONFIG_DEFAULTS)
            effective.update({k: v for k, v in self._config.topic_defaults.items() if k in BROKER_TOPIC_CONFIG_DEFAULTS})
            effective.update(record.configs)
            return succeed(effective)
        except Exception as error:
            return fail(broker_error(error))

    def alter_configs(
        self, principal: Principal, topic: str, set_configs: Mapping[str, str], delete_configs: Sequence[str]
    ) -> Deferred[None]:
        """Change topic config overrides through the controller; see ``IBroker.alter_configs``."""
        try:
            self._authorize(principal, Operation.ALTER_CONFIGS, ResourceType.TOPIC, topic)
            record = self._control.topic(topic)
            if record is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            configs = {k: v for k, v in record.configs.items() if k not in set(delete_configs)}
            configs.update(set_configs)
            validate_broker_topic_configs(configs)
            self._log_config(configs)
            return self._control.alter_configs(topic, configs)
        except Exception as error:
            return fail(broker_error(error))

    def create_partitions(self, principal: Principal, topic: str, total_count: int) -> Deferred[None]:
        """Grow a topic through the controller; see ``IBroker.create_partitions``."""
        try:
            self._authorize(principal, Operation.ALTER, ResourceType.TOPIC, topic)
            record = self._control.topic(topic)
            if record is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            if not len(record.partitions) < total_count <= partitions_per_topic_max:
                raise errors.InvalidPartitionsError(
                    f"topic {topic!r} has {len(record.partitions)} partitions; the new count must be larger "
                    f"(and at most {partitions_per_topic_max}), got {total_count}"
                )
            grown = self._control.create_partitions(topic, total_count)
            grown.addCallback(lambda _: self._topics_changed([topic]))
            return grown
        except Exception as error:
            return fail(broker_error(error))

    def delete_records(self, principal: Principal, topic: str, partition: int, before_offset: int) -> Deferred[int]:
        """Advance the log start offset; see ``IBroker.delete_records``."""
        try:
            self._authorize(principal, Operation.DELETE, ResourceType.TOPIC, topic)
            partition_log = self._partition_log(topic, partition)
            high_watermark = self.high_watermark(partition_log)
            target = high_watermark if before_offset == -1 else before_offset
            if not partition_log.log_start_offset <= target <= high_watermark:
                raise errors.OffsetOutOfRangeError(
                    f"cannot delete records before {target}: {topic}-{partition} holds "
                    f"{partition_log.log_start_offset}..{high_watermark}"
                )
            partition_log.delete_records_before(target)
            return succeed(partition_log.log_start_offset)
        except Exception as error:
            return fail(broker_error(error))

    def init_producer_id(self, principal: Principal, transactional_id: str | None) -> Deferred[ProducerIdentity]:
        """Hand out a fresh producer id (blocks are reserved cluster-wide before use); epoch starts at 0."""
        try:
            self._authorize(principal, Operation.WRITE, ResourceType.CLUSTER, "kafka-cluster")
        except Exception as error:
            return fail(broker_error(error))
        if self._next_producer_id < self._producer_id_block_end:
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            return succeed(ProducerIdentity(producer_id=producer_id, producer_epoch=0))
        reserved = self._control.allocate_producer_ids(PRODUCER_ID_BLOCK_SIZE)
        reserved.addCallback(self._producer_ids_reserved)
        reserved.addCallback(lambda _: self.init_producer_id(principal, transactional_id))
        return reserved

    def describe_quorum(self, principal: Principal) -> Deferred[dict[str, Any]]:
        """The controller quorum and brokers; see ``IBroker.describe_quorum``."""
        try:
            self._authorize(principal, Operation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")
        except errors.BrokerError as error:
            return fail(error)
        return succeed(self._control.describe())

    def _producer_ids_reserved(self, first: int) -> None:
        if self._next_producer_id >= self._producer_id_block_end:
            self._next_producer_id = first
            self._producer_id_block_end = first + PRODUCER_ID_BLOCK_SIZE

    # -- consumer groups --------------------------------------------------------------------

    def start_groups(self, new_member_id: Callable[[str], str]) -> Deferred[None]:
        """Create ``__consumer_offsets`` if needed, then coordinate the groups of its partitions this broker leads.

        The topic is created (through the controller) only once ``internal_replication_factor``
        brokers are live; until then group requests answer COORDINATOR_NOT_AVAILABLE.
        """
        self._new_member_id = new_member_id
        created: Deferred[None] = succeed(None)
        if self._control.topic(OFFSETS_TOPIC) is None:
            spec = TopicSpec(name=OFFSETS_TOPIC, partitions=self._config.offsets_topic_partitions,
                             configs=dict(OFFSETS_TOPIC_CONFIGS))
            created = self._create_topic_now(spec)
            created.addErrback(lambda failure: failure.trap(errors.TopicAlreadyExistsError))
        created.addCallback(lambda _: self._sync_coordinators())
        return created

    def _sync_coordinators(self) -> None:
        """Coordinate exactly the offsets partitions this broker leads, each for its current leader epoch."""
        if self._new_member_id is None:
            return  # start_groups has not run yet
        if self._coordinators is None:
            # Created by another broker, the topic may reach this broker's image a moment after the creation returned.
            record = self._control.topic(OFFSETS_TOPIC)
            if record is None:
                return
            self._coordinators = CoordinatedPartitions(len(record.partitions))
        coordinators = self._coordinators
        for partition in range(coordinators.partition_count):
            leader = self._leaders.get((OFFSETS_TOPIC, partition))
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
        committed = leader.wait_for_high_watermark(end_offset - 1, 1, OFFSETS_COMMIT_TIMEOUT_MS)
        committed.addCallbacks(lambda _: self._serve_offsets_partition(partition, leader),
                               self._offsets_load_failed, errbackArgs=(partition, leader))

    def _offsets_load_failed(self, failure: Any, partition: int, leader: LeaderPartition) -> None:
        failure.trap(errors.BrokerError)
        if self._coordinating(partition, leader):  # timed out while still leading: keep waiting
            self._load_offsets_partition(partition, leader)

    def _coordinating(self, partition: int, leader: LeaderPartition) -> bool:
        """``leader`` still leads ``partition`` and the coordinators still expect it."""
        return (self._coordinators is not None and self._leaders.get((OFFSETS_TOPIC, partition)) is leader
                and self._coordinators.epoch_of(partition) == leader.leader_epoch and not self._stopping)

    def _serve_offsets_partition(self, partition: int, leader: LeaderPartition) -> None:
        """Replay the partition up to its high watermark and start its groups' coordinator."""
        if not self._coordinating(partition, leader):
            return
        coordinators, new_member_id = self._coordinators, self._new_member_id
        assert coordinators is not None and new_member_id is not None, "set before any partition loads"
        partition_log = self._logs.get(OFFSETS_TOPIC, partition)
        store = OffsetStore.replay(read_offsets_records(partition_log, leader.high_watermark))
        coordinator = GroupCoordinator(config=self._group_config(), partitions_per_topic=self._partitions_of,
                                       new_member_id=new_member_id, store=store, now_ms=self.now_ms())
        service = GroupService(coordinator=coordinator, clock=self._clock, append=self._append_offsets,
                               offsets_partitions=coordinators.partition_count)
        coordinators.serve(partition, leader.leader_epoch, service)
        self.log.info("coordinating the groups of {topic}-{partition} at epoch {epoch} ({count} group(s) loaded)",
                      topic=OFFSETS_TOPIC, partition=partition, epoch=leader.leader_epoch,
                      count=len(store.group_ids()))

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
        record = self._control.topic(topic)
        return len(record.partitions) if record is not None else 0

    def _append_offsets(self, partition: int, records: bytes) -> Deferred[Any]:
        """Append a coordinator batch to ``__consumer_offsets``; fires once the high watermark passes it (acks=all).

        A commit acknowledged only by the leader's disk would be lost, or go back to an older offset,
        when that leader fails before its followers copied it.
        """
        try:
            partition_log, leader = self._leader(OFFSETS_TOPIC, partition)
            min_insync = self._min_insync_replicas(OFFSETS_TOPIC)
            self._check_enough_replicas(leader, min_insync)
            appended = partition_log.append(records, self.now_ms(), leader_epoch=leader.leader_epoch)
        except Exception as error:  # storage errors become typed broker errors; others propagate
            return fail(broker_error(error)).addErrback(_leadership_lost_to_not_coordinator)
        self._appended(partition_log)
        replicated = leader.wait_for_high_watermark(appended.last_offset, min_insync, OFFSETS_COMMIT_TIMEOUT_MS)
        return replicated.addErrback(_leadership_lost_to_not_coordinator)

    def _group_call(
        self, principal: Principal, operation: Operation, group_id: str, call: Callable[[GroupService], Deferred[Any]]
    ) -> Deferred[Any]:
        """Authorize ``operation`` on the group, then hand the call to the group service."""
        try:
            self._authorize(principal, operation, ResourceType.GROUP, group_id)
            return call(self._running_coordinators().service_for(group_id))
        except errors.BrokerError as error:
            return fail(error)

    def join_group(self, principal: Principal, request: group_messages.JoinRequest) -> Deferred[Any]:
        """Join a group; see ``IBroker.join_group``."""
        return self._group_call(principal, Operation.READ, request.group_id, lambda groups: groups.join(request))

    def sync_group(self, principal: Principal, request: group_messages.MemberRequest) -> Deferred[Any]:
        """A member's assignment; see ``IBroker.sync_group``."""
        return self._group_call(principal, Operation.READ, request.group_id, lambda groups: groups.sync(request))

    def heartbeat(self, principal: Principal, request: group_messages.MemberRequest, polled: bool) -> Deferred[Any]:
        """Keep a member alive; see ``IBroker.heartbeat``."""
        return self._group_call(principal, Operation.READ, request.group_id,
                                lambda groups: groups.heartbeat(request, polled))

    def leave_group(self, principal: Principal, request: group_messages.MemberRequest) -> Deferred[Any]:
        """A member leaves; see ``IBroker.leave_group``."""
        return self._group_call(principal, Operation.READ, request.group_id, lambda groups: groups.leave(request))

    def commit_offsets(self, principal: Principal, request: group_messages.OffsetCommitRequest) -> Deferred[Any]:
        """Commit offsets durably; see ``IBroker.commit_offsets``."""
        try:
            for commit in request.offsets:
                self._authorize(principal, Operation.READ, ResourceType.TOPIC, commit.topic_partition.topic)
        except errors.BrokerError as error:
            return fail(error)
        return self._group_call(principal, Operation.READ, request.group_id, lambda groups: groups.commit(request))

    def fetch_offsets(
        self, principal: Principal, group_id: str, partitions: Sequence[TopicPartition] | None
    ) -> Deferred[Any]:
        """Committed offsets; see ``IBroker.fetch_offsets``."""
        return self._group_call(principal, Operation.DESCRIBE, group_id,
                                lambda groups: groups.fetch_offsets(group_id, partitions))

    def _running_coordinators(self) -> CoordinatedPartitions:
        if self._coordinators is None:
            raise errors.CoordinatorNotAvailableError(
                f"{OFFSETS_TOPIC} does not exist yet (it is created once "
                f"{self.internal_replication_factor()} brokers are live); retry"
            )
        return self._coordinators

    def find_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        """The broker leading the group's offsets partition; see ``IBroker.find_coordinator``."""
        try:
            self._authorize(principal, Operation.DESCRIBE, ResourceType.GROUP, group_id)
            record = self._control.topic(OFFSETS_TOPIC)
            if record is None:
                raise errors.CoordinatorNotAvailableError(
                    f"{OFFSETS_TOPIC} does not exist yet (it is created once "
                    f"{self.internal_replication_factor()} brokers are live); retry"
                )
            partition = offsets_partition(group_id, len(record.partitions))
            leader_id = record.partitions[partition].leader_id
            broker = self._control.image.brokers.get(leader_id)
            if broker is None or broker.fenced:
                raise errors.CoordinatorNotAvailableError(
                    f"{OFFSETS_TOPIC}-{partition} (group {group_id!r}) has no live leader right now; retry"
                )
            return succeed(BrokerEndpoint(node_id=broker.node_id, host=broker.host, port=broker.port,
                                          listeners=broker.listeners))
        except errors.BrokerError as error:
            return fail(error)

    def list_groups(self, principal: Principal) -> Deferred[Any]:
        """Groups coordinated here that the principal may describe; see ``IBroker.list_groups``."""
        try:
            services = self._running_coordinators().services()
        except errors.BrokerError as error:
            return fail(error)
        listed = gatherResults([service.list_groups() for service in services], consumeErrors=True)
        listed.addCallback(lambda lists: sorted(
            (g for groups in lists for g in groups
             if self._authorizer.authorize(principal, Operation.DESCRIBE, ResourceType.GROUP, g.group_id)),
            key=lambda g: g.group_id,
        ))
        return listed

    def describe_group(self, principal: Principal, group_id: str) -> Deferred[Any]:
        """A group's state and members; see ``IBroker.describe_group``."""
        return self._group_call(principal, Operation.DESCRIBE, group_id, lambda groups: groups.describe_group(group_id))

    def delete_group(self, principal: Principal, group_id: str) -> Deferred[Any]:
        """Delete an empty group and its offsets; see ``IBroker.delete_group``."""
        return self._group_call(principal, Operation.DELETE, group_id, lambda groups: groups.delete_group(group_id))

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
                end = self.high_watermark(self._logs.get(*topic_partition))
                lags[group_id, topic_partition.topic, topic_partition.partition] = max(0, end - committed.offset)
        return lags

    # -- replication ------------------------------------------------------------------------

    def _partitions_changed(self, image: MetadataImage) -> None:
        """The image changed: take up or give up leaderships, and tell the fetcher what to follow."""
        if self._stopping:
            return
        node_id, now_ms = self._config.node_id, self.now_ms()
        following: dict[tuple[str, int], tuple[int, int]] = {}
        current: set[tuple[str, int]] = set()
        local = set(self._logs.partitions())
        for topic in image.topics.values():
            for number, state in enumerate(topic.partitions):
                key = (topic.name, number)
                if key not in local or node_id not in state.replicas:
                    continue
                if state.leader_id == node_id:
                    current.add(key)
                    leader = self._leaders.get(key)
                    if leader is None or leader.leader_epoch != state.leader_epoch:
                        self._become_leader(key, state, now_ms)
                    else:
                        leader.update(state, now_ms)
                        self._replication_progress(self._logs.get(*key))
                elif state.leader_id >= 0:
                    following[key] = (state.leader_id, state.leader_epoch)
        for key in set(self._leaders) - current:
            self._resign(key)
        if self.fetcher is not None:
            self.fetcher.follow(following)
        self._sync_coordinators()
        self._wake_live_broker_waiters(image)

    def _become_leader(self, key: tuple[str, int], state: PartitionState, now_ms: int) -> None:
        old = self._leaders.get(key)
        if old is not None:
            self._resign(key)
        partition_log = self._logs.get(*key)
        # Remember where this epoch starts, so a follower asking about a later epoch we never saw is told where we differ.
        partition_log.epochs.assign(state.leader_epoch, partition_log.log_end_offset)
        start_high_watermark = min(self._follower_high_watermarks.pop(key, 0), partition_log.log_end_offset)
        leader = LeaderPartition(
            name=f"{key[0]}-{key[1]}", node_id=self._config.node_id, state=state, high_watermark=start_high_watermark,
            epoch_start_offset=partition_log.log_end_offset, clock=self._clock, now_ms=now_ms,
        )
        self._leaders[key] = leader
        self._leader_of_log[partition_log] = leader
        self.log.info("leading {partition} at epoch {epoch} (ISR {isr})", partition=leader.name,
                      epoch=state.leader_epoch, isr=state.isr)
        self._replication_progress(partition_log)

    def _resign(self, key: tuple[str, int]) -> None:
        leader = self._leaders.pop(key)
        leader.resign(errors.NotLeaderError(f"{leader.name}: leadership moved to another broker; retry there"))
        for partition_log, led in list(self._leader_of_log.items()):
            if led is leader:
                del self._leader_of_log[partition_log]
                self._follower_high_watermarks[key] = led.high_watermark
                self._wake_fetches(partition_log)

    def follower_position(self, key: tuple[str, int]) -> tuple[int, int] | None:
        """(fetch offset, last fetched leader epoch) of a partition we follow; None if we lead it or hold no log."""
        if key in self._leaders or key not in set(self._logs.partitions()):
            return None
        partition_log = self._logs.get(*key)
        return partition_log.log_end_offset, partition_log.epochs.latest_epoch

    def follower_append(self, key: tuple[str, int], result: FetchResult) -> PartitionLog | None:
        """Apply a leader's answer to our fetch: truncate where told, append the batches; return the log appended to."""
        if key in self._leaders or key not in set(self._logs.partitions()):
            return None
        partition_log = self._logs.get(*key)
        if result.diverging_end_offset >= 0:
            end_offset = partition_log.log_end_offset
            cut = truncation_offset(lambda epoch: partition_log.epochs.end_offset_for(epoch, end_offset), end_offset,
                                    result.diverging_epoch, result.diverging_end_offset)
            self.log.info("{topic}-{partition}: truncating to {offset} (diverged from the leader after epoch {epoch})",
                          topic=key[0], partition=key[1], offset=cut, epoch=result.diverging_epoch)
            partition_log.truncate_to(cut)
            return None
        appended = None
        if result.records:
            first_offset = read_header(result.records).base_offset
            if partition_log.log_start_offset == partition_log.log_end_offset > first_offset:
                # Restarted at the leader's log start, which lies inside this batch: keep the whole batch.
                partition_log.truncate_fully_and_start_at(first_offset)
            partition_log.append(result.records, self.now_ms(), assign_offsets=False)
            if result.log_start_offset > partition_log.log_start_offset:
                partition_log.delete_records_before(min(result.log_start_offset, partition_log.log_end_offset))
            appended = partition_log
        self._follower_high_watermarks[key] = min(result.high_watermark, partition_log.log_end_offset)
        return appended

    def follower_reset(self, key: tuple[str, int], leader_log_start_offset: int) -> bool:
        """The leader's log now starts above our end (retention, delete-records): empty ours and go on from its start.

        True when the log was reset (the next fetch asks from the leader's log start).
        """
        if key in self._leaders or key not in set(self._logs.partitions()):
            return False
        partition_log = self._logs.get(*key)
        if partition_log.log_end_offset >= leader_log_start_offset:
            return False
        self.log.info("{topic}-{partition}: our log ends at {end}, below the leader's log start {start}; starting "
                      "again from there", topic=key[0], partition=key[1], end=partition_log.log_end_offset,
                      start=leader_log_start_offset)
        partition_log.truncate_fully_and_start_at(leader_log_start_offset)
        return True

    def wait_durable(self, partition_log: PartitionLog) -> Deferred[None]:
        """Fire once everything appended to ``partition_log`` so far is on disk (a follower's next fetch waits)."""
        if partition_log.config.flush_policy != "sync" or partition_log.log_end_offset == 0:
            return succeed(None)
        return self._flusher.wait_durable(partition_log, partition_log.log_end_offset - 1)

    def check_isr(self) -> None:
        """Propose ISR changes for led partitions: lagging followers out, caught-up ones in."""
        now_ms = self.now_ms()
        for (topic, partition), leader in list(self._leaders.items()):
            isr = leader.replicas.isr_change(now_ms, self._config.replica_lag_time_max_ms, leader.epoch_start_offset)
            if isr is None:
                continue
            leader.replicas.propose(isr)
            self.log.info("{partition}: proposing ISR {isr} (was {old})", partition=leader.name, isr=sorted(isr),
                          old=sorted(leader.replicas.isr))
            record = AlterPartition(topic=topic, partition=partition, leader_id=self._config.node_id,
                                    leader_epoch=leader.leader_epoch, partition_epoch=leader.partition_epoch,
                                    isr=tuple(sorted(isr)))
            proposed = self._control.alter_partition(record)
            proposed.addErrback(self._isr_proposal_failed, leader)

    def _isr_proposal_failed(self, failure: Any, leader: LeaderPartition) -> None:
        failure.trap(errors.BrokerError)
        self.log.info("{partition}: ISR change not committed: {error}", partition=leader.name,
                      error=failure.getErrorMessage())
        leader.replicas.proposal_failed()

    def reassign_partition(
        self, principal: Principal, topic: str, partition: int, target_replicas: Sequence[int]
    ) -> Deferred[None]:
        """Move a partition's replicas through the controller; see ``IBroker.reassign_partition``."""
        try:
            self._authorize(principal, Operation.ALTER, ResourceType.TOPIC, topic)
            return self._control.reassign_partition(topic, partition, tuple(target_replicas))
        except Exception as error:
            return fail(broker_error(error))

    def list_reassignments(
        self, principal: Principal, topics: Sequence[str] | None
    ) -> Deferred[list[PartitionReassignment]]:
        """The reassignments in progress; see ``IBroker.list_reassignments``."""
        try:
            self._authorize(principal, Operation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster")
        except errors.BrokerError as error:
            return fail(error)
        ongoing = []
        for topic in self._control.image.topics.values():
            if topics is not None and topic.name not in topics:
                continue
            for number, state in enumerate(topic.partitions):
                if not state.target_replicas:
                    continue
                ongoing.append(PartitionReassignment(
                    topic=topic.name, partition=number, replicas=tuple(state.replicas),
                    target_replicas=tuple(state.target_replicas),
                    adding_replicas=tuple(r for r in state.target_replicas if r not in state.isr),
                    removing_replicas=tuple(r for r in state.replicas if r not in state.target_replicas),
                ))
        return succeed(ongoing)

    # -- housekeeping -----------------------------------------------------------------------

    def flush_due_logs(self) -> None:
        """Schedule fsync for logs whose interval flush policy says it is time."""
        now_ms = self.now_ms()
        for partition_log in self._all_logs():
            if partition_log.needs_flush(now_ms):
                self._flusher.request_flush(partition_log)

    def apply_retention(self) -> None:
        """Delete whole segments past retention, for every partition, never at or above the high watermark."""
        now_ms = self.now_ms()
        for partition_log in self._all_logs():
            partition_log.apply_retention(now_ms, max_offset=self.high_watermark(partition_log))

    def expire_producers(self) -> None:
        """Forget idempotent producers idle for producer_id_expiration_ms, in every partition."""
        now_ms = self.now_ms()
        for partition_log in self._all_logs():
            partition_log.expire_producers(now_ms, self._config.producer_id_expiration_ms)

    def partition_count(self) -> int:
        """Partitions this broker hosts (for metrics)."""
        return len(self._control.image.partitions_hosted(self._config.node_id))

    def log_size_bytes(self) -> int:
        """Bytes of all partition logs on disk (for metrics)."""
        return sum(p.size_bytes for p in self._all_logs())

    def stop(self) -> Deferred[None]:
        """Refuse new produces, answer waiting fetches, wait for the last fsync round."""
        self._stopping = True
        if self.fetcher is not None:
            self.fetcher.follow({})
        for key in list(self._leaders):
            self._resign(key)
        if self._coordinators is not None:
            self._coordinators.stop()
        waiters, self._live_broker_waiters = self._live_broker_waiters, []
        for _, waiter in waiters:
            waiter.errback(errors.BrokerShuttingDownError("the broker is shutting down"))
        for waiters in list(self._fetch_waiters.values()):
            for pending in list(waiters):
                pending.complete()
        for partition_log in self._all_logs():
            self._flusher.request_flush(partition_log)
        return self._flusher.drain()


def _leadership_lost_to_not_coordinator(failure: Any) -> Any:
    """An offsets append that lost its partition's leadership means this broker no longer coordinates the group."""
    failure.trap(errors.NotLeaderError, errors.FencedLeaderEpochError)
    raise errors.NotCoordinatorError(f"{failure.getErrorMessage()} (the group's coordinator moved; find it again)")


class _PendingFetch:
    """A long-poll fetch waiting for ``min_bytes`` or its timer."""

    __slots__ = ("broker", "principal", "positions", "logs", "min_bytes", "max_bytes", "deferred", "timer", "replica_id")

    def __init__(
        self, broker: Broker, principal: Principal, positions: Sequence[FetchPosition], min_bytes: int, max_bytes: int,
        replica_id: int = -1,
    ) -> None:
        self.broker = broker
        self.replica_id = replica_id
        self.principal = principal
        self.positions = positions
        self.logs: list[PartitionLog] = []
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.deferred: Deferred[list[FetchResult]] = Deferred()
        self.timer: IDelayedCall | None = None

    def try_complete(self) -> None:
        """Answer now if enough data has become visible."""
        results = self.broker._read_all(self.principal, self.positions, self.max_bytes, self.replica_id)
        if sum(len(r.records) for r in results) >= max(self.min_bytes, 1) or any(r.error for r in results):
            self._finish(results)

    def complete(self) -> None:
        """Answer with whatever is there (timer expiry or shutdown)."""
        if not self.deferred.called:
            self._finish(self.broker._read_all(self.principal, self.positions, self.max_bytes, self.replica_id))

    def _finish(self, results: list[FetchResult]) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.broker._forget_fetch(self)
        self.deferred.callback(results)


