# -*- test-case-name: tests.unit.client.test_transaction_state -*-
"""A transactional producer's side of a transaction, without I/O: its state and what it has told the coordinator.

The drivers (the blocking and Twisted producers) ask ``TransactionTracker`` before each call, so
an illegal call (commit with no transaction open, send before ``begin_transaction``) is refused
client-side with ``InvalidTxnStateError`` naming what to do, and the broker never sees it. A
partition is added to the transaction (AddPartitionsToTxn) before the first batch for it is
sent, so no batch reaches a partition leader before the coordinator lists that partition (the
leader would refuse it, KIP-890); the blocking producer's I/O thread adds every partition waiting
in one request. A send that fails inside a transaction makes it abortable only; being fenced (a newer producer with the same transactional id, or a
transaction the coordinator aborted after its timeout) is fatal: the producer must be closed.
"""

from __future__ import annotations

import enum

from mqbroker import errors

TopicPartition = tuple[str, int]


class ProducerTransactionState(enum.Enum):
    """Where a transactional producer is (Kafka's ``TransactionManager`` states, simplified)."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


_S = ProducerTransactionState
#: Every legal move; the tracker asserts it never takes another.
TRANSITIONS: dict[ProducerTransactionState, frozenset[ProducerTransactionState]] = {
    _S.UNINITIALIZED: frozenset({_S.READY, _S.FATAL_ERROR}),
    _S.READY: frozenset({_S.READY, _S.IN_TRANSACTION, _S.FATAL_ERROR}),
    _S.IN_TRANSACTION: frozenset({_S.COMMITTING, _S.ABORTING, _S.ABORTABLE_ERROR, _S.FATAL_ERROR}),
    _S.COMMITTING: frozenset({_S.READY, _S.COMMITTING, _S.FATAL_ERROR}),
    _S.ABORTING: frozenset({_S.READY, _S.ABORTING, _S.FATAL_ERROR}),
    _S.ABORTABLE_ERROR: frozenset({_S.ABORTING, _S.ABORTABLE_ERROR, _S.FATAL_ERROR}),
    _S.FATAL_ERROR: frozenset({_S.FATAL_ERROR}),
}

#: Errors after which only closing the producer helps (another incarnation owns the transactional id).
FATAL_CODES = frozenset({
    errors.ErrorCode.PRODUCER_FENCED, errors.ErrorCode.INVALID_PRODUCER_EPOCH,
    errors.ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, errors.ErrorCode.INVALID_PRODUCER_ID_MAPPING,
})


class TransactionTracker:
    """The client's transaction state machine for one transactional id."""

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self.state = ProducerTransactionState.UNINITIALIZED
        #: Partitions the coordinator lists in the current transaction, and those being added.
        self.partitions: set[TopicPartition] = set()
        self.pending: set[TopicPartition] = set()
        #: Groups whose offsets the current transaction commits.
        self.groups: set[str] = set()
        #: Why the transaction can only be aborted (or the producer only closed).
        self.error: errors.BrokerError | None = None

    def _move(self, state: ProducerTransactionState) -> None:
        assert state in TRANSITIONS[self.state], f"{self.state} -> {state}"
        self.state = state

    def _refuse(self, action: str, hint: str) -> errors.InvalidTxnStateError:
        if self.state is ProducerTransactionState.FATAL_ERROR:
            return errors.InvalidTxnStateError(
                f"{action} on transactional producer {self.transactional_id!r}, which failed for good ({self.error}); "
                "close it and create a new one")
        return errors.InvalidTxnStateError(
            f"{action} while the producer of {self.transactional_id!r} is {self.state.value}; {hint}")

    # -- the application's calls -------------------------------------------------------------

    def check_init(self) -> None:
        """``init_transactions`` is allowed only once, first."""
        if self.state is not ProducerTransactionState.UNINITIALIZED:
            raise self._refuse("init_transactions()", "it may be called only once")

    def initialized(self) -> None:
        """InitProducerId answered: transactions may begin."""
        self._move(ProducerTransactionState.READY)

    def begin(self) -> None:
        """Start a transaction (no broker call: the first partition or offsets added opens it there)."""
        if self.state is not ProducerTransactionState.READY:
            raise self._refuse("begin_transaction()", "commit or abort the current transaction first"
                               if self.state is not ProducerTransactionState.UNINITIALIZED
                               else "call init_transactions() first")
        self.partitions.clear()
        self.pending.clear()
        self.groups.clear()
        self.error = None
        self._move(ProducerTransactionState.IN_TRANSACTION)

    def check_send(self) -> None:
        """Records may be sent only inside a transaction."""
        if self.state is ProducerTransactionState.ABORTABLE_ERROR:
            raise self._refuse("send()", f"a send of this transaction failed ({self.error}); abort it")
        if self.state is not ProducerTransactionState.IN_TRANSACTION:
            raise self._refuse("send()", "call begin_transaction() first")

    def to_add(self, partitions: set[TopicPartition]) -> set[TopicPartition]:
        """The partitions the coordinator does not list yet and nobody is adding (their records must wait)."""
        return partitions - self.partitions - self.pending

    def adding(self, partitions: set[TopicPartition]) -> None:
        """AddPartitionsToTxn for ``partitions`` is due (their batches wait for it)."""
        self.pending |= partitions

    def added(self, partitions: set[TopicPartition]) -> None:
        """AddPartitionsToTxn answered for ``partitions``."""
        self.partitions |= partitions
        self.pending -= partitions

    def add_failed(self, partitions: set[TopicPartition], error: errors.BrokerError) -> None:
        """AddPartitionsToTxn was refused: the transaction can only be aborted (or, fenced, the producer closed)."""
        self.pending -= partitions
        self.failed(error)

    def check_offsets(self) -> None:
        """Offsets may be sent only inside a transaction that can still commit."""
        if self.state is not ProducerTransactionState.IN_TRANSACTION:
            raise self._refuse("send_offsets_to_transaction()", "call begin_transaction() first")

    def ending(self, committed: bool) -> bool:
        """Start commit (``committed``) or abort; False when there is nothing to tell the coordinator."""
        if committed and self.state is ProducerTransactionState.ABORTABLE_ERROR:
            raise self._refuse("commit_transaction()", f"a send of this transaction failed ({self.error}); abort it")
        allowed = {ProducerTransactionState.IN_TRANSACTION, ProducerTransactionState.COMMITTING if committed
                   else ProducerTransactionState.ABORTING}
        if not committed:
            allowed.add(ProducerTransactionState.ABORTABLE_ERROR)
        if self.state not in allowed:
            raise self._refuse("commit_transaction()" if committed else "abort_transaction()",
                               "call begin_transaction() first")
        self._move(ProducerTransactionState.COMMITTING if committed else ProducerTransactionState.ABORTING)
        return bool(self.partitions or self.groups)

    def ended(self) -> None:
        """EndTxn answered (or nothing had to be told): a new transaction may begin."""
        self.partitions.clear()
        self.pending.clear()
        self.groups.clear()
        self.error = None
        self._move(ProducerTransactionState.READY)

    # -- failures ----------------------------------------------------------------------------

    def failed(self, error: errors.BrokerError) -> None:
        """A call or send of the transaction failed: fatal if fenced, otherwise an open transaction must be aborted
        (a commit or abort that failed otherwise may be called again)."""
        if error.code in FATAL_CODES or self.state in (ProducerTransactionState.UNINITIALIZED,
                                                       ProducerTransactionState.FATAL_ERROR):
            self.error = error
            self._move(ProducerTransactionState.FATAL_ERROR)
        elif self.state in (ProducerTransactionState.IN_TRANSACTION, ProducerTransactionState.ABORTABLE_ERROR):
            self.error = error
            self._move(ProducerTransactionState.ABORTABLE_ERROR)
