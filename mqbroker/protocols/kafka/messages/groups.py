"""The Kafka consumer-group messages: membership (Join, Sync, Heartbeat, Leave), offsets and group admin.

Written from Kafka's published message specifications, one class per struct; the field
annotations are the wire schema and ``wire(...)`` says in which versions a field travels
(see ``mqbroker.protocols.schema``). Versions outside the ranges in ``apis.py`` are not modelled.
"""

from __future__ import annotations

from mqbroker.protocols.schema import Int16, Int32, Int64, message, wire


@message
class JoinGroupRequestProtocol:
    """One assignor the member supports, with its subscription for that assignor."""

    name: str
    metadata: bytes


@message
class JoinGroupRequest:
    """Join (or rejoin) a group; answered when the group's rebalance completes."""

    group_id: str
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32 = wire(since=1, default=-1)
    member_id: str
    group_instance_id: str | None = wire(since=5, default=None)
    protocol_type: str
    protocols: tuple[JoinGroupRequestProtocol, ...]
    reason: str | None = wire(since=8, default=None)


@message
class JoinGroupResponseMember:
    """A member and its subscription, sent to the group's leader only."""

    member_id: str
    group_instance_id: str | None = wire(since=5, default=None)
    metadata: bytes


@message
class JoinGroupResponse:
    """The generation joined, the assignor chosen and the leader's member id."""

    throttle_time_ms: Int32 = wire(since=2, default=0)
    error_code: Int16
    generation_id: Int32 = -1
    protocol_type: str | None = wire(since=7, default=None)
    protocol_name: str | None = wire(nullable_since=7)
    leader: str
    skip_assignment: bool = wire(since=9, default=False)
    member_id: str
    members: tuple[JoinGroupResponseMember, ...]


@message
class SyncGroupRequestAssignment:
    """The assignment the leader computed for one member."""

    member_id: str
    assignment: bytes


@message
class SyncGroupRequest:
    """Collect this member's assignment for its generation (the leader also hands them in)."""

    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = wire(since=3, default=None)
    protocol_type: str | None = wire(since=5, default=None)
    protocol_name: str | None = wire(since=5, default=None)
    assignments: tuple[SyncGroupRequestAssignment, ...]


@message
class SyncGroupResponse:
    """The member's assignment for its generation."""

    throttle_time_ms: Int32 = wire(since=1, default=0)
    error_code: Int16
    protocol_type: str | None = wire(since=5, default=None)
    protocol_name: str | None = wire(since=5, default=None)
    assignment: bytes


@message
class HeartbeatRequest:
    """A member is alive (and has not been asked to rejoin)."""

    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = wire(since=3, default=None)


@message
class HeartbeatResponse:
    """None, or REBALANCE_IN_PROGRESS: rejoin."""

    throttle_time_ms: Int32 = wire(since=1, default=0)
    error_code: Int16


@message
class MemberIdentity:
    """A member leaving a group."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = wire(since=5, default=None)


@message
class LeaveGroupRequest:
    """Members leave a group at once (one member before version 3, a batch after)."""

    group_id: str
    member_id: str = wire(until=2, default="")
    members: tuple[MemberIdentity, ...] = wire(since=3, default=())


@message
class MemberResponse:
    """The outcome of one member's leave."""

    member_id: str
    group_instance_id: str | None
    error_code: Int16


@message
class LeaveGroupResponse:
    """The outcome of a leave, per member from version 3 on."""

    throttle_time_ms: Int32 = wire(since=1, default=0)
    error_code: Int16
    members: tuple[MemberResponse, ...] = wire(since=3, default=())


@message
class OffsetCommitRequestPartition:
    """The position committed for one partition."""

    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = wire(since=6, default=-1)
    committed_metadata: str | None


@message
class OffsetCommitRequestTopic:
    """The positions committed for one topic's partitions."""

    name: str
    partitions: tuple[OffsetCommitRequestPartition, ...]


@message
class OffsetCommitRequest:
    """Commit positions for a group (as a member of a generation, or standalone with -1)."""

    group_id: str
    generation_id_or_member_epoch: Int32 = -1
    member_id: str
    group_instance_id: str | None = wire(since=7, default=None)
    retention_time_ms: Int64 = wire(until=4, default=-1)
    topics: tuple[OffsetCommitRequestTopic, ...]


@message
class OffsetCommitResponsePartition:
    """Whether one partition's position was committed."""

    partition_index: Int32
    error_code: Int16


@message
class OffsetCommitResponseTopic:
    """The commit outcome for one topic's partitions."""

    name: str
    partitions: tuple[OffsetCommitResponsePartition, ...]


@message
class OffsetCommitResponse:
    """The commit outcome, per partition."""

    throttle_time_ms: Int32 = wire(since=3, default=0)
    topics: tuple[OffsetCommitResponseTopic, ...]


@message
class OffsetFetchRequestTopic:
    """The partitions of one topic whose committed offsets are wanted (up to version 7)."""

    name: str
    partition_indexes: tuple[Int32, ...]


@message
class OffsetFetchRequestGroupTopic:
    """The partitions of one topic whose committed offsets are wanted (version 8 on)."""

    name: str
    partition_indexes: tuple[Int32, ...]


@message
class OffsetFetchRequestGroup:
    """One group's committed offsets wanted (null topics: all of them)."""

    group_id: str
    member_id: str | None = wire(since=9, default=None)
    member_epoch: Int32 = wire(since=9, default=-1)
    topics: tuple[OffsetFetchRequestGroupTopic, ...] | None


@message
class OffsetFetchRequest:
    """Read committed offsets: one group up to version 7, several from version 8."""

    group_id: str = wire(until=7, default="")
    topics: tuple[OffsetFetchRequestTopic, ...] | None = wire(until=7, nullable_since=2, default=())
    groups: tuple[OffsetFetchRequestGroup, ...] = wire(since=8, default=())
    require_stable: bool = wire(since=7, default=False)


@message
class OffsetFetchResponsePartition:
    """One partition's committed offset (-1: none)."""

    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = wire(since=5, default=-1)
    metadata: str | None
    error_code: Int16


@message
class OffsetFetchResponseTopic:
    """One topic's committed offsets (up to version 7)."""

    name: str
    partitions: tuple[OffsetFetchResponsePartition, ...]


@message
class OffsetFetchResponseGroupPartition:
    """One partition's committed offset (-1: none), version 8 on."""

    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    metadata: str | None
    error_code: Int16


@message
class OffsetFetchResponseGroupTopic:
    """One topic's committed offsets, version 8 on."""

    name: str
    partitions: tuple[OffsetFetchResponseGroupPartition, ...]


@message
class OffsetFetchResponseGroup:
    """One group's committed offsets, or the error reading them."""

    group_id: str
    topics: tuple[OffsetFetchResponseGroupTopic, ...]
    error_code: Int16 = 0


@message
class OffsetFetchResponse:
    """Committed offsets, per group and partition."""

    throttle_time_ms: Int32 = wire(since=3, default=0)
    topics: tuple[OffsetFetchResponseTopic, ...] = wire(until=7, default=())
    error_code: Int16 = wire(since=2, until=7, default=0)
    groups: tuple[OffsetFetchResponseGroup, ...] = wire(since=8, default=())


@message
class ListGroupsRequest:
    """List groups, optionally only those in some states or of some types."""

    states_filter: tuple[str, ...] = wire(since=4, default=())
    types_filter: tuple[str, ...] = wire(since=5, default=())


@message
class ListedGroup:
    """One group: its id, protocol type, state and type."""

    group_id: str
    protocol_type: str
    group_state: str = wire(since=4, default="")
    group_type: str = wire(since=5, default="")


@message
class ListGroupsResponse:
    """The groups the caller may describe."""

    throttle_time_ms: Int32 = wire(since=1, default=0)
    error_code: Int16
    groups: tuple[ListedGroup, ...]


@message
class DescribeGroupsRequest:
    """Describe groups: state, assignor and members."""

    groups: tuple[str, ...]
    include_authorized_operations: bool = wire(since=3, default=False)


@message
class DescribedGroupMember:
    """One member of a group, with its subscription and assignment bytes."""

    member_id: str
    group_instance_id: str | None = wire(since=4, default=None)
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@message
class DescribedGroup:
    """One group's state, protocol and members, or the error describing it."""

    error_code: Int16
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedGroupMember, ...]
    authorized_operations: Int32 = wire(since=3, default=-2147483648)


@message
class DescribeGroupsResponse:
    """The described groups."""

    throttle_time_ms: Int32 = wire(since=1, default=0)
    groups: tuple[DescribedGroup, ...]


@message
class DeleteGroupsRequest:
    """Delete empty groups and their committed offsets."""

    groups_names: tuple[str, ...]


@message
class DeletableGroupResult:
    """Whether one group was deleted."""

    group_id: str
    error_code: Int16


@message
class DeleteGroupsResponse:
    """The deletion outcome, per group."""

    throttle_time_ms: Int32
    results: tuple[DeletableGroupResult, ...]


@message
class OffsetDeleteRequestPartition:
    """One partition whose committed offset is to be deleted."""

    partition_index: Int32


@message
class OffsetDeleteRequestTopic:
    """Partitions of one topic whose committed offsets are to be deleted."""

    name: str
    partitions: tuple[OffsetDeleteRequestPartition, ...]


@message
class OffsetDeleteRequest:
    """Delete a group's committed offsets of topics none of its members subscribes to."""

    group_id: str
    topics: tuple[OffsetDeleteRequestTopic, ...]


@message
class OffsetDeleteResponsePartition:
    """Whether one partition's committed offset was deleted."""

    partition_index: Int32
    error_code: Int16


@message
class OffsetDeleteResponseTopic:
    """The outcome for one topic's partitions."""

    name: str
    partitions: tuple[OffsetDeleteResponsePartition, ...]


@message
class OffsetDeleteResponse:
    """The group's error (unknown group, not authorized) and each partition's outcome."""

    error_code: Int16
    throttle_time_ms: Int32 = 0
    topics: tuple[OffsetDeleteResponseTopic, ...] = ()
