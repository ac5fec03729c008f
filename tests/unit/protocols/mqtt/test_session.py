"""Session state serialization, queue bounds, record headers, and garbage into a live session."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.mqtt.actions import Close, PublishToLog
from mqbroker.protocols.mqtt.headers import message_from_record, record_headers
from mqbroker.protocols.mqtt.packets import Properties, RetainHandling
from mqbroker.protocols.mqtt.session import ConnectionState
from mqbroker.protocols.mqtt.state import (
    OutboundMessage,
    SessionState,
    Subscription,
)
from tests.unit.protocols.mqtt.test_flows import connected_session

texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=10)


@st.composite
def session_states(draw: st.DrawFn) -> SessionState:
    """A session with arbitrary durable parts."""
    state = SessionState(draw(texts), expiry_interval_s=draw(st.integers(0, 0xFFFF_FFFF)))
    for topic_filter in draw(st.lists(texts, max_size=4, unique=True)):
        state.subscriptions[topic_filter] = Subscription(
            topic_filter=topic_filter, qos=draw(st.integers(0, 2)), no_local=draw(st.booleans()),
            retain_as_published=draw(st.booleans()), retain_handling=draw(st.sampled_from(RetainHandling)),
            subscription_identifier=draw(st.none() | st.integers(1, 268_435_455)),
        )
    for packet_id in draw(st.lists(st.integers(1, 0xFFFF), max_size=4, unique=True)):
        position = draw(st.none() | st.tuples(texts, st.integers(0, 99), st.integers(0, 2**62)))  # None: not in the log
        state.inflight[packet_id] = OutboundMessage(
            topic=draw(texts), payload=draw(st.binary(max_size=20)), qos=draw(st.integers(1, 2)),
            retain=draw(st.booleans()), properties=Properties(
                message_expiry_interval_s=draw(st.none() | st.integers(1, 99)),
                subscription_identifiers=tuple(draw(st.lists(st.integers(1, 268_435_455), max_size=2)))),
            position=position,
        )
        if state.inflight[packet_id].qos == 2 and draw(st.booleans()):
            state.released.add(packet_id)  # PUBREC received: awaiting PUBCOMP
    state.received_qos2 = set(draw(st.lists(st.integers(1, 0xFFFF), max_size=4)))
    state.next_packet_id = draw(st.integers(1, 0xFFFF))
    return state


@given(state=session_states())
@settings(max_examples=100)
def test_durable_session_state_survives_bytes_round_trip(state: SessionState) -> None:
    restored = SessionState.from_bytes(state.to_bytes())
    assert restored == state
    assert list(restored.inflight) == list(state.inflight)  # resend order is kept
    assert restored.released == state.released


def test_qos0_queue_overflow_drops_the_oldest_message() -> None:
    state = SessionState("c", qos0_queue_length_max=2)
    subscription = [Subscription(topic_filter="#")]
    for payload in (b"1", b"2", b"3"):
        state.enqueue(OutboundMessage(topic="t", payload=payload, qos=0), subscription)
    assert [message.payload for message in state.qos0_pending] == [b"2", b"3"]
    assert state.qos0_dropped == 1


def test_pending_qos1_queue_reports_when_full() -> None:
    state = SessionState("c", pending_messages_max=1)
    state.enqueue(OutboundMessage(topic="t", payload=b"", qos=1), [Subscription(topic_filter="#", qos=1)])
    assert not state.has_room()


def test_packet_ids_skip_those_in_flight_and_wrap_after_65535() -> None:
    state = SessionState("c")
    state.next_packet_id = 0xFFFF
    state.inflight[1] = OutboundMessage(topic="t", qos=1, payload=b"")
    assert state.allocate_packet_id() == 0xFFFF
    assert state.allocate_packet_id() == 2


def test_record_headers_carry_metadata_and_properties_both_ways() -> None:
    properties = Properties(
        payload_format_indicator=1, message_expiry_interval_s=30, content_type="application/json",
        response_topic="replies/1", correlation_data=b"\x00\x01",
        user_properties=(("unit", "C"), ("mqtt.qos", "spoof")),
    )
    headers = record_headers(1, True, "dev-1", properties)
    message = message_from_record(b"devices/1/temp", b"21", headers, timestamp_ms=5000)
    assert message == OutboundMessage(
        topic="devices/1/temp", payload=b"21", qos=1, retain=True, properties=properties,
        origin_client_id="dev-1", created_ms=5000,
    )


def test_native_records_go_out_at_the_subscription_qos_and_keyless_records_not_at_all() -> None:
    message = message_from_record(b"sensors/1", b"v", [("trace", b"abc")], timestamp_ms=0)
    assert message is not None and message.qos == 2
    assert message.properties.user_properties == (("trace", "abc"),)
    assert message_from_record(None, b"v", [], timestamp_ms=0) is None
    assert message_from_record(b"bad/+", b"v", [], timestamp_ms=0) is None


@given(data=st.lists(st.binary(max_size=64), max_size=5), level=st.sampled_from([4, 5]))
@settings(max_examples=200)
def test_garbage_after_connect_yields_only_actions(data: list[bytes], level: int) -> None:
    session = connected_session(level)
    for chunk in data:
        was_connected = session.state is ConnectionState.CONNECTED
        actions = session.receive_data(chunk, 1)
        if was_connected and session.state is not ConnectionState.CONNECTED:
            assert isinstance(actions[-1], Close)
    for action in session.connection_lost(2):
        assert not isinstance(action, PublishToLog) or action.ticket is None
