"""Pure translation of forwarded share-group calls into native requests, and of the host's answers
back into the broker's share-group values (``shares.messages``) or typed errors.

Used by ``share_routing`` to send a call about a share group (admin, or a member's heartbeat, fetch or
acknowledgement) to the broker hosting it (the leader of its ``__share_group_state`` partition) over the
native protocol, as the clients do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mqbroker import errors
from mqbroker.groups.model import TopicPartition
from mqbroker.protocols.native import share_messages as wire
from mqbroker.shares import messages as shares
from mqbroker.shares.partition_values import AcquiredRange, PartitionStats


def create_request(group_id: str, topics: Sequence[str], configs: Mapping[str, str]) -> wire.CreateShareGroupRequest:
    """A CreateShareGroup of ``group_id``."""
    return wire.CreateShareGroupRequest(group_id=group_id, topics=tuple(topics), configs=dict(configs))


def alter_request(group_id: str, topics: Sequence[str] | None, set_configs: Mapping[str, str],
                  delete_configs: Sequence[str]) -> wire.AlterShareGroupRequest:
    """An AlterShareGroup of ``group_id`` (``topics`` None: unchanged)."""
    return wire.AlterShareGroupRequest(group_id=group_id, topics=None if topics is None else tuple(topics),
                                       set_configs=dict(set_configs), delete_configs=tuple(delete_configs))


def delete_request(group_id: str) -> wire.DeleteShareGroupRequest:
    """A DeleteShareGroup of ``group_id``."""
    return wire.DeleteShareGroupRequest(group_id=group_id)


def describe_request(group_id: str) -> wire.ShareGroupDescribeRequest:
    """A ShareGroupDescribe of the one group ``group_id``."""
    return wire.ShareGroupDescribeRequest(group_ids=(group_id,))


def listings(response: wire.ListShareGroupsResponse) -> list[shares.ShareGroupListing]:
    """A broker's ListShareGroups answer as the broker's listings."""
    return [shares.ShareGroupListing(group_id=group.group_id, topics=tuple(group.topics), members=group.members,
                                     push_endpoint=group.push_endpoint) for group in response.groups]


def description(response: wire.ShareGroupDescribeResponse, group_id: str) -> shares.ShareGroupDescription:
    """The host's ShareGroupDescribe answer as a ``ShareGroupDescription`` (its error raised as itself)."""
    found = [group for group in response.groups if group.group_id == group_id]
    if not found:
        raise errors.UnknownServerError(f"the share group's host answered without group {group_id!r}")
    group = found[0]
    if group.error_code:
        raise errors.error_for_code(group.error_code, group.error_message or f"describing {group_id!r} failed")
    return shares.ShareGroupDescription(
        group_id=group.group_id, topics=tuple(group.topics), configs=dict(group.configs),
        members=tuple(shares.ShareMemberDescription(
            member_id=member.member_id, client_id=member.client_id, client_host=member.client_host,
            topics=tuple(member.subscribed_topic_names), acquired=member.acquired_records) for member in group.members),
        partitions=tuple(_partition(partition) for partition in group.partitions),
        dead_lettered=group.dead_lettered, dead_letter_depth=group.dead_letter_depth, unused_ms=group.unused_ms)


def _partition(partition: wire.DescribedSharePartition) -> shares.SharePartitionDescription:
    stats = PartitionStats(
        start_offset=partition.start_offset, end_offset=partition.end_offset, available=partition.available,
        acquired=partition.acquired, dead_lettering=partition.dead_lettering, due=partition.due,
        delivery_counts={count.delivery_count: count.records for count in partition.delivery_counts})
    return shares.SharePartitionDescription(topic=partition.topic, partition=partition.partition_index, stats=stats,
                                            scheduled=partition.scheduled, lag=partition.lag)


# -- data calls: a member's heartbeat, fetch and acknowledgement, sent to the group's host -------------


def heartbeat_request(request: shares.ShareHeartbeatRequest) -> wire.ShareGroupHeartbeatRequest:
    """A ShareGroupHeartbeat of the member (its client id and host are this broker's at the host)."""
    return wire.ShareGroupHeartbeatRequest(group_id=request.group_id, member_id=request.member_id,
                                           member_epoch=request.member_epoch, subscribed_topic_names=request.topics)


def heartbeat_answer(response: wire.ShareGroupHeartbeatResponse) -> shares.ShareHeartbeatResponse:
    """The host's ShareGroupHeartbeat answer as the broker's."""
    return shares.ShareHeartbeatResponse(
        member_id=response.member_id, member_epoch=response.member_epoch,
        heartbeat_interval_ms=response.heartbeat_interval_ms,
        assignment=tuple(TopicPartition(topic.name, partition) for topic in response.assignment
                         for partition in topic.partitions))


def fetch_request(request: shares.ShareFetchRequest) -> wire.ShareFetchRequest:
    """A ShareFetch (with its piggybacked acknowledgements) of the member."""
    partitions: dict[str, list[int]] = {}
    for topic_partition in request.partitions:
        partitions.setdefault(topic_partition.topic, []).append(topic_partition.partition)
    return wire.ShareFetchRequest(
        group_id=request.group_id, member_id=request.member_id, max_wait_ms=request.wait_ms_max,
        max_records=request.records_max, max_bytes=request.bytes_max, lease_ms=request.lease_ms,
        topics=tuple(wire.ShareFetchTopic(name=topic, partitions=tuple(indices))
                     for topic, indices in partitions.items()),
        acknowledgements=_acknowledge_topics(request.acknowledgements))


def fetch_answer(response: wire.ShareFetchResponse) -> shares.ShareFetchResponse:
    """The host's ShareFetch answer as the broker's (a partition's error as its typed error)."""
    return shares.ShareFetchResponse(
        partitions=tuple(shares.SharePartitionRecords(
            topic=topic.name, partition=partition.partition_index, records=bytes(partition.records or b""),
            acquired=tuple(AcquiredRange(acquired.first_offset, acquired.last_offset, acquired.delivery_count)
                           for acquired in partition.acquired_records),
            error=_error(partition.error_code, partition.error_message))
            for topic in response.topics for partition in topic.partitions),
        acknowledgements=acknowledge_results(response.acknowledgements))


def acknowledge_request(request: shares.ShareAcknowledgeRequest) -> wire.ShareAcknowledgeRequest:
    """A ShareAcknowledge of the member."""
    return wire.ShareAcknowledgeRequest(group_id=request.group_id, member_id=request.member_id,
                                        lease_ms=request.lease_ms,
                                        topics=_acknowledge_topics(request.acknowledgements))


def acknowledge_results(topics: Sequence[wire.ShareAcknowledgeTopicResult]) -> tuple[shares.AcknowledgeResult, ...]:
    """The host's acknowledgement outcomes as the broker's (each error as its typed error)."""
    return tuple(shares.AcknowledgeResult(topic=topic.name, partition=partition.partition_index,
                                          first_offset=batch.first_offset, last_offset=batch.last_offset,
                                          error=_error(batch.error_code, batch.error_message))
                 for topic in topics for partition in topic.partitions for batch in partition.batches)


def _acknowledge_topics(acknowledgements: Sequence[shares.Acknowledgement]) -> tuple[wire.ShareAcknowledgeTopic, ...]:
    """Acknowledgements as wire topics, each run of one topic (and partition) merged, their order kept."""
    runs: list[tuple[str, list[tuple[int, list[wire.ShareAcknowledgementBatch]]]]] = []
    for ack in acknowledgements:
        batch = wire.ShareAcknowledgementBatch(first_offset=ack.first_offset, last_offset=ack.last_offset,
                                               acknowledge_type=int(ack.kind), error=ack.error or None)
        if not runs or runs[-1][0] != ack.topic:
            runs.append((ack.topic, []))
        partitions = runs[-1][1]
        if not partitions or partitions[-1][0] != ack.partition:
            partitions.append((ack.partition, []))
        partitions[-1][1].append(batch)
    return tuple(wire.ShareAcknowledgeTopic(name=topic, partitions=tuple(
        wire.ShareAcknowledgePartition(partition_index=partition, batches=tuple(batches))
        for partition, batches in partitions)) for topic, partitions in runs)


def _error(code: int, message: str | None) -> errors.BrokerError | None:
    return errors.error_for_code(code, message or "") if code else None
