# -*- test-case-name: tests.unit.transactions.test_coordinator -*-
"""Transaction version 2 (KIP-890 part 2) decisions of the coordinator's EndTxn (pure).

Every EndTxn of a version 2 producer moves it to the next epoch: the decision record and its
markers carry that epoch, so no late write of the finished transaction can join the next one,
and the answer hands it to the producer. These functions say what such an EndTxn means when it
is a retry, when nothing is ongoing, and when the epoch is exhausted (a fresh producer id).
"""

from __future__ import annotations

import dataclasses

from mqbroker.errors import ConcurrentTransactionsError, InvalidTxnStateError
from mqbroker.transactions.log_records import TransactionMetadata
from mqbroker.transactions.messages import (
    PRODUCER_EPOCH_MAX,
    EndTxnRequest,
    TransactionState,
)


def is_bumped_retry(current: TransactionMetadata, request: EndTxnRequest) -> bool:
    """A version 2 EndTxn retried after its decision moved the producer to the next epoch (answer it again)."""
    wanted = (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT) if request.committed \
        else (TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT)
    return (request.bump_epoch and request.producer_id == current.producer_id
            and request.producer_epoch == current.producer_epoch - 1 and current.state in wanted)


def needs_fresh_producer_id(current: TransactionMetadata | None, request: EndTxnRequest) -> bool:
    """True when this version 2 EndTxn would move the id past its last epoch (to a new producer id)."""
    return request.bump_epoch and current is not None and current.producer_epoch >= PRODUCER_EPOCH_MAX


def ended_without_transaction(current: TransactionMetadata, request: EndTxnRequest, now_ms: int) -> TransactionMetadata:
    """A version 2 EndTxn with nothing ongoing: an abort (of writes that never reached the coordinator) bumps the
    epoch; so does the end of a transaction at an exhausted epoch, to ``request.fresh_producer_id`` at epoch 0.
    A commit of nothing is refused (``InvalidTxnStateError``)."""
    if request.committed and current.state is not TransactionState.COMPLETE_COMMIT:
        raise InvalidTxnStateError(
            f"cannot commit transactional id {request.transactional_id!r} in state {current.state.value}; "
            "no transaction was begun")
    if current.producer_epoch < PRODUCER_EPOCH_MAX:
        producer_id, epoch = current.producer_id, current.producer_epoch + 1
    elif request.fresh_producer_id is not None:
        producer_id, epoch = request.fresh_producer_id, 0
    else:
        raise ConcurrentTransactionsError(f"transactional id {request.transactional_id!r} needs a new producer id; retry")
    return dataclasses.replace(current, producer_id=producer_id, producer_epoch=epoch, state=TransactionState.EMPTY,
                               last_update_ms=now_ms)
