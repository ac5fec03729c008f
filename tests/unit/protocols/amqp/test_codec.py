"""AMQP frame codec: round trips, frame_max splitting, client interop and error codes."""

from __future__ import annotations

import struct

import pika.spec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.protocols.amqp import codec, fields
from mqbroker.protocols.amqp.spec import (
    FRAME_END,
    METHODS,
    PROTOCOL_HEADER,
    AmqpError,
    BasicDeliver,
    BasicProperties,
    BasicPublish,
    ConnectionStartOk,
    FrameType,
    ProtocolHeaderMismatch,
    QueueDeclare,
    ReplyCode,
)
from tests.unit.protocols.amqp import strategies


def frames_of(items: list[codec.Frame | codec.PublishFrames]) -> list[codec.Frame]:
    """The decoder's items as frames: a published message received whole comes as one ``PublishFrames``."""
    return [frame for item in items
            for frame in (item.frames() if isinstance(item, codec.PublishFrames) else (item,))]


def decode_all(data: bytes, frame_bytes_max: int = 131072) -> list[codec.Frame]:
    """Feed ``data`` one byte at a time, the hardest split for the decoder."""
    decoder = codec.FrameDecoder(frame_bytes_max, expect_protocol_header=False)
    frames: list[codec.Frame] = []
    for index in range(len(data)):
        frames += decoder.receive_data(data[index : index + 1])
    return frames


any_method = st.sampled_from(list(METHODS.values())).flatmap(strategies.methods_of)


@settings(max_examples=800)
@given(method=any_method)
def test_every_supported_method_round_trips(method) -> None:
    decoder = codec.FrameDecoder(131072, expect_protocol_header=False)
    assert decoder.receive_data(codec.encode_method(7, method)) == [codec.MethodFrame(channel=7, method=method)]


@given(properties=strategies.properties, body=st.binary(max_size=20000))
def test_content_header_with_every_property_and_field_type_round_trips(properties, body) -> None:
    raw = codec.encode_properties(properties)
    data = codec.encode_message(3, BasicPublish(routing_key="k"), raw, body, 4096)
    frames = frames_of(codec.FrameDecoder(131072, expect_protocol_header=False).receive_data(data))
    header = frames[1]
    assert isinstance(header, codec.HeaderFrame)
    assert (header.properties, header.properties_raw, header.body_size) == (properties, raw, len(body))
    assert b"".join(frame.payload for frame in frames[2:]) == body


@given(values=strategies.tables)
def test_field_tables_survive_a_round_trip(values) -> None:
    assert fields.Reader(fields.table(values)).table() == values


def test_bodies_are_split_by_frame_max_counting_the_whole_frame() -> None:
    data = codec.encode_message(1, BasicPublish(), codec.encode_properties(BasicProperties()), b"x" * 300_000, 131072)
    bodies = [frame for frame in decode_all(data) if isinstance(frame, codec.BodyFrame)]
    assert [len(frame.payload) for frame in bodies] == [131064, 131064, 37872]


def test_an_empty_body_sends_no_body_frame() -> None:
    data = codec.encode_message(1, BasicPublish(), codec.encode_properties(BasicProperties()), b"", 4096)
    assert [type(frame) for frame in decode_all(data)] == [codec.MethodFrame, codec.HeaderFrame]


def tagged(tag: bytes, payload: bytes) -> bytes:
    """A one-entry field table holding ``payload`` under ``tag``."""
    entry = b"\x01k" + tag + payload
    return struct.pack(">I", len(entry)) + entry


@pytest.mark.parametrize(
    ("tag", "payload", "expected"),
    [
        (b"b", b"\xff", -1),
        (b"B", b"\xff", 255),
        (b"s", b"\xff\xfe", -2),  # RabbitMQ and py-amqp read s as int16, not a short string
        (b"u", b"\xff\xfe", 65534),
        (b"i", b"\xff\xff\xff\xff", 2**32 - 1),
        (b"I", b"\xff\xff\xff\xff", -1),
        (b"l", b"\xff" * 8, -1),
        (b"L", b"\x00\x00\x00\x01\x00\x00\x00\x00", 2**32),  # py-amqp's int64
        (b"f", struct.pack(">f", 1.5), 1.5),  # pamqp (aio-pika) floats
        (b"d", struct.pack(">d", 2.25), 2.25),
        (b"t", b"\x01", True),
        (b"x", b"\x00\x00\x00\x02\x00\xff", b"\x00\xff"),
        (b"S", b"\x00\x00\x00\x02hi", "hi"),
        (b"V", b"", None),
        (b"A", b"\x00\x00\x00\x06V" + b"I\x00\x00\x00\x05", [None, 5]),
    ],
)
def test_every_field_tag_clients_send_is_decoded(tag: bytes, payload: bytes, expected: object) -> None:
    assert fields.Reader(tagged(tag, payload)).table() == {"k": expected}


def test_non_utf8_long_strings_re_encode_to_the_same_bytes() -> None:
    raw = tagged(b"S", b"\x00\x00\x00\x02\xff\xfe")
    assert fields.table(fields.Reader(raw).table()) == raw


@pytest.mark.parametrize(
    "method",
    [
        pika.spec.Queue.Declare(queue="celery", durable=True, arguments={"x-expires": 10000, "big": 2**40}),
        pika.spec.Basic.Publish(exchange="amq.topic", routing_key="a.b", mandatory=True),
        pika.spec.Basic.Nack(delivery_tag=9, multiple=True, requeue=False),
        pika.spec.Basic.Consume(queue="q", consumer_tag="", no_ack=True, arguments={"x-stream-offset": "first"}),
        pika.spec.Connection.StartOk(client_properties={"capabilities": {"basic.nack": True}}, response="\0u\0p"),
    ],
    ids=lambda method: method.NAME,
)
def test_methods_encoded_by_pika_decode_to_the_same_arguments(method) -> None:
    payload = b"".join(method.encode())
    ours = codec.decode_method(struct.pack(">HH", method.INDEX >> 16, method.INDEX & 0xFFFF) + payload)
    for name, value in vars(method).items():
        mine = getattr(ours, {"ticket": "reserved_1", "global_qos": "global_"}.get(name, name))
        assert mine == (value.encode() if isinstance(mine, bytes) and isinstance(value, str) else value), name


def test_properties_encoded_by_pika_are_decoded() -> None:
    properties = pika.spec.BasicProperties(
        content_type="application/json", headers={"task": "t", "eta": None, "retries": 0}, delivery_mode=2,
        priority=3, correlation_id="c", reply_to="r", expiration="60000", message_id="m", timestamp=1700000000,
        type="t", user_id="guest", app_id="a", cluster_id="x",
    )
    raw = b"".join(properties.encode())
    assert codec.decode_properties(raw) == BasicProperties(**vars(properties))


def error_of(data: bytes, frame_bytes_max: int = 131072) -> AmqpError:
    with pytest.raises(AmqpError) as caught:
        decode_all(data, frame_bytes_max)
    return caught.value


def test_a_bad_frame_end_is_a_frame_error() -> None:
    frame = codec.encode_method(1, BasicPublish())
    assert error_of(frame[:-1] + b"\x00").reply_code is ReplyCode.FRAME_ERROR


def test_an_oversized_frame_is_refused_before_its_payload_arrives() -> None:
    decoder = codec.FrameDecoder(4096, expect_protocol_header=False)
    with pytest.raises(AmqpError) as caught:
        decoder.receive_data(struct.pack(">BHI", 3, 1, 4089))
    assert caught.value.reply_code is ReplyCode.FRAME_ERROR and caught.value.connection_level
    assert decoder.failed


def test_an_unknown_method_is_not_implemented_and_names_it() -> None:
    error = error_of(codec.encode_frame(FrameType.METHOD, 1, struct.pack(">HH", 30, 10)))  # access.request
    assert (error.reply_code, error.class_id, error.method_id) == (ReplyCode.NOT_IMPLEMENTED, 30, 10)


def test_truncated_arguments_are_a_syntax_error() -> None:
    payload = codec.encode_method_payload(QueueDeclare(queue="q"))[:-2]
    error = error_of(codec.encode_frame(FrameType.METHOD, 1, payload))
    assert (error.reply_code, error.class_id, error.method_id) == (ReplyCode.SYNTAX_ERROR, 50, 10)


def test_unknown_frame_types_and_heartbeats_off_channel_zero_are_frame_errors() -> None:
    assert error_of(codec.encode_frame(5, 0, b"")).reply_code is ReplyCode.FRAME_ERROR  # type: ignore[arg-type]
    assert error_of(codec.encode_frame(FrameType.HEARTBEAT, 1, b"")).reply_code is ReplyCode.FRAME_ERROR


def test_a_foreign_protocol_header_is_refused() -> None:
    decoder = codec.FrameDecoder(131072)
    with pytest.raises(ProtocolHeaderMismatch):
        decoder.receive_data(b"AMQP\x01\x01\x00\x0a")


def test_the_protocol_header_may_arrive_in_pieces() -> None:
    decoder = codec.FrameDecoder(131072)
    assert decoder.receive_data(PROTOCOL_HEADER[:3]) == []
    frames = decoder.receive_data(PROTOCOL_HEADER[3:] + codec.encode_method(0, ConnectionStartOk()))
    assert frames == [codec.MethodFrame(channel=0, method=ConnectionStartOk())]


@settings(max_examples=300)
@given(garbage=st.lists(st.binary(max_size=64), max_size=8), header=st.booleans())
def test_garbage_into_the_decoder_raises_only_amqp_errors(garbage: list[bytes], header: bool) -> None:
    decoder = codec.FrameDecoder(4096, expect_protocol_header=header)
    try:
        for chunk in garbage:
            decoder.receive_data(chunk)
    except AmqpError:
        assert decoder.failed


@settings(max_examples=200)
@given(method=any_method, data=st.data())
def test_corrupted_method_frames_raise_only_amqp_errors(method, data) -> None:
    frame = bytearray(codec.encode_method(1, method))
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    try:
        codec.FrameDecoder(131072, expect_protocol_header=False).receive_data(bytes(frame) + bytes([FRAME_END]))
    except AmqpError:
        pass  # a typed error is the expected outcome for most corruptions


def test_the_spec_covers_the_measured_method_set() -> None:
    from mqbroker.protocols.amqp.spec import MEASURED_METHOD_IDS

    assert len(MEASURED_METHOD_IDS) == 41 and MEASURED_METHOD_IDS <= set(METHODS)
    for method_class in METHODS.values():
        assert codec.decode_method(codec.encode_method_payload(method_class())) == method_class()


@settings(max_examples=100)
@given(tag=strategies.shortstrs, delivery_tag=st.integers(0, 2**64 - 1), redelivered=st.booleans(),
       exchange=strategies.shortstrs, routing_key=strategies.shortstrs, body=st.binary(max_size=9000),
       frame_max=st.sampled_from([4096, 131072]))
def test_the_deliver_template_encodes_exactly_what_the_generic_encoder_does(
    tag, delivery_tag, redelivered, exchange, routing_key, body, frame_max
) -> None:
    raw = codec.encode_properties(BasicProperties(delivery_mode=2, content_type="text/plain"))
    method = BasicDeliver(consumer_tag=tag, delivery_tag=delivery_tag, redelivered=redelivered,
                          exchange=exchange, routing_key=routing_key)
    packed = codec.encode_deliver(9, fields.shortstr(tag), delivery_tag, redelivered, exchange, routing_key, raw, body,
                                  frame_max)
    assert packed == codec.encode_message(9, method, raw, body, frame_max)


@given(method=st.sampled_from([METHODS[(60, 80)], METHODS[(60, 90)], METHODS[(60, 120)], BasicPublish])
       .flatmap(strategies.methods_of))
def test_repeated_publishes_and_settlements_decode_like_the_generic_decoder(method) -> None:
    decoder = codec.FrameDecoder(131072, expect_protocol_header=False)
    frame = codec.encode_method(1, method)
    assert decoder.receive_data(frame * 3) == [codec.MethodFrame(channel=1, method=method)] * 3
    assert codec.decode_method(frame[7:-1]) == method


def test_repeated_content_headers_keep_their_own_body_size() -> None:
    decoder = codec.FrameDecoder(131072, expect_protocol_header=False)
    raw = codec.encode_properties(BasicProperties(delivery_mode=2))
    frames = frames_of(decoder.receive_data(b"".join(
        codec.encode_message(1, BasicPublish(), raw, b"x" * size, 131072) for size in (3, 5))))
    headers = [frame for frame in frames if isinstance(frame, codec.HeaderFrame)]
    assert [(header.body_size, header.properties) for header in headers] == [
        (3, BasicProperties(delivery_mode=2)), (5, BasicProperties(delivery_mode=2))]
