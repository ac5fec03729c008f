"""A read's frames split at once, a published message as one item: the compiled splitter against the reference,
and a connection given a stream at once against the same stream one byte at a time (where no message ever
arrives whole)."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqbroker.protocols.amqp import codec, spec
from mqbroker.protocols.amqp.actions import PublishRun
from mqbroker.protocols.amqp.connection import Connection
from mqbroker.protocols.amqp.frame_split import (
    COMPILED_FRAME_SPLITTER,
    split_frames,
    split_frames_python,
)
from tests.interaction.test_amqp_scripts import Script

FRAME_MAX = 4096
_properties = st.sampled_from([codec.encode_properties(spec.BasicProperties()),
                               codec.encode_properties(spec.BasicProperties(delivery_mode=2)),
                               codec.encode_properties(spec.BasicProperties(headers={"x-delay": 5}))])
_publish = st.builds(lambda channel, properties, body, immediate, routing_key: codec.encode_message(
    channel, spec.BasicPublish(routing_key=routing_key, immediate=immediate), properties, body, FRAME_MAX),
    st.integers(1, 3), _properties, st.one_of(st.binary(max_size=40), st.binary(min_size=4, max_size=4),
                                              st.just(b"z" * 9000)),
    st.sampled_from([False, False, False, True]), st.sampled_from(["q", "", "k" * 40]))


def _frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", frame_type, channel, len(payload)) + payload + bytes([spec.FRAME_END])


_well_formed = st.one_of(
    _publish, _publish, _publish,
    st.builds(lambda channel, tag: codec.encode_method(channel, spec.BasicAck(delivery_tag=tag)),
              st.integers(1, 3), st.integers(0, 3)),
    st.builds(lambda channel: codec.encode_method(channel, spec.ChannelOpen()), st.integers(2, 3)),
    st.builds(lambda channel: codec.encode_method(channel, spec.ConfirmSelect()), st.integers(1, 3)),
    st.builds(lambda channel: codec.encode_method(channel, spec.ChannelClose()), st.integers(1, 3)),
    # content frames out of place, a header of another class, a body size over the limit, a short body
    st.builds(lambda channel, body: _frame(3, channel, body), st.integers(0, 3), st.binary(max_size=8)),
    st.builds(lambda channel, class_id, size: _frame(2, channel, struct.pack(">HHQ", class_id, 0, size) + b"\x00\x00"),
              st.integers(1, 3), st.sampled_from([60, 50]), st.sampled_from([0, 3, 2**40])),
    st.builds(lambda channel: codec.encode_method(channel, spec.BasicPublish()) + _frame(
        2, channel, struct.pack(">HHQ", 60, 0, 5) + b"\x00\x00") + _frame(3, channel, b"abc"), st.integers(1, 3)),
)
_pieces = st.one_of(
    _well_formed, _well_formed, _well_formed,
    st.builds(lambda publish: publish[:-1] + b"\x00", _publish),  # a bad frame-end octet
    st.just(struct.pack(">BHI", 1, 1, 10 * FRAME_MAX)),  # a frame over frame_max
    st.binary(max_size=12),
)
streams = st.lists(_pieces, max_size=12).map(b"".join)
#: Streams of whole, well-formed frames (a connection refuses a malformed read before it acts on any of it).
frame_streams = st.lists(_well_formed, max_size=16).map(b"".join)


def test_the_compiled_splitter_is_built() -> None:
    """The install builds it (setup.py); a missing compiler would leave the slower Python reference running."""
    assert COMPILED_FRAME_SPLITTER


@given(stream=streams, cut=st.integers(0, 2**16), frame_max=st.sampled_from([FRAME_MAX, 131_072, 8]),
       kind=st.sampled_from([bytes, bytearray]))
@settings(max_examples=800, suppress_health_check=[HealthCheck.too_slow])
def test_the_compiled_splitter_gives_the_references_items(stream: bytes, cut: int, frame_max: int, kind: type) -> None:
    buffer = kind(stream[:cut])
    assert split_frames(buffer, frame_max) == split_frames_python(buffer, frame_max)


def _decoded(data: bytes, chunk_bytes: int) -> tuple[list[codec.Frame], str | None]:
    decoder = codec.FrameDecoder(FRAME_MAX, expect_protocol_header=False)
    frames: list[codec.Frame] = []
    try:
        for start in range(0, len(data), chunk_bytes):
            for item in decoder.receive_data(data[start:start + chunk_bytes]):
                frames += item.frames() if isinstance(item, codec.PublishFrames) else [item]
    except spec.AmqpError as error:
        return frames, f"{error.reply_code} {error.reply_text}"
    return frames, None


@given(stream=streams)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_a_published_message_decodes_to_the_frames_it_came_as(stream: bytes) -> None:
    """Received at once, a message is one item; its frames are those a byte-by-byte read gives (which never holds
    a whole message), and an error is the same error (the frames before it, in the same read, are not handed on)."""
    whole_frames, whole_error = _decoded(stream, len(stream) or 1)
    single_frames, single_error = _decoded(stream, 1)
    assert whole_error == single_error
    if whole_error is None:
        assert whole_frames == single_frames


def _opened() -> Connection:
    script = Script()
    script.run("connect")
    script.connection.data_to_send()
    return script.connection


@given(stream=frame_streams)
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow], deadline=None)
def test_a_connection_given_whole_messages_acts_as_one_given_their_frames_one_by_one(stream: bytes) -> None:
    """The same actions and the same bytes back (confirms, channel and connection errors included), whether a
    message's frames arrive together or apart."""
    whole, by_frame = _opened(), _opened()
    whole_actions = whole.receive_data(stream, 0)
    decoder = codec.FrameDecoder(FRAME_MAX, expect_protocol_header=False)
    frames: list[bytes] = []
    position = 0
    try:
        for item in decoder.receive_data(stream):
            for frame in item.frames() if isinstance(item, codec.PublishFrames) else [item]:
                size = 8 + _payload_size(stream, position)
                frames.append(stream[position:position + size])
                position += size
    except spec.AmqpError:
        return  # a frame the decoder refuses (a header too short for its class): the decoder's test covers it
    assert position == len(stream)
    split_actions = [action for frame in frames for action in by_frame.receive_data(frame, 0)]
    # a run of messages alike but for their bodies is the Publish of each
    assert [one for action in whole_actions
            for one in (action.publishes() if isinstance(action, PublishRun) else [action])] == split_actions
    assert whole.data_to_send() == by_frame.data_to_send()
    assert whole.state == by_frame.state


def _payload_size(stream: bytes, position: int) -> int:
    return struct.unpack_from(">I", stream, position + 3)[0]


def test_messages_read_together_alike_but_for_their_bodies_are_one_run_with_consecutive_confirms() -> None:
    connection = _opened()
    connection.receive_data(codec.encode_method(1, spec.ConfirmSelect()), 0)

    def published(routing_key: str, body: bytes) -> bytes:
        return codec.encode_message(1, spec.BasicPublish(routing_key=routing_key), b"\x10\x00\x02", body, FRAME_MAX)

    actions = connection.receive_data(b"".join([published("q", b"a1"), published("q", b"a2"), published("q", b"a3"),
                                                published("r", b"b1"), published("q", b"c1"), published("q", b"c2")]), 0)
    assert [(type(action).__name__, action.routing_key, action.confirm_sequence) for action in actions] == [
        ("PublishRun", "q", 1), ("Publish", "r", 4), ("PublishRun", "q", 5)]
    assert actions[0].bodies == [b"a1", b"a2", b"a3"] and actions[2].bodies == [b"c1", b"c2"]
    assert [publish.confirm_sequence for publish in actions[0].publishes()] == [1, 2, 3]


def test_a_transactions_publishes_stay_one_by_one() -> None:
    connection = _opened()
    connection.receive_data(codec.encode_method(1, spec.TxSelect()), 0)
    message = codec.encode_message(1, spec.BasicPublish(routing_key="q"), b"\x10\x00\x02", b"ab", FRAME_MAX)
    connection.receive_data(message * 3, 0)
    actions = connection.receive_data(codec.encode_method(1, spec.TxCommit()), 0)
    assert [type(action).__name__ for action in actions] == ["Publish", "Publish", "Publish", "Execute"]
