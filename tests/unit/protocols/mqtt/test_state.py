"""Stored session state: garbage, and valid records with any one field broken, raise only CorruptMessageError."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.errors import CorruptMessageError
from mqbroker.protocols.mqtt.packets import Publish
from mqbroker.protocols.mqtt.state import Inflight, InflightState, OutboundMessage, SessionState
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


@pytest.mark.parametrize("data", [
    b"\xff\xfe", b"[" * 100_000, b'{"version": 2}',
    b'{"version":1,"client_id":"c","expiry_interval_s":0,"next_packet_id":1,"subscriptions":[],'
    b'"inflight":[{"state":"awaiting-puback","publish":"MAA="}],"received_qos2":[]}',
])
def test_undecodable_state_names_the_problem(data: bytes) -> None:
    with pytest.raises(CorruptMessageError, match="MQTT session state"):
        SessionState.from_bytes(data)


def _inflight(packet_id: int, flow: InflightState = InflightState.AWAITING_PUBACK) -> Inflight:
    return Inflight(publish=Publish(topic=f"t/{packet_id}", payload=b"p" * packet_id, qos=2, packet_id=packet_id),
                    state=flow)


def test_stored_state_follows_every_inflight_change() -> None:
    """to_bytes encodes each in-flight message once; a message acknowledged, moved on in its flow or replaced
    under the same packet id is written as it is now, as a state that never stored anything would write it."""
    state = SessionState("c", expiry_interval_s=60)
    state.inflight = {packet_id: _inflight(packet_id) for packet_id in (1, 2, 3)}
    state.to_bytes()
    del state.inflight[1]
    state.inflight[2] = replace(state.inflight[2], state=InflightState.AWAITING_PUBCOMP)
    state.inflight[3] = _inflight(3, InflightState.AWAITING_PUBREC)
    state.inflight[3] = replace(state.inflight[3], publish=replace(state.inflight[3].publish, payload=b"new"))
    state.inflight[4] = _inflight(4)
    fresh = SessionState("c", expiry_interval_s=60)
    fresh.inflight = dict(state.inflight)
    assert state.to_bytes() == fresh.to_bytes()
    restored = SessionState.from_bytes(state.to_bytes())
    assert [(entry.publish.packet_id, entry.state, entry.publish.payload) for entry in restored.inflight.values()] == [
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
