"""The Kafka messages of cluster operations: ElectLeaders, DescribeLogDirs, AlterReplicaLogDirs, the partition
reassignments, DescribeQuorum, DescribeTopicPartitions and ListConfigResources.

Written from Kafka's published message specifications, one class per struct; the field
annotations are the wire schema and ``wire(...)`` says in which versions a field travels
(see ``mqbroker.protocols.schema``). Versions outside the ranges in ``apis.py`` are not modelled.
"""

from __future__ import annotations

from mqbroker.protocols.schema import Int8, Int16, Int32, Int64, UInt16, Uuid, ZERO_UUID, message, wire

# -- ElectLeaders (43) ---------------------------------------------------------------------------


@message
class ElectionTopicPartitions:
    """Partitions of one topic to elect leaders for."""

    topic: str
    partitions: tuple[Int32, ...]


@message
class ElectLeadersRequest:
    """Elect the preferred (0) or any in-sync-or-not (1, unclean) replica leader; null: every partition."""

    election_type: Int8 = wire(since=1, default=0)
    topic_partitions: tuple[ElectionTopicPartitions, ...] | None
    timeout_ms: Int32 = 60000


@message
class ElectionPartitionResult:
    """The outcome for one partition."""

    partition_id: Int32
    error_code: Int16
    error_message: str | None


@message
class ReplicaElectionResult:
    """The outcomes for the partitions of one topic."""

    topic: str
    partition_result: tuple[ElectionPartitionResult, ...]


@message
class ElectLeadersResponse:
    """One outcome per partition (a top-level error from version 1)."""

    throttle_time_ms: Int32
    error_code: Int16 = wire(since=1, default=0)
    replica_election_results: tuple[ReplicaElectionResult, ...]


# -- DescribeLogDirs (35) and AlterReplicaLogDirs (34) ------------------------------------------


@message
class DescribableLogDirTopic:
    """Partitions of one topic to describe."""

    topic: str
    partitions: tuple[Int32, ...]


@message
class DescribeLogDirsRequest:
    """Where this broker's replicas of these topics (null: all) live and their sizes."""

    topics: tuple[DescribableLogDirTopic, ...] | None


@message
class DescribeLogDirsPartition:
    """One replica in a log directory."""

    partition_index: Int32
    partition_size: Int64
    offset_lag: Int64
    is_future_key: bool


@message
class DescribeLogDirsTopic:
    """The replicas of one topic in a log directory."""

    name: str
    partitions: tuple[DescribeLogDirsPartition, ...]


@message
class DescribeLogDirsResult:
    """One log directory and the replicas in it."""

    error_code: Int16
    log_dir: str
    topics: tuple[DescribeLogDirsTopic, ...]
    total_bytes: Int64 = wire(since=4, default=-1)
    usable_bytes: Int64 = wire(since=4, default=-1)


@message
class DescribeLogDirsResponse:
    """This broker's log directories."""

    throttle_time_ms: Int32
    error_code: Int16 = wire(since=3, default=0)
    results: tuple[DescribeLogDirsResult, ...]


@message
class AlterReplicaLogDirTopic:
    """Partitions of one topic to move."""

    name: str
    partitions: tuple[Int32, ...]


@message
class AlterReplicaLogDir:
    """The directory to move some replicas to."""

    path: str
    topics: tuple[AlterReplicaLogDirTopic, ...]


@message
class AlterReplicaLogDirsRequest:
    """Move replicas on this broker between its log directories."""

    dirs: tuple[AlterReplicaLogDir, ...]


@message
class AlterReplicaLogDirPartitionResult:
    """The outcome for one partition."""

    partition_index: Int32
    error_code: Int16


@message
class AlterReplicaLogDirTopicResult:
    """The outcomes for the partitions of one topic."""

    topic_name: str
    partitions: tuple[AlterReplicaLogDirPartitionResult, ...]


@message
class AlterReplicaLogDirsResponse:
    """One outcome per partition."""

    throttle_time_ms: Int32
    results: tuple[AlterReplicaLogDirTopicResult, ...]


# -- AlterPartitionReassignments (45) and ListPartitionReassignments (46) ------------------------


@message
class ReassignablePartition:
    """A partition's target replicas (null: cancel its reassignment)."""

    partition_index: Int32
    replicas: tuple[Int32, ...] | None = None


@message
class ReassignableTopic:
    """Partitions of one topic to move."""

    name: str
    partitions: tuple[ReassignablePartition, ...]


@message
class AlterPartitionReassignmentsRequest:
    """Move partitions' replicas to other brokers."""

    timeout_ms: Int32 = 60000
    allow_replication_factor_change: bool = wire(since=1, default=True)
    topics: tuple[ReassignableTopic, ...]


@message
class ReassignablePartitionResponse:
    """Whether one partition's reassignment started."""

    partition_index: Int32
    error_code: Int16
    error_message: str | None


@message
class ReassignableTopicResponse:
    """The outcomes for the partitions of one topic."""

    name: str
    partitions: tuple[ReassignablePartitionResponse, ...]


@message
class AlterPartitionReassignmentsResponse:
    """One outcome per partition, or a top-level error."""

    throttle_time_ms: Int32
    allow_replication_factor_change: bool = wire(since=1, default=True)
    error_code: Int16
    error_message: str | None
    responses: tuple[ReassignableTopicResponse, ...]


@message
class ListPartitionReassignmentsTopics:
    """Partitions of one topic to look at."""

    name: str
    partition_indexes: tuple[Int32, ...]


@message
class ListPartitionReassignmentsRequest:
    """The reassignments in progress (of these partitions; null: all)."""

    timeout_ms: Int32 = 60000
    topics: tuple[ListPartitionReassignmentsTopics, ...] | None = None


@message
class OngoingPartitionReassignment:
    """One partition being moved."""

    partition_index: Int32
    replicas: tuple[Int32, ...]
    adding_replicas: tuple[Int32, ...]
    removing_replicas: tuple[Int32, ...]


@message
class OngoingTopicReassignment:
    """The partitions of one topic being moved."""

    name: str
    partitions: tuple[OngoingPartitionReassignment, ...]


@message
class ListPartitionReassignmentsResponse:
    """The reassignments in progress."""

    throttle_time_ms: Int32
    error_code: Int16
    error_message: str | None
    topics: tuple[OngoingTopicReassignment, ...]


# -- DescribeQuorum (55) -------------------------------------------------------------------------


@message
class QuorumPartitionRequest:
    """A partition of a Raft quorum's log."""

    partition_index: Int32


@message
class QuorumTopicRequest:
    """A Raft quorum's log topic."""

    topic_name: str
    partitions: tuple[QuorumPartitionRequest, ...]


@message
class DescribeQuorumRequest:
    """Describe the controller quorum (``__cluster_metadata`` partition 0)."""

    topics: tuple[QuorumTopicRequest, ...]


@message
class ReplicaState:
    """One member of the quorum and how far its log reaches (-1: not known)."""

    replica_id: Int32
    replica_directory_id: Uuid = wire(since=2, default=ZERO_UUID)
    log_end_offset: Int64
    last_fetch_timestamp: Int64 = wire(since=1, default=-1)
    last_caught_up_timestamp: Int64 = wire(since=1, default=-1)


@message
class QuorumPartitionData:
    """The quorum of one log partition: its leader, epoch, high watermark, voters and observers."""

    partition_index: Int32
    error_code: Int16
    error_message: str | None = wire(since=2, default=None)
    leader_id: Int32
    leader_epoch: Int32
    high_watermark: Int64
    current_voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]


@message
class QuorumTopicData:
    """The quorum of a log topic."""

    topic_name: str
    partitions: tuple[QuorumPartitionData, ...]


@message
class QuorumListener:
    """Where a quorum member listens."""

    name: str
    host: str
    port: UInt16


@message
class QuorumNode:
    """A quorum member and its listeners."""

    node_id: Int32
    listeners: tuple[QuorumListener, ...]


@message
class DescribeQuorumResponse:
    """The controller quorum, or why it cannot be described."""

    error_code: Int16
    error_message: str | None = wire(since=2, default=None)
    topics: tuple[QuorumTopicData, ...]
    nodes: tuple[QuorumNode, ...] = wire(since=2, default=())


# -- DescribeTopicPartitions (75) ----------------------------------------------------------------


@message
class TopicRequest:
    """A topic to describe, by name."""

    name: str


@message
class Cursor:
    """Where a page of partitions starts (or the next one would)."""

    topic_name: str
    partition_index: Int32


@message
class DescribeTopicPartitionsRequest:
    """Describe topics' partitions a page at a time (no topics: every topic)."""

    topics: tuple[TopicRequest, ...]
    response_partition_limit: Int32 = 2000
    cursor: Cursor | None = None


@message
class DescribeTopicPartitionsResponsePartition:
    """One partition: leader, epoch, replicas, in-sync replicas."""

    error_code: Int16
    partition_index: Int32
    leader_id: Int32
    leader_epoch: Int32 = -1
    replica_nodes: tuple[Int32, ...]
    isr_nodes: tuple[Int32, ...]
    eligible_leader_replicas: tuple[Int32, ...] | None = None
    last_known_elr: tuple[Int32, ...] | None = None
    offline_replicas: tuple[Int32, ...]


@message
class DescribeTopicPartitionsResponseTopic:
    """One topic and the partitions of it on this page."""

    error_code: Int16
    name: str | None
    topic_id: Uuid = ZERO_UUID
    is_internal: bool = False
    partitions: tuple[DescribeTopicPartitionsResponsePartition, ...]
    topic_authorized_operations: Int32 = -(2**31)


@message
class DescribeTopicPartitionsResponse:
    """A page of topics' partitions, and where the next page starts (null: this was the last)."""

    throttle_time_ms: Int32
    topics: tuple[DescribeTopicPartitionsResponseTopic, ...]
    next_cursor: Cursor | None = None


# -- ListConfigResources (74) --------------------------------------------------------------------


@message
class ListConfigResourcesRequest:
    """The resources that have configurations (of these types; version 0: client metrics only)."""

    resource_types: tuple[Int8, ...] = wire(since=1, default=())


@message
class ConfigResource:
    """One resource with a configuration."""

    resource_name: str
    resource_type: Int8 = wire(since=1, default=16)


@message
class ListConfigResourcesResponse:
    """The resources found."""

    throttle_time_ms: Int32
    error_code: Int16
    config_resources: tuple[ConfigResource, ...]
