"""Publish admission for x-overflow reject-publish: rounds that count with nothing of ours in flight, verdicts that
take the oldest waiting publishes up to x-max-length, runs of confirms split where a batch stopped taking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.protocols.amqp.publish_admission import AdmissionLedger, rejected_here_before, split_run


def test_a_round_takes_what_fits_and_the_next_waits_until_those_landed() -> None:
    ledger = AdmissionLedger(max_length=5)
    assert not ledger.round_due(0)
    assert ledger.round_due(3)
    ledger.start_round()
    assert not ledger.round_due(3)  # one round at a time
    assert ledger.decide(waiting=8, ready=2) == 3
    assert not ledger.round_due(4)  # three admitted are on their way: a count now might miss them
    ledger.landed(3)
    assert ledger.round_due(4)
    ledger.start_round()
    assert ledger.decide(waiting=4, ready=5) == 0  # full: every waiting publish is rejected
    assert ledger.round_due(1)


def test_a_queue_already_over_its_length_takes_nothing_and_length_zero_takes_nothing_ever() -> None:
    over = AdmissionLedger(max_length=2)
    over.start_round()
    assert over.decide(waiting=3, ready=7) == 0
    empty = AdmissionLedger(max_length=0)
    empty.start_round()
    assert empty.decide(waiting=3, ready=0) == 0


def test_a_failed_count_ends_the_round_with_nothing_admitted() -> None:
    ledger = AdmissionLedger(max_length=5)
    ledger.start_round()
    ledger.round_failed()
    assert ledger.in_flight == 0 and ledger.round_due(1)


def test_misuse_is_a_programming_error() -> None:
    ledger = AdmissionLedger(max_length=1)
    with pytest.raises(AssertionError):
        ledger.decide(waiting=1, ready=0)  # no round asked
    ledger.start_round()
    with pytest.raises(AssertionError):
        ledger.start_round()
    ledger.decide(waiting=1, ready=0)
    with pytest.raises(AssertionError):
        ledger.landed(2)


@given(st.integers(0, 50), st.lists(st.tuples(st.integers(0, 20), st.integers(0, 60)), max_size=30))
def test_publishes_through_one_broker_never_exceed_the_length(max_length: int,
                                                              rounds: list[tuple[int, int]]) -> None:
    """Publishes through one broker only, with consumers taking some between rounds: the queue never holds more."""
    ledger = AdmissionLedger(max_length=max_length)
    ready = 0
    for waiting, consumed in rounds:
        ready = max(0, ready - consumed)
        if not ledger.round_due(waiting):
            continue
        ledger.start_round()
        admitted = ledger.decide(waiting=waiting, ready=ready)
        assert 0 <= admitted <= waiting
        assert admitted == min(waiting, max(0, max_length - ready))  # what fits is taken, not less
        ready += admitted
        ledger.landed(admitted)
        assert admitted == 0 or ready <= max_length


def test_a_run_is_acked_as_far_as_every_batch_took_it_and_nacked_after() -> None:
    assert split_run(5, [(5, True)]) == [(0, 4, True)]
    assert split_run(5, [(3, True)]) == [(0, 2, True), (3, 4, False)]
    assert split_run(5, [(3, True), (5, True), (2, True)]) == [(0, 1, True), (2, 4, False)]
    assert split_run(5, [(3, True), (5, False)]) == [(0, 2, False), (3, 4, False)]
    assert split_run(5, [(0, True)]) == [(0, 4, False)]
    assert split_run(5, [(-2, True)]) == [(0, 4, False)]  # the run began after the batch stopped taking
    assert split_run(3, [(9, True)]) == [(0, 2, True)]


def test_a_maxlen_death_in_the_same_queue_is_a_cycle() -> None:
    death = {"queue": "q", "reason": "maxlen", "count": 1}
    assert rejected_here_before({"x-death": [death]}, "q")
    assert not rejected_here_before({"x-death": [death]}, "other")
    assert not rejected_here_before({"x-death": [{**death, "reason": "rejected"}]}, "q")
    assert not rejected_here_before(None, "q") and not rejected_here_before({"x-death": 5}, "q")
