"""The Kafka messages that move records: Produce, Fetch, ListOffsets and InitProducerId.

Written from Kafka's published message specifications, one class per struct; the field
annotations are the wire schema and ``wire(...)`` says in which versions a field travels
(see ``mqbroker.protocols.schema``). Versions outside the ranges in ``apis.py`` are not modelled.
"""

from __future__ import annotations

from mqbroker.protocols.schema import ZERO_UUID, Int8, Int16, Int32, Int64, Records, Uuid, message, wire

#: The first Produce and Fetch version naming topics by id instead of by name (KIP-516).
TOPIC_ID_VERSION = 13
#: From this Produce version on a transactional batch adds its partition to the transaction (transaction version 2).
PRODUCE_ADDS_TO_TRANSACTION_VERSION = 12


@message
class PartitionProduceData:
    """Record batches for one partition."""

    index: Int32
    records: Records | None


@message
class TopicProduceData:
    """The partitions of one topic a Produce writes to (named up to version 12, by id from 13)."""

    name: str = wire(until=12, default="")
    topic_id: Uuid = wire(since=13, default=ZERO_UUID)
    partition_data: tuple[PartitionProduceData, ...]


@message
class ProduceRequest:
    """Append record batches; ``acks`` 0 (no answer), 1 (leader wrote) or -1 (every in-sync replica has them)."""

    transactional_id: str | None = None
    acks: Int16
    timeout_ms: Int32
    topic_data: tuple[TopicProduceData, ...]


@message
class BatchIndexAndErrorMessage:
    """Which batch of a partition was refused, and why."""

    batch_index: Int32
    batch_index_error_message: str | None = None


@message
class LeaderIdAndEpoch:
    """Where a partition's leader is now (sent with NOT_LEADER_OR_FOLLOWER)."""

    leader_id: Int32 = -1
    leader_epoch: Int32 = -1


@message
class PartitionProduceResponse:
    """Where one partition's batches landed, or why they did not."""

    index: Int32
    error_code: Int16
    base_offset: Int64
    log_append_time_ms: Int64 = -1
    log_start_offset: Int64 = wire(since=5, default=-1)
    record_errors: tuple[BatchIndexAndErrorMessage, ...] = wire(since=8, default=())
    error_message: str | None = wire(since=8, default=None)
    current_leader: LeaderIdAndEpoch = wire(tag=0, since=10, default_factory=LeaderIdAndEpoch)


@message
class TopicProduceResponse:
    """The outcome of a Produce for one topic's partitions."""

    name: str = wire(until=12, default="")
    topic_id: Uuid = wire(since=13, default=ZERO_UUID)
    partition_responses: tuple[PartitionProduceResponse, ...]


@message
class NodeEndpoint:
    """A broker address the client may not know yet (for a moved leader)."""

    node_id: Int32
    host: str
    port: Int32
    rack: str | None = None


@message
class ProduceResponse:
    """The outcome of a Produce, per partition."""

    responses: tuple[TopicProduceResponse, ...]
    throttle_time_ms: Int32 = 0
    node_endpoints: tuple[NodeEndpoint, ...] = wire(tag=0, since=10, default=())


@message
class FetchPartition:
    """One partition to read, from ``fetch_offset``, at most ``partition_max_bytes``."""

    partition: Int32
    current_leader_epoch: Int32 = wire(since=9, default=-1)
    fetch_offset: Int64
    last_fetched_epoch: Int32 = wire(since=12, default=-1)
    log_start_offset: Int64 = wire(since=5, default=-1)
    partition_max_bytes: Int32
    replica_directory_id: Uuid = wire(tag=0, since=17, default=ZERO_UUID)
    high_watermark: Int64 = wire(tag=1, since=18, default=0x7fffffffffffffff)


@message
class ReplicaState:
    """Who fetches (a follower's id and broker epoch; -1 for a consumer), from version 15."""

    replica_id: Int32 = -1
    replica_epoch: Int64 = -1


@message
class FetchTopic:
    """The partitions of one topic a Fetch reads (named up to version 12, by id from 13)."""

    topic: str = wire(until=12, default="")
    topic_id: Uuid = wire(since=13, default=ZERO_UUID)
    partitions: tuple[FetchPartition, ...]


@message
class ForgottenTopic:
    """Partitions an incremental fetch session drops (unused: sessions are not kept)."""

    topic: str = wire(until=12, default="")
    topic_id: Uuid = wire(since=13, default=ZERO_UUID)
    partitions: tuple[Int32, ...]


@message
class FetchRequest:
    """Long-poll read of record batches (``session_id`` 0: a full fetch, no session)."""

    cluster_id: str | None = wire(tag=0, since=12, default=None)
    replica_id: Int32 = wire(until=14, default=-1)
    replica_state: ReplicaState = wire(tag=1, since=15, default_factory=ReplicaState)
    max_wait_ms: Int32
    min_bytes: Int32
    max_bytes: Int32 = 0x7fffffff
    isolation_level: Int8 = 0
    session_id: Int32 = wire(since=7, default=0)
    session_epoch: Int32 = wire(since=7, default=-1)
    topics: tuple[FetchTopic, ...]
    forgotten_topics_data: tuple[ForgottenTopic, ...] = wire(since=7, default=())
    rack_id: str = wire(since=11, default="")


@message
class EpochEndOffset:
    """Where a follower's log diverged from the leader's."""

    epoch: Int32 = -1
    end_offset: Int64 = -1


@message
class SnapshotId:
    """A metadata snapshot a KRaft follower should load (never sent by mqbroker)."""

    end_offset: Int64 = -1
    epoch: Int32 = -1


@message
class AbortedTransaction:
    """A transaction whose records a read_committed consumer must skip."""

    producer_id: Int64
    first_offset: Int64


@message
class PartitionData:
    """One partition's batches and watermarks, or the error reading it."""

    partition_index: Int32
    error_code: Int16
    high_watermark: Int64
    last_stable_offset: Int64 = -1
    log_start_offset: Int64 = wire(since=5, default=-1)
    diverging_epoch: EpochEndOffset = wire(tag=0, since=12, default_factory=EpochEndOffset)
    current_leader: LeaderIdAndEpoch = wire(tag=1, since=12, default_factory=LeaderIdAndEpoch)
    snapshot_id: SnapshotId = wire(tag=2, since=12, default_factory=SnapshotId)
    aborted_transactions: tuple[AbortedTransaction, ...] | None
    preferred_read_replica: Int32 = wire(since=11, default=-1)
    records: Records | None


@message
class FetchableTopicResponse:
    """The partitions of one topic in a Fetch answer."""

    topic: str = wire(until=12, default="")
    topic_id: Uuid = wire(since=13, default=ZERO_UUID)
    partitions: tuple[PartitionData, ...]


@message
class FetchResponse:
    """What a Fetch read, per partition."""

    throttle_time_ms: Int32
    error_code: Int16 = wire(since=7, default=0)
    session_id: Int32 = wire(since=7, default=0)
    responses: tuple[FetchableTopicResponse, ...]
    node_endpoints: tuple[NodeEndpoint, ...] = wire(tag=0, since=16, default=())


@message
class ListOffsetsPartition:
    """A partition whose offset for ``timestamp`` (-1 latest, -2 earliest, -3 max timestamp) is wanted."""

    partition_index: Int32
    current_leader_epoch: Int32 = wire(since=4, default=-1)
    timestamp: Int64


@message
class ListOffsetsTopic:
    """The partitions of one topic in a ListOffsets request."""

    name: str
    partitions: tuple[ListOffsetsPartition, ...]


@message
class ListOffsetsRequest:
    """Look offsets up by timestamp, or the earliest or latest."""

    replica_id: Int32
    isolation_level: Int8 = wire(since=2, default=0)
    topics: tuple[ListOffsetsTopic, ...]


@message
class ListOffsetsPartitionResponse:
    """The offset found for one partition (and the timestamp of its record)."""

    partition_index: Int32
    error_code: Int16
    timestamp: Int64 = -1
    offset: Int64 = -1
    leader_epoch: Int32 = wire(since=4, default=-1)


@message
class ListOffsetsTopicResponse:
    """The offsets found for one topic's partitions."""

    name: str
    partitions: tuple[ListOffsetsPartitionResponse, ...]


@message
class ListOffsetsResponse:
    """The offsets found, per partition."""

    throttle_time_ms: Int32 = wire(since=2, default=0)
    topics: tuple[ListOffsetsTopicResponse, ...]


@message
class InitProducerIdRequest:
    """Ask for a producer id and epoch (idempotence; transactions when ``transactional_id`` is set)."""

    transactional_id: str | None
    transaction_timeout_ms: Int32
    producer_id: Int64 = wire(since=3, default=-1)
    producer_epoch: Int16 = wire(since=3, default=-1)


@message
class InitProducerIdResponse:
    """The producer id and epoch to stamp into batches."""

    throttle_time_ms: Int32
    error_code: Int16
    producer_id: Int64 = -1
    producer_epoch: Int16
