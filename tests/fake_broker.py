"""One in-memory ``IBroker`` for the front ends' tests: real record-batch logs, long polls, scripted answers.

``FakeBroker`` keeps each partition as a list of stamped RecordBatch v2 batches, appended by
``produce`` (or by the test, with ``append``) exactly as the broker stamps them. Reads follow the
broker's rules: a fetch returns whole batches below the high watermark from the batch holding its
offset; with ``durable_at_once=False`` the high watermark moves only when the test calls ``sync``
(the fsync), and a long poll waits for it (or for ``wait_ms_max`` on the clock, if there is one).
Principals are checked with the ``authorizer`` the way the core checks them.

Everything else is scripted: ``script(call, *answers, topic=...)`` makes the next calls answer
with those values, Deferreds or exceptions before the modelled behaviour; a call the fake does
not model and nobody scripted fails with ``InvalidRequestError`` naming it. Every call is
recorded in ``calls`` as ``(name, principal, *arguments)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from zope.interface import implementer

from mqbroker import errors
from mqbroker.core.topic_config import TopicConfigLayers
from mqbroker.groups import messages as group_messages
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import CommittedOffset
from mqbroker.interfaces import IAuthorizer, IBroker
from mqbroker.model import (
    CLUSTER_RESOURCE,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Acks,
    BrokerEndpoint,
    ClusterMetadata,
    FetchPosition,
    FetchRequest,
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
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.header import iter_batches, read_header, stamp
from mqbroker.security.acl import Acl, AllowEverything
from mqbroker.security.scram import ScramMechanism, ScramUpsertion
from mqbroker.shares import messages as share_messages

_DENIED = {ResourceType.TOPIC: errors.TopicAuthorizationError, ResourceType.GROUP: errors.GroupAuthorizationError,
           ResourceType.CLUSTER: errors.ClusterAuthorizationError}


@dataclass
class FakeLog:
    """One partition: stamped batches (base offset, bytes), its end and its high watermark."""

    batches: list[tuple[int, bytes]] = field(default_factory=list)
    log_end: int = 0
    high_watermark: int = 0
    log_start: int = 0

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches below the high watermark from the one holding ``offset``; the first always fits."""
        chosen: list[bytes] = []
        size = 0
        for base, batch in self.batches:
            last = base + read_header(batch).last_offset_delta
            if last < offset or base >= self.high_watermark:
                continue
            if chosen and size + len(batch) > max_bytes:
                break
            chosen.append(batch)
            size += len(batch)
        return b"".join(chosen)


@dataclass
class _PendingFetch:
    request: FetchRequest
    deferred: Deferred[list[FetchResult]]
    timer: IDelayedCall | None = None


@dataclass
class _PendingNotice:
    ready: Callable[[], bool]
    deferred: Deferred[bool]
    timer: IDelayedCall | None = None


@implementer(IBroker)
class FakeBroker:
    """An in-memory ``IBroker``: partition logs, long polls, authorization, scripted answers (see the module)."""

    def __init__(self, *, clock: IReactorTime | None = None, authorizer: IAuthorizer | None = None,
                 durable_at_once: bool = True, node: BrokerEndpoint | None = None) -> None:
        self.clock = clock
        self.authorizer = authorizer or AllowEverything()
        self.durable_at_once = durable_at_once
        self.node = node or BrokerEndpoint(node_id=1, host="127.0.0.1", port=9393)
        self.logs: dict[tuple[str, int], FakeLog] = {}
        self.topic_configs: dict[str, dict[str, str]] = {}
        #: Dynamic topic defaults by entity ("" the cluster's, else a broker id), as the metadata image holds them.
        self.broker_configs: dict[str, dict[str, str]] = {}
        self.calls: list[tuple[Any, ...]] = []
        #: While True, produces are appended but their Deferreds wait in ``held_produces`` (a slow leader).
        self.hold_produces = False
        self.held_produces: list[Deferred[ProduceResult]] = []
        self._scripts: dict[tuple[str, str | None], list[Any]] = {}
        self._pending: list[_PendingFetch] = []
        self._notices: list[_PendingNotice] = []
        self._next_producer_id = 1000
        #: SCRAM users by name (their passwords: the fake keeps no credentials) and ACLs.
        self.users: dict[str, str] = {}
        #: Each user's SCRAM iterations per mechanism, as ``alter_scram_credentials`` set them.
        self.scram: dict[str, dict[ScramMechanism, int]] = {}
        self.acls: list[Acl] = []

    # -- driving the fake ------------------------------------------------------------------

    def script(self, call: str, *answers: Any, topic: str | None = None) -> None:
        """The next calls of ``call`` (on ``topic``, or any) answer these, in order, before the model does."""
        self._scripts.setdefault((call, topic), []).extend(answers)

    def add_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> None:
        """Make a topic (empty partitions) as if an admin had created it."""
        for partition in range(partitions):
            self.logs.setdefault((name, partition), FakeLog())
        self.topic_configs.setdefault(name, dict(configs or {}))

    def append(self, topic: str, records: bytes, partition: int = 0) -> int:
        """Append batches as another client would (durable at once or at ``sync``); their base offset."""
        if (topic, partition) not in self.logs:
            self.add_topic(topic, partition + 1)
        log = self.logs[(topic, partition)]
        base = log.log_end
        for position, header in iter_batches(records, check=False):
            batch = bytearray(records[position : position + header.size_bytes])
            stamp(batch, 0, log.log_end, 0)
            log.batches.append((log.log_end, bytes(batch)))
            log.log_end += header.last_offset_delta + 1
        if self.durable_at_once:
            log.high_watermark = log.log_end
            self._wake()
        return base

    def append_records(self, topic: str, entries: Sequence[tuple[bytes | None, bytes | None]], partition: int = 0) -> int:
        """Append (key, value) records as one batch; its base offset."""
        builder = BatchBuilder()
        for key, value in entries:
            builder.append(0, key, value)
        return self.append(topic, builder.build(), partition)

    def sync(self) -> None:
        """The fsync: everything appended is durable; waiting fetches answer."""
        for log in self.logs.values():
            log.high_watermark = log.log_end
        self._wake()

    def calls_of(self, name: str) -> list[tuple[Any, ...]]:
        """The recorded calls of ``name``, without the name."""
        return [call[1:] for call in self.calls if call[0] == name]

    # -- the broker API --------------------------------------------------------------------

    def produce(self, principal: Principal, topic: str, partition: int, records: bytes, acks: Acks,
                timeout_ms: int, transactional_id: str | None = None, front_end_batches: bool = False,
                add_to_transaction: bool = False) -> Deferred[ProduceResult]:
        """Append at once (creating the topic); fire as the acks say (``hold_produces``: never, until the test)."""
        assert isinstance(acks, Acks), acks
        self.calls.append(("produce", principal, topic, partition, records, acks, timeout_ms))
        return self._scripted("produce", topic) or self._guarded(lambda: self._produce(principal, topic, partition,
                                                                                       records))

    def _produce(self, principal: Principal, topic: str, partition: int, records: bytes) -> Deferred[ProduceResult]:
        self._require(principal, Operation.WRITE, ResourceType.TOPIC, topic)
        base = self.append(topic, records, partition)
        log = self.logs[(topic, partition)]
        result = ProduceResult(base_offset=base, last_offset=log.log_end - 1, log_append_time_ms=-1,
                               log_start_offset=log.log_start)
        if self.hold_produces:
            held: Deferred[ProduceResult] = Deferred()
            self.held_produces.append(held)
            return held
        return succeed(result)

    def fetch(self, principal: Principal, request: FetchRequest) -> Deferred[list[FetchResult]]:
        """Whole batches below the high watermark; a long poll waits for ``response_bytes_min`` (see the module)."""
        assert isinstance(request, FetchRequest), request
        self.calls.append(("fetch", principal, request))
        topic = request.positions[0].topic if request.positions else None
        return self._scripted("fetch", topic) or self._guarded(lambda: self._fetch(principal, request))

    def wait_for_records(self, principal: Principal, topic: str, partition: int, position: Callable[[], int],
                         wait_ms_max: int, isolation_level: int = 0) -> Deferred[bool]:
        """True once a fetch from ``position()`` (asked at every wake) would find records or an error, False at
        ``wait_ms_max`` on the clock; see ``IBroker.wait_for_records``."""
        self.calls.append(("wait_for_records", principal, topic, partition))

        def ready() -> bool:
            found = self._read_one(FetchPosition(topic=topic, partition=partition, offset=position(), max_bytes=1))
            return bool(found.records) or found.error is not None

        return self._scripted("wait_for_records", topic) or self._guarded(
            lambda: self._notice(principal, topic, ready, wait_ms_max))

    def _notice(self, principal: Principal, topic: str, ready: Callable[[], bool], wait_ms_max: int) -> Deferred[bool]:
        self._require(principal, Operation.READ, ResourceType.TOPIC, topic)
        if wait_ms_max <= 0 or ready():
            return succeed(True)
        notice = _PendingNotice(ready, Deferred())
        if self.clock is not None:
            notice.timer = self.clock.callLater(wait_ms_max / 1000.0, self._notify, notice, False)
        self._notices.append(notice)
        return notice.deferred

    def _notify(self, notice: _PendingNotice, answer: bool) -> None:
        self._notices.remove(notice)
        if notice.timer is not None and notice.timer.active():
            notice.timer.cancel()
        notice.deferred.callback(answer)

    def replica_fetch(self, principal: Principal, replica_id: int, request: FetchRequest) -> Deferred[list[FetchResult]]:
        """Only scripted: followers are the core's business."""
        self.calls.append(("replica_fetch", principal, replica_id, request))
        return self._scripted("replica_fetch", None) or self._unmodelled("replica_fetch")

    def _fetch(self, principal: Principal, request: FetchRequest) -> Deferred[list[FetchResult]]:
        for position in request.positions:
            self._require(principal, Operation.READ, ResourceType.TOPIC, position.topic)
        results = self._read(request)
        if request.wait_ms_max <= 0 or self._enough(request, results):
            return succeed(results)
        pending = _PendingFetch(request, Deferred())
        if self.clock is not None:
            pending.timer = self.clock.callLater(request.wait_ms_max / 1000.0, self._answer, pending)
        self._pending.append(pending)
        return pending.deferred

    def _read(self, request: FetchRequest) -> list[FetchResult]:
        return [self._read_one(position) for position in request.positions]

    def _read_one(self, position: FetchPosition) -> FetchResult:
        log = self.logs.get((position.topic, position.partition))
        if log is None:
            return FetchResult(topic=position.topic, partition=position.partition,
                               error=errors.UnknownTopicOrPartitionError(f"{position.topic}-{position.partition}"))
        if not log.log_start <= position.offset <= log.log_end:
            return FetchResult(topic=position.topic, partition=position.partition, high_watermark=log.high_watermark,
                               log_start_offset=log.log_start, error=errors.OffsetOutOfRangeError(
                                   f"offset {position.offset} is outside {log.log_start}..{log.log_end}"))
        return FetchResult(topic=position.topic, partition=position.partition,
                           records=log.read(position.offset, position.max_bytes), high_watermark=log.high_watermark,
                           log_start_offset=log.log_start)

    @staticmethod
    def _enough(request: FetchRequest, results: list[FetchResult]) -> bool:
        return (sum(len(result.records) for result in results) >= max(request.response_bytes_min, 1)
                or any(result.error is not None for result in results))

    def _wake(self) -> None:
        for pending in list(self._pending):
            if self._enough(pending.request, self._read(pending.request)):
                self._answer(pending)
        for notice in list(self._notices):
            if notice.ready():
                self._notify(notice, True)

    def _answer(self, pending: _PendingFetch) -> None:
        if pending in self._pending:
            self._pending.remove(pending)
            if pending.timer is not None and pending.timer.active():
                pending.timer.cancel()
            pending.deferred.callback(self._read(pending.request))

    def list_offset(self, principal: Principal, topic: str, partition: int,
                    timestamp_ms: int, isolation_level: int = 0) -> Deferred[OffsetAndTimestamp]:
        """The log start (-2) or the high watermark (-1); no time index: -1 for a timestamp."""
        self.calls.append(("list_offset", principal, topic, partition, timestamp_ms))
        return self._scripted("list_offset", topic) or self._guarded(
            lambda: self._list_offset(principal, topic, partition, timestamp_ms))

    def _list_offset(self, principal: Principal, topic: str, partition: int,
                     timestamp_ms: int) -> Deferred[OffsetAndTimestamp]:
        self._require(principal, Operation.DESCRIBE, ResourceType.TOPIC, topic)
        log = self._log(topic, partition)
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return succeed(OffsetAndTimestamp(offset=log.log_start))
        if timestamp_ms == LATEST_TIMESTAMP:
            return succeed(OffsetAndTimestamp(offset=log.high_watermark))
        return succeed(OffsetAndTimestamp(offset=-1))

    def metadata(self, principal: Principal, topics: Sequence[str] | None,
                 allow_auto_create: bool) -> Deferred[ClusterMetadata]:
        """This one broker, and each named topic's partitions (an unknown one carries its error)."""
        self.calls.append(("metadata", principal, topics, allow_auto_create))
        return self._scripted("metadata", None) or succeed(self._metadata(topics))

    def _metadata(self, topics: Sequence[str] | None) -> ClusterMetadata:
        names = sorted(self.topic_configs) if topics is None else list(topics)
        described = []
        for name in names:
            count = sum(1 for topic, _ in self.logs if topic == name)
            if not count:
                described.append(TopicMetadata(name=name, error=errors.UnknownTopicOrPartitionError(name)))
                continue
            described.append(TopicMetadata(name=name, internal=name.startswith("__"), partitions=tuple(
                PartitionMetadata(partition=partition, leader_id=self.node.node_id, leader_epoch=0,
                                  replicas=(self.node.node_id,), isr=(self.node.node_id,))
                for partition in range(count))))
        return ClusterMetadata(cluster_id="fake", controller_id=self.node.node_id, brokers=(self.node,),
                               topics=tuple(described))

    def create_topic(self, principal: Principal, spec: TopicSpec, validate_only: bool) -> Deferred[None]:
        """Make the topic (1 partition by default); TOPIC_ALREADY_EXISTS if it is there."""
        self.calls.append(("create_topic", principal, spec, validate_only))
        return self._scripted("create_topic", spec.name) or self._guarded(lambda: self._create_topic(principal, spec,
                                                                                                    validate_only))

    def _create_topic(self, principal: Principal, spec: TopicSpec, validate_only: bool) -> Deferred[None]:
        self._require(principal, Operation.CREATE, ResourceType.TOPIC, spec.name)
        if spec.name in self.topic_configs:
            raise errors.TopicAlreadyExistsError(f"topic {spec.name!r} already exists")
        if not validate_only:
            self.add_topic(spec.name, spec.partitions if spec.partitions > 0 else 1, spec.configs)
        return succeed(None)

    def delete_topic(self, principal: Principal, name: str) -> Deferred[None]:
        """Drop the topic and its logs."""
        self.calls.append(("delete_topic", principal, name))
        return self._scripted("delete_topic", name) or self._guarded(lambda: self._delete_topic(principal, name))

    def _delete_topic(self, principal: Principal, name: str) -> Deferred[None]:
        self._require(principal, Operation.DELETE, ResourceType.TOPIC, name)
        if self.topic_configs.pop(name, None) is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        for key in [key for key in self.logs if key[0] == name]:
            del self.logs[key]
        return succeed(None)

    def describe_configs(self, principal: Principal, topic: str) -> Deferred[dict[str, str]]:
        """The topic's overrides (the fake has no defaults)."""
        self.calls.append(("describe_configs", principal, topic))
        return self._scripted("describe_configs", topic) or self._guarded(
            lambda: succeed(dict(self._configs(topic))))

    def alter_configs(self, principal: Principal, topic: str, set_configs: Mapping[str, str],
                      delete_configs: Sequence[str]) -> Deferred[None]:
        """Set and reset overrides."""
        self.calls.append(("alter_configs", principal, topic, set_configs, delete_configs))

        def alter() -> Deferred[None]:
            configs = self._configs(topic)
            configs.update(set_configs)
            for key in delete_configs:
                configs.pop(key, None)
            return succeed(None)

        return self._scripted("alter_configs", topic) or self._guarded(alter)

    def describe_config_layers(self, principal: Principal, topic: str | None) -> Deferred[TopicConfigLayers]:
        """The topic's overrides over the dynamic defaults (the fake has no static ones)."""
        self.calls.append(("describe_config_layers", principal, topic))
        return self._scripted("describe_config_layers", topic) or self._guarded(lambda: succeed(TopicConfigLayers.of(
            {}, self.broker_configs, self.node.node_id, {} if topic is None else self._configs(topic))))

    def alter_broker_configs(self, principal: Principal, broker_id: int | None, set_configs: Mapping[str, str],
                             delete_configs: Sequence[str], validate_only: bool = False) -> Deferred[None]:
        """Set and reset dynamic defaults (unchecked)."""
        self.calls.append(("alter_broker_configs", principal, broker_id, set_configs, delete_configs, validate_only))

        def alter() -> Deferred[None]:
            if not validate_only:
                configs = self.broker_configs.setdefault("" if broker_id is None else str(broker_id), {})
                configs.update(set_configs)
                for key in delete_configs:
                    configs.pop(key, None)
            return succeed(None)

        return self._scripted("alter_broker_configs", None) or self._guarded(alter)

    def create_partitions(self, principal: Principal, topic: str, total_count: int) -> Deferred[None]:
        """Add empty partitions up to ``total_count``."""
        self.calls.append(("create_partitions", principal, topic, total_count))

        def grow() -> Deferred[None]:
            self._configs(topic)
            self.add_topic(topic, total_count)
            return succeed(None)

        return self._scripted("create_partitions", topic) or self._guarded(grow)

    def delete_records(self, principal: Principal, topic: str, partition: int, before_offset: int) -> Deferred[int]:
        """Move the log start up to ``before_offset``; fire with it."""
        self.calls.append(("delete_records", principal, topic, partition, before_offset))

        def delete() -> Deferred[int]:
            log = self._log(topic, partition)
            log.log_start = max(log.log_start, min(before_offset, log.high_watermark))
            return succeed(log.log_start)

        return self._scripted("delete_records", topic) or self._guarded(delete)

    def init_producer_id(self, principal: Principal, transactional_id: str | None,
                         transaction_timeout_ms: int = -1) -> Deferred[ProducerIdentity]:
        """A fresh producer id, epoch 0."""
        self.calls.append(("init_producer_id", principal, transactional_id))
        self._next_producer_id += 1
        return self._scripted("init_producer_id", None) or succeed(
            ProducerIdentity(producer_id=self._next_producer_id, producer_epoch=0))

    def describe_quorum(self, principal: Principal) -> Deferred[dict[str, Any]]:
        """A quorum of this one broker."""
        self.calls.append(("describe_quorum", principal))
        node_id = self.node.node_id
        return self._scripted("describe_quorum", None) or succeed({
            "node_id": node_id, "leader": node_id, "term": 1, "commit_index": 0, "applied_index": 0,
            "voters": [node_id], "brokers": []})

    def replica_sizes(self, principal: Principal, topic: str) -> Deferred[dict[int, int]]:
        """Bytes of the topic's replicas held here: every partition's records."""
        self.calls.append(("replica_sizes", principal, topic))
        return self._scripted("replica_sizes", topic) or succeed(
            {number: sum(len(batch) for _, batch in log.batches) for (name, number), log in self.logs.items()
             if name == topic})

    def reassign_partition(self, principal: Principal, topic: str, partition: int,
                           target_replicas: Sequence[int]) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("reassign_partition", principal, topic, partition, target_replicas))
        return self._scripted("reassign_partition", topic) or self._unmodelled("reassign_partition")

    def list_reassignments(self, principal: Principal,
                           topics: Sequence[str] | None) -> Deferred[list[PartitionReassignment]]:
        """None are in progress."""
        self.calls.append(("list_reassignments", principal, topics))
        return self._scripted("list_reassignments", None) or succeed([])

    # -- consumer groups: scripted --------------------------------------------------------------

    def find_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        """This broker coordinates every group."""
        self.calls.append(("find_coordinator", principal, group_id))
        return self._scripted("find_coordinator", None) or succeed(self.node)

    def join_group(self, principal: Principal,
                   request: group_messages.JoinRequest) -> Deferred[group_messages.JoinResponse]:
        """Only scripted."""
        self.calls.append(("join_group", principal, request))
        return self._scripted("join_group", None) or self._unmodelled("join_group")

    def sync_group(self, principal: Principal,
                   request: group_messages.MemberRequest) -> Deferred[group_messages.SyncResponse]:
        """Only scripted."""
        self.calls.append(("sync_group", principal, request))
        return self._scripted("sync_group", None) or self._unmodelled("sync_group")

    def heartbeat(self, principal: Principal, request: group_messages.MemberRequest, polled: bool) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("heartbeat", principal, request, polled))
        return self._scripted("heartbeat", None) or self._unmodelled("heartbeat")

    def leave_group(self, principal: Principal, request: group_messages.MemberRequest) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("leave_group", principal, request))
        return self._scripted("leave_group", None) or self._unmodelled("leave_group")

    def commit_offsets(self, principal: Principal, request: group_messages.OffsetCommitRequest) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("commit_offsets", principal, request))
        return self._scripted("commit_offsets", None) or self._unmodelled("commit_offsets")

    def fetch_offsets(self, principal: Principal, group_id: str, partitions: Sequence[TopicPartition] | None,
                      require_stable: bool = False) -> Deferred[dict[TopicPartition, CommittedOffset | None]]:
        """Only scripted."""
        self.calls.append(("fetch_offsets", principal, group_id, partitions))
        return self._scripted("fetch_offsets", None) or self._unmodelled("fetch_offsets")

    def list_groups(self, principal: Principal) -> Deferred[list[group_messages.GroupListing]]:
        """No groups, unless scripted."""
        self.calls.append(("list_groups", principal))
        return self._scripted("list_groups", None) or succeed([])

    def describe_group(self, principal: Principal, group_id: str) -> Deferred[group_messages.GroupDescription]:
        """Only scripted."""
        self.calls.append(("describe_group", principal, group_id))
        return self._scripted("describe_group", None) or self._unmodelled("describe_group")

    def delete_group(self, principal: Principal, group_id: str) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("delete_group", principal, group_id))
        return self._scripted("delete_group", None) or self._unmodelled("delete_group")

    # -- share groups: scripted ------------------------------------------------------------------------

    def find_share_coordinator(self, principal: Principal, group_id: str) -> Deferred[BrokerEndpoint]:
        """This broker hosts every share group."""
        self.calls.append(("find_share_coordinator", principal, group_id))
        return self._scripted("find_share_coordinator", None) or succeed(self.node)

    def share_group_heartbeat(self, principal: Principal, request: share_messages.ShareHeartbeatRequest
                              ) -> Deferred[share_messages.ShareHeartbeatResponse]:
        """Only scripted."""
        self.calls.append(("share_group_heartbeat", principal, request))
        return self._scripted("share_group_heartbeat", None) or self._unmodelled("share_group_heartbeat")

    def share_fetch(self, principal: Principal, request: share_messages.ShareFetchRequest
                    ) -> Deferred[share_messages.ShareFetchResponse]:
        """Only scripted."""
        self.calls.append(("share_fetch", principal, request))
        return self._scripted("share_fetch", None) or self._unmodelled("share_fetch")

    def share_acknowledge(self, principal: Principal, request: share_messages.ShareAcknowledgeRequest
                          ) -> Deferred[tuple[share_messages.AcknowledgeResult, ...]]:
        """Only scripted."""
        self.calls.append(("share_acknowledge", principal, request))
        return self._scripted("share_acknowledge", None) or self._unmodelled("share_acknowledge")

    def create_share_group(self, principal: Principal, group_id: str, topics: Sequence[str],
                           configs: Mapping[str, str]) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("create_share_group", principal, group_id, topics, configs))
        return self._scripted("create_share_group", None) or self._unmodelled("create_share_group")

    def alter_share_group(self, principal: Principal, group_id: str, topics: Sequence[str] | None,
                          set_configs: Mapping[str, str], delete_configs: Sequence[str]) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("alter_share_group", principal, group_id, topics, set_configs, delete_configs))
        return self._scripted("alter_share_group", None) or self._unmodelled("alter_share_group")

    def delete_share_group(self, principal: Principal, group_id: str) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("delete_share_group", principal, group_id))
        return self._scripted("delete_share_group", None) or self._unmodelled("delete_share_group")

    def describe_share_group(self, principal: Principal, group_id: str
                             ) -> Deferred[share_messages.ShareGroupDescription]:
        """Only scripted."""
        self.calls.append(("describe_share_group", principal, group_id))
        return self._scripted("describe_share_group", None) or self._unmodelled("describe_share_group")

    def list_share_groups(self, principal: Principal) -> Deferred[list[share_messages.ShareGroupListing]]:
        """No share groups, unless scripted."""
        self.calls.append(("list_share_groups", principal))
        return self._scripted("list_share_groups", None) or succeed([])
    def delete_offsets(self, principal: Principal, group_id: str, partitions: Sequence[TopicPartition]
                       ) -> Deferred[dict[TopicPartition, BaseException | None]]:
        """Only scripted."""
        self.calls.append(("delete_offsets", principal, group_id, tuple(partitions)))
        return self._scripted("delete_offsets", None) or self._unmodelled("delete_offsets")

    # -- transactions: scripted ----------------------------------------------------------------------

    def find_transaction_coordinator(self, principal: Principal, transactional_id: str) -> Deferred[BrokerEndpoint]:
        """This broker coordinates every transactional id."""
        self.calls.append(("find_transaction_coordinator", principal, transactional_id))
        return self._scripted("find_transaction_coordinator", None) or succeed(self.node)

    def add_partitions_to_txn(self, principal: Principal, request: Any) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("add_partitions_to_txn", principal, request))
        return self._scripted("add_partitions_to_txn", None) or self._unmodelled("add_partitions_to_txn")

    def add_offsets_to_txn(self, principal: Principal, request: Any) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("add_offsets_to_txn", principal, request))
        return self._scripted("add_offsets_to_txn", None) or self._unmodelled("add_offsets_to_txn")

    def end_txn(self, principal: Principal, request: Any) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("end_txn", principal, request))
        return self._scripted("end_txn", None) or self._unmodelled("end_txn")

    def txn_commit_offsets(self, principal: Principal, request: Any) -> Deferred[None]:
        """Only scripted."""
        self.calls.append(("txn_commit_offsets", principal, request))
        return self._scripted("txn_commit_offsets", None) or self._unmodelled("txn_commit_offsets")

    def write_txn_markers(self, principal: Principal, markers: Sequence[Any]) -> Deferred[list[Any]]:
        """Only scripted."""
        self.calls.append(("write_txn_markers", principal, markers))
        return self._scripted("write_txn_markers", None) or self._unmodelled("write_txn_markers")

    def describe_transactions(self, principal: Principal, transactional_ids: Sequence[str]) -> Deferred[list[Any]]:
        """Only scripted."""
        self.calls.append(("describe_transactions", principal, transactional_ids))
        return self._scripted("describe_transactions", None) or self._unmodelled("describe_transactions")

    def list_transactions(self, principal: Principal, states: Sequence[Any],
                          producer_ids: Sequence[int]) -> Deferred[list[Any]]:
        """None, unless scripted."""
        self.calls.append(("list_transactions", principal, states, producer_ids))
        return self._scripted("list_transactions", None) or succeed([])

    # -- users and ACLs: in memory, authorized on the cluster ------------------------------------------

    def list_users(self, principal: Principal) -> Deferred[list[str]]:
        """Every user name."""
        self.calls.append(("list_users", principal))
        return self._scripted("list_users", None) or self._guarded(
            lambda: self._cluster(principal, Operation.DESCRIBE) or succeed(sorted(self.users)))

    def upsert_user(self, principal: Principal, name: str, password: str, create: bool) -> Deferred[None]:
        """Add a user or change a password (DUPLICATE_RESOURCE / RESOURCE_NOT_FOUND as the broker answers)."""
        self.calls.append(("upsert_user", principal, name, password, create))

        def upsert() -> Deferred[None]:
            self._cluster(principal, Operation.ALTER)
            if create and name in self.users:
                raise errors.DuplicateResourceError(f"user {name!r} already exists")
            if not create and name not in self.users:
                raise errors.ResourceNotFoundError(f"user {name!r} does not exist")
            self.users[name] = password
            return succeed(None)

        return self._scripted("upsert_user", None) or self._guarded(upsert)

    def remove_user(self, principal: Principal, name: str) -> Deferred[None]:
        """Delete a user."""
        self.calls.append(("remove_user", principal, name))

        def remove() -> Deferred[None]:
            self._cluster(principal, Operation.ALTER)
            if self.users.pop(name, None) is None:
                raise errors.ResourceNotFoundError(f"user {name!r} does not exist")
            return succeed(None)

        return self._scripted("remove_user", None) or self._guarded(remove)

    def describe_users(self, principal: Principal) -> Deferred[dict[str, dict[ScramMechanism, int]]]:
        """Every user's mechanisms and iterations (a password user has SHA-256 and SHA-512 at 4096)."""
        self.calls.append(("describe_users", principal))

        def describe() -> Deferred[dict[str, dict[ScramMechanism, int]]]:
            self._cluster(principal, Operation.DESCRIBE)
            described = {name: {mechanism: 4096 for mechanism in ScramMechanism} for name in self.users}
            described.update({name: dict(iterations) for name, iterations in self.scram.items()})
            return succeed(described)

        return self._scripted("describe_users", None) or self._guarded(describe)

    def alter_scram_credentials(self, principal: Principal, name: str, upsertions: Sequence[ScramUpsertion],
                                deletions: Sequence[ScramMechanism]) -> Deferred[None]:
        """Set and remove a user's credentials by mechanism (a user left without any goes)."""
        self.calls.append(("alter_scram_credentials", principal, name, upsertions, deletions))

        def alter() -> Deferred[None]:
            self._cluster(principal, Operation.ALTER)
            iterations = self.scram.setdefault(name, {})
            for mechanism in deletions:
                if iterations.pop(mechanism, None) is None:
                    raise errors.ResourceNotFoundError(f"user {name!r} has no {mechanism.value} credential to remove")
            iterations.update({mechanism: count for mechanism, _, count, _ in upsertions})
            if not iterations:
                del self.scram[name]
            return succeed(None)

        return self._scripted("alter_scram_credentials", None) or self._guarded(alter)

    def list_acls(self, principal: Principal) -> Deferred[list[Acl]]:
        """Every ACL."""
        self.calls.append(("list_acls", principal))
        return self._scripted("list_acls", None) or self._guarded(
            lambda: self._cluster(principal, Operation.DESCRIBE) or succeed(list(self.acls)))

    def add_acls(self, principal: Principal, acls: Sequence[Acl]) -> Deferred[None]:
        """Store ACLs."""
        self.calls.append(("add_acls", principal, acls))

        def add() -> Deferred[None]:
            self._cluster(principal, Operation.ALTER)
            self.acls.extend(acl for acl in acls if acl not in self.acls)
            return succeed(None)

        return self._scripted("add_acls", None) or self._guarded(add)

    def remove_acls(self, principal: Principal, acls: Sequence[Acl]) -> Deferred[None]:
        """Delete exactly these ACLs."""
        self.calls.append(("remove_acls", principal, acls))

        def remove() -> Deferred[None]:
            self._cluster(principal, Operation.ALTER)
            self.acls = [acl for acl in self.acls if acl not in acls]
            return succeed(None)

        return self._scripted("remove_acls", None) or self._guarded(remove)

    # -- helpers ---------------------------------------------------------------------------------

    def _cluster(self, principal: Principal, operation: Operation) -> None:
        self._require(principal, operation, ResourceType.CLUSTER, CLUSTER_RESOURCE)

    def _scripted(self, call: str, topic: str | None) -> Deferred[Any] | None:
        for key in ((call, topic), (call, None)):
            answers = self._scripts.get(key)
            if answers:
                answer = answers.pop(0)
                if isinstance(answer, Deferred):
                    return answer
                return fail(answer) if isinstance(answer, Exception) else succeed(answer)
        return None

    @staticmethod
    def _unmodelled(call: str) -> Deferred[Any]:
        return fail(errors.InvalidRequestError(f"the fake broker does not model {call}; script it"))

    @staticmethod
    def _guarded(call: Any) -> Deferred[Any]:
        try:
            return call()
        except errors.BrokerError as error:
            return fail(error)

    def _require(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> None:
        if not self.authorizer.authorize(principal, operation, resource_type, name):
            raise _DENIED[resource_type](f"{principal} may not {operation.value} {resource_type.value} {name!r}")

    def _log(self, topic: str, partition: int) -> FakeLog:
        log = self.logs.get((topic, partition))
        if log is None:
            raise errors.UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        return log

    def _configs(self, topic: str) -> dict[str, str]:
        configs = self.topic_configs.get(topic)
        if configs is None:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        return configs
