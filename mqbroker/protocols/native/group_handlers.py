"""The native protocol's consumer-group APIs: coordinator, join, sync, heartbeat, leave, offsets, listing."""

from __future__ import annotations

import contextvars
from collections.abc import Iterable
from typing import Any

from mqbroker import errors
from mqbroker.groups import messages as groups
from mqbroker.groups.model import TopicPartition
from mqbroker.interfaces import IBroker
from mqbroker.model import Principal
from mqbroker.protocols.native import consumer_protocol
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.deferreds import settle
from mqbroker.protocols.native.replies import error_code

#: The requesting client's id (from the request header), for handlers that record it (group joins).
REQUEST_CLIENT_ID: contextvars.ContextVar[str] = contextvars.ContextVar("client_id", default="")


async def handle_find_coordinator(broker: IBroker, principal: Principal, request: m.FindCoordinatorRequest) -> Any:
    """The broker coordinating a group (or a transactional id), or hosting a share group: the leader of its
    internal topic's partition."""
    if request.key_type == m.CoordinatorType.SHARE:
        node = await broker.find_share_coordinator(principal, request.key)
    elif request.key_type == m.CoordinatorType.TRANSACTION:
        node = await broker.find_transaction_coordinator(principal, request.key)
    elif request.key_type == m.CoordinatorType.GROUP:
        node = await broker.find_coordinator(principal, request.key)
    else:
        raise errors.InvalidRequestError(f"coordinator type {request.key_type} is unknown; groups are 0, "
                                         "transactional ids 1, share groups 2")
    return m.FindCoordinatorResponse(node_id=node.node_id, host=node.host, port=node.port)


async def handle_join_group(broker: IBroker, principal: Principal, request: m.JoinGroupRequest) -> Any:
    """Join; the reply comes when the group's rebalance completes (the broker computes assignments)."""
    if not request.protocols:
        raise errors.InconsistentGroupProtocolError("a join must offer at least one assignor")
    subscription = consumer_protocol.decode_subscription(request.protocols[0].metadata)
    joined = await broker.join_group(principal, groups.JoinRequest(
        group_id=request.group_id, member_id=request.member_id, group_instance_id=request.group_instance_id,
        client_id=REQUEST_CLIENT_ID.get(), client_host=principal.host, session_timeout_ms=request.session_timeout_ms,
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
        code, message = error_code(error)
        results.append(m.LeaveGroupMemberResult(member_id=leaving.member_id, group_instance_id=leaving.group_instance_id,
                                                error_code=code, error_message=message))
    return m.LeaveGroupResponse(members=tuple(results))


def partition_commits(topics: Iterable[Any]) -> tuple[groups.PartitionCommit, ...]:
    """The partition commits of an OffsetCommit or TxnOffsetCommit request's topics (-1 epoch: none given)."""
    return tuple(
        groups.PartitionCommit(
            topic_partition=TopicPartition(topic.name, p.partition_index), offset=p.committed_offset,
            metadata=p.committed_metadata or "",
            leader_epoch=None if p.committed_leader_epoch < 0 else p.committed_leader_epoch,
        )
        for topic in topics for p in topic.partitions
    )


async def handle_offset_commit(broker: IBroker, principal: Principal, request: m.OffsetCommitRequest) -> Any:
    """Commit offsets durably; a refused commit (fenced, stale generation) fails every partition."""
    commits = partition_commits(request.topics)
    _, error = await settle(broker.commit_offsets(principal, groups.OffsetCommitRequest(
        group_id=request.group_id, member_id=request.member_id, group_instance_id=request.group_instance_id,
        generation_id=request.generation_id, offsets=commits,
    )))
    code, message = error_code(error)
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
        code, message = error_code(error)
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
        code, message = error_code(error)
        results.append(m.DeleteGroupResult(group_id=group_id, error_code=code, error_message=message))
    return m.DeleteGroupsResponse(results=tuple(results))
