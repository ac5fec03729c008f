"""Request and response types of the native share-group APIs (queues on the log).

In KIP-932's spirit, with mqbroker's own layouts: a member heartbeats to its share group's host
(``FindCoordinator`` with key type 2 finds it), fetches records each leased to it
(``ShareFetch``, which may carry acknowledgements), and acknowledges them by offset ranges
(``ShareAcknowledge``: 1 accept, 2 release, 3 reject, 4 renew the lease). A ShareFetch answer
holds whole record batches and, per partition, the ranges of offsets the member acquired with
their delivery counts: the client keeps exactly those records. ``CreateShareGroup``,
``AlterShareGroup``, ``DeleteShareGroup``, ``ListShareGroups`` and ``ShareGroupDescribe``
administer share groups and push subscriptions (a share group with ``push.*`` configs).
"""

from __future__ import annotations

import dataclasses

from mqbroker.protocols.schema import Int8, Int16, Int32, Int64, Records, message, wire

# ---------------------------------------------------------------------------------------------
# ShareGroupHeartbeat


@message
class ShareGroupHeartbeatRequest:
    """Joins (member epoch 0, empty member id), stays in, or leaves (member epoch -1) a share group."""

    group_id: str
    member_id: str = ""
    member_epoch: Int32 = 0
    subscribed_topic_names: tuple[str, ...] = ()


@message
class ShareAssignedTopic:
    """The partitions of one topic a member may fetch from."""

    name: str
    partitions: tuple[Int32, ...]


@message
class ShareGroupHeartbeatResponse:
    """The member's id and epoch, when to heartbeat again, and what it may fetch from."""

    member_id: str
    member_epoch: Int32
    heartbeat_interval_ms: Int32
    assignment: tuple[ShareAssignedTopic, ...]


# ---------------------------------------------------------------------------------------------
# Acknowledgements (in ShareFetch and ShareAcknowledge)


@message
class ShareAcknowledgementBatch:
    """A verdict on offsets ``first_offset..last_offset``: 1 accept, 2 release, 3 reject, 4 renew."""

    first_offset: Int64
    last_offset: Int64
    acknowledge_type: Int8
    #: Why (release and reject): kept as the records' last error, shown in dead-letter headers.
    error: str | None = None


@message
class ShareAcknowledgePartition:
    """Acknowledgements for one partition."""

    partition_index: Int32
    batches: tuple[ShareAcknowledgementBatch, ...]


@message
class ShareAcknowledgeTopic:
    """Acknowledgements for one topic."""

    name: str
    partitions: tuple[ShareAcknowledgePartition, ...]


@message
class ShareAcknowledgeBatchResult:
    """The outcome of one acknowledgement batch (0 once it is replicated)."""

    first_offset: Int64
    last_offset: Int64
    error_code: Int16 = 0
    error_message: str | None = None


@message
class ShareAcknowledgePartitionResult:
    """Outcomes for one partition."""

    partition_index: Int32
    batches: tuple[ShareAcknowledgeBatchResult, ...]


@message
class ShareAcknowledgeTopicResult:
    """Outcomes for one topic."""

    name: str
    partitions: tuple[ShareAcknowledgePartitionResult, ...]


# ---------------------------------------------------------------------------------------------
# ShareFetch


@message
class ShareFetchTopic:
    """Partitions of one topic to fetch from."""

    name: str
    partitions: tuple[Int32, ...]


@message
class ShareFetchRequest:
    """Acknowledges, then acquires up to ``max_records`` records (long-poll up to ``max_wait_ms``).

    ``lease_ms`` -1 leases for the group's ``lease.ms``; ``topics`` empty fetches from every
    partition the member may fetch from.
    """

    group_id: str
    member_id: str
    max_wait_ms: Int32 = 500
    max_records: Int32 = 500
    max_bytes: Int32 = 16 * 1024 * 1024
    lease_ms: Int32 = -1
    topics: tuple[ShareFetchTopic, ...] = ()
    acknowledgements: tuple[ShareAcknowledgeTopic, ...] = ()


@message
class AcquiredRecords:
    """Offsets ``first_offset..last_offset`` leased to the member, each delivered ``delivery_count`` times."""

    first_offset: Int64
    last_offset: Int64
    delivery_count: Int16


@message
class ShareFetchPartitionResult:
    """Whole batches holding the acquired records, and which records those are."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None
    records: Records = b""
    acquired_records: tuple[AcquiredRecords, ...] = ()


@message
class ShareFetchTopicResult:
    """Results for one topic."""

    name: str
    partitions: tuple[ShareFetchPartitionResult, ...]


@message
class ShareFetchResponse:
    """Acquired records per topic and partition, and the outcome of each acknowledgement."""

    topics: tuple[ShareFetchTopicResult, ...]
    acknowledgements: tuple[ShareAcknowledgeTopicResult, ...] = ()


# ---------------------------------------------------------------------------------------------
# ShareAcknowledge


@message
class ShareAcknowledgeRequest:
    """Acknowledges records without fetching; ``lease_ms`` is the new lease of renewals (-1: the group's)."""

    group_id: str
    member_id: str
    lease_ms: Int32 = -1
    topics: tuple[ShareAcknowledgeTopic, ...]


@message
class ShareAcknowledgeResponse:
    """The outcome of each acknowledgement."""

    topics: tuple[ShareAcknowledgeTopicResult, ...]


# ---------------------------------------------------------------------------------------------
# Administration


@message
class CreateShareGroupRequest:
    """Defines a share group over ``topics`` (a push subscription: with ``push.*`` configs)."""

    group_id: str
    topics: tuple[str, ...]
    configs: dict[str, str] = dataclasses.field(default_factory=dict)


@message
class CreateShareGroupResponse:
    """The group is defined (errors travel in the envelope)."""


@message
class AlterShareGroupRequest:
    """Changes a share group's topics (null: unchanged) and configs."""

    group_id: str
    topics: tuple[str, ...] | None = None
    set_configs: dict[str, str] = dataclasses.field(default_factory=dict)
    delete_configs: tuple[str, ...] = ()


@message
class AlterShareGroupResponse:
    """The group is changed."""


@message
class DeleteShareGroupRequest:
    """Deletes a share group without members, with its state and scheduled records."""

    group_id: str


@message
class DeleteShareGroupResponse:
    """The group is deleted."""


@message
class ListShareGroupsRequest:
    """Lists the share groups the answering broker hosts."""


@message
class ListedShareGroup:
    """One share group in a listing."""

    group_id: str
    topics: tuple[str, ...]
    members: Int32
    push_endpoint: str = ""


@message
class ListShareGroupsResponse:
    """The share groups hosted by the answering broker."""

    groups: tuple[ListedShareGroup, ...]


@message
class ShareGroupDescribeRequest:
    """Describes share groups by id (each is answered by its host: ask it)."""

    group_ids: tuple[str, ...]


@message
class DescribedShareMember:
    """One member and how many records it holds leased."""

    member_id: str
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    acquired_records: Int32


@message
class ShareDeliveryCount:
    """How many in-flight records were delivered this many times."""

    delivery_count: Int16
    records: Int32


@message
class DescribedSharePartition:
    """One share partition: its window of the log, its records by state, its lag."""

    topic: str
    partition_index: Int32
    start_offset: Int64
    end_offset: Int64
    available: Int32
    acquired: Int32
    dead_lettering: Int32
    due: Int32
    scheduled: Int64
    lag: Int64
    delivery_counts: tuple[ShareDeliveryCount, ...] = ()


@message
class DescribedShareGroup:
    """A share group's definition (secrets masked), members, partitions and dead letters."""

    group_id: str
    error_code: Int16 = 0
    error_message: str | None = None
    topics: tuple[str, ...] = ()
    configs: dict[str, str] = dataclasses.field(default_factory=dict)
    members: tuple[DescribedShareMember, ...] = ()
    partitions: tuple[DescribedSharePartition, ...] = ()
    dead_lettered: Int64 = 0
    #: Records on the dead-letter topic (-1: the group has none).
    dead_letter_depth: Int64 = -1
    #: How long the group has been without members (0: it has some; -1: not known). Version 1 on.
    unused_ms: Int64 = wire(since=1, default=-1)


@message
class ShareGroupDescribeResponse:
    """One description per group asked for."""

    groups: tuple[DescribedShareGroup, ...]
