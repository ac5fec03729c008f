"""The broker core: one protocol-independent implementation of ``IBroker``.

"tx-light": it returns Deferreds and schedules through an injected clock, but does no I/O of
its own beyond calling the storage library (appends on this thread, fsync through the
``Flusher``'s thread pool). The produce and fetch paths handle whole record batches: no
per-record work happens here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from mqbroker import errors
from mqbroker.catalog import (
    BROKER_TOPIC_CONFIG_DEFAULTS,
    PRODUCER_ID_BLOCK_SIZE,
    TopicCatalog,
    TopicRecord,
    log_config_for,
    validate_broker_topic_configs,
    validate_topic_name,
)
from mqbroker.config import BrokerConfig
from mqbroker.flusher import Flusher
from mqbroker.group_service import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_CONFIGS,
    GroupService,
    read_offsets_records,
)
from mqbroker.groups import messages as group_messages
from mqbroker.groups.coordinator import GroupCoordinator
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import OffsetStore
from mqbroker.interfaces import IAuthorizer, IBroker
from mqbroker.limits import fetch_response_bytes_max, fetch_wait_ms_max, partitions_per_topic_max
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
from mqbroker.storage.manager import LogManager

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
        catalog: TopicCatalog,
        save_catalog: Callable[[TopicCatalog], None],
        flusher_factory: Callable[[Callable[[Iterable[PartitionLog]], None]], Flusher],
        authorizer: IAuthorizer,
    ) -> None:
        self._config = config
        self._clock = clock
        self._logs = logs
        self._catalog = catalog
        self._save_catalog = save_catalog
        self._authorizer = authorizer
        self._flusher = flusher_factory(self._on_durable)
        self._fetch_waiters: dict[PartitionLog, set[_PendingFetch]] = {}
        self._next_producer_id = catalog.producer_id_block_end
        self._stopping = False
        self._groups: GroupService | None = None
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
        return [self._logs.get(topic, partition) for topic, partition in self._logs.partitions()]

    def _partition_log(self, topic: str, partition: int, auto_create: bool = False) -> PartitionLog:
        record = self._catalog.topics.get(topic)
        if record is None and auto_create and self._config.auto_create_topics:
            record = self._create_topic_now(TopicSpec(name=topic))
        if record is None:
            raise errors.UnknownTopicOrPartitionError(
                f"topic {topic!r} does not exist; create it with `mqbroker topics create {topic}` "
                "or enable auto_create_topics"
            )
        if not 0 <= partition < record.partitions:
            raise errors.UnknownTopicOrPartitionError(
                f"topic {topic!r} has partitions 0..{record.partitions - 1}; partition {partition} does not exist"
            )
        return self._logs.get(topic, partition)

    def high_watermark(self, partition_log: PartitionLog) -> int:
        """The end of what consumers may see: durable data under the sync policy."""
        if partition_log.config.flush_policy == "sync":
            return partition_log.durable_end_offset
        return partition_log.log_end_offset

    # -- produce ---------------------------------------------------------------------------

    def produce(
        self, principal: Principal, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int
    ) -> Deferred[ProduceResult]:
        """Append a client's batches; see ``IBroker.produce``."""
        try:
            if self._stopping:
                raise errors.BrokerShuttingDownError("the broker is shutting down; retry on another broker")
            if acks not in (0, 1, -1):
                raise errors.InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {acks}")
            self._authorize(principal, Operation.WRITE, ResourceType.TOPIC, topic)
            partition_log = self._partition_log(topic, partition, auto_create=True)
            appended = partition_log.append(records, self.now_ms())
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
        if partition_log.config.flush_policy != "sync":
            self._wake_fetches(partition_log)
            return succeed(result)
        if acks == 0:
            self._flusher.request_flush(partition_log)
            return succeed(result)
        durable = self._flusher.wait_durable(partition_log, appended.last_offset)
        durable.addCallback(lambda _: result)
        return durable

    def _on_durable(self, logs: Iterable[PartitionLog]) -> None:
        for partition_log in logs:
            self._wake_fetches(partition_log)

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
        max_bytes = min(max_bytes, fetch_response_bytes_max) if max_bytes > 0 else fetch_response_bytes_max
        results = self._read_all(principal, positions, max_bytes)
        available = sum(len(r.records) for r in results)
        if max_wait_ms <= 0 or available >= max(min_bytes, 1) or any(r.error for r in results):
            return succeed(results)
        pending = _PendingFetch(self, principal, positions, min_bytes, max_bytes)
        pending.logs = [self._partition_log(p.topic, p.partition) for p in positions]
        for partition_log in pending.logs:
            self._fetch_waiters.setdefault(partition_log, set()).add(pending)
        pending.timer = self._clock.callLater(min(max_wait_ms, fetch_wait_ms_max) / 1000.0, pending.complete)
        return pending.deferred

    def _read_all(self, principal: Principal, positions: Sequence[FetchPosition], max_bytes: int) -> list[FetchResult]:
        results = []
        remaining = max_bytes
        for position in positions:
            result = self._read_one(principal, position, remaining, first=not results)
            remaining = max(0, remaining - len(result.records))
            results.append(result)
        return results

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

    def _wake_fetches(self, partition_log: PartitionLog) -> None:
        waiters = self._fetch_waiters.get(partition_log)
        if waiters:
            for pending in list(waiters):
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
        """Describe this broker and the topics; see ``IBroker.metadata``."""
        node_id = self._config.node_id
        names = sorted(self._catalog.topics) if topics is None else list(topics)
        described = []
        for name in names:
            try:
                self._authorize(principal, Operation.DESCRIBE, ResourceType.TOPIC, name)
                record = self._catalog.topics.get(name)
                if record is None and allow_auto_create and self._config.auto_create_topics:
                    validate_topic_name(name)
                    record = self._create_topic_now(TopicSpec(name=name))
                if record is None:
                    raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                partitions = tuple(
                    PartitionMetadata(partition=p, leader_id=node_id, leader_epoch=0, replicas=(node_id,), isr=(node_id,))
                    for p in range(record.partitions)
                )
                described.append(TopicMetadata(name=name, partitions=partitions, internal=name.startswith("__")))
            except errors.BrokerError as error:
                described.append(TopicMetadata(name=name, error=error))
        brokers = (BrokerEndpoint(node_id=node_id, host=self._config.public_host, port=self._config.native_port),)
        return succeed(ClusterMetadata(
            cluster_id=self._config.cluster_id, controller_id=node_id, brokers=brokers, topics=tuple(described)
        ))

    # -- admin ------------------------------------------------------------------------------

    def create_topic(self, principal: Principal, spec: TopicSpec, validate_only: bool) -> Deferred[None]:
        """Create a topic; see ``IBroker.create_topic``."""
        try:
            self._authorize(principal, Operation.CREATE, ResourceType.TOPIC, spec.name)
            if spec.name in self._catalog.topics:
                raise errors.TopicAlreadyExistsError(f"topic {spec.name!r} already exists")
            self._check_topic_spec(spec)
            if not validate_only:
                self._create_topic_now(spec)
            return succeed(None)
        except Exception as error:
            return fail(broker_error(error))

    def _check_topic_spec(self, spec: TopicSpec) -> None:
        validate_topic_name(spec.name)
        partitions = self._config.default_partitions if spec.partitions == -1 else spec.partitions
        if not 1 <= partitions <= partitions_per_topic_max:
            raise errors.InvalidPartitionsError(f"a topic needs 1..{partitions_per_topic_max} partitions, got {partitions}")
        replication = self._config.default_replication_factor if spec.replication_factor == -1 else spec.replication_factor
        if replication != 1:
            raise errors.InvalidReplicationFactorError(
                f"replication factor {replication} is larger than the 1 available broker"
            )
        validate_broker_topic_configs(spec.configs)
        self._log_config(spec.configs)

    def _create_topic_now(self, spec: TopicSpec) -> TopicRecord:
        self._check_topic_spec(spec)
        partitions = self._config.default_partitions if spec.partitions == -1 else spec.partitions
        record = TopicRecord(name=spec.name, partitions=partitions, configs=dict(spec.configs))
        log_config = self._log_config(record.configs)
        for partition in range(partitions):
            self._logs.create(spec.name, partition, log_config, self.now_ms())
        self._catalog.add(record)
        self._save_catalog(self._catalog)
        self.log.info("created topic {topic} with {partitions} partition(s)", topic=spec.name, partitions=partitions)
        return record

    def delete_topic(self, principal: Principal, name: str) -> Deferred[None]:
        """Delete a topic and its data; see ``IBroker.delete_topic``."""
        try:
            self._authorize(principal, Operation.DELETE, ResourceType.TOPIC, name)
            record = self._catalog.topics.get(name)
            if record is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            doomed = [self._partition_log(name, partition) for partition in range(record.partitions)]
            self._catalog.remove(name)
            self._save_catalog(self._catalog)
            for partition, partition_log in enumerate(doomed):
                self._wake_fetches(partition_log)  # waiting fetches now answer UNKNOWN_TOPIC_OR_PARTITION
                self._logs.delete(name, partition)
            self.log.info("deleted topic {topic}", topic=name)
            return succeed(None)
        except Exception as error:
            return fail(broker_error(error))

    def describe_configs(self, principal: Principal, topic: str) -> Deferred[dict[str, str]]:
        """Return the topic's effective configuration; see ``IBroker.describe_configs``."""
        try:
            self._authorize(principal, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic)
            record = self._catalog.topics.get(topic)
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
        """Change topic config overrides; see ``IBroker.alter_configs``."""
        try:
            self._authorize(principal, Operation.ALTER_CONFIGS, ResourceType.TOPIC, topic)
            record = self._catalog.topics.get(topic)
            if record is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            configs = {k: v for k, v in record.configs.items() if k not in set(delete_configs)}
            configs.update(set_configs)
            validate_broker_topic_configs(configs)
            log_config = self._log_config(configs)
            self._catalog.set_configs(topic, configs)
            self._save_catalog(self._catalog)
            for partition in range(record.partitions):
                self._partition_log(topic, partition).reconfigure(log_config)
            return succeed(None)
        except Exception as error:
            return fail(broker_error(error))

    def create_partitions(self, principal: Principal, topic: str, total_count: int) -> Deferred[None]:
        """Grow a topic; see ``IBroker.create_partitions``."""
        try:
            self._authorize(principal, Operation.ALTER, ResourceType.TOPIC, topic)
            record = self._catalog.topics.get(topic)
            if record is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
            if not record.partitions < total_count <= partitions_per_topic_max:
                raise errors.InvalidPartitionsError(
                    f"topic {topic!r} has {record.partitions} partitions; the new count must be larger "
                    f"(and at most {partitions_per_topic_max}), got {total_count}"
                )
            log_config = self._log_config(record.configs)
            for partition in range(record.partitions, total_count):
                self._logs.create(topic, partition, log_config, self.now_ms())
            self._catalog.set_partitions(topic, total_count)
            self._save_catalog(self._catalog)
            if self._groups is not None:
                self._groups.topics_changed([topic])
            return succeed(None)
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
        """Hand out a fresh producer id (blocks are persisted before use); epoch starts at 0."""
        try:
            self._authorize(principal, Operation.WRITE, ResourceType.CLUSTER, "kafka-cluster")
            if self._next_producer_id >= self._catalog.producer_id_block_end:
                self._catalog.producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK_SIZE
                self._save_catalog(self._catalog)
            producer_id = self._next_producer_id
            self._next_producer_id += 1
            return succeed(ProducerIdentity(producer_id=producer_id, producer_epoch=0))
        except Exception as error:
            return fail(broker_error(error))

    # -- consumer groups --------------------------------------------------------------------

    def start_groups(self, new_member_id: Callable[[str], str]) -> None:
        """Create ``__consumer_offsets`` if needed, replay it, and start coordinating groups."""
        config = self._config
        record = self._catalog.topics.get(OFFSETS_TOPIC)
        if record is None:
            spec = TopicSpec(name=OFFSETS_TOPIC, partitions=config.offsets_topic_partitions,
                             configs=dict(OFFSETS_TOPIC_CONFIGS))
            record = self._create_topic_now(spec)
        logs = [self._logs.get(OFFSETS_TOPIC, partition) for partition in range(record.partitions)]
        store = OffsetStore.replay(item for partition_log in logs for item in read_offsets_records(partition_log))
        group_config = group_messages.GroupConfig(
            session_timeout_ms_min=config.group_min_session_timeout_ms,
            session_timeout_ms_max=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            offsets_retention_ms=config.offsets_retention_ms,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
        )
        coordinator = GroupCoordinator(config=group_config, partitions_per_topic=self._partitions_of,
                                       new_member_id=new_member_id, store=store, now_ms=self.now_ms())
        self._groups = GroupService(coordinator=coordinator, clock=self._clock, append=self._append_offsets,
                                    offsets_partitions=record.partitions)

    def _partitions_of(self, topic: str) -> int:
        record = self._catalog.topics.get(topic)
        return record.partitions if record is not None else 0

    def _append_offsets(self, partition: int, records: bytes) -> Deferred[Any]:
        """Append a coordinator batch to ``__consumer_offsets``; fires once durable (acks = all)."""
        try:
            partition_log = self._partition_log(OFFSETS_TOPIC, partition)
            appended = partition_log.append(records, self.now_ms())
        except Exception as error:  # storage errors become typed broker errors; others propagate
            return fail(broker_error(error))
        if partition_log.config.flush_policy != "sync":
            return succeed(None)
        return self._flusher.wait_durable(partition_log, appended.last_offset)

    def _group_call(
        self, principal: Principal, operation: Operation, group_id: str, call: Callable[[GroupService], Deferred[Any]]
    ) -> Deferred[Any]:
        """Authorize ``operation`` on the group, then hand the call to the group service."""
        try:
            self._authorize(principal, operation, ResourceType.GROUP, group_id)
            if self._groups is None:
                raise errors.CoordinatorNotAvailableError("the group coordinator is not running yet; retry")
            return call(self._groups)
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

    def list_groups(self, principal: Principal) -> Deferred[Any]:
        """Groups the principal may describe; see ``IBroker.list_groups``."""
        if self._groups is None:
            return fail(errors.CoordinatorNotAvailableError("the group coordinator is not running yet; retry"))
        listed = self._groups.list_groups()
        listed.addCallback(lambda groups: [g for g in groups if self._authorizer.authorize(
            principal, Operation.DESCRIBE, ResourceType.GROUP, g.group_id)])
        return listed

    def describe_group(self, principal: Principal, group_id: str) -> Deferred[Any]:
        """A group's state and members; see ``IBroker.describe_group``."""
        return self._group_call(principal, Operation.DESCRIBE, group_id, lambda groups: groups.describe_group(group_id))

    def delete_group(self, principal: Principal, group_id: str) -> Deferred[Any]:
        """Delete an empty group and its offsets; see ``IBroker.delete_group``."""
        return self._group_call(principal, Operation.DELETE, group_id, lambda groups: groups.delete_group(group_id))

    def group_lags(self) -> dict[tuple[str, str, int], int]:
        """Lag per (group, topic, partition) with a committed offset: high watermark minus committed (metrics)."""
        if self._groups is None:
            return {}
        lags = {}
        for group_id, offsets in self._groups.committed_offsets().items():
            for topic_partition, committed in offsets.items():
                if committed is None or self._partitions_of(topic_partition.topic) <= topic_partition.partition:
                    continue
                end = self.high_watermark(self._logs.get(*topic_partition))
                lags[group_id, topic_partition.topic, topic_partition.partition] = max(0, end - committed.offset)
        return lags

    # -- housekeeping -----------------------------------------------------------------------

    def flush_due_logs(self) -> None:
        """Schedule fsync for logs whose interval flush policy says it is time."""
        now_ms = self.now_ms()
        for partition_log in self._all_logs():
            if partition_log.needs_flush(now_ms):
                self._flusher.request_flush(partition_log)

    def apply_retention(self) -> None:
        """Delete whole segments past retention, for every partition."""
        now_ms = self.now_ms()
        for partition_log in self._all_logs():
            partition_log.apply_retention(now_ms)

    def partition_count(self) -> int:
        """Partitions this broker hosts (for metrics)."""
        return sum(t.partitions for t in self._catalog.topics.values())

    def log_size_bytes(self) -> int:
        """Bytes of all partition logs on disk (for metrics)."""
        return sum(p.size_bytes for p in self._all_logs())

    def stop(self) -> Deferred[None]:
        """Refuse new produces, answer waiting fetches, wait for the last fsync round."""
        self._stopping = True
        if self._groups is not None:
            self._groups.stop()
        for waiters in list(self._fetch_waiters.values()):
            for pending in list(waiters):
                pending.complete()
        for partition_log in self._all_logs():
            self._flusher.request_flush(partition_log)
        return self._flusher.drain()


class _PendingFetch:
    """A long-poll fetch waiting for ``min_bytes`` or its timer."""

    __slots__ = ("broker", "principal", "positions", "logs", "min_bytes", "max_bytes", "deferred", "timer")

    def __init__(
        self, broker: Broker, principal: Principal, positions: Sequence[FetchPosition], min_bytes: int, max_bytes: int
    ) -> None:
        self.broker = broker
        self.principal = principal
        self.positions = positions
        self.logs: list[PartitionLog] = []
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.deferred: Deferred[list[FetchResult]] = Deferred()
        self.timer: IDelayedCall | None = None

    def try_complete(self) -> None:
        """Answer now if enough data has become visible."""
        results = self.broker._read_all(self.principal, self.positions, self.max_bytes)
        if sum(len(r.records) for r in results) >= max(self.min_bytes, 1) or any(r.error for r in results):
            self._finish(results)

    def complete(self) -> None:
        """Answer with whatever is there (timer expiry or shutdown)."""
        if not self.deferred.called:
            self._finish(self.broker._read_all(self.principal, self.positions, self.max_bytes))

    def _finish(self, results: list[FetchResult]) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        self.broker._forget_fetch(self)
        self.deferred.callback(results)


