"""Requests into the transaction coordinator, its answers, its configuration and its outputs.

The types the broker API (``IBroker``) passes for transactions, shared by every front end that
exposes them, and by the pure coordinator (``coordinator``) and the service that hosts it.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass

from mqbroker.errors import BrokerError
from mqbroker.groups.messages import OffsetCommitRequest
from mqbroker.groups.model import TopicPartition

#: A producer epoch at this value or above is exhausted: the coordinator hands out a new producer id.
PRODUCER_EPOCH_MAX = 32767 - 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


class TransactionState(enum.Enum):
    """Where a transactional id is in its cycle (Kafka's ``TransactionState``; the wire number is ``code``)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"

    @property
    def code(self) -> int:
        """The int8 that stands for the state in ``__transaction_state`` (Kafka's numbering)."""
        return _STATE_CODES[self]

    @classmethod
    def from_code(cls, code: int) -> TransactionState:
        """The state an int8 stands for (``ValueError`` if none)."""
        for state, known in _STATE_CODES.items():
            if known == code:
                return state
        raise ValueError(f"transaction state {code} is unknown")

    @property
    def prepared(self) -> bool:
        """True while the decision is taken and its markers are being written."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        """True once a transaction ended (or before the first one began)."""
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


_STATE_CODES = {
    TransactionState.EMPTY: 0,
    TransactionState.ONGOING: 1,
    TransactionState.PREPARE_COMMIT: 2,
    TransactionState.PREPARE_ABORT: 3,
    TransactionState.COMPLETE_COMMIT: 4,
    TransactionState.COMPLETE_ABORT: 5,
    TransactionState.DEAD: 6,
}

#: Every legal transition; anything else is a coordinator bug and trips an assertion.
TRANSITIONS: dict[TransactionState, frozenset[TransactionState]] = {
    TransactionState.EMPTY: frozenset({TransactionState.EMPTY, TransactionState.ONGOING, TransactionState.DEAD}),
    TransactionState.ONGOING: frozenset({
        TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT,
    }),
    TransactionState.PREPARE_COMMIT: frozenset({TransactionState.COMPLETE_COMMIT}),
    TransactionState.PREPARE_ABORT: frozenset({TransactionState.COMPLETE_ABORT}),
    TransactionState.COMPLETE_COMMIT: frozenset({TransactionState.EMPTY, TransactionState.ONGOING, TransactionState.DEAD}),
    TransactionState.COMPLETE_ABORT: frozenset({TransactionState.EMPTY, TransactionState.ONGOING, TransactionState.DEAD}),
    TransactionState.DEAD: frozenset(),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionConfig:
    """Coordinator settings (Kafka's names and defaults)."""

    #: The longest ``transaction.timeout.ms`` a producer may ask for (transaction.max.timeout.ms).
    transaction_timeout_ms_max: int = 15 * 60 * 1000
    #: A transactional id idle this long in a finished state is forgotten (transactional.id.expiration.ms).
    transactional_id_expiration_ms: int = 7 * 24 * 60 * 60 * 1000
    #: How often expired transactional ids are looked for.
    expiration_check_interval_ms: int = 60 * 60 * 1000
    #: Most partitions one transaction may write to.
    partitions_per_transaction_max: int = 10_000
    #: How long a transaction whose markers are all written may wait for its completion record: a request of
    #: the same id meanwhile (a producer beginning its next transaction) shares the write. The decision and
    #: its markers are durable already; a coordinator taking over only writes the markers again. 0: at once.
    completion_linger_ms: int = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdAndEpoch:
    """Who a transactional request comes from (the answer of InitProducerId)."""

    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class InitTransactionsRequest:
    """InitProducerId with a transactional id: fence the previous incarnation, get the id and a new epoch."""

    transactional_id: str
    transaction_timeout_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsRequest:
    """Partitions the producer is about to write to in its ongoing transaction.

    ``verify_only`` (KIP-890, from a partition leader): change nothing, answer whether they are in it.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[TopicPartition]
    verify_only: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AddOffsetsRequest:
    """The producer will commit offsets of ``group_id`` in its ongoing transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnRequest:
    """Commit (``committed``) or abort the producer's ongoing transaction.

    ``bump_epoch`` (transaction version 2, KIP-890 part 2): the decision moves the producer to the
    next epoch, answered as a ``ProducerIdAndEpoch`` (a fresh producer id at epoch 0 once the epoch
    is exhausted: ``fresh_producer_id``, allocated by the service before the coordinator needs it).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    bump_epoch: bool = False
    fresh_producer_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionMarker:
    """Markers to write: ``committed`` or aborted, for a producer's transaction, in these partitions."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionDescription:
    """A transactional id as ``transactions describe`` shows it."""

    transactional_id: str
    state: TransactionState
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    #: When the ongoing transaction began (-1: none).
    start_ms: int
    last_update_ms: int
    partitions: frozenset[TopicPartition]
    #: The ``__transaction_state`` partition and leader epoch of the coordinator that answered.
    coordinator_partition: int = -1
    coordinator_epoch: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionListing:
    """One transactional id in ``transactions list``."""

    transactional_id: str
    producer_id: int
    state: TransactionState


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """The answer to the parked request ``request_key``: a value or a typed error."""

    request_key: Hashable
    response: object = None
    error: BrokerError | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkersToWrite:
    """The coordinator asks for a transaction's markers (then ``markers_written``)."""

    transactional_id: str
    marker: TransactionMarker


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    """What the coordinator produced since the last ``ready()``: replies, records to append, markers to write."""

    replies: tuple[Reply, ...] = ()
    #: (transactional id, log record) to append to ``__transaction_state`` in this order, in one batch, then report
    #: with ``written`` once per id (an id may have two records: a completion and the next transaction's start).
    writes: tuple[tuple[str, object], ...] = ()
    markers: tuple[MarkersToWrite, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequest:
    """Offsets a transactional producer commits for a group: visible once its transaction commits.

    ``offsets`` holds the group's ``OffsetCommitRequest`` (member id and generation fence a zombie
    consumer, KIP-447); the producer id and epoch fence a zombie producer. ``add_to_transaction``
    (transaction version 2): the group's offsets partition joins the transaction here, without an
    AddOffsetsToTxn first.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    offsets: OffsetCommitRequest
    add_to_transaction: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkerOutcome:
    """Whether one partition took a transaction's marker (``error`` None)."""

    producer_id: int
    topic_partition: TopicPartition
    error: BrokerError | None = None
