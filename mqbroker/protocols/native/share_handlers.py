"""The native protocol's share-group handlers: wire messages ⇄ the ``IBroker`` share-group calls."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mqbroker import errors
from mqbroker.groups.model import TopicPartition
from mqbroker.interfaces import IBroker
from mqbroker.model import AcknowledgeType, Principal
from mqbroker.protocols.deferreds import settle
from mqbroker.protocols.native import share_messages as wire
from mqbroker.protocols.native.group_handlers import REQUEST_CLIENT_ID
from mqbroker.protocols.native.replies import error_code, per_topic
from mqbroker.shares import messages as shares


def acknowledgements(topics: Iterable[wire.ShareAcknowledgeTopic]) -> tuple[shares.Acknowledgement, ...]:
    """Wire acknowledgements → the broker's; an unknown acknowledge type is a bad request."""
    result = []
    for topic in topics:
        for partition in topic.partitions:
            for batch in partition.batches:
                try:
                    kind = AcknowledgeType(batch.acknowledge_type)
                except ValueError:
                    raise errors.InvalidRequestError(
                        f"acknowledge type {batch.acknowledge_type} is unknown: 1 accept, 2 release, 3 reject, 4 renew"
                    ) from None
                result.append(shares.Acknowledgement(
                    topic=topic.name, partition=partition.partition_index, first_offset=batch.first_offset,
                    last_offset=batch.last_offset, kind=kind, error=batch.error or ""))
    return tuple(result)


def acknowledge_results(results: Iterable[shares.AcknowledgeResult]) -> tuple[wire.ShareAcknowledgeTopicResult, ...]:
    """The broker's acknowledgement outcomes, grouped by topic and partition."""
    by_partition: dict[tuple[str, int], list[wire.ShareAcknowledgeBatchResult]] = {}
    for result in results:
        code, message = error_code(result.error)
        by_partition.setdefault((result.topic, result.partition), []).append(wire.ShareAcknowledgeBatchResult(
            first_offset=result.first_offset, last_offset=result.last_offset, error_code=code, error_message=message))
    by_topic: dict[str, list[wire.ShareAcknowledgePartitionResult]] = {}
    for (topic, partition), batches in by_partition.items():
        by_topic.setdefault(topic, []).append(
            wire.ShareAcknowledgePartitionResult(partition_index=partition, batches=tuple(batches)))
    return tuple(wire.ShareAcknowledgeTopicResult(name=name, partitions=tuple(partitions))
                 for name, partitions in by_topic.items())


async def handle_share_group_heartbeat(broker: IBroker, principal: Principal,
                                       request: wire.ShareGroupHeartbeatRequest) -> Any:
    """Join, stay in or leave a share group."""
    answer = await broker.share_group_heartbeat(principal, shares.ShareHeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        client_id=REQUEST_CLIENT_ID.get(), client_host=principal.host, topics=request.subscribed_topic_names))
    by_topic: dict[str, list[int]] = {}
    for topic_partition in answer.assignment:
        by_topic.setdefault(topic_partition.topic, []).append(topic_partition.partition)
    return wire.ShareGroupHeartbeatResponse(
        member_id=answer.member_id, member_epoch=answer.member_epoch,
        heartbeat_interval_ms=answer.heartbeat_interval_ms,
        assignment=tuple(wire.ShareAssignedTopic(name=topic, partitions=tuple(partitions))
                         for topic, partitions in by_topic.items()))


async def handle_share_fetch(broker: IBroker, principal: Principal, request: wire.ShareFetchRequest) -> Any:
    """Acknowledge, then acquire records (long-poll)."""
    partitions = tuple(TopicPartition(topic.name, partition) for topic in request.topics for partition in topic.partitions)
    answer = await broker.share_fetch(principal, shares.ShareFetchRequest(
        group_id=request.group_id, member_id=request.member_id, partitions=partitions,
        records_max=request.max_records, bytes_max=request.max_bytes, wait_ms_max=request.max_wait_ms,
        lease_ms=request.lease_ms, acknowledgements=acknowledgements(request.acknowledgements)))
    return wire.ShareFetchResponse(
        topics=per_topic(wire.ShareFetchTopicResult, ((records.topic, _fetched(records)) for records in answer.partitions)),
        acknowledgements=acknowledge_results(answer.acknowledgements))


def _fetched(records: shares.SharePartitionRecords) -> wire.ShareFetchPartitionResult:
    code, message = error_code(records.error)
    return wire.ShareFetchPartitionResult(
        partition_index=records.partition, error_code=code, error_message=message, records=records.records,
        acquired_records=tuple(wire.AcquiredRecords(first_offset=r.first, last_offset=r.last,
                                                    delivery_count=r.delivery_count) for r in records.acquired))


async def handle_share_acknowledge(broker: IBroker, principal: Principal, request: wire.ShareAcknowledgeRequest) -> Any:
    """Settle acquired records."""
    results = await broker.share_acknowledge(principal, shares.ShareAcknowledgeRequest(
        group_id=request.group_id, member_id=request.member_id, lease_ms=request.lease_ms,
        acknowledgements=acknowledgements(request.topics)))
    return wire.ShareAcknowledgeResponse(topics=acknowledge_results(results))


async def handle_create_share_group(broker: IBroker, principal: Principal, request: wire.CreateShareGroupRequest) -> Any:
    """Define a share group (or a push subscription)."""
    await broker.create_share_group(principal, request.group_id, request.topics, dict(request.configs))
    return wire.CreateShareGroupResponse()


async def handle_alter_share_group(broker: IBroker, principal: Principal, request: wire.AlterShareGroupRequest) -> Any:
    """Change a share group's topics and configs."""
    await broker.alter_share_group(principal, request.group_id, request.topics, dict(request.set_configs),
                                   request.delete_configs)
    return wire.AlterShareGroupResponse()


async def handle_delete_share_group(broker: IBroker, principal: Principal, request: wire.DeleteShareGroupRequest) -> Any:
    """Delete a share group without members."""
    await broker.delete_share_group(principal, request.group_id)
    return wire.DeleteShareGroupResponse()


async def handle_list_share_groups(broker: IBroker, principal: Principal, request: wire.ListShareGroupsRequest) -> Any:
    """The share groups the answering broker hosts."""
    listed = await broker.list_share_groups(principal)
    return wire.ListShareGroupsResponse(groups=tuple(
        wire.ListedShareGroup(group_id=group.group_id, topics=group.topics, members=group.members,
                              push_endpoint=group.push_endpoint) for group in listed))


async def handle_share_group_describe(broker: IBroker, principal: Principal,
                                      request: wire.ShareGroupDescribeRequest) -> Any:
    """Each group's definition, members, partitions and dead letters (or its error)."""
    described = []
    for group_id in request.group_ids:
        group, error = await settle(broker.describe_share_group(principal, group_id))
        code, message = error_code(error)
        if group is None:
            described.append(wire.DescribedShareGroup(group_id=group_id, error_code=code, error_message=message))
            continue
        described.append(wire.DescribedShareGroup(
            group_id=group_id, topics=group.topics, configs=dict(group.configs),
            members=tuple(wire.DescribedShareMember(member_id=member.member_id, client_id=member.client_id,
                                                    client_host=member.client_host,
                                                    subscribed_topic_names=member.topics,
                                                    acquired_records=member.acquired) for member in group.members),
            partitions=tuple(_partition(partition) for partition in group.partitions),
            dead_lettered=group.dead_lettered, dead_letter_depth=group.dead_letter_depth, unused_ms=group.unused_ms))
    return wire.ShareGroupDescribeResponse(groups=tuple(described))


def _partition(partition: shares.SharePartitionDescription) -> wire.DescribedSharePartition:
    stats = partition.stats
    return wire.DescribedSharePartition(
        topic=partition.topic, partition_index=partition.partition, start_offset=stats.start_offset,
        end_offset=stats.end_offset, available=stats.available, acquired=stats.acquired,
        dead_lettering=stats.dead_lettering, due=stats.due, scheduled=partition.scheduled, lag=partition.lag,
        delivery_counts=tuple(wire.ShareDeliveryCount(delivery_count=count, records=records)
                              for count, records in stats.delivery_counts.items()))

