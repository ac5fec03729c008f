"""Pure translation of forwarded share-group admin calls into native requests, and of the host's answers
back into the broker's share-group values (``shares.messages``) or typed errors.

Used by ``share_routing`` to send an admin call about a share group to the broker hosting it (the
leader of its ``__share_group_state`` partition) over the native protocol, as the clients do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mqbroker import errors
from mqbroker.protocols.native import share_messages as wire
from mqbroker.shares import messages as shares
from mqbroker.shares.partition import PartitionStats


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
        dead_lettered=group.dead_lettered, dead_letter_depth=group.dead_letter_depth)


def _partition(partition: wire.DescribedSharePartition) -> shares.SharePartitionDescription:
    stats = PartitionStats(
        start_offset=partition.start_offset, end_offset=partition.end_offset, available=partition.available,
        acquired=partition.acquired, dead_lettering=partition.dead_lettering, due=partition.due,
        delivery_counts={count.delivery_count: count.records for count in partition.delivery_counts})
    return shares.SharePartitionDescription(topic=partition.topic, partition=partition.partition_index, stats=stats,
                                            scheduled=partition.scheduled, lag=partition.lag)
