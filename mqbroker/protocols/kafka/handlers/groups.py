"""Consumer groups: Kafka's client-side group protocol mapped onto mqbroker's coordinator.

mqbroker's coordinator computes assignments itself (cooperative, incremental, static members
welcome). A Kafka client therefore always finds itself a *follower*: the JoinGroup answer names
no member as leader, so the client sends an empty SyncGroup and receives its assignment there.
The client's assignor names map onto the coordinator's; whichever the coordinator picks, the
answer names the client's own protocol that maps to it, as Kafka clients require.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from mqbroker import errors
from mqbroker.groups.model import TopicPartition
from mqbroker.protocols.deferreds import gathered, settle, settled
from mqbroker.protocols.exceptions import MalformedMessageError
from mqbroker.protocols.kafka.error_codes import kafka_error
from mqbroker.protocols.kafka.handlers.context import RequestContext
from mqbroker.protocols.kafka.messages import consumer_protocol
from mqbroker.protocols.kafka.messages import groups as m

#: Kafka assignor names -> the coordinator's. Kafka's eager "sticky" becomes the cooperative one:
#: the coordinator never stops the world. Names it does not know (custom assignors) use its default.
ASSIGNORS = {"range": "range", "roundrobin": "round-robin", "cooperative-sticky": "cooperative-sticky",
             "sticky": "cooperative-sticky"}
DEFAULT_ASSIGNOR = "cooperative-sticky"
#: The coordinator's assignor names as Kafka tools show them.
KAFKA_NAMES = {"range": "range", "round-robin": "roundrobin", "cooperative-sticky": "cooperative-sticky"}
#: Every group is a classic group (KIP-848's ``consumer`` groups are not served).
GROUP_TYPE = "classic"
#: No member is the leader: every Kafka client is a follower (see the module docstring).
NO_LEADER = ""


def coordinator_assignor(kafka_name: str) -> str:
    """The coordinator's assignor for a Kafka assignor name."""
    return ASSIGNORS.get(kafka_name, DEFAULT_ASSIGNOR)


def _subscribed_topics(request: m.JoinGroupRequest) -> frozenset[str]:
    """The topics of the member's subscription (each protocol carries the same topics)."""
    if request.protocol_type != consumer_protocol.CONSUMER_PROTOCOL_TYPE:
        raise errors.InconsistentGroupProtocolError(
            f"protocol type {request.protocol_type!r} is not served yet; only consumer groups (\"consumer\") are")
    if not request.protocols:
        raise errors.InconsistentGroupProtocolError("a join must offer at least one assignor")
    try:
        return frozenset(consumer_protocol.decode_subscription(request.protocols[0].metadata).topics)
    except MalformedMessageError as error:
        raise errors.InconsistentGroupProtocolError(f"the subscription of assignor {request.protocols[0].name!r} "
                                                    f"does not decode: {error.message}") from None


async def handle_join_group(context: RequestContext, request: m.JoinGroupRequest) -> m.JoinGroupResponse:
    """Join; answered once the group's rebalance completes, with this member as a follower."""
    topics = _subscribed_topics(request)
    offered = [protocol.name for protocol in request.protocols]
    joined = await context.calls.join_group(
        group_id=request.group_id, member_id=request.member_id, group_instance_id=request.group_instance_id,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms if request.rebalance_timeout_ms >= 0 else request.session_timeout_ms,
        protocol_type=request.protocol_type, topics=topics,
        assignors=list(dict.fromkeys(coordinator_assignor(name) for name in offered)),
    )
    chosen = next(name for name in offered if coordinator_assignor(name) == joined.assignor)
    return m.JoinGroupResponse(
        error_code=0, generation_id=joined.generation_id, protocol_type=request.protocol_type, protocol_name=chosen,
        leader=NO_LEADER, member_id=joined.member_id, members=(),
    )


def encode_assignment(partitions: Iterable[TopicPartition]) -> bytes:
    """Partitions as a consumer-protocol assignment."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return consumer_protocol.encode_assignment(consumer_protocol.ConsumerAssignment(assigned_partitions=tuple(
        consumer_protocol.TopicPartitions(topic=topic, partitions=tuple(numbers)) for topic, numbers in by_topic.items()
    )))


def _subscription(topics: Iterable[str]) -> bytes:
    """A member's subscription as DescribeGroups shows it (consumer protocol version 0: its topics)."""
    return consumer_protocol.encode_subscription(consumer_protocol.ConsumerSubscription(topics=tuple(sorted(topics))),
                                                 version=0)


async def handle_sync_group(context: RequestContext, request: m.SyncGroupRequest) -> m.SyncGroupResponse:
    """The member's assignment for its generation (assignments a client sends are not needed)."""
    synced = await context.calls.sync_group(request.group_id, request.member_id, request.group_instance_id,
                                            request.generation_id)
    return m.SyncGroupResponse(error_code=0, protocol_type=request.protocol_type, protocol_name=request.protocol_name,
                               assignment=encode_assignment(synced.assignment))


async def handle_heartbeat(context: RequestContext, request: m.HeartbeatRequest) -> m.HeartbeatResponse:
    """Keep a member alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
    await context.calls.heartbeat(request.group_id, request.member_id, request.group_instance_id,
                                  request.generation_id)
    return m.HeartbeatResponse(error_code=0)


async def handle_leave_group(context: RequestContext, request: m.LeaveGroupRequest) -> m.LeaveGroupResponse:
    """Members leave at once (one before version 3, each with its own outcome from version 3)."""
    if context.version < 3:
        await context.calls.leave_group(request.group_id, request.member_id, None)
        return m.LeaveGroupResponse(error_code=0)
    results = []
    for member in request.members:
        _, error = await settle(context.calls.leave_group(request.group_id, member.member_id, member.group_instance_id))
        code, _ = kafka_error(error)
        results.append(m.MemberResponse(member_id=member.member_id, group_instance_id=member.group_instance_id,
                                        error_code=code))
    return m.LeaveGroupResponse(error_code=0, members=tuple(results))


async def handle_offset_commit(context: RequestContext, request: m.OffsetCommitRequest) -> m.OffsetCommitResponse:
    """Commit positions durably; a refused commit (stale generation, unknown member) fails every partition."""
    offsets = [
        (topic.name, p.partition_index, p.committed_offset, p.committed_metadata or "", p.committed_leader_epoch)
        for topic in request.topics for p in topic.partitions
    ]
    _, error = await settle(context.calls.commit_offsets(
        request.group_id, request.member_id, request.group_instance_id, request.generation_id_or_member_epoch, offsets))
    code, _ = kafka_error(error)
    return m.OffsetCommitResponse(topics=tuple(
        m.OffsetCommitResponseTopic(name=topic.name, partitions=tuple(
            m.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=code) for p in topic.partitions
        ))
        for topic in request.topics
    ))


async def _committed(context: RequestContext, group_id: str, wanted: Sequence[tuple[str, int]] | None,
                     require_stable: bool) -> tuple[dict[str, list[tuple[int, Any]]], int]:
    """A group's committed offsets per topic ((partition, CommittedOffset or None) pairs) and an error code
    (``require_stable``: UNSTABLE_OFFSET_COMMIT while a transaction's offsets for them are pending)."""
    found, error = await settle(context.calls.fetch_offsets(group_id, wanted, require_stable))
    code, _ = kafka_error(error)
    by_topic: dict[str, list[tuple[int, Any]]] = {}
    if found is not None:
        for topic_partition, committed in sorted(found.items()):
            by_topic.setdefault(topic_partition.topic, []).append((topic_partition.partition, committed))
    elif wanted is not None:
        for topic, partition in wanted:
            by_topic.setdefault(topic, []).append((partition, None))
    return by_topic, code


def _position(committed: Any) -> tuple[int, int, str]:
    """(offset, leader epoch, metadata) of a committed offset; -1, -1, "" when there is none."""
    if committed is None:
        return -1, -1, ""
    epoch = committed.leader_epoch if committed.leader_epoch is not None else -1
    return committed.offset, epoch, committed.metadata


async def handle_offset_fetch(context: RequestContext, request: m.OffsetFetchRequest) -> m.OffsetFetchResponse:
    """Committed offsets (-1 where none): one group up to version 7, several from version 8."""
    if context.version >= 8:
        groups = []
        for group in request.groups:
            wanted = None if group.topics is None else [(t.name, p) for t in group.topics for p in t.partition_indexes]
            by_topic, code = await _committed(context, group.group_id, wanted, request.require_stable)
            groups.append(m.OffsetFetchResponseGroup(group_id=group.group_id, error_code=code, topics=tuple(
                m.OffsetFetchResponseGroupTopic(name=name, partitions=tuple(
                    m.OffsetFetchResponseGroupPartition(
                        partition_index=partition, committed_offset=offset, committed_leader_epoch=epoch,
                        metadata=metadata, error_code=0)
                    for partition, (offset, epoch, metadata) in ((p, _position(c)) for p, c in entries)))
                for name, entries in by_topic.items())))
        return m.OffsetFetchResponse(groups=tuple(groups))
    wanted = None if request.topics is None else [(t.name, p) for t in request.topics for p in t.partition_indexes]
    by_topic, code = await _committed(context, request.group_id, wanted, request.require_stable)
    partition_code = code if context.version < 2 else 0  # version 1 has no top-level error code
    return m.OffsetFetchResponse(error_code=code, topics=tuple(
        m.OffsetFetchResponseTopic(name=name, partitions=tuple(
            m.OffsetFetchResponsePartition(partition_index=partition, committed_offset=offset,
                                           committed_leader_epoch=epoch, metadata=metadata, error_code=partition_code)
            for partition, (offset, epoch, metadata) in ((p, _position(c)) for p, c in entries)))
        for name, entries in by_topic.items()))


async def handle_list_groups(context: RequestContext, request: m.ListGroupsRequest) -> m.ListGroupsResponse:
    """Groups, optionally only those in some states or of some types (all are classic groups)."""
    listed = await context.calls.list_groups()
    states = {state.lower() for state in request.states_filter}
    types = {kind.lower() for kind in request.types_filter}
    if types and GROUP_TYPE not in types:
        listed = []
    return m.ListGroupsResponse(error_code=0, groups=tuple(
        m.ListedGroup(group_id=group.group_id, protocol_type=group.protocol_type, group_state=group.state.value,
                      group_type=GROUP_TYPE)
        for group in listed if not states or group.state.value.lower() in states
    ))


async def handle_describe_groups(context: RequestContext, request: m.DescribeGroupsRequest) -> m.DescribeGroupsResponse:
    """State, assignor and members (with their assignments) per group; an unknown group is Dead."""
    described = await gathered([settled(context.calls.describe_group(group_id)) for group_id in request.groups])
    results = []
    for group_id, (group, error) in zip(request.groups, described):
        code, _ = kafka_error(error)
        if group is None:
            results.append(m.DescribedGroup(error_code=code, group_id=group_id, group_state="Dead", protocol_type="",
                                            protocol_data="", members=()))
            continue
        results.append(m.DescribedGroup(
            error_code=0, group_id=group_id, group_state=group.state.value, protocol_type=group.protocol_type,
            protocol_data=KAFKA_NAMES.get(group.assignor, group.assignor),
            members=tuple(
                m.DescribedGroupMember(member_id=member.member_id, group_instance_id=member.group_instance_id,
                                       client_id=member.client_id, client_host=member.client_host,
                                       member_metadata=_subscription(member.topics),
                                       member_assignment=encode_assignment(member.assignment))
                for member in group.members),
        ))
    return m.DescribeGroupsResponse(groups=tuple(results))


async def handle_delete_groups(context: RequestContext, request: m.DeleteGroupsRequest) -> m.DeleteGroupsResponse:
    """Delete empty groups and their offsets, one outcome each."""
    outcomes = await gathered([settled(context.calls.delete_group(group_id)) for group_id in request.groups_names])
    return m.DeleteGroupsResponse(throttle_time_ms=0, results=tuple(
        m.DeletableGroupResult(group_id=group_id, error_code=kafka_error(error)[0])
        for group_id, (_, error) in zip(request.groups_names, outcomes)))


async def handle_offset_delete(context: RequestContext, request: m.OffsetDeleteRequest) -> m.OffsetDeleteResponse:
    """Delete committed offsets of topics no member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for the others)."""
    wanted = [(topic.name, partition.partition_index) for topic in request.topics for partition in topic.partitions]
    outcomes, error = await settle(context.calls.delete_offsets(request.group_id, wanted))
    if error is not None:
        return m.OffsetDeleteResponse(error_code=kafka_error(error)[0])
    return m.OffsetDeleteResponse(error_code=0, topics=tuple(
        m.OffsetDeleteResponseTopic(name=topic.name, partitions=tuple(
            m.OffsetDeleteResponsePartition(
                partition_index=partition.partition_index,
                error_code=kafka_error(outcomes[TopicPartition(topic.name, partition.partition_index)])[0])
            for partition in topic.partitions))
        for topic in request.topics))
