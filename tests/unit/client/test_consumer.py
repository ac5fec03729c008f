"""The consumer core: positions, seeks, resets, fetch plans and decoding replies into messages."""

import contextlib
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.client.consumer import (
    EARLIEST,
    LATEST,
    ConsumerConfig,
    ConsumerCore,
    FetchPlan,
    NoOffsetForPartitionError,
    OffsetReset,
    PositionOutOfRangeError,
    decode_messages,
)
from mqbroker.client.group_member import AssignmentChange, apply_change
from mqbroker.errors import CorruptMessageError, ErrorCode, TopicAuthorizationError
from mqbroker.protocols.native.messages import FetchPartitionResult, FetchResponse, FetchTopicResult
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.control import ControlType, encode_control_batch
from mqbroker.records.header import stamp
from mqbroker.records.readable import UnreadableBatch
from tests.poison import poison_batch

EVENTS_0 = ("events", 0)
EVENTS_1 = ("events", 1)


def _batch(base_offset: int, values: list[bytes], timestamp_ms: int = 1000) -> bytes:
    builder = BatchBuilder(base_offset=base_offset)
    for value in values:
        builder.append(timestamp_ms, b"k", value, [("h", b"v")])
    return builder.build()


def _response(records: bytes, code: int = 0, partition: int = 0) -> FetchResponse:
    result = FetchPartitionResult(partition_index=partition, error_code=code, high_watermark=99, records=records)
    return FetchResponse(topics=(FetchTopicResult(name="events", partitions=(result,)),))


def _positioned(offset: int) -> ConsumerCore:
    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.EARLIEST))
    core.assign([EVENTS_0])
    core.seek(EVENTS_0, offset)
    return core


def test_new_assignment_asks_for_a_reset_by_policy_then_takes_the_answer() -> None:
    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.LATEST))
    core.assign([EVENTS_0])
    assert core.reset_requests() == {EVENTS_0: LATEST}
    assert core.position(EVENTS_0) is None
    core.reset_resolved(EVENTS_0, LATEST, 17)
    assert core.position(EVENTS_0) == 17 and core.reset_requests() == {}


def test_seek_variants_set_or_look_up_the_position() -> None:
    core = _positioned(5)
    core.seek_to_beginning(EVENTS_0)
    assert core.reset_requests() == {EVENTS_0: EARLIEST}
    core.seek_to_timestamp(EVENTS_0, 123)
    core.reset_resolved(EVENTS_0, EARLIEST, 0)  # an answer to the superseded seek is ignored
    assert core.reset_requests() == {EVENTS_0: 123}
    core.seek(EVENTS_0, 9)
    assert core.position(EVENTS_0) == 9


def test_unassigned_partition_cannot_be_sought() -> None:
    with pytest.raises(ValueError, match="not assigned"):
        ConsumerCore(ConsumerConfig()).seek(("other", 0), 1)


def test_fetch_reply_becomes_messages_and_advances_the_position() -> None:
    core = _positioned(10)
    (plan,) = core.fetch_plans(lambda topic, partition: 3)
    assert plan.node_id == 3 and plan.request().topics[0].partitions[0].fetch_offset == 10
    assert core.fetch_plans(lambda topic, partition: 3) == []  # one fetch in flight per partition
    data = _batch(8, [b"a", b"b", b"c", b"d"]) + _batch(12, [b"e"])
    messages = core.fetch_completed(plan, _response(data))
    assert [(message.offset, message.value) for message in messages] == [(10, b"c"), (11, b"d"), (12, b"e")]
    assert messages[0].headers == (("h", b"v"),) and messages[0].key == b"k" and messages[0].timestamp == 1000
    assert core.position(EVENTS_0) == 13


def test_control_batches_are_skipped_but_move_the_position() -> None:
    control = bytearray(encode_control_batch(ControlType.COMMIT, 1, 0, 0, 5))
    stamp(control, 0, 13, 0)
    core = _positioned(12)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    messages = core.fetch_completed(plan, _response(_batch(12, [b"x"]) + bytes(control)))
    assert [message.value for message in messages] == [b"x"]
    assert core.position(EVENTS_0) == 14


def test_partial_batch_at_the_end_is_left_for_the_next_fetch() -> None:
    whole = _batch(0, [b"a"])
    messages: list = []
    assert decode_messages("events", 0, whole + _batch(1, [b"b"])[:30], 0, messages) == 1
    assert len(messages) == 1


def test_offset_out_of_range_resets_by_policy() -> None:
    core = _positioned(50)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    core.fetch_completed(plan, _response(b"", code=ErrorCode.OFFSET_OUT_OF_RANGE))
    assert core.reset_requests() == {EVENTS_0: EARLIEST}


def test_under_reset_none_a_partition_without_a_position_waits_for_a_seek() -> None:
    """No committed offset, no seek: the partition stays assigned, nothing is looked up or fetched for it, and
    ``require_positions`` names it until it is sought (a committed one is sought by the group and not named)."""
    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.NONE))
    apply_change(core, AssignmentChange(assigned=frozenset({EVENTS_0, EVENTS_1})), {EVENTS_0: 7, EVENTS_1: None})
    assert core.assignment() == {EVENTS_0, EVENTS_1} and core.position(EVENTS_1) is None
    assert core.reset_requests() == {}
    with pytest.raises(NoOffsetForPartitionError, match="events-1") as raised:
        core.require_positions()
    assert raised.value.partitions == {EVENTS_1}
    core.require_positions([EVENTS_0])  # the sought partition alone is fine
    assert [plan.offsets for plan in core.fetch_plans(lambda topic, partition: 1)] == [{EVENTS_0: 7}]
    core.seek_to_beginning(EVENTS_1)
    core.require_positions()
    assert core.reset_requests() == {EVENTS_1: EARLIEST}
    core.assign([EVENTS_0, ("events", 2)])
    with pytest.raises(NoOffsetForPartitionError):
        core.require_positions([("events", 2)])
    core.seek(("events", 2), 0)
    core.require_positions()


def test_under_reset_none_an_out_of_range_fetch_keeps_the_position_and_holds_the_error() -> None:
    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.NONE))
    core.assign([EVENTS_0])
    core.seek(EVENTS_0, 50)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    assert core.fetch_completed(plan, _response(b"", code=ErrorCode.OFFSET_OUT_OF_RANGE)) == []
    assert core.position(EVENTS_0) == 50 and core.reset_requests() == {}
    with pytest.raises(PositionOutOfRangeError, match="events-0 at 50") as raised:
        core.raise_failure()
    assert raised.value.offsets == {EVENTS_0: 50}
    assert [plan.offsets for plan in core.fetch_plans(lambda topic, partition: 1)] == [{EVENTS_0: 50}]


def test_not_leader_marks_the_topic_stale_and_keeps_the_position() -> None:
    core = _positioned(4)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    core.fetch_completed(plan, _response(b"", code=ErrorCode.NOT_LEADER_OR_FOLLOWER))
    assert core.stale_topics == {"events"} and core.position(EVENTS_0) == 4
    assert len(core.fetch_plans(lambda topic, partition: 2)) == 1


def test_reply_for_a_partition_sought_meanwhile_is_dropped() -> None:
    core = _positioned(0)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    core.seek(EVENTS_0, 100)
    assert core.fetch_completed(plan, _response(_batch(0, [b"a"]))) == []
    assert core.position(EVENTS_0) == 100


@settings(max_examples=100)
@given(garbage=st.binary(max_size=300))
def test_garbage_records_raise_only_the_typed_error(garbage: bytes) -> None:
    with contextlib.suppress(CorruptMessageError):
        decode_messages("events", 0, garbage, 0, [])


def test_a_poison_batch_stops_the_consumer_unless_it_asked_to_pass_over_such_batches() -> None:
    poison = bytearray(poison_batch(records_count=2))
    stamp(poison, 0, 1, 0)
    fetched = _batch(0, [b"a"]) + bytes(poison) + _batch(3, [b"d"])
    core = _positioned(0)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    assert core.fetch_completed(plan, _response(fetched)) == []  # not even the good batch before it
    with pytest.raises(CorruptMessageError):  # Kafka's behaviour: the application decides (seek past it)
        core.raise_failure()
    core.raise_failure()  # raised once
    assert core.position(EVENTS_0) == 0
    skipped: list[UnreadableBatch] = []
    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.EARLIEST), on_unreadable=skipped.append)
    core.assign([EVENTS_0])
    core.seek(EVENTS_0, 0)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    assert [message.value for message in core.fetch_completed(plan, _response(fetched))] == [b"a", b"d"]
    assert core.position(EVENTS_0) == 4
    assert [(batch.topic, batch.first_offset, batch.last_offset) for batch in skipped] == [("events", 1, 2)]


@pytest.mark.parametrize("failing", ["poison", "refused"])
def test_a_partition_that_fails_keeps_its_position_and_the_others_messages_are_returned(failing: str) -> None:
    """One reply, two partitions: the first decodes, the second holds an error for the application. The first's
    messages come back (its position moved past them, so raising past them would lose them); the error waits."""
    poison = bytearray(poison_batch(records_count=2))
    stamp(poison, 0, 5, 0)
    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.EARLIEST))
    core.assign([("events", 0), ("events", 1)])
    core.seek(("events", 0), 0)
    core.seek(("events", 1), 5)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    second = (FetchPartitionResult(partition_index=1, error_code=0, high_watermark=9, records=bytes(poison))
              if failing == "poison" else
              FetchPartitionResult(partition_index=1, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                   high_watermark=-1, records=b""))
    first = FetchPartitionResult(partition_index=0, error_code=0, high_watermark=2, records=_batch(0, [b"a", b"b"]))
    response = FetchResponse(topics=(FetchTopicResult(name="events", partitions=(first, second)),))
    assert [message.value for message in core.fetch_completed(plan, response)] == [b"a", b"b"]
    assert core.position(("events", 0)) == 2 and core.position(("events", 1)) == 5
    with pytest.raises(CorruptMessageError if failing == "poison" else TopicAuthorizationError):
        core.raise_failure()


def test_messages_that_never_reached_the_application_are_read_again() -> None:
    """A callback raising part-way through a reply, or a driver interrupted after ``fetch_completed``: the
    partitions whose messages were decoded are read again from the first of them, with no fetch left in flight."""
    poison = bytearray(poison_batch(records_count=2))
    stamp(poison, 0, 5, 0)

    def refuse(batch: UnreadableBatch) -> None:
        raise RuntimeError("the application's callback failed")

    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.EARLIEST), on_unreadable=refuse)
    core.assign([EVENTS_0, EVENTS_1])
    core.seek(EVENTS_0, 0)
    core.seek(EVENTS_1, 5)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    first = FetchPartitionResult(partition_index=0, error_code=0, high_watermark=2, records=_batch(0, [b"a", b"b"]))
    second = FetchPartitionResult(partition_index=1, error_code=0, high_watermark=9, records=bytes(poison))
    with pytest.raises(RuntimeError):
        core.fetch_completed(plan, FetchResponse(topics=(FetchTopicResult(name="events", partitions=(first, second)),)))
    assert core.position(EVENTS_0) == 0 and core.position(EVENTS_1) == 5
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    assert plan.offsets == {EVENTS_0: 0, EVENTS_1: 5}
    messages = core.fetch_completed(plan, FetchResponse(topics=(FetchTopicResult(name="events", partitions=(first,)),)))
    (newer,) = core.fetch_plans(lambda topic, partition: 1)  # the next fetch, sent before the poll was interrupted
    core.unread(messages)
    assert core.position(EVENTS_0) == 0 and not core.fetch_current(newer)
    core.fetch_abandoned(newer)
    assert core.fetch_plans(lambda topic, partition: 1)[0].offsets == {EVENTS_0: 0, EVENTS_1: 5}


# -- a fetch in flight across polls (pipelining) ------------------------------------------------------------


def _two_partitions_in_flight() -> tuple[ConsumerCore, FetchPlan]:
    core = ConsumerCore(ConsumerConfig(auto_offset_reset=OffsetReset.EARLIEST))
    core.assign([EVENTS_0, EVENTS_1])
    core.seek(EVENTS_0, 10)
    core.seek(EVENTS_1, 20)
    (plan,) = core.fetch_plans(lambda topic, partition: 1)
    return core, plan


def _revoke_and_regain_from_commit(core: ConsumerCore) -> None:
    apply_change(core, AssignmentChange(revoked=frozenset([EVENTS_0])), {})
    apply_change(core, AssignmentChange(assigned=frozenset([EVENTS_0])), {EVENTS_0: 15})


@pytest.mark.parametrize(("overtake", "fetched_again"), [
    (lambda core: core.seek(EVENTS_0, 3), {EVENTS_0: 3, EVENTS_1: 20}),
    (lambda core: core.seek(EVENTS_0, 10), {EVENTS_0: 10, EVENTS_1: 20}),  # same offset: still dropped
    (lambda core: core.seek_to_beginning(EVENTS_0), {EVENTS_1: 20}),  # EVENTS_0 waits for its ListOffsets
    (lambda core: core.seek_to_end(EVENTS_0), {EVENTS_1: 20}),
    (lambda core: core.seek_to_timestamp(EVENTS_0, 5), {EVENTS_1: 20}),
    (lambda core: core.pause([EVENTS_0]), {EVENTS_1: 20}),
    (lambda core: core.assign([EVENTS_1]), {EVENTS_1: 20}),
    (_revoke_and_regain_from_commit, {EVENTS_0: 15, EVENTS_1: 20}),
], ids=["seek", "seek-same-offset", "seek-to-beginning", "seek-to-end", "seek-to-timestamp", "pause", "unassign",
        "rebalance"])
def test_a_fetch_in_flight_is_overtaken_by_any_change_of_where_its_partitions_are_read(
        overtake: Callable[[ConsumerCore], None], fetched_again: dict[tuple[str, int], int]) -> None:
    """The driver abandons such a fetch; its partitions are fetched again from where they are read now."""
    core, plan = _two_partitions_in_flight()
    assert core.fetch_current(plan) and core.fetch_plans(lambda topic, partition: 1) == []
    overtake(core)
    assert not core.fetch_current(plan)
    core.fetch_abandoned(plan)
    (again,) = core.fetch_plans(lambda topic, partition: 1)
    assert again.offsets == fetched_again


def test_a_pause_lifted_before_the_answer_is_taken_keeps_the_fetch() -> None:
    core, plan = _two_partitions_in_flight()
    core.pause([EVENTS_0])
    core.paused.discard(EVENTS_0)
    assert core.fetch_current(plan)


def test_the_stale_fetchs_end_leaves_the_newer_fetch_of_a_partition_in_flight() -> None:
    """A seek re-plans one partition while the old plan is still out: neither the old plan's answer nor its
    abandonment frees the partition the new plan fetches (that would send a third fetch of it)."""
    core, old = _two_partitions_in_flight()
    core.seek(EVENTS_0, 3)
    (newer,) = core.fetch_plans(lambda topic, partition: 1)
    assert newer.offsets == {EVENTS_0: 3}
    assert core.fetch_completed(old, _response(_batch(10, [b"stale"]))) == []  # sought away: not passed on
    (rest,) = core.fetch_plans(lambda topic, partition: 1)
    assert rest.offsets == {EVENTS_1: 20}
    core.fetch_abandoned(old)
    assert core.fetch_plans(lambda topic, partition: 1) == []
    assert [message.offset for message in core.fetch_completed(newer, _response(_batch(3, [b"x", b"y"])))] == [3, 4]


_LOG_END = 40


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.just(("plan",)), st.just(("answer",)), st.just(("answer-unchecked",)), st.just(("pause",)),
    st.just(("resume",)), st.tuples(st.just("seek"), st.integers(0, _LOG_END)), st.just(("reassign",)),
), max_size=40))
def test_no_record_is_returned_twice_or_skipped_whatever_overtakes_the_fetches_in_flight(
        operations: list[tuple[object, ...]]) -> None:
    """Against a log of one record per offset: fetches sent ahead, answered in order, while the application seeks,
    pauses, resumes and is re-assigned the partition. After each seek the records start at its offset, and each
    record returned is the one after the last (``answer``: as the drivers take an answer, dropping an overtaken
    fetch first; ``answer-unchecked``: taken as it is, as the Twisted driver may within one poll)."""
    core = _positioned(0)
    expected = 0
    in_flight: list[FetchPlan] = []
    for operation in operations:
        kind = operation[0]
        if kind == "plan":
            in_flight += core.fetch_plans(lambda topic, partition: 1)
        elif kind in ("answer", "answer-unchecked") and in_flight:
            plan = in_flight.pop(0)
            if kind == "answer" and not core.fetch_current(plan):
                core.fetch_abandoned(plan)
                continue
            start = plan.offsets[EVENTS_0]
            records = _batch(start, [b"%d" % offset for offset in range(start, min(start + 3, _LOG_END))]) \
                if start < _LOG_END else b""  # at the log's end: an empty answer (a batch holds at least one record)
            for message in core.fetch_completed(plan, _response(records)):
                assert message.offset == expected and message.value == b"%d" % expected
                assert kind == "answer-unchecked" or EVENTS_0 not in core.paused
                expected += 1
        elif kind == "pause":
            core.pause([EVENTS_0])
        elif kind == "resume":
            core.paused.discard(EVENTS_0)
        elif kind == "seek":
            core.seek(EVENTS_0, expected := int(operation[1]))  # type: ignore[call-overload]
        elif kind == "reassign":
            apply_change(core, AssignmentChange(revoked=frozenset([EVENTS_0])), {})
            apply_change(core, AssignmentChange(assigned=frozenset([EVENTS_0])), {EVENTS_0: expected})
        assert core.position(EVENTS_0) == expected
