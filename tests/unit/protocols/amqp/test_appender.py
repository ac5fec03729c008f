"""A batch's fate reaches every message appended to it, once; ``all_settled`` waits for every batch or the first refusal."""

from __future__ import annotations

from mqbroker.protocols.amqp.appender import BatchStored, all_settled


def test_listeners_hear_the_outcome_in_order_and_late_listeners_at_once() -> None:
    batch, heard = BatchStored(), []
    batch.when_settled(lambda stored: heard.append(("first", stored)))
    batch.when_settled(lambda stored: heard.append(("second", stored)))
    batch.settle(True)
    batch.when_settled(lambda stored: heard.append(("late", stored)))
    assert heard == [("first", True), ("second", True), ("late", True)]


def test_all_settled_waits_for_every_batch_and_counts_a_repeated_one_once() -> None:
    first, second = BatchStored(), BatchStored()
    settled = all_settled([first, second, first])
    first.settle(True)
    assert not settled.called
    second.settle(True)
    assert settled.result is True


def test_all_settled_fails_as_soon_as_one_batch_is_refused() -> None:
    first, second = BatchStored(), BatchStored()
    settled = all_settled([first, second])
    second.settle(False)
    assert settled.result is False
    first.settle(True)  # too late to change the answer


def test_all_settled_of_nothing_is_true_at_once() -> None:
    assert all_settled([]).result is True
