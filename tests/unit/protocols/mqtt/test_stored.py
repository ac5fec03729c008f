"""The stored session record: it round-trips; garbage raises only CorruptMessageError."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.mqtt.stored import StoredSession
from tests.unit.protocols.mqtt.test_state import decodes_or_raises_corrupt, garbage_for

stored_sessions = st.builds(
    StoredSession,
    state=st.binary(max_size=40),
    cursors=st.dictionaries(st.tuples(st.text(max_size=6), st.integers(0, 99)), st.integers(0, 2**62), max_size=3),
    ended_at_ms=st.none() | st.integers(0, 2**50),
)


@given(stored=stored_sessions)
def test_stored_session_round_trips(stored: StoredSession) -> None:
    assert StoredSession.from_bytes(stored.to_bytes()) == stored


@given(data=garbage_for(stored_sessions.map(StoredSession.to_bytes)))
@settings(max_examples=400)
def test_garbage_stored_session_raises_only_corrupt_message(data: bytes) -> None:
    decodes_or_raises_corrupt(StoredSession.from_bytes, data)
