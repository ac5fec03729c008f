"""Stored session state: garbage, and valid records with any one field broken, raise only CorruptMessageError."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.errors import CorruptMessageError
from mqbroker.protocols.mqtt.packets import Properties
from mqbroker.protocols.mqtt.state import InflightState, OutboundMessage, SessionState
from tests.unit.protocols.mqtt.test_session import session_states

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@st.composite
def broken_documents(draw: st.DrawFn, valid: st.SearchStrategy[bytes]) -> bytes:
    """A valid JSON record with one value somewhere in it replaced by any JSON value, or one key removed."""
    document = json.loads(draw(valid))
    node: Any = document
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            break
        key = draw(st.sampled_from(keys))
        if isinstance(node[key], (dict, list)) and node[key] and draw(st.booleans()):
            node = node[key]
            continue
        if isinstance(node, dict) and draw(st.booleans()):
            del node[key]
        else:
            node[key] = draw(json_values)
        break
    return json.dumps(document).encode()


def garbage_for(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Bytes, JSON of any shape, and broken valid records."""
    return st.binary(max_size=200) | json_values.map(lambda value: json.dumps(value).encode()) | broken_documents(valid)


def decodes_or_raises_corrupt(decode: Any, data: bytes) -> None:
    """Call ``decode(data)``; CorruptMessageError is the one error allowed to escape."""
    try:
        decode(data)
    except CorruptMessageError:
        pass


@given(data=garbage_for(session_states().map(SessionState.to_bytes)))
@settings(max_examples=400)
def test_garbage_state_raises_only_corrupt_message(data: bytes) -> None:
    decodes_or_raises_corrupt(SessionState.from_bytes, data)


_V2_HEAD = b'{"version":2,"client_id":"c","expiry_interval_s":0,"next_packet_id":1,"subscriptions":[],"inflight":'


@pytest.mark.parametrize("data", [
    b"\xff\xfe", b"[" * 100_000, b'{"version": 2}', b'{"version": 3}', b'{"version": true}',
    b'{"version":1,"client_id":"c","expiry_interval_s":0,"next_packet_id":1,"subscriptions":[],'
    b'"inflight":[{"state":"awaiting-puback","publish":"MAA="}],"received_qos2":[]}',
    _V2_HEAD + b'[[1,1,"awaiting-puback","mqtt",0,5,1,false]],"received_qos2":[]}',  # 8 items
    _V2_HEAD + b'[[1,1,"awaiting-puback","mqtt",0,-5,1,false,[]]],"received_qos2":[]}',
    _V2_HEAD + b'[[1,0,"awaiting-puback","mqtt",0,5,1,false,[]]],"received_qos2":[]}',
    _V2_HEAD + b'[[65535,2,"awaiting-puback","mqtt",0,5,1,false,[]]],"received_qos2":[]}',
    _V2_HEAD + b'[[1,1,"awaiting-puback","mqtt",0,5,0,false,[]]],"received_qos2":[]}',
    _V2_HEAD + b'[[1,1,"awaiting-puback","mqtt",0,5,1,1,[]]],"received_qos2":[]}',
    _V2_HEAD + b'[[1,1,"awaiting-puback","mqtt",0,5,1,false,[0]]],"received_qos2":[]}',
    _V2_HEAD + b'[[1,1,"sent","mqtt",0,5,1,false,[]]],"received_qos2":[]}',
    # a flow state its QoS does not have: QoS 1 awaits a PUBACK only, QoS 2 never one
    _V2_HEAD + b'[[1,1,"awaiting-pubrec","mqtt",0,5,1,false,[]]],"received_qos2":[]}',
    _V2_HEAD + b'[[1,1,"awaiting-puback","mqtt",0,5,2,false,[]]],"received_qos2":[]}',
    _V2_HEAD + b'[[1,3,"awaiting-puback","mqtt",0,5,1,false,[]],[2,1,"awaiting-puback","mqtt",0,9,1,false,[]]],'
               b'"received_qos2":[]}',
])
def test_undecodable_state_names_the_problem(data: bytes) -> None:
    with pytest.raises(CorruptMessageError, match="MQTT session state"):
        SessionState.from_bytes(data)


def _inflight(packet_id: int, qos: int = 2) -> OutboundMessage:
    return OutboundMessage(topic=f"t/{packet_id}", payload=b"p" * packet_id, qos=qos)


def _flows(state: SessionState) -> list[InflightState | None]:
    return [state.flow(packet_id) for packet_id in state.inflight]


def test_stored_state_follows_every_inflight_change() -> None:
    """to_bytes encodes each in-flight message once; a message acknowledged, moved on in its flow or replaced
    under the same packet id is written as it is now, as a state that never stored anything would write it."""
    state = SessionState("c", expiry_interval_s=60)
    state.inflight = {packet_id: _inflight(packet_id) for packet_id in (1, 2, 3)}
    state.to_bytes()
    state.complete(1)
    state.released.add(2)
    state.inflight[3] = replace(state.inflight[3], payload=b"new")
    state.inflight[4] = _inflight(4, qos=1)
    fresh = SessionState("c", expiry_interval_s=60)
    fresh.inflight, fresh.released = dict(state.inflight), set(state.released)
    assert state.to_bytes() == fresh.to_bytes()
    restored = SessionState.from_bytes(state.to_bytes())
    assert [(packet_id, restored.flow(packet_id), message.payload) for packet_id, message in restored.inflight.items()] == [
        (2, InflightState.AWAITING_PUBCOMP, b"pp"), (3, InflightState.AWAITING_PUBREC, b"new"),
        (4, InflightState.AWAITING_PUBACK, b"pppp")]


def test_refill_waits_for_half_the_queue() -> None:
    """Reads paused for a full queue resume at half of it, not at the first free slot."""
    state = SessionState("c", pending_messages_max=4)
    message = OutboundMessage(topic="t", payload=b"", qos=1)
    state.pending.extend([message] * 4)
    assert not state.has_room() and not state.wants_refill()
    state.pending.popleft()
    assert state.has_room() and not state.wants_refill()
    state.pending.popleft()
    assert state.wants_refill()


#: A state as the format before positions (version 1) wrote it: every in-flight message whole. Written by
#: ``SessionState.to_bytes`` at 52ec9fa: a session subscribed to ``fleet/#`` (identifier 7) with a QoS 1 message
#: awaiting PUBACK (packet id 3) and a QoS 2 one awaiting PUBCOMP (4), inbound QoS 2 packet id 9 unreleased.
_VERSION_1_STATE = (
    b'{"client_id":"old-device","expiry_interval_s":3600,"inflight":[{"publish":"Mg8AB2ZsZWV0LzEAAwILB0E=",'
    b'"state":"awaiting-puback"},{"publish":"NA0AB2ZsZWV0LzIABABC","state":"awaiting-pubcomp"}],"next_packet_id":5,'
    b'"received_qos2":[9],"subscriptions":[{"no_local":false,"qos":2,"retain_as_published":false,"retain_handling":0,'
    b'"share_group":null,"subscription_identifier":7,"topic_filter":"fleet/#"}],"version":1}'
)


def test_a_state_stored_before_the_upgrade_still_loads_with_its_messages_whole() -> None:
    state = SessionState.from_bytes(_VERSION_1_STATE)
    assert (state.client_id, state.expiry_interval_s, state.next_packet_id, state.received_qos2) == (
        "old-device", 3600, 5, {9})
    assert list(state.subscriptions) == ["fleet/#"] and state.subscriptions["fleet/#"].subscription_identifier == 7
    assert [(packet_id, state.flow(packet_id), message.topic, message.payload, message.position)
            for packet_id, message in state.inflight.items()] == [
        (3, InflightState.AWAITING_PUBACK, "fleet/1", b"A", None), (4, InflightState.AWAITING_PUBCOMP, "fleet/2", b"B", None)]
    assert state.inflight[3].properties.subscription_identifiers == (7,)
    assert state.unread == {}  # nothing to read back: the messages are in the record
    assert SessionState.from_bytes(state.to_bytes()) == state  # and it is written again in the new format


def _logged(offset: int, qos: int = 1) -> OutboundMessage:
    return OutboundMessage(topic="fleet/1", payload=b"reading %d" % offset, qos=qos, retain=True,
                           properties=Properties(subscription_identifiers=(7, 9)), position=("mqtt.messages", 2, offset))


def test_an_inflight_message_from_the_log_is_stored_as_its_position_and_read_back_in_order() -> None:
    state = SessionState("c", expiry_interval_s=60)
    state.inflight = {5: _logged(100), 6: _logged(101, qos=2), 7: _inflight(7), 8: _logged(103, qos=2)}
    state.released = {6}
    data = state.to_bytes()
    assert b"reading" not in data  # the log has the payloads
    loaded = SessionState.from_bytes(data)
    assert loaded == state and list(loaded.inflight) == [5, 6, 7, 8] and _flows(loaded) == _flows(state)
    assert loaded.unread == {5: ("mqtt.messages", 2, 100), 8: ("mqtt.messages", 2, 103)}  # PUBCOMP needs only the id
    for packet_id, offset in ((8, 103), (5, 100)):
        record = OutboundMessage(topic="fleet/1", payload=b"reading %d" % offset, qos=2, retain=True,
                                 position=("mqtt.messages", 2, offset))
        loaded.read_back(packet_id, record, now_ms=0)
    assert loaded.unread == {}
    assert list(loaded.inflight) == [5, 6, 7, 8]  # the resend order is kept
    for packet_id in (5, 8):
        assert loaded.inflight[packet_id] == state.inflight[packet_id]  # QoS, retain, identifiers as delivered


def test_a_message_the_log_no_longer_has_is_dropped_and_expiry_counts_from_its_publication() -> None:
    state = SessionState("c", expiry_interval_s=60)
    state.inflight = {1: _logged(10), 2: _logged(11)}
    loaded = SessionState.from_bytes(state.to_bytes())
    loaded.read_back(1, None, now_ms=0)
    expiring = OutboundMessage(topic="fleet/1", payload=b"x", qos=1, created_ms=1_000,
                               properties=Properties(message_expiry_interval_s=30))
    loaded.read_back(2, expiring, now_ms=21_000)
    assert list(loaded.inflight) == [2]
    assert loaded.inflight[2].properties == Properties(message_expiry_interval_s=10, subscription_identifiers=(7, 9))
    late = SessionState.from_bytes(state.to_bytes())
    late.read_back(1, expiring, now_ms=99_000)  # its delivery had begun: it still goes out
    assert late.inflight[1].properties.message_expiry_interval_s == 1


def test_a_window_of_a_thousand_messages_in_flight_stores_in_a_few_hundred_bytes() -> None:
    state = SessionState("c", expiry_interval_s=60)
    state.inflight = {packet_id: OutboundMessage(topic="t", payload=b"x" * 100, qos=2,
                                                 position=("mqtt.messages", 2, 1_000_000 + packet_id))
                      for packet_id in range(1, 1001)}
    assert len(state.to_bytes()) < 200  # one run: consecutive packet ids and offsets
    state.released.add(500)
    state.complete(700)
    loaded = SessionState.from_bytes(state.to_bytes())
    assert len(state.to_bytes()) < 400 and loaded == state and list(loaded.inflight) == list(state.inflight)
    assert [loaded.inflight[n].position for n in (499, 500, 501, 1000)] == [
        ("mqtt.messages", 2, 1_000_000 + n) for n in (499, 500, 501, 1000)]


@st.composite
def windows(draw: st.DrawFn) -> bytes:
    """A stored state whose in-flight messages are in the log: runs of consecutive packet ids and offsets."""
    state = SessionState("c", expiry_interval_s=60)
    packet_id, offset = draw(st.integers(1, 0xFFF0)), draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(0, 12))):
        flow = draw(st.sampled_from(InflightState))
        state.inflight[packet_id] = replace(_logged(offset, 1 if flow is InflightState.AWAITING_PUBACK else 2), position=(
            draw(st.sampled_from(["mqtt.messages", "plant"])), draw(st.integers(0, 2)), offset))
        if flow is InflightState.AWAITING_PUBCOMP:
            state.released.add(packet_id)
        packet_id = packet_id % 0xFFFF + 1
        offset += draw(st.integers(1, 3))
    return state.to_bytes()


@given(data=garbage_for(windows()))
@settings(max_examples=400)
def test_garbage_runs_of_log_positions_raise_only_corrupt_message(data: bytes) -> None:
    decodes_or_raises_corrupt(SessionState.from_bytes, data)


@given(st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.sampled_from([(), (7,), (7, 9)]),
                          st.sampled_from(list(InflightState)), st.booleans(), st.booleans()), max_size=40))
def test_any_mix_of_in_flight_entries_is_stored_as_runs_that_load_as_the_same_entries(
        steps: list[tuple[int, bool, tuple[int, ...], InflightState, bool, bool]]) -> None:
    """Entries in the log whose packet ids and offsets follow on (or not), of one partition or another, among
    entries stored whole, load with the position, flow state, QoS, retain flag and identifiers each had."""
    state = SessionState("c", expiry_interval_s=60)
    packet_id, offset = 0xFFF0, 50  # packet ids wrap past 65,535 within the list
    for gap, retain, identifiers, flow, other_partition, whole in steps:
        packet_id = packet_id % 0xFFFF + 1 + (gap == 2)
        packet_id = packet_id % 0xFFFF + 1 if packet_id > 0xFFFF else packet_id
        offset += 1 + gap
        qos = 1 if flow is InflightState.AWAITING_PUBACK else 2
        position = None if whole else ("mqtt.messages", 3 if other_partition else 2, offset)
        message = OutboundMessage(topic="" if not whole else "t", payload=b"" if not whole else b"p", qos=qos,
                                  retain=retain, properties=Properties(subscription_identifiers=identifiers),
                                  position=position)
        if state.inflight.setdefault(packet_id, message) is message and flow is InflightState.AWAITING_PUBCOMP:
            state.released.add(packet_id)
    loaded = SessionState.from_bytes(state.to_bytes())
    assert [(packet_id, message.position, loaded.flow(packet_id), message.qos, message.retain,
             message.properties.subscription_identifiers) for packet_id, message in loaded.inflight.items()] == [
        (packet_id, message.position, state.flow(packet_id), message.qos, message.retain,
         message.properties.subscription_identifiers) for packet_id, message in state.inflight.items()]
