"""The stored will record: it round-trips; garbage raises only CorruptMessageError."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.mqtt.actions import PublishToLog, Retain, ScheduleWill
from mqbroker.protocols.mqtt.stored_will import StoredWill
from tests.unit.protocols.mqtt.test_state import decodes_or_raises_corrupt, garbage_for

_headers = st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3).map(tuple)


@st.composite
def stored_wills(draw: st.DrawFn) -> StoredWill:
    payload, headers = draw(st.binary(max_size=30)), draw(_headers)
    write = PublishToLog(ticket=None, log_topic=draw(st.text(max_size=10)), key=draw(st.binary(max_size=10)),
                         payload=payload, headers=headers)
    retain = draw(st.none() | st.text(max_size=10).map(lambda topic: Retain(topic=topic, payload=payload, headers=headers)))
    return StoredWill(delay_ms=draw(st.integers(0, 2**40)), write=write, retain=retain,
                      due_at_ms=draw(st.none() | st.integers(0, 2**50)))


@given(will=stored_wills())
def test_stored_will_round_trips(will: StoredWill) -> None:
    assert StoredWill.from_bytes(will.to_bytes()) == will


@given(data=garbage_for(stored_wills().map(StoredWill.to_bytes)))
@settings(max_examples=400)
def test_garbage_stored_will_raises_only_corrupt_message(data: bytes) -> None:
    decodes_or_raises_corrupt(StoredWill.from_bytes, data)


def test_a_will_keeps_its_delay_and_goes_out_that_long_after_it_is_rescheduled() -> None:
    write = PublishToLog(ticket=None, log_topic="mqtt.messages", key=b"dev/1", payload=b"gone", headers=())
    retain = Retain(topic="dev/1", payload=b"gone", headers=())
    stored = StoredWill.of(ScheduleWill(client_id="dev-1", at_ms=1_500, actions=(write, retain)), now_ms=1_000)
    assert stored.delay_ms == 500
    assert stored.schedule("dev-1", now_ms=9_000) == ScheduleWill(client_id="dev-1", at_ms=9_500, actions=(write, retain))


def test_a_will_whose_delay_began_goes_out_at_its_due_time_wherever_it_is_rescheduled() -> None:
    write = PublishToLog(ticket=None, log_topic="mqtt.messages", key=b"dev/1", payload=b"gone", headers=())
    begun = StoredWill.begun(ScheduleWill(client_id="dev-1", at_ms=1_500, actions=(write,)), now_ms=1_000)
    assert (begun.delay_ms, begun.due_at_ms) == (500, 1_500)
    assert StoredWill.from_bytes(begun.to_bytes()).schedule("dev-1", now_ms=1_200).at_ms == 1_500
