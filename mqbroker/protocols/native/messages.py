"""Request and response types of every native-protocol API, and the table of supported versions.

The field annotations are the wire schema (see ``schema``); docs/protocol.md shows them as
tables. API keys reuse Kafka's numbers so that operators recognise them, but the layouts are
mqbroker's own: this is not the Kafka wire protocol.

Conventions: ``-1`` means "none" or "broker default" for ids, epochs, counts and offsets;
every per-item result carries ``error_code`` (an ``mqbroker.errors.ErrorCode``) and a
nullable ``error_message``. A failure of the whole request travels in the response envelope
instead (``ErrorResponse``, see ``codec``), so response types hold no top-level error field.
"""

from __future__ import annotations

import dataclasses
import enum

from mqbroker.protocols.native import share_messages as share
from mqbroker.protocols.native.txn_messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from mqbroker.protocols.schema import Int8, Int16, Int32, Int64, Records, message, wire


class ApiKey(enum.IntEnum):
    """Identifies the API of a request (Kafka's numbers where Kafka has the API)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    #: mqbroker's own APIs (no Kafka equivalent) are numbered from 1100.
    CREATE_CONNECTOR = 1100
    ALTER_CONNECTOR = 1101
    DESCRIBE_CONNECTORS = 1102
    CREATE_SHARE_GROUP = 1110
    ALTER_SHARE_GROUP = 1111
    DELETE_SHARE_GROUP = 1112
    LIST_SHARE_GROUPS = 1113


class Acks(enum.IntEnum):
    """How many replicas must have a produced batch before the broker answers."""

    NONE = 0  # no response at all
    LEADER = 1
    ALL = -1


class IsolationLevel(enum.IntEnum):
    """Which records a fetch may see."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class OffsetSpec(enum.IntEnum):
    """Special ``timestamp`` values of a ListOffsets partition (any other value is epoch ms)."""

    LATEST = -1
    EARLIEST = -2


class CoordinatorType(enum.IntEnum):
    """What a FindCoordinator key names."""

    GROUP = 0
    TRANSACTION = 1
    SHARE = 2


class ConfigResourceType(enum.IntEnum):
    """What a config resource name names (Kafka's numbers)."""

    TOPIC = 2
    BROKER = 4


class ConnectorAction(enum.IntEnum):
    """What an AlterConnector request does."""

    PAUSE = 0
    RESUME = 1
    DELETE = 2


class ConfigOperation(enum.IntEnum):
    """What an incremental config alteration does."""

    SET = 0
    DELETE = 1


# ---------------------------------------------------------------------------------------------
# ApiVersions


@message
class ApiVersionsRequest:
    """Asks which APIs and versions the broker supports (version 0 is answered forever)."""


@message
class ApiVersionRange:
    """The versions of one API a broker supports, both ends inclusive."""

    api_key: Int16
    min_version: Int16
    max_version: Int16


@message
class ApiVersionsResponse:
    """Every API the broker supports."""

    api_keys: tuple[ApiVersionRange, ...]


# ---------------------------------------------------------------------------------------------
# Metadata


@message
class MetadataRequest:
    """Asks for brokers, topics and partition leaders."""

    topics: tuple[str, ...] | None  # None: every topic
    allow_auto_topic_creation: bool = False


@message
class MetadataBroker:
    """One broker of the cluster."""

    node_id: Int32
    host: str
    port: Int32
    rack: str | None = None


@message
class MetadataPartition:
    """Leader and replicas of one partition."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None
    leader_id: Int32
    leader_epoch: Int32
    replica_nodes: tuple[Int32, ...]
    isr_nodes: tuple[Int32, ...]


@message
class MetadataTopic:
    """One topic and its partitions."""

    name: str
    error_code: Int16 = 0
    error_message: str | None = None
    is_internal: bool = False
    partitions: tuple[MetadataPartition, ...]


@message
class MetadataResponse:
    """The cluster as the answering broker sees it."""

    brokers: tuple[MetadataBroker, ...]
    cluster_id: str | None
    controller_id: Int32
    topics: tuple[MetadataTopic, ...]


# ---------------------------------------------------------------------------------------------
# Produce


@message
class ProducePartition:
    """Record batches for one partition."""

    partition_index: Int32
    records: Records


@message
class ProduceTopic:
    """Record batches for the partitions of one topic."""

    name: str
    partitions: tuple[ProducePartition, ...]


@message
class ProduceRequest:
    """Appends record batches; with ``acks == 0`` the broker sends no response. Version 1: with
    ``add_to_transaction`` a transactional batch adds its partition to the producer's transaction at
    the partition leader (transaction version 2, no AddPartitionsToTxn first)."""

    transactional_id: str | None = None
    acks: Int16
    timeout_ms: Int32
    topics: tuple[ProduceTopic, ...]
    add_to_transaction: bool = wire(since=1, default=False)


@message
class ProducePartitionResult:
    """Where one partition's batches landed."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None
    base_offset: Int64 = -1
    log_append_time_ms: Int64 = -1  # -1 unless the topic uses LogAppendTime
    log_start_offset: Int64 = -1


@message
class ProduceTopicResult:
    """Produce results for one topic."""

    name: str
    partitions: tuple[ProducePartitionResult, ...]


@message
class ProduceResponse:
    """Produce results per topic and partition."""

    topics: tuple[ProduceTopicResult, ...]


# ---------------------------------------------------------------------------------------------
# Fetch


@message
class FetchPartition:
    """Where to read one partition from."""

    partition_index: Int32
    current_leader_epoch: Int32 = -1  # -1: do not check the leader epoch
    fetch_offset: Int64
    log_start_offset: Int64 = -1  # followers report theirs; consumers send -1
    partition_max_bytes: Int32
    last_fetched_epoch: Int32 = -1  # followers: the leader epoch of their last batch (divergence check)


@message
class FetchTopic:
    """Partitions to read from one topic."""

    name: str
    partitions: tuple[FetchPartition, ...]


@message
class FetchRequest:
    """Reads record batches; long-polls until ``min_bytes`` are there or ``max_wait_ms`` passed."""

    replica_id: Int32 = -1  # -1 for consumers; a follower's node id
    max_wait_ms: Int32
    min_bytes: Int32
    max_bytes: Int32
    isolation_level: Int8 = IsolationLevel.READ_UNCOMMITTED
    topics: tuple[FetchTopic, ...]


@message
class FetchAbortedTransaction:
    """A transaction whose batches a read_committed reader drops: the producer's, from ``first_offset`` up to
    its ABORT marker."""

    producer_id: Int64
    first_offset: Int64


@message
class FetchPartitionResult:
    """Record batches read from one partition, and where its log stands.

    Version 1 adds ``aborted_transactions`` (null for read_uncommitted); a version 0 request for
    read_committed is refused, since its answer could not list them.
    """

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None
    high_watermark: Int64 = -1
    last_stable_offset: Int64 = -1
    log_start_offset: Int64 = -1
    records: Records = b""
    diverging_epoch: Int32 = -1  # to a follower: its log leaves the leader's after this epoch ...
    diverging_end_offset: Int64 = -1  # ... which ends here in the leader's log (truncate, then fetch again)
    aborted_transactions: tuple[FetchAbortedTransaction, ...] | None = wire(since=1, default=None)


@message
class FetchTopicResult:
    """Fetch results for one topic."""

    name: str
    partitions: tuple[FetchPartitionResult, ...]


@message
class FetchResponse:
    """Fetch results per topic and partition."""

    topics: tuple[FetchTopicResult, ...]


# ---------------------------------------------------------------------------------------------
# ListOffsets


@message
class ListOffsetsPartition:
    """Asks for the offset at a timestamp (or ``OffsetSpec.LATEST`` / ``EARLIEST``)."""

    partition_index: Int32
    current_leader_epoch: Int32 = -1
    timestamp: Int64


@message
class ListOffsetsTopic:
    """Offset lookups in one topic."""

    name: str
    partitions: tuple[ListOffsetsPartition, ...]


@message
class ListOffsetsRequest:
    """Finds offsets by timestamp, or a log's start or end."""

    isolation_level: Int8 = IsolationLevel.READ_UNCOMMITTED
    topics: tuple[ListOffsetsTopic, ...]


@message
class ListOffsetsPartitionResult:
    """The offset found in one partition (-1 when none matches)."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None
    timestamp: Int64 = -1
    offset: Int64 = -1
    leader_epoch: Int32 = -1


@message
class ListOffsetsTopicResult:
    """Offset lookups for one topic."""

    name: str
    partitions: tuple[ListOffsetsPartitionResult, ...]


@message
class ListOffsetsResponse:
    """Offset lookups per topic and partition."""

    topics: tuple[ListOffsetsTopicResult, ...]


# ---------------------------------------------------------------------------------------------
# CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords


@message
class CreatableTopic:
    """One topic to create."""

    name: str
    num_partitions: Int32 = -1  # -1: the broker's default
    replication_factor: Int16 = -1  # -1: the broker's default
    configs: dict[str, str | None] = dataclasses.field(default_factory=dict)


@message
class CreateTopicsRequest:
    """Creates topics (or, with ``validate_only``, only checks that it could)."""

    topics: tuple[CreatableTopic, ...]
    timeout_ms: Int32
    validate_only: bool = False


@message
class CreateTopicResult:
    """Outcome of creating one topic."""

    name: str
    error_code: Int16 = 0
    error_message: str | None = None
    num_partitions: Int32 = -1
    replication_factor: Int16 = -1


@message
class CreateTopicsResponse:
    """Outcome per topic."""

    topics: tuple[CreateTopicResult, ...]


@message
class DeleteTopicsRequest:
    """Deletes topics and their data."""

    topic_names: tuple[str, ...]
    timeout_ms: Int32


@message
class DeleteTopicResult:
    """Outcome of deleting one topic."""

    name: str
    error_code: Int16 = 0
    error_message: str | None = None


@message
class DeleteTopicsResponse:
    """Outcome per topic."""

    topics: tuple[DeleteTopicResult, ...]


@message
class CreatePartitionsTopic:
    """Grow one topic to ``count`` partitions in total."""

    name: str
    count: Int32


@message
class CreatePartitionsRequest:
    """Adds partitions to existing topics."""

    topics: tuple[CreatePartitionsTopic, ...]
    timeout_ms: Int32
    validate_only: bool = False


@message
class CreatePartitionsResult:
    """Outcome for one topic."""

    name: str
    error_code: Int16 = 0
    error_message: str | None = None


@message
class CreatePartitionsResponse:
    """Outcome per topic."""

    results: tuple[CreatePartitionsResult, ...]


@message
class DeleteRecordsPartition:
    """Delete everything before ``offset`` (-1: up to the high watermark)."""

    partition_index: Int32
    offset: Int64


@message
class DeleteRecordsTopic:
    """Deletions in one topic."""

    name: str
    partitions: tuple[DeleteRecordsPartition, ...]


@message
class DeleteRecordsRequest:
    """Moves log start offsets forward."""

    topics: tuple[DeleteRecordsTopic, ...]
    timeout_ms: Int32


@message
class DeleteRecordsPartitionResult:
    """The new log start offset of one partition."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None
    low_watermark: Int64 = -1


@message
class DeleteRecordsTopicResult:
    """Deletions in one topic."""

    name: str
    partitions: tuple[DeleteRecordsPartitionResult, ...]


@message
class DeleteRecordsResponse:
    """Deletions per topic and partition."""

    topics: tuple[DeleteRecordsTopicResult, ...]


# ---------------------------------------------------------------------------------------------
# DescribeConfigs, IncrementalAlterConfigs


@message
class DescribeConfigsResource:
    """A topic or broker whose configs to describe."""

    resource_type: Int8
    resource_name: str
    configuration_keys: tuple[str, ...] | None = None  # None: every key


@message
class DescribeConfigsRequest:
    """Reads configs of topics or brokers."""

    resources: tuple[DescribeConfigsResource, ...]


@message
class DescribedConfig:
    """One config entry and where its value comes from."""

    name: str
    value: str | None  # None when sensitive
    read_only: bool = False
    is_default: bool = False
    is_sensitive: bool = False


@message
class DescribeConfigsResult:
    """Configs of one resource."""

    resource_type: Int8
    resource_name: str
    error_code: Int16 = 0
    error_message: str | None = None
    configs: tuple[DescribedConfig, ...] = ()


@message
class DescribeConfigsResponse:
    """Configs per resource."""

    results: tuple[DescribeConfigsResult, ...]


@message
class AlterableConfig:
    """Set one key (``ConfigOperation.SET``) or return it to its default (``DELETE``)."""

    name: str
    config_operation: Int8
    value: str | None = None


@message
class AlterConfigsResource:
    """Alterations of one resource."""

    resource_type: Int8
    resource_name: str
    configs: tuple[AlterableConfig, ...]


@message
class IncrementalAlterConfigsRequest:
    """Changes only the named config keys; others keep their values."""

    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False


@message
class AlterConfigsResourceResult:
    """Outcome for one resource."""

    resource_type: Int8
    resource_name: str
    error_code: Int16 = 0
    error_message: str | None = None


@message
class IncrementalAlterConfigsResponse:
    """Outcome per resource."""

    results: tuple[AlterConfigsResourceResult, ...]


# ---------------------------------------------------------------------------------------------
# InitProducerId, FindCoordinator


@message
class InitProducerIdRequest:
    """Gets a producer id and epoch; passing the current ones back bumps the epoch."""

    transactional_id: str | None = None
    transaction_timeout_ms: Int32 = -1
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1


@message
class InitProducerIdResponse:
    """The producer id and epoch to stamp into batches."""

    producer_id: Int64
    producer_epoch: Int16


@message
class FindCoordinatorRequest:
    """Asks which broker coordinates a group (or a transactional id)."""

    key: str
    key_type: Int8 = CoordinatorType.GROUP


@message
class FindCoordinatorResponse:
    """The coordinating broker."""

    node_id: Int32
    host: str
    port: Int32


# ---------------------------------------------------------------------------------------------
# Consumer groups


@message
class JoinGroupProtocol:
    """One assignment protocol a member supports, with its subscription (``ConsumerSubscription``)."""

    name: str
    metadata: bytes


@message
class JoinGroupRequest:
    """Joins (or rejoins) a group; ``member_id`` is empty on the first join."""

    group_id: str
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32
    member_id: str = ""
    group_instance_id: str | None = None
    protocol_type: str = "consumer"
    protocols: tuple[JoinGroupProtocol, ...]


@message
class JoinGroupMember:
    """A member as the leader sees it: its subscription for the chosen protocol."""

    member_id: str
    group_instance_id: str | None = None
    metadata: bytes


@message
class JoinGroupResponse:
    """The new generation; only the leader receives the members."""

    generation_id: Int32
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: tuple[JoinGroupMember, ...] = ()


@message
class SyncGroupAssignment:
    """The leader's assignment for one member (``ConsumerAssignment`` bytes)."""

    member_id: str
    assignment: bytes


@message
class SyncGroupRequest:
    """Sends the leader's assignments (followers send none) and waits for one's own."""

    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[SyncGroupAssignment, ...] = ()


@message
class SyncGroupResponse:
    """This member's assignment for the generation."""

    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@message
class HeartbeatRequest:
    """Keeps a member alive; the answer says whether a rebalance started."""

    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    #: The application polled since the previous heartbeat (a member that stops polling is evicted as stuck).
    polled: bool = True


@message
class HeartbeatResponse:
    """A heartbeat was accepted (a rebalance is reported as an error in the envelope)."""


@message
class LeavingMember:
    """A member leaving its group."""

    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@message
class LeaveGroupRequest:
    """Removes members from a group at once, so the rebalance need not wait for timeouts."""

    group_id: str
    members: tuple[LeavingMember, ...]


@message
class LeaveGroupMemberResult:
    """Outcome for one leaving member."""

    member_id: str
    group_instance_id: str | None = None
    error_code: Int16 = 0
    error_message: str | None = None


@message
class LeaveGroupResponse:
    """Outcome per member."""

    members: tuple[LeaveGroupMemberResult, ...]


@message
class OffsetCommitPartition:
    """The next offset to consume from one partition."""

    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


@message
class OffsetCommitTopic:
    """Commits for one topic."""

    name: str
    partitions: tuple[OffsetCommitPartition, ...]


@message
class OffsetCommitRequest:
    """Commits offsets; ``generation_id == -1`` commits outside group membership."""

    group_id: str
    generation_id: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: Int64 = -1  # -1: the broker's default retention
    topics: tuple[OffsetCommitTopic, ...]


@message
class OffsetCommitPartitionResult:
    """Outcome of one partition's commit."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None


@message
class OffsetCommitTopicResult:
    """Commit outcomes for one topic."""

    name: str
    partitions: tuple[OffsetCommitPartitionResult, ...]


@message
class OffsetCommitResponse:
    """Commit outcomes per topic and partition."""

    topics: tuple[OffsetCommitTopicResult, ...]


@message
class OffsetFetchTopic:
    """Partitions of one topic whose committed offsets to read."""

    name: str
    partition_indexes: tuple[Int32, ...]


@message
class OffsetFetchRequest:
    """Reads a group's committed offsets."""

    group_id: str
    topics: tuple[OffsetFetchTopic, ...] | None  # None: every committed partition
    require_stable: bool = False


@message
class OffsetFetchPartitionResult:
    """The committed offset of one partition (-1 when none)."""

    partition_index: Int32
    committed_offset: Int64 = -1
    committed_leader_epoch: Int32 = -1
    metadata: str | None = None
    error_code: Int16 = 0
    error_message: str | None = None


@message
class OffsetFetchTopicResult:
    """Committed offsets of one topic."""

    name: str
    partitions: tuple[OffsetFetchPartitionResult, ...]


@message
class OffsetFetchResponse:
    """Committed offsets per topic and partition."""

    topics: tuple[OffsetFetchTopicResult, ...]


@message
class ListGroupsRequest:
    """Lists groups, optionally only those in the given states (empty: all)."""

    states_filter: tuple[str, ...] = ()


@message
class ListedGroup:
    """One group in a listing."""

    group_id: str
    protocol_type: str
    group_state: str


@message
class ListGroupsResponse:
    """The groups this broker coordinates."""

    groups: tuple[ListedGroup, ...]


@message
class DescribeGroupsRequest:
    """Describes groups by id."""

    groups: tuple[str, ...]


@message
class DescribedGroupMember:
    """One member: who it is, what it subscribed to, what it was assigned."""

    member_id: str
    group_instance_id: str | None = None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@message
class DescribedGroup:
    """A group's state, protocol and members."""

    group_id: str
    error_code: Int16 = 0
    error_message: str | None = None
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""  # the chosen assignor
    members: tuple[DescribedGroupMember, ...] = ()


@message
class DescribeGroupsResponse:
    """Descriptions per group."""

    groups: tuple[DescribedGroup, ...]


@message
class DeleteGroupsRequest:
    """Deletes empty groups and their committed offsets."""

    groups_names: tuple[str, ...]


@message
class DeleteGroupResult:
    """Outcome for one group."""

    group_id: str
    error_code: Int16 = 0
    error_message: str | None = None


@message
class DeleteGroupsResponse:
    """Outcome per group."""

    results: tuple[DeleteGroupResult, ...]


# ---------------------------------------------------------------------------------------------
# SASL


@message
class SaslHandshakeRequest:
    """Chooses a SASL mechanism; an unsupported one is refused with the enabled list in the message."""

    mechanism: str


@message
class SaslHandshakeResponse:
    """The mechanisms the broker has enabled."""

    mechanisms: tuple[str, ...]


@message
class SaslAuthenticateRequest:
    """One client step of the SASL exchange (opaque to the codec)."""

    auth_bytes: bytes


@message
class SaslAuthenticateResponse:
    """One server step of the SASL exchange."""

    auth_bytes: bytes
    session_lifetime_ms: Int64 = 0  # 0: the session does not expire


# ---------------------------------------------------------------------------------------------
# Security administration: ACLs and users (each needs ALTER, or DESCRIBE to list, on the cluster)


@message
class AclBinding:
    """One ACL: who (``User:NAME`` or ``User:*``) from where (an IP or ``*``) may or may not do what to which resource."""

    resource_type: str  # topic, group, cluster, transactional_id
    resource_name: str  # a name, a prefix, or * (every name)
    pattern_type: str  # literal or prefixed
    principal: str
    host: str
    operation: str  # read, write, create, delete, alter, describe, describe_configs, alter_configs, all
    permission: str  # allow or deny


@message
class DescribeAclsRequest:
    """Lists every ACL (clients filter)."""


@message
class DescribeAclsResponse:
    """Every ACL stored in the cluster metadata."""

    acls: tuple[AclBinding, ...]


@message
class CreateAclsRequest:
    """Stores ACLs in the cluster metadata (an existing identical ACL is kept)."""

    creations: tuple[AclBinding, ...]


@message
class CreateAclsResponse:
    """The ACLs are committed (failures travel in the envelope)."""


@message
class DeleteAclsRequest:
    """Removes exactly these ACLs."""

    deletions: tuple[AclBinding, ...]


@message
class DeleteAclsResponse:
    """The deletions are committed."""


@message
class DescribeUserScramCredentialsRequest:
    """Lists the users (never their credentials)."""


@message
class DescribedUser:
    """One user and the SCRAM mechanisms it has credentials for."""

    name: str


@message
class DescribeUserScramCredentialsResponse:
    """Every user."""

    users: tuple[DescribedUser, ...]


@message
class UserUpsertion:
    """Create a user (``create`` 1) or change its password (0); the broker salts and derives the SCRAM keys.

    The password crosses the wire once (use TLS); only derived keys are stored.
    """

    name: str
    password: str
    create: Int8


@message
class AlterUserScramCredentialsRequest:
    """Creates, re-keys and deletes users."""

    upsertions: tuple[UserUpsertion, ...]
    deletions: tuple[str, ...]


@message
class AlterUserResult:
    """Outcome for one user."""

    name: str
    error_code: Int16 = 0
    error_message: str | None = None


@message
class AlterUserScramCredentialsResponse:
    """Outcome per user."""

    results: tuple[AlterUserResult, ...]


# ---------------------------------------------------------------------------------------------
# Partition reassignment


@message
class ReassignablePartition:
    """One partition and the brokers that should hold its replicas (the first is the preferred leader)."""

    partition_index: Int32
    replicas: tuple[Int32, ...]


@message
class ReassignableTopic:
    """Partitions of one topic to move."""

    name: str
    partitions: tuple[ReassignablePartition, ...]


@message
class AlterPartitionReassignmentsRequest:
    """Moves partitions to other brokers: the new replicas catch up and join the ISR, then the others leave."""

    topics: tuple[ReassignableTopic, ...]


@message
class ReassignablePartitionResult:
    """Whether one partition's reassignment was started."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None


@message
class ReassignableTopicResult:
    """Outcomes for the partitions of one topic."""

    name: str
    partitions: tuple[ReassignablePartitionResult, ...]


@message
class AlterPartitionReassignmentsResponse:
    """One outcome per partition (the move itself goes on in the background)."""

    topics: tuple[ReassignableTopicResult, ...]


@message
class ListPartitionReassignmentsRequest:
    """Asks which partitions are being moved (of ``topics``; empty: of every topic)."""

    topics: tuple[str, ...]


@message
class OngoingPartitionReassignment:
    """A partition being moved: all its replicas now, the ones still catching up, the ones that will leave."""

    partition_index: Int32
    replicas: tuple[Int32, ...]
    target_replicas: tuple[Int32, ...]
    adding_replicas: tuple[Int32, ...]
    removing_replicas: tuple[Int32, ...]


@message
class OngoingTopicReassignment:
    """The partitions of one topic being moved."""

    name: str
    partitions: tuple[OngoingPartitionReassignment, ...]


@message
class ListPartitionReassignmentsResponse:
    """Every reassignment in progress."""

    topics: tuple[OngoingTopicReassignment, ...]


# ---------------------------------------------------------------------------------------------
# The API table


# ---------------------------------------------------------------------------------------------
# Controller quorum


@message
class DescribeQuorumRequest:
    """Asks the answering broker for its view of the controller quorum and the registered brokers."""


@message
class QuorumVoter:
    """One controller voter."""

    node_id: Int32


@message
class QuorumBroker:
    """One registered broker and its state (``active`` or ``fenced``)."""

    node_id: Int32
    host: str
    port: Int32
    state: str


@message
class DescribeQuorumResponse:
    """The Raft state of the controller as the answering broker sees it (-1: no known leader)."""

    node_id: Int32
    leader_id: Int32
    term: Int64
    commit_index: Int64
    applied_index: Int64
    voters: tuple[QuorumVoter, ...]
    brokers: tuple[QuorumBroker, ...]


# ---------------------------------------------------------------------------------------------
# Connectors (docs/connectors.md): mqbroker's own APIs. Failures travel in the response envelope.


@message
class CreateConnectorRequest:
    """Creates connector ``name``; the broker checks ``configs`` before storing it."""

    name: str
    configs: dict[str, str]


@message
class CreateConnectorResponse:
    """The connector is stored; its tasks start on their owners."""


@message
class AlterConnectorRequest:
    """Pauses, resumes or deletes a connector (``action``: a ``ConnectorAction``)."""

    name: str
    action: Int8


@message
class AlterConnectorResponse:
    """The change is stored; the tasks' owners apply it."""


@message
class DescribeConnectorsRequest:
    """Describes connectors by name (None: every connector)."""

    names: tuple[str, ...] | None


@message
class DescribedConnectorTask:
    """One task as its owner last reported it (``state``: a ``TaskState`` value; -1: unknown)."""

    task: Int32
    state: str
    owner_id: Int32
    updated_ms: Int64
    records_total: Int64
    records_per_second: Int64
    lag_records: Int64
    lag_ms: Int64
    errors_total: Int64
    outages_total: Int64
    outage_ms: Int64
    in_outage: bool
    last_error: str | None
    last_error_ms: Int64


@message
class DescribedConnector:
    """A connector: type, target state (``running`` or ``paused``), configuration (secrets hidden), tasks."""

    name: str
    type: str
    state: str
    configs: dict[str, str]
    tasks: tuple[DescribedConnectorTask, ...]


@message
class DescribeConnectorsResponse:
    """The described connectors, by name."""

    connectors: tuple[DescribedConnector, ...]


@message
class ApiSchema:
    """The request and response types of one API and its supported versions (inclusive)."""

    request_type: type
    response_type: type
    min_version: int = 0
    max_version: int = 0


#: Every API the codec speaks. Adding a version: give the new fields ``wire(since=...)`` defaults
#: (see ``mqbroker.protocols.schema``), raise ``max_version``, and compile per version as the Kafka codec does.
APIS: dict[ApiKey, ApiSchema] = {
    ApiKey.PRODUCE: ApiSchema(request_type=ProduceRequest, response_type=ProduceResponse, max_version=1),
    ApiKey.FETCH: ApiSchema(request_type=FetchRequest, response_type=FetchResponse, max_version=1),
    ApiKey.LIST_OFFSETS: ApiSchema(request_type=ListOffsetsRequest, response_type=ListOffsetsResponse),
    ApiKey.METADATA: ApiSchema(request_type=MetadataRequest, response_type=MetadataResponse),
    ApiKey.OFFSET_COMMIT: ApiSchema(request_type=OffsetCommitRequest, response_type=OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: ApiSchema(request_type=OffsetFetchRequest, response_type=OffsetFetchResponse),
    ApiKey.FIND_COORDINATOR: ApiSchema(request_type=FindCoordinatorRequest, response_type=FindCoordinatorResponse),
    ApiKey.JOIN_GROUP: ApiSchema(request_type=JoinGroupRequest, response_type=JoinGroupResponse),
    ApiKey.HEARTBEAT: ApiSchema(request_type=HeartbeatRequest, response_type=HeartbeatResponse),
    ApiKey.LEAVE_GROUP: ApiSchema(request_type=LeaveGroupRequest, response_type=LeaveGroupResponse),
    ApiKey.SYNC_GROUP: ApiSchema(request_type=SyncGroupRequest, response_type=SyncGroupResponse),
    ApiKey.DESCRIBE_GROUPS: ApiSchema(request_type=DescribeGroupsRequest, response_type=DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: ApiSchema(request_type=ListGroupsRequest, response_type=ListGroupsResponse),
    ApiKey.SASL_HANDSHAKE: ApiSchema(request_type=SaslHandshakeRequest, response_type=SaslHandshakeResponse),
    ApiKey.API_VERSIONS: ApiSchema(request_type=ApiVersionsRequest, response_type=ApiVersionsResponse),
    ApiKey.CREATE_TOPICS: ApiSchema(request_type=CreateTopicsRequest, response_type=CreateTopicsResponse),
    ApiKey.DELETE_TOPICS: ApiSchema(request_type=DeleteTopicsRequest, response_type=DeleteTopicsResponse),
    ApiKey.DELETE_RECORDS: ApiSchema(request_type=DeleteRecordsRequest, response_type=DeleteRecordsResponse),
    ApiKey.INIT_PRODUCER_ID: ApiSchema(request_type=InitProducerIdRequest, response_type=InitProducerIdResponse),
    ApiKey.DESCRIBE_CONFIGS: ApiSchema(request_type=DescribeConfigsRequest, response_type=DescribeConfigsResponse),
    ApiKey.SASL_AUTHENTICATE: ApiSchema(
        request_type=SaslAuthenticateRequest, response_type=SaslAuthenticateResponse
    ),
    ApiKey.CREATE_PARTITIONS: ApiSchema(
        request_type=CreatePartitionsRequest, response_type=CreatePartitionsResponse
    ),
    ApiKey.DELETE_GROUPS: ApiSchema(request_type=DeleteGroupsRequest, response_type=DeleteGroupsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: ApiSchema(
        request_type=IncrementalAlterConfigsRequest, response_type=IncrementalAlterConfigsResponse
    ),
    ApiKey.DESCRIBE_QUORUM: ApiSchema(request_type=DescribeQuorumRequest, response_type=DescribeQuorumResponse),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: ApiSchema(
        request_type=AlterPartitionReassignmentsRequest, response_type=AlterPartitionReassignmentsResponse
    ),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: ApiSchema(
        request_type=ListPartitionReassignmentsRequest, response_type=ListPartitionReassignmentsResponse
    ),
    ApiKey.DESCRIBE_ACLS: ApiSchema(request_type=DescribeAclsRequest, response_type=DescribeAclsResponse),
    ApiKey.CREATE_ACLS: ApiSchema(request_type=CreateAclsRequest, response_type=CreateAclsResponse),
    ApiKey.DELETE_ACLS: ApiSchema(request_type=DeleteAclsRequest, response_type=DeleteAclsResponse),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: ApiSchema(
        request_type=DescribeUserScramCredentialsRequest, response_type=DescribeUserScramCredentialsResponse
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: ApiSchema(
        request_type=AlterUserScramCredentialsRequest, response_type=AlterUserScramCredentialsResponse
    ),
    ApiKey.SHARE_GROUP_HEARTBEAT: ApiSchema(
        request_type=share.ShareGroupHeartbeatRequest, response_type=share.ShareGroupHeartbeatResponse
    ),
    ApiKey.SHARE_GROUP_DESCRIBE: ApiSchema(  # v1: DescribedShareGroup.unused_ms
        request_type=share.ShareGroupDescribeRequest, response_type=share.ShareGroupDescribeResponse, max_version=1
    ),
    ApiKey.SHARE_FETCH: ApiSchema(request_type=share.ShareFetchRequest, response_type=share.ShareFetchResponse),
    ApiKey.SHARE_ACKNOWLEDGE: ApiSchema(
        request_type=share.ShareAcknowledgeRequest, response_type=share.ShareAcknowledgeResponse
    ),
    ApiKey.CREATE_SHARE_GROUP: ApiSchema(
        request_type=share.CreateShareGroupRequest, response_type=share.CreateShareGroupResponse
    ),
    ApiKey.ALTER_SHARE_GROUP: ApiSchema(
        request_type=share.AlterShareGroupRequest, response_type=share.AlterShareGroupResponse
    ),
    ApiKey.DELETE_SHARE_GROUP: ApiSchema(
        request_type=share.DeleteShareGroupRequest, response_type=share.DeleteShareGroupResponse
    ),
    ApiKey.LIST_SHARE_GROUPS: ApiSchema(
        request_type=share.ListShareGroupsRequest, response_type=share.ListShareGroupsResponse
    ),
    ApiKey.CREATE_CONNECTOR: ApiSchema(request_type=CreateConnectorRequest, response_type=CreateConnectorResponse),
    ApiKey.ALTER_CONNECTOR: ApiSchema(request_type=AlterConnectorRequest, response_type=AlterConnectorResponse),
    ApiKey.DESCRIBE_CONNECTORS: ApiSchema(
        request_type=DescribeConnectorsRequest, response_type=DescribeConnectorsResponse
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: ApiSchema(
        request_type=AddPartitionsToTxnRequest, response_type=AddPartitionsToTxnResponse
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: ApiSchema(request_type=AddOffsetsToTxnRequest, response_type=AddOffsetsToTxnResponse),
    ApiKey.END_TXN: ApiSchema(request_type=EndTxnRequest, response_type=EndTxnResponse, max_version=1),
    ApiKey.WRITE_TXN_MARKERS: ApiSchema(request_type=WriteTxnMarkersRequest, response_type=WriteTxnMarkersResponse),
    ApiKey.TXN_OFFSET_COMMIT: ApiSchema(request_type=TxnOffsetCommitRequest, response_type=TxnOffsetCommitResponse),
    ApiKey.DESCRIBE_TRANSACTIONS: ApiSchema(
        request_type=DescribeTransactionsRequest, response_type=DescribeTransactionsResponse
    ),
    ApiKey.LIST_TRANSACTIONS: ApiSchema(request_type=ListTransactionsRequest, response_type=ListTransactionsResponse),
}

#: The API key of each request type (the codec derives a request's key from its type).
API_KEY_OF_REQUEST: dict[type, ApiKey] = {schema.request_type: key for key, schema in APIS.items()}
