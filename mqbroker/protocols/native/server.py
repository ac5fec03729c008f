"""The native protocol's Twisted front end: decoded requests → ``IBroker`` calls → responses.

Thin by design: the codec (``connection.ServerConnection``) turns bytes into requests, the
broker does the work, and this module only translates between their types. Many requests are
in flight per connection; responses go out as each completes, matched by correlation id.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.groups import messages as groups
from mqbroker.groups.model import TopicPartition
from mqbroker.interfaces import IBroker
from mqbroker.model import ANONYMOUS, FetchPosition, FetchResult, IsolationLevel, Principal, TopicSpec
from mqbroker.protocols.adapter import ConnectionHandle, SessionFactory
from mqbroker.protocols.deferreds import gathered, settle, settled
from mqbroker.protocols.native import consumer_protocol
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native.codec import RequestHeader, supported_api_versions
from mqbroker.protocols.native.security import SECURITY_APIS, ConnectionSecurity
from mqbroker.protocols.native.connection import (
    ConnectionFailed,
    RequestReceived,
    RequestRejected,
    ServerConnection,
)

Handler = Callable[[Any, Principal, Any], Awaitable[Any]]

#: The requesting client's id (from the request header), for handlers that record it (group joins).
_client_id: contextvars.ContextVar[str] = contextvars.ContextVar("client_id", default="")
#: The request's API version, for handlers whose answer differs by version (Fetch).
_api_version: contextvars.ContextVar[int] = contextvars.ContextVar("api_version", default=0)


def _code(error: BaseException | None) -> tuple[int, str | None]:
    """Wire error code and message of a broker error (or none)."""
    if error is None:
        return 0, None
    if isinstance(error, errors.BrokerError):
        return int(error.code), error.message
    return int(errors.ErrorCode.UNKNOWN_SERVER_ERROR), "internal error; see the broker log"


# -- one coroutine per API -----------------------------------------------------------------


async def handle_api_versions(broker: IBroker, principal: Principal, request: m.ApiVersionsRequest) -> Any:
    """List the APIs this server answers (only those with a handler)."""
    advertised = supported_api_versions()
    served = HANDLERS.keys() | SECURITY_APIS
    return m.ApiVersionsResponse(api_keys=tuple(r for r in advertised.api_keys if r.api_key in served))


async def handle_metadata(broker: IBroker, principal: Principal, request: m.MetadataRequest) -> Any:
    """Brokers and topic partitions with their leaders."""
    cluster = await broker.metadata(principal, request.topics, request.allow_auto_topic_creation)
    topics = []
    for topic in cluster.topics:
        code, message = _code(topic.error)
        partitions = tuple(
            m.MetadataPartition(
                partition_index=p.partition, leader_id=p.leader_id, leader_epoch=p.leader_epoch,
                replica_nodes=p.replicas, isr_nodes=p.isr,
            )
            for p in topic.partitions
        )
        topics.append(m.MetadataTopic(
            name=topic.name, error_code=code, error_message=message, is_internal=topic.internal, partitions=partitions
        ))
    brokers = tuple(m.MetadataBroker(node_id=b.node_id, host=b.host, port=b.port) for b in cluster.brokers)
    return m.MetadataResponse(
        brokers=brokers, cluster_id=cluster.cluster_id, controller_id=cluster.controller_id, topics=tuple(topics)
    )


def handle_produce(broker: IBroker, principal: Principal, request: m.ProduceRequest) -> Deferred[Any]:
    """Append each partition's batches (all before anything waits, which keeps their order);
    answer once each partition is acknowledged. Plain Deferreds, no coroutine: this is the hot path."""
    answers = [
        settled(broker.produce(principal, topic.name, partition.partition_index, partition.records,
                                request.acks, request.timeout_ms, request.transactional_id)).addCallback(
            _produce_result, topic.name, partition.partition_index)
        for topic in request.topics
        for partition in topic.partitions
    ]
    return gathered(answers).addCallback(_produce_response)


def _produce_result(settled: tuple[Any, BaseException | None], topic: str, partition: int) -> tuple[str, Any]:
    result, error = settled
    code, message = _code(error)
    return topic, m.ProducePartitionResult(
        partition_index=partition, error_code=code, error_message=message,
        base_offset=result.base_offset if result else -1,
        log_append_time_ms=-1,
        log_start_offset=result.log_start_offset if result else -1,
    )


def _produce_response(answers: list[tuple[str, m.ProducePartitionResult]]) -> m.ProduceResponse:
    return m.ProduceResponse(topics=_per_topic(m.ProduceTopicResult, answers))


def _per_topic(topic_result: Callable[..., Any], answers: Iterable[tuple[str, Any]]) -> tuple[Any, ...]:
    """(topic, partition result) pairs grouped into topic results, topics in first-seen order."""
    by_topic: dict[str, list[Any]] = {}
    for topic, result in answers:
        by_topic.setdefault(topic, []).append(result)
    return tuple(topic_result(name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items())


def handle_fetch(broker: IBroker, principal: Principal, request: m.FetchRequest) -> Deferred[Any]:
    """Long-poll read of whole batches (plain Deferreds, like produce)."""
    positions = [
        FetchPosition(topic=topic.name, partition=p.partition_index, offset=p.fetch_offset, max_bytes=p.partition_max_bytes,
                      current_leader_epoch=p.current_leader_epoch, last_fetched_epoch=p.last_fetched_epoch)
        for topic in request.topics
        for p in topic.partitions
    ]
    if request.replica_id >= 0:  # a follower broker replicating (reads past the high watermark, reports divergence)
        fetched = broker.replica_fetch(principal, request.replica_id, positions, request.max_wait_ms,
                                       request.min_bytes, request.max_bytes)
    else:
        if request.isolation_level == IsolationLevel.READ_COMMITTED and _api_version.get() < 1:
            raise errors.UnsupportedVersionError(
                "read_committed needs Fetch version 1, whose answer lists the aborted transactions")
        fetched = broker.fetch(principal, positions, request.max_wait_ms, request.min_bytes, request.max_bytes,
                               request.isolation_level)
    return fetched.addCallback(_fetch_response)


def _fetch_response(fetched: list[FetchResult]) -> m.FetchResponse:
    answers = ((result.topic, _fetch_result(result)) for result in fetched)
    return m.FetchResponse(topics=_per_topic(m.FetchTopicResult, answers))


def _fetch_result(result: FetchResult) -> m.FetchPartitionResult:
    code, message = _code(result.error)
    return m.FetchPartitionResult(
        partition_index=result.partition, error_code=code, error_message=message,
        high_watermark=result.high_watermark,
        last_stable_offset=result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark,
        log_start_offset=result.log_start_offset, records=result.records,
        diverging_epoch=result.diverging_epoch, diverging_end_offset=result.diverging_end_offset,
        aborted_transactions=None if result.aborted_transactions is None else tuple(
            m.FetchAbortedTransaction(producer_id=aborted.producer_id, first_offset=aborted.first_offset)
            for aborted in result.aborted_transactions),
    )


async def handle_list_offsets(broker: IBroker, principal: Principal, request: m.ListOffsetsRequest) -> Any:
    """Earliest, latest or by-timestamp offsets."""
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            found, error = await settle(
                broker.list_offset(principal, topic.name, partition.partition_index, partition.timestamp,
                                   request.isolation_level)
            )
            code, message = _code(error)
            partitions.append(m.ListOffsetsPartitionResult(
                partition_index=partition.partition_index, error_code=code, error_message=message,
                offset=found.offset if found else -1, timestamp=found.timestamp_ms if found else -1,
            ))
        topics.append(m.ListOffsetsTopicResult(name=topic.name, partitions=tuple(partitions)))
    return m.ListOffsetsResponse(topics=tuple(topics))


async def handle_create_topics(broker: IBroker, principal: Principal, request: m.CreateTopicsRequest) -> Any:
    """Create topics, one result each."""
    results = []
    for topic in request.topics:
        spec = TopicSpec(
            name=topic.name, partitions=topic.num_partitions, replication_factor=topic.replication_factor,
            configs={k: v for k, v in topic.configs.items() if v is not None},
        )
        _, error = await settle(broker.create_topic(principal, spec, request.validate_only))
        code, message = _code(error)
        results.append(m.CreateTopicResult(
            name=topic.name, error_code=code, error_message=message,
            num_partitions=topic.num_partitions, replication_factor=topic.replication_factor,
        ))
    return m.CreateTopicsResponse(topics=tuple(results))


async def handle_delete_topics(broker: IBroker, principal: Principal, request: m.DeleteTopicsRequest) -> Any:
    """Delete topics, one result each."""
    results = []
    for name in request.topic_names:
        _, error = await settle(broker.delete_topic(principal, name))
        code, message = _code(error)
        results.append(m.DeleteTopicResult(name=name, error_code=code, error_message=message))
    return m.DeleteTopicsResponse(topics=tuple(results))


async def handle_create_partitions(broker: IBroker, principal: Principal, request: m.CreatePartitionsRequest) -> Any:
    """Grow topics."""
    results = []
    for topic in request.topics:
        if request.validate_only:
            error = None
        else:
            _, error = await settle(broker.create_partitions(principal, topic.name, topic.count))
        code, message = _code(error)
        results.append(m.CreatePartitionsResult(name=topic.name, error_code=code, error_message=message))
    return m.CreatePartitionsResponse(results=tuple(results))


async def handle_delete_records(broker: IBroker, principal: Principal, request: m.DeleteRecordsRequest) -> Any:
    """Advance log start offsets."""
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            low, error = await settle(
                broker.delete_records(principal, topic.name, partition.partition_index, partition.offset)
            )
            code, message = _code(error)
            partitions.append(m.DeleteRecordsPartitionResult(
                partition_index=partition.partition_index, error_code=code, error_message=message,
                low_watermark=low if low is not None else -1,
            ))
        topics.append(m.DeleteRecordsTopicResult(name=topic.name, partitions=tuple(partitions)))
    return m.DeleteRecordsResponse(topics=tuple(topics))


def _topic_resource_error(resource_type: int, name: str) -> errors.BrokerError | None:
    if resource_type != m.ConfigResourceType.TOPIC:
        return errors.InvalidRequestError(f"only topic configs can be described or altered, not resource type {resource_type}")
    return None


async def handle_describe_configs(broker: IBroker, principal: Principal, request: m.DescribeConfigsRequest) -> Any:
    """Effective topic configs."""
    results = []
    for resource in request.resources:
        configs: dict[str, Any] | None = None
        error = _topic_resource_error(resource.resource_type, resource.resource_name)
        if error is None:
            configs, error = await settle(broker.describe_configs(principal, resource.resource_name))
        wanted = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        entries = tuple(
            m.DescribedConfig(name=key, value=str(value))
            for key, value in sorted((configs or {}).items())
            if wanted is None or key in wanted
        )
        code, message = _code(error)
        results.append(m.DescribeConfigsResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name,
            error_code=code, error_message=message, configs=entries,
        ))
    return m.DescribeConfigsResponse(results=tuple(results))


async def handle_alter_configs(broker: IBroker, principal: Principal, request: m.IncrementalAlterConfigsRequest) -> Any:
    """Set or reset topic config keys."""
    results = []
    for resource in request.resources:
        error = _topic_resource_error(resource.resource_type, resource.resource_name)
        if error is None and not request.validate_only:
            set_configs = {c.name: c.value or "" for c in resource.configs if c.config_operation == m.ConfigOperation.SET}
            delete_configs = [c.name for c in resource.configs if c.config_operation == m.ConfigOperation.DELETE]
            _, error = await settle(broker.alter_configs(principal, resource.resource_name, set_configs, delete_configs))
        code, message = _code(error)
        results.append(m.AlterConfigsResourceResult(
            resource_type=resource.resource_type, resource_name=resource.resource_name,
            error_code=code, error_message=message,
        ))
    return m.IncrementalAlterConfigsResponse(results=tuple(results))


async def handle_init_producer_id(broker: IBroker, principal: Principal, request: m.InitProducerIdRequest) -> Any:
    """A fresh idempotent producer identity, or a transactional id's producer id with a new epoch."""
    identity = await broker.init_producer_id(principal, request.transactional_id, request.transaction_timeout_ms)
    return m.InitProducerIdResponse(producer_id=identity.producer_id, producer_epoch=identity.producer_epoch)


async def handle_find_coordinator(broker: IBroker, principal: Principal, request: m.FindCoordinatorRequest) -> Any:
    """The broker coordinating a group (or a transactional id): the leader of its internal topic's partition."""
    if request.key_type == m.CoordinatorType.TRANSACTION:
        node = await broker.find_transaction_coordinator(principal, request.key)
    elif request.key_type == m.CoordinatorType.GROUP:
        node = await broker.find_coordinator(principal, request.key)
    else:
        raise errors.InvalidRequestError(f"coordinator type {request.key_type} is unknown; groups are 0, "
                                         "transactional ids 1")
    return m.FindCoordinatorResponse(node_id=node.node_id, host=node.host, port=node.port)


async def handle_join_group(broker: IBroker, principal: Principal, request: m.JoinGroupRequest) -> Any:
    """Join; the reply comes when the group's rebalance completes (the broker computes assignments)."""
    if not request.protocols:
        raise errors.InconsistentGroupProtocolError("a join must offer at least one assignor")
    subscription = consumer_protocol.decode_subscription(request.protocols[0].metadata)
    joined = await broker.join_group(principal, groups.JoinRequest(
        group_id=request.group_id, member_id=request.member_id, group_instance_id=request.group_instance_id,
        client_id=_client_id.get(), client_host=principal.host, session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms, protocol_type=request.protocol_type,
        topics=frozenset(subscription.topics), assignors=tuple(p.name for p in request.protocols),
    ))
    return m.JoinGroupResponse(generation_id=joined.generation_id, protocol_type=request.protocol_type,
                               protocol_name=joined.assignor, leader="", member_id=joined.member_id)


def _member(request: Any) -> groups.MemberRequest:
    return groups.MemberRequest(group_id=request.group_id, member_id=request.member_id,
                                group_instance_id=request.group_instance_id, generation_id=request.generation_id)


def _encode_assignment(partitions: frozenset[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return consumer_protocol.encode_assignment(consumer_protocol.ConsumerAssignment(assigned_partitions=tuple(
        consumer_protocol.TopicPartitions(topic=topic, partitions=tuple(parts)) for topic, parts in by_topic.items()
    )))


async def handle_sync_group(broker: IBroker, principal: Principal, request: m.SyncGroupRequest) -> Any:
    """The member's assignment for its generation (leader-sent assignments are ignored: the broker assigns)."""
    synced = await broker.sync_group(principal, _member(request))
    return m.SyncGroupResponse(protocol_type=request.protocol_type, protocol_name=request.protocol_name,
                               assignment=_encode_assignment(synced.assignment))


async def handle_heartbeat(broker: IBroker, principal: Principal, request: m.HeartbeatRequest) -> Any:
    """Keep a member alive; REBALANCE_IN_PROGRESS (in the envelope) tells it to rejoin."""
    await broker.heartbeat(principal, _member(request), request.polled)
    return m.HeartbeatResponse()


async def handle_leave_group(broker: IBroker, principal: Principal, request: m.LeaveGroupRequest) -> Any:
    """Remove members at once, one outcome each."""
    results = []
    for leaving in request.members:
        member = groups.MemberRequest(group_id=request.group_id, member_id=leaving.member_id,
                                      group_instance_id=leaving.group_instance_id)
        _, error = await settle(broker.leave_group(principal, member))
        code, message = _code(error)
        results.append(m.LeaveGroupMemberResult(member_id=leaving.member_id, group_instance_id=leaving.group_instance_id,
                                                error_code=code, error_message=message))
    return m.LeaveGroupResponse(members=tuple(results))


async def handle_offset_commit(broker: IBroker, principal: Principal, request: m.OffsetCommitRequest) -> Any:
    """Commit offsets durably; a refused commit (fenced, stale generation) fails every partition."""
    commits = tuple(
        groups.PartitionCommit(
            topic_partition=TopicPartition(topic.name, p.partition_index), offset=p.committed_offset,
            metadata=p.committed_metadata or "",
            leader_epoch=None if p.committed_leader_epoch < 0 else p.committed_leader_epoch,
        )
        for topic in request.topics for p in topic.partitions
    )
    _, error = await settle(broker.commit_offsets(principal, groups.OffsetCommitRequest(
        group_id=request.group_id, member_id=request.member_id, group_instance_id=request.group_instance_id,
        generation_id=request.generation_id, offsets=commits,
    )))
    code, message = _code(error)
    return m.OffsetCommitResponse(topics=tuple(
        m.OffsetCommitTopicResult(name=topic.name, partitions=tuple(
            m.OffsetCommitPartitionResult(partition_index=p.partition_index, error_code=code, error_message=message)
            for p in topic.partitions
        ))
        for topic in request.topics
    ))


async def handle_offset_fetch(broker: IBroker, principal: Principal, request: m.OffsetFetchRequest) -> Any:
    """Committed offsets (-1 where none)."""
    wanted = None if request.topics is None else [
        TopicPartition(topic.name, index) for topic in request.topics for index in topic.partition_indexes
    ]
    found = await broker.fetch_offsets(principal, request.group_id, wanted, request.require_stable)
    by_topic: dict[str, list[m.OffsetFetchPartitionResult]] = {}
    for topic_partition, committed in sorted(found.items()):
        by_topic.setdefault(topic_partition.topic, []).append(m.OffsetFetchPartitionResult(
            partition_index=topic_partition.partition,
            committed_offset=committed.offset if committed else -1,
            committed_leader_epoch=committed.leader_epoch if committed and committed.leader_epoch is not None else -1,
            metadata=committed.metadata if committed else None,
        ))
    return m.OffsetFetchResponse(topics=tuple(
        m.OffsetFetchTopicResult(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()
    ))


async def handle_list_groups(broker: IBroker, principal: Principal, request: m.ListGroupsRequest) -> Any:
    """Groups (optionally only those in some states)."""
    listed = await broker.list_groups(principal)
    wanted = set(request.states_filter)
    return m.ListGroupsResponse(groups=tuple(
        m.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state.value)
        for g in listed if not wanted or g.state.value in wanted
    ))


async def handle_describe_groups(broker: IBroker, principal: Principal, request: m.DescribeGroupsRequest) -> Any:
    """State, assignor and members (with their assignments) per group."""
    described = []
    for group_id in request.groups:
        group, error = await settle(broker.describe_group(principal, group_id))
        code, message = _code(error)
        if group is None:
            described.append(m.DescribedGroup(group_id=group_id, error_code=code, error_message=message))
            continue
        described.append(m.DescribedGroup(
            group_id=group_id, group_state=group.state.value, protocol_type=group.protocol_type,
            protocol_data=group.assignor,
            members=tuple(
                m.DescribedGroupMember(member_id=member.member_id, group_instance_id=member.group_instance_id,
                                       client_id=member.client_id, client_host=member.client_host,
                                       member_metadata=b"", member_assignment=_encode_assignment(member.assignment))
                for member in group.members
            ),
        ))
    return m.DescribeGroupsResponse(groups=tuple(described))


async def handle_delete_groups(broker: IBroker, principal: Principal, request: m.DeleteGroupsRequest) -> Any:
    """Delete empty groups and their offsets, one outcome each."""
    results = []
    for group_id in request.groups_names:
        _, error = await settle(broker.delete_group(principal, group_id))
        code, message = _code(error)
        results.append(m.DeleteGroupResult(group_id=group_id, error_code=code, error_message=message))
    return m.DeleteGroupsResponse(results=tuple(results))


async def handle_describe_quorum(broker: IBroker, principal: Principal, request: m.DescribeQuorumRequest) -> Any:
    """The controller quorum and the registered brokers, as this broker sees them."""
    quorum = await broker.describe_quorum(principal)
    return m.DescribeQuorumResponse(
        node_id=quorum["node_id"], leader_id=quorum["leader"] or -1, term=quorum["term"],
        commit_index=quorum["commit_index"], applied_index=quorum["applied_index"],
        voters=tuple(m.QuorumVoter(node_id=voter) for voter in quorum["voters"]),
        brokers=tuple(m.QuorumBroker(**broker_state) for broker_state in quorum["brokers"]),
    )


async def handle_alter_partition_reassignments(
    broker: IBroker, principal: Principal, request: m.AlterPartitionReassignmentsRequest
) -> Any:
    """Start moving partitions; one outcome each (the replicas catch up in the background)."""
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            _, error = await settle(broker.reassign_partition(principal, topic.name, partition.partition_index,
                                                               partition.replicas))
            code, message = _code(error)
            partitions.append(m.ReassignablePartitionResult(partition_index=partition.partition_index,
                                                            error_code=code, error_message=message))
        topics.append(m.ReassignableTopicResult(name=topic.name, partitions=tuple(partitions)))
    return m.AlterPartitionReassignmentsResponse(topics=tuple(topics))


async def handle_list_partition_reassignments(
    broker: IBroker, principal: Principal, request: m.ListPartitionReassignmentsRequest
) -> Any:
    """The reassignments in progress."""
    ongoing = await broker.list_reassignments(principal, request.topics or None)
    by_topic: dict[str, list[m.OngoingPartitionReassignment]] = {}
    for item in ongoing:
        by_topic.setdefault(item.topic, []).append(m.OngoingPartitionReassignment(
            partition_index=item.partition, replicas=item.replicas, target_replicas=item.target_replicas,
            adding_replicas=item.adding_replicas, removing_replicas=item.removing_replicas,
        ))
    return m.ListPartitionReassignmentsResponse(topics=tuple(
        m.OngoingTopicReassignment(name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items()
    ))


from mqbroker.protocols.native import txn_handlers  # noqa: E402 (it uses this module's _code)

HANDLERS: dict[m.ApiKey, Handler] = {
    m.ApiKey.API_VERSIONS: handle_api_versions,
    m.ApiKey.METADATA: handle_metadata,
    m.ApiKey.PRODUCE: handle_produce,
    m.ApiKey.FETCH: handle_fetch,
    m.ApiKey.LIST_OFFSETS: handle_list_offsets,
    m.ApiKey.CREATE_TOPICS: handle_create_topics,
    m.ApiKey.DELETE_TOPICS: handle_delete_topics,
    m.ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    m.ApiKey.DELETE_RECORDS: handle_delete_records,
    m.ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    m.ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_alter_configs,
    m.ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    m.ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    m.ApiKey.JOIN_GROUP: handle_join_group,
    m.ApiKey.SYNC_GROUP: handle_sync_group,
    m.ApiKey.HEARTBEAT: handle_heartbeat,
    m.ApiKey.LEAVE_GROUP: handle_leave_group,
    m.ApiKey.OFFSET_COMMIT: handle_offset_commit,
    m.ApiKey.OFFSET_FETCH: handle_offset_fetch,
    m.ApiKey.LIST_GROUPS: handle_list_groups,
    m.ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    m.ApiKey.DELETE_GROUPS: handle_delete_groups,
    m.ApiKey.DESCRIBE_QUORUM: handle_describe_quorum,
    m.ApiKey.ALTER_PARTITION_REASSIGNMENTS: handle_alter_partition_reassignments,
    m.ApiKey.LIST_PARTITION_REASSIGNMENTS: handle_list_partition_reassignments,
    **txn_handlers.HANDLERS,
}


class NativeSession:
    """One client connection: decodes requests, runs their handlers, writes responses."""

    log = Logger()

    def __init__(
        self, broker: IBroker, frame_bytes_max: int, latency: Any = None, security: Any = None, clock: Any = None
    ) -> None:
        self._broker = broker
        self._frame_bytes_max = frame_bytes_max
        self._codec = ServerConnection(frame_bytes_max)
        self._latency = latency
        self._connection: ConnectionHandle | None = None
        self._principal = ANONYMOUS
        self._closed = False
        self._services = security  # a SecurityServices, or None: everyone is anonymous
        self._security: ConnectionSecurity | None = None
        self._clock = clock
        self._throttled = False
        #: Whether a request has run as an authenticated principal (the frame bound is then the full one).
        self._authenticated = False

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete request (the adapter closes a connection that trickles one)."""
        return self._codec.buffered_bytes

    def connection_made(self, connection: ConnectionHandle) -> None:
        self._connection = connection
        # The peer's host goes into the principal: host-based ACLs and `groups describe` show it.
        host = connection.peer.rpartition(":")[0]
        self._principal = dataclasses.replace(self._principal, host=host)
        if self._services is not None:
            self._security = ConnectionSecurity(self._services, connection.secure, host, connection.peer_certificate)
            if not self._services.config.security_allow_anonymous:  # small frames until SASL or a certificate names it
                self._codec.allow_frames_up_to(min(self._frame_bytes_max, limits.pre_authentication_frame_bytes_max))
    def connection_lost(self, reason: Failure) -> None:
        self._closed = True

    def data_received(self, data: bytes) -> None:
        for event in self._codec.receive_data(data):
            if isinstance(event, RequestReceived):
                self._start(event.header, event.request)
            elif isinstance(event, RequestRejected):
                self._write(self._codec.reply_error(event.header, event.error))
            else:
                self._fail(event)
        self._apply_backpressure()

    def _fail(self, event: ConnectionFailed) -> None:
        assert self._connection is not None
        self.log.warn("closing native connection from {peer}: {error}", peer=self._connection.peer, error=event.error.message)
        if event.error.header is not None:
            self._write(self._codec.reply_error(event.error.header, event.error))
        self._connection.close()

    def _start(self, header: RequestHeader, request: Any) -> None:
        api_key = header.api_key  # the codec decoded it to an ApiKey
        principal = self._principal
        if self._security is not None:
            try:
                authenticated = self._security.require_principal(api_key)
                if authenticated is not None and not self._authenticated:
                    self._authenticated = True
                    self._codec.allow_frames_up_to(self._frame_bytes_max)
                principal = authenticated or principal
            except errors.BrokerError as error:
                self._write(self._codec.reply_error(header, error))
                return
        handler = HANDLERS.get(api_key)
        if self._security is not None and api_key in SECURITY_APIS:
            handler = lambda broker, principal, request: self._security.handle(principal, request)  # noqa: E731
        if handler is None:
            error = errors.UnknownApiKeyError(f"API {api_key.name} is not served by this broker version")
            self._write(self._codec.reply_error(header, error))
            return
        started = time.perf_counter()
        _client_id.set(header.client_id)
        _api_version.set(header.api_version)
        answered = maybeDeferred(handler, self._broker, principal, request)  # produce/fetch: Deferreds; others: coroutines
        if header.api_key == m.ApiKey.PRODUCE and request.acks == 0:
            answered.addCallback(self._throttle_then, principal, header, request, None, lambda: None)
            answered.addErrback(self._log_unexpected, header)
            return  # acks=0: the client expects no response
        answered.addCallbacks(self._reply, self._reply_failure, callbackArgs=(header, started, principal, request),
                              errbackArgs=(header,))

    def _reply(self, response: Any, header: RequestHeader, started: float, principal: Principal, request: Any) -> None:
        if self._latency is not None:
            _latency_series(self._latency, header.api_key).observe(time.perf_counter() - started)
        if self._security is not None:
            response = self._security.advertise(response)
        frame = self._codec.reply(header, response)
        self._throttle_then(response, principal, header, request, response, lambda: self._write(frame))

    def _throttle_then(self, _: Any, principal: Principal, header: RequestHeader, request: Any, response: Any,
                       send: Any) -> None:
        """Quotas: over its byte rate, a client's reply waits and its connection is not read meanwhile."""
        delay_ms = 0
        if self._security is not None and self._clock is not None:
            now_ms = int(self._clock.seconds() * 1000)
            delay_ms = self._security.throttle_ms(principal, header.client_id, request, response, now_ms)
        if delay_ms <= 0:
            send()
            self._apply_backpressure()
            return
        self._throttled = True
        self._apply_backpressure()

        def release() -> None:
            self._throttled = False
            send()
            self._apply_backpressure()

        self._clock.callLater(delay_ms / 1000.0, release)

    def _reply_failure(self, failure: Failure, header: RequestHeader) -> None:
        if failure.check(errors.BrokerError):
            self._write(self._codec.reply_error(header, failure.value))
        else:
            self._log_unexpected(failure, header)
            self._write(self._codec.reply_error(header, errors.UnknownServerError("internal error; see the broker log")))
        self._apply_backpressure()

    def _log_unexpected(self, failure: Failure, header: RequestHeader) -> None:
        self.log.failure("unexpected error answering {api} request {correlation_id}", failure,
                         api=m.ApiKey(header.api_key).name, correlation_id=header.correlation_id)

    def _write(self, frame: bytes) -> None:
        if not self._closed and self._connection is not None:
            self._connection.write(frame)

    def _apply_backpressure(self) -> None:
        """Stop reading requests while too many are in flight for this connection."""
        if self._connection is None:
            return
        if self._throttled or self._codec.inflight_requests >= limits.native_inflight_requests_max:
            self._connection.pause_reading()
        else:
            self._connection.resume_reading()


@functools.lru_cache(maxsize=256)
def _latency_series(latency: Any, api_key: int) -> Any:
    """The request-latency histogram series of one API (looking a series up by labels is slow on every reply)."""
    return latency.labels("native", m.ApiKey(api_key).name.lower())


def build_factory(broker: IBroker, context: Any) -> SessionFactory:
    """The native listener's factory (named by the front-end plugin)."""
    config = context.config
    latency = context.metrics.request_latency if context.metrics is not None else None
    gauge = context.metrics.connections.labels("native") if context.metrics is not None else None
    security = getattr(context, "security", None)
    return SessionFactory(
        lambda address: NativeSession(broker, config.native_frame_bytes_max, latency, security, context.reactor),
        idle_timeout_s=config.connection_idle_ms / 1000.0,
        metrics_gauge=gauge,
        frame_timeout_s=getattr(context, "frame_timeout_s", None),
    )


