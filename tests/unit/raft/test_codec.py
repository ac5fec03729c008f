"""Raft wire codec: every message round-trips; garbage raises only RaftCodecError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.raft import codec
from mqbroker.raft.errors import RaftCodecError
from mqbroker.raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Configuration,
    Entry,
    EntryKind,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Snapshot,
    SnapshotMetadata,
    VoteRequest,
    VoteResponse,
)

node_ids = st.integers(1, 2**32 - 1)
indexes = st.integers(0, 2**64 - 1)
blobs = st.binary(max_size=64)


@st.composite
def configurations(draw: st.DrawFn) -> Configuration:
    members = draw(st.lists(st.integers(1, 50), unique=True, max_size=6))
    split = draw(st.integers(0, len(members)))
    return Configuration(voters=frozenset(members[:split]), learners=frozenset(members[split:]))


@st.composite
def append_entries(draw: st.DrawFn) -> AppendEntries:
    term = draw(st.integers(1, 2**40))
    previous_index = draw(st.integers(0, 2**40))
    entries = []
    for position in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            kind, data = EntryKind.CONFIGURATION, codec.encode_configuration(draw(configurations()))
        else:
            kind, data = EntryKind.NORMAL, draw(blobs)
        entry_term = draw(st.integers(0, term))
        entries.append(Entry(term=entry_term, index=previous_index + 1 + position, kind=kind, data=data))
    return AppendEntries(
        term=term,
        from_id=draw(node_ids),
        to_id=draw(node_ids),
        previous_index=previous_index,
        previous_term=draw(indexes),
        entries=tuple(entries),
        commit_index=draw(indexes),
    )


def _header(draw: st.DrawFn) -> dict[str, int]:
    return {"term": draw(indexes), "from_id": draw(node_ids), "to_id": draw(node_ids)}


@st.composite
def messages(draw: st.DrawFn):  # type: ignore[no-untyped-def]
    header = _header(draw)
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return VoteRequest(**header, last_log_index=draw(indexes), last_log_term=draw(indexes), pre_vote=draw(st.booleans()))
    if kind == 1:
        return VoteResponse(**header, granted=draw(st.booleans()), pre_vote=draw(st.booleans()))
    if kind == 2:
        return draw(append_entries())
    if kind == 3:
        return AppendEntriesResponse(
            **header, index=draw(indexes), rejected=draw(st.booleans()), hint_index=draw(indexes), hint_term=draw(indexes)
        )
    if kind == 4:
        return Heartbeat(**header, commit_index=draw(indexes), context=draw(blobs))
    if kind == 5:
        return HeartbeatResponse(**header, context=draw(blobs))
    metadata = SnapshotMetadata(index=draw(indexes), term=draw(indexes), configuration=draw(configurations()))
    return InstallSnapshot(**header, snapshot=Snapshot(metadata=metadata, data=draw(blobs)))


@given(messages())
def test_every_message_round_trips(message) -> None:  # type: ignore[no-untyped-def]
    assert codec.decode(codec.encode(message)) == message


@given(st.binary(max_size=200))
def test_garbage_raises_only_the_codec_error(data: bytes) -> None:
    try:
        codec.decode(data)
    except RaftCodecError:
        pass


@settings(max_examples=300)
@given(messages(), st.data())
def test_corrupted_messages_decode_or_raise_the_codec_error(message, data: st.DataObject) -> None:  # type: ignore[no-untyped-def]
    encoded = bytearray(codec.encode(message))
    position = data.draw(st.integers(0, len(encoded) - 1))
    encoded[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    try:
        codec.decode(bytes(encoded[:cut]))
    except RaftCodecError:
        pass


@pytest.mark.parametrize("cut", range(23))
def test_truncated_message_is_rejected(cut: int) -> None:
    encoded = codec.encode(HeartbeatResponse(term=1, from_id=1, to_id=2, context=b"abc"))
    assert len(encoded) == 24
    with pytest.raises(RaftCodecError):
        codec.decode(encoded[:cut])


def test_trailing_bytes_are_rejected() -> None:
    encoded = codec.encode(VoteResponse(term=1, from_id=1, to_id=2, granted=True))
    with pytest.raises(RaftCodecError, match="trailing"):
        codec.decode(encoded + b"\x00")


def test_entries_out_of_place_are_rejected() -> None:
    message = AppendEntries(
        term=2, from_id=1, to_id=2, previous_index=5, previous_term=1, commit_index=0,
        entries=(Entry(term=2, index=7),),
    )
    with pytest.raises(RaftCodecError, match="out of place"):
        codec.decode(codec.encode(message))


def test_unknown_entry_kind_is_rejected() -> None:
    message = AppendEntries(
        term=2, from_id=1, to_id=2, previous_index=0, previous_term=0, commit_index=0, entries=(Entry(term=2, index=1),)
    )
    encoded = bytearray(codec.encode(message))
    encoded[-5] = 9  # the kind byte of the only entry (its data is empty)
    with pytest.raises(RaftCodecError, match="unknown entry kind"):
        codec.decode(bytes(encoded))


@given(configurations())
def test_configurations_round_trip(configuration: Configuration) -> None:
    assert codec.decode_configuration(codec.encode_configuration(configuration)) == configuration
