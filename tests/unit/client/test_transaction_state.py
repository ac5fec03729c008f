"""The client's transaction state machine: what each call may do in each state."""

from __future__ import annotations

import pytest

from mqbroker import errors
from mqbroker.client.transaction_state import TRANSITIONS, ProducerTransactionState, TransactionTracker

S = ProducerTransactionState


def _in_transaction() -> TransactionTracker:
    tracker = TransactionTracker("tx")
    tracker.initialized()
    tracker.begin()
    return tracker


def test_a_transaction_adds_each_partition_once_and_ends_ready_for_the_next() -> None:
    tracker = _in_transaction()
    assert tracker.to_add({("t", 0), ("t", 1)}) == {("t", 0), ("t", 1)}
    tracker.adding({("t", 0), ("t", 1)})
    assert tracker.to_add({("t", 0), ("t", 1)}) == set()  # being added: asked once
    tracker.added({("t", 0)})
    tracker.add_failed({("t", 1)}, errors.ConcurrentTransactionsError("busy"))
    assert tracker.state is S.ABORTABLE_ERROR and tracker.partitions == {("t", 0)} and not tracker.pending
    tracker.ending(committed=False)
    tracker.ended()
    tracker.begin()
    tracker.added({("t", 0)})
    assert tracker.ending(committed=True) is True
    tracker.ended()
    assert tracker.state is S.READY and not tracker.partitions
    tracker.begin()
    assert tracker.ending(committed=False) is False  # nothing was added: no broker call
    tracker.ended()


@pytest.mark.parametrize(("call", "hint"), [
    (lambda t: t.begin(), "init_transactions"),
    (lambda t: t.check_send(), "begin_transaction"),
    (lambda t: t.ending(True), "begin_transaction"),
    (lambda t: t.check_offsets(), "begin_transaction"),
])
def test_calls_out_of_order_are_refused_naming_what_to_do(call, hint) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(errors.InvalidTxnStateError, match=hint):
        call(TransactionTracker("tx"))


def test_a_failed_send_allows_only_an_abort() -> None:
    tracker = _in_transaction()
    tracker.failed(errors.NotEnoughReplicasError("too few replicas"))
    assert tracker.state is S.ABORTABLE_ERROR
    for refused in (tracker.check_send, lambda: tracker.ending(True)):
        with pytest.raises(errors.InvalidTxnStateError, match="abort it"):
            refused()
    tracker.ending(False)
    tracker.ended()
    assert tracker.state is S.READY


def test_being_fenced_is_final() -> None:
    tracker = _in_transaction()
    tracker.failed(errors.ProducerFencedError("a newer producer"))
    assert tracker.state is S.FATAL_ERROR
    for refused in (tracker.begin, lambda: tracker.ending(False), tracker.check_send):
        with pytest.raises(errors.InvalidTxnStateError, match="close it"):
            refused()


def test_a_commit_that_failed_without_fencing_may_be_retried() -> None:
    tracker = _in_transaction()
    tracker.added({("t", 0)})
    tracker.ending(True)
    tracker.failed(errors.RequestTimedOutError("no answer"))
    assert tracker.state is S.COMMITTING
    assert tracker.ending(True) is True


def test_every_state_has_its_transitions() -> None:
    assert set(TRANSITIONS) == set(ProducerTransactionState)
