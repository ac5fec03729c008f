"""Request and response types of the native protocol's transaction APIs (Kafka's numbers and shapes, our layouts).

AddPartitionsToTxn, AddOffsetsToTxn and EndTxn go to the transactional id's coordinator
(FindCoordinator with key type 1); TxnOffsetCommit to the group's coordinator; WriteTxnMarkers
is sent by a coordinator to partition leaders (brokers only); DescribeTransactions to an id's
coordinator and ListTransactions to every broker. ``messages.APIS`` lists them.
"""

from __future__ import annotations

from mqbroker.protocols.schema import Int16, Int32, Int64, message, wire


@message
class AddPartitionsToTxnTopic:
    """Partitions of one topic to add to the transaction."""

    name: str
    partitions: tuple[Int32, ...]


@message
class AddPartitionsToTxnRequest:
    """Adds partitions to the producer's ongoing transaction (``verify_only``: a partition leader checks, KIP-890)."""

    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    verify_only: bool = False
    topics: tuple[AddPartitionsToTxnTopic, ...]


@message
class AddPartitionsToTxnPartitionResult:
    """Whether one partition is in the transaction now."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None


@message
class AddPartitionsToTxnTopicResult:
    """Outcomes for the partitions of one topic."""

    name: str
    partitions: tuple[AddPartitionsToTxnPartitionResult, ...]


@message
class AddPartitionsToTxnResponse:
    """One outcome per partition (the same for all: a transaction takes them together or not at all)."""

    results: tuple[AddPartitionsToTxnTopicResult, ...]


@message
class AddOffsetsToTxnRequest:
    """The producer will commit offsets of ``group_id`` in its transaction (TxnOffsetCommit follows)."""

    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    group_id: str


@message
class AddOffsetsToTxnResponse:
    """The group's offsets partition is in the transaction (a failure travels in the envelope)."""


@message
class EndTxnRequest:
    """Commits (``committed``) or aborts the producer's ongoing transaction. Version 1: with ``bump_epoch``
    (transaction version 2) the decision moves the producer to its next epoch."""

    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    committed: bool
    bump_epoch: bool = wire(since=1, default=False)


@message
class EndTxnResponse:
    """The decision is durable; the markers are being written (a failure travels in the envelope). Version 1:
    after a ``bump_epoch`` request, the producer id and epoch its next transaction uses (-1 otherwise)."""

    producer_id: Int64 = wire(since=1, default=-1)
    producer_epoch: Int16 = wire(since=1, default=-1)


@message
class WritableTxnMarkerTopic:
    """Partitions of one topic that take the marker."""

    name: str
    partition_indexes: tuple[Int32, ...]


@message
class WritableTxnMarker:
    """A transaction's COMMIT (``transaction_result`` true) or ABORT marker and where it goes."""

    producer_id: Int64
    producer_epoch: Int16
    transaction_result: bool
    topics: tuple[WritableTxnMarkerTopic, ...]
    coordinator_epoch: Int32


@message
class WriteTxnMarkersRequest:
    """A transaction coordinator's markers for partitions the receiving broker leads (brokers only)."""

    markers: tuple[WritableTxnMarker, ...]


@message
class WritableTxnMarkerPartitionResult:
    """Whether one partition took its marker."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None


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
    """One result per marker and partition."""

    markers: tuple[WritableTxnMarkerResult, ...]


@message
class TxnOffsetCommitRequestPartition:
    """One partition's position, committed with the transaction."""

    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


@message
class TxnOffsetCommitRequestTopic:
    """Positions in one topic."""

    name: str
    partitions: tuple[TxnOffsetCommitRequestPartition, ...]


@message
class TxnOffsetCommitRequest:
    """Commits a group's offsets inside a transaction; the consumer's member id and generation fence zombies (KIP-447)."""

    transactional_id: str
    group_id: str
    producer_id: Int64
    producer_epoch: Int16
    generation_id: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: tuple[TxnOffsetCommitRequestTopic, ...]


@message
class TxnOffsetCommitResponsePartition:
    """Outcome for one partition."""

    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None


@message
class TxnOffsetCommitResponseTopic:
    """Outcomes for the partitions of one topic."""

    name: str
    partitions: tuple[TxnOffsetCommitResponsePartition, ...]


@message
class TxnOffsetCommitResponse:
    """One outcome per partition."""

    topics: tuple[TxnOffsetCommitResponseTopic, ...]


@message
class DescribeTransactionsRequest:
    """Asks an id's coordinator for its transactional ids' states."""

    transactional_ids: tuple[str, ...]


@message
class TransactionTopicPartitions:
    """Partitions of one topic in a transaction."""

    topic: str
    partitions: tuple[Int32, ...]


@message
class DescribedTransaction:
    """One transactional id's state (``transaction_start_time_ms`` -1: none ongoing)."""

    error_code: Int16 = 0
    error_message: str | None = None
    transactional_id: str
    transaction_state: str = ""
    transaction_timeout_ms: Int32 = -1
    transaction_start_time_ms: Int64 = -1
    producer_id: Int64 = -1
    producer_epoch: Int16 = -1
    coordinator_epoch: Int32 = -1
    topics: tuple[TransactionTopicPartitions, ...] = ()


@message
class DescribeTransactionsResponse:
    """One answer per id asked for."""

    transaction_states: tuple[DescribedTransaction, ...]


@message
class ListTransactionsRequest:
    """Asks a broker for the transactional ids it coordinates (optionally of some states or producer ids)."""

    state_filters: tuple[str, ...] = ()
    producer_id_filters: tuple[Int64, ...] = ()


@message
class ListedTransaction:
    """One transactional id and its state."""

    transactional_id: str
    producer_id: Int64
    transaction_state: str


@message
class ListTransactionsResponse:
    """The ids this broker coordinates."""

    transaction_states: tuple[ListedTransaction, ...]
