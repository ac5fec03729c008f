"""LostLeaseSuspects: after a lost call to a share group, records below the log's end are flagged redelivered."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, fail
from twisted.internet.task import Clock

from mqbroker.protocols.amqp.share_view import EVERY_OFFSET, LostLeaseSuspects
from mqbroker.shares.partition_values import AcquiredRange


@dataclasses.dataclass
class At:
    offset: int


def test_nothing_is_suspect_until_a_call_is_lost_then_what_lies_below_the_log_end() -> None:
    answers: list[Deferred[At]] = []
    suspects = LostLeaseSuspects(Clock(), lambda: answers.append(Deferred()) or answers[-1])
    assert not suspects.redelivered(5, 1) and suspects.redelivered(5, 2)
    suspects.call_lost()
    assert suspects.redelivered(10**9, 1), "every record is suspect until the log's end is known"
    answers[0].callback(At(100))
    assert suspects.redelivered(99, 1) and not suspects.redelivered(100, 1)


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 9), st.integers(1, 3)), max_size=5),
       st.sampled_from([0, 17, 45, EVERY_OFFSET]))
def test_the_offsets_of_acquired_ranges_flagged_redelivered_are_those_the_rule_flags(
        spans: list[tuple[int, int, int]], below: int) -> None:
    suspects = LostLeaseSuspects(Clock(), lambda: Deferred())
    suspects.below = below
    ranges = [AcquiredRange(first, first + length, count) for first, length, count in spans]
    assert suspects.redelivered_offsets(ranges) == {
        offset for acquired in ranges for offset in range(acquired.first, acquired.last + 1)
        if suspects.redelivered(offset, acquired.delivery_count)}


def test_a_call_lost_while_the_end_is_found_asks_again() -> None:
    answers: list[Deferred[At]] = []
    suspects = LostLeaseSuspects(Clock(), lambda: answers.append(Deferred()) or answers[-1])
    suspects.call_lost()
    suspects.call_lost()
    answers[0].callback(At(10))
    assert suspects.below == EVERY_OFFSET and len(answers) == 2, "the older end may lie below the newer suspects"
    answers[1].callback(At(20))
    assert suspects.below == 20


def test_a_failed_lookup_is_retried_a_second_later_and_stops_with_the_queue() -> None:
    clock = Clock()
    calls = []

    def find() -> Deferred[At]:
        calls.append(1)
        return fail(RuntimeError("no leader")) if len(calls) == 1 else _at(7)

    suspects = LostLeaseSuspects(clock, find)
    suspects.call_lost()
    assert suspects.below == EVERY_OFFSET
    clock.advance(1.0)
    assert suspects.below == 7 and len(calls) == 2
    suspects.stopped = True
    suspects.call_lost()
    assert len(calls) == 2


def _at(offset: int) -> Deferred[At]:
    answer: Deferred[At] = Deferred()
    answer.callback(At(offset))
    return answer
