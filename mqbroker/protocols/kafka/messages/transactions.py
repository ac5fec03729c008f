"""The Kafka messages of transactions: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions and WriteTxnMarkers.

Written from Kafka's published message specifications (``AddPartitionsToTxnRequest.json`` and
the others), up to the versions ``apis.py`` serves: AddPartitionsToTxn 0–3 (version 4 batches
several transactional ids for brokers, KIP-890), AddOffsetsToTxn 0–3, EndTxn 0–5 (version 5
answers a bumped epoch, transaction version 2), TxnOffsetCommit 0–5 (version 3 of each is
flexible), DescribeTransactions 0 and WriteTxnMarkers 1–2 (all flexible).
"""

from __future__ import annotations

from mqbroker.protocols.schema import Int8, Int16, Int32, Int64, message, wire

#: EndTxn from this version on bumps the producer epoch and answers it (transaction version 2, KIP-890 part 2).
END_TXN_BUMPS_EPOCH_VERSION = 5
#: TxnOffsetCommit from this version on adds the group's offsets partition to the transaction (no AddOffsetsToTxn).
TXN_OFFSET_COMMIT_ADDS_TO_TRANSACTION_VERSION = 5


@message
class AddPartitionsToTxnTopic:
    """Partitions of one topic to add to the transaction."""

    name: str
    partitions: tuple[Int32, ...]


@message
class AddPartitionsToTxnRequest:
    """Adds partitions to the producer's ongoing transaction (versions 0–3: one transactional id)."""

    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    topics: tuple[AddPartitionsToTxnTopic, ...]


@message
class AddPartitionsToTxnPartitionResult:
    """Whether one partition is in the transaction now."""

    partition_index: Int32
    partition_error_code: Int16


@message
class AddPartitionsToTxnTopicResult:
    """Outcomes for the partitions of one topic."""

    name: str
    results_by_partition: tuple[AddPartitionsToTxnPartitionResult, ...]


@message
class AddPartitionsToTxnResponse:
    """One outcome per partition."""

    throttle_time_ms: Int32
    results_by_topic_v3_and_below: tuple[AddPartitionsToTxnTopicResult, ...]


@message
class AddOffsetsToTxnRequest:
    """The producer will commit ``group_id``'s offsets in its transaction (TxnOffsetCommit follows)."""

    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    group_id: str


@message
class AddOffsetsToTxnResponse:
    """The group's offsets partition is in the transaction, or why not."""

    throttle_time_ms: Int32
    error_code: Int16


@message
class EndTxnRequest:
    """Commits (``committed``) or aborts the producer's ongoing transaction."""

    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    committed: bool


@message
class EndTxnResponse:
    """The decision is durable, or why not; version 5: the producer's next id and epoch (transaction version 2)."""

    throttle_time_ms: Int32
    error_code: Int16
    producer_id: Int64 = wire(since=5, default=-1)
    producer_epoch: Int16 = wire(since=5, default=-1)


@message
class TxnOffsetCommitRequestPartition:
    """One partition's position, committed with the transaction."""

    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = wire(since=2, default=-1)
    committed_metadata: str | None


@message
class TxnOffsetCommitRequestTopic:
    """Positions in one topic."""

    name: str
    partitions: tuple[TxnOffsetCommitRequestPartition, ...]


@message
class TxnOffsetCommitRequest:
    """Commits a group's offsets inside a transaction (member id and generation from version 3, KIP-447)."""

    transactional_id: str
    group_id: str
    producer_id: Int64
    producer_epoch: Int16
    generation_id: Int32 = wire(since=3, default=-1)
    member_id: str = wire(since=3, default="")
    group_instance_id: str | None = wire(since=3, default=None)
    topics: tuple[TxnOffsetCommitRequestTopic, ...]


@message
class TxnOffsetCommitResponsePartition:
    """Outcome for one partition."""

    partition_index: Int32
    error_code: Int16


@message
class TxnOffsetCommitResponseTopic:
    """Outcomes for the partitions of one topic."""

    name: str
    partitions: tuple[TxnOffsetCommitResponsePartition, ...]


@message
class TxnOffsetCommitResponse:
    """One outcome per partition."""

    throttle_time_ms: Int32
    topics: tuple[TxnOffsetCommitResponseTopic, ...]


@message
class DescribeTransactionsRequest:
    """Describe these transactional ids (at their coordinator)."""

    transactional_ids: tuple[str, ...]


@message
class DescribeTransactionsTopic:
    """The partitions of one topic in a transaction."""

    topic: str
    partitions: tuple[Int32, ...]


@message
class DescribedTransaction:
    """One transactional id's state, producer and open transaction, or why it cannot be described."""

    error_code: Int16
    transactional_id: str
    transaction_state: str
    transaction_timeout_ms: Int32
    transaction_start_time_ms: Int64
    producer_id: Int64
    producer_epoch: Int16
    topics: tuple[DescribeTransactionsTopic, ...]


@message
class DescribeTransactionsResponse:
    """One description per transactional id asked for."""

    throttle_time_ms: Int32
    transaction_states: tuple[DescribedTransaction, ...]


@message
class WritableTxnMarkerTopic:
    """The partitions of one topic to write a marker to."""

    name: str
    partition_indexes: tuple[Int32, ...]


@message
class WritableTxnMarker:
    """A COMMIT (``transaction_result``) or ABORT marker of a producer's transaction, for some partitions."""

    producer_id: Int64
    producer_epoch: Int16
    transaction_result: bool
    topics: tuple[WritableTxnMarkerTopic, ...]
    coordinator_epoch: Int32
    transaction_version: Int8 = wire(since=2, default=0)


@message
class WriteTxnMarkersRequest:
    """A transaction coordinator asks a partition leader for markers (brokers only: needs cluster ALTER)."""

    markers: tuple[WritableTxnMarker, ...]


@message
class WritableTxnMarkerPartitionResult:
    """Whether one partition took its marker."""

    partition_index: Int32
    error_code: Int16


@message
class WritableTxnMarkerTopicResult:
    """Outcomes for the partitions of one topic."""

    name: str
    partitions: tuple[WritableTxnMarkerPartitionResult, ...]


@message
class WritableTxnMarkerResult:
    """Outcomes for one producer's marker."""

    producer_id: Int64
    topics: tuple[WritableTxnMarkerTopicResult, ...]


@message
class WriteTxnMarkersResponse:
    """One result per marker asked for."""

    markers: tuple[WritableTxnMarkerResult, ...]
