"""AMQP 0-9-1 frame codec: protocol header, method / content-header / body / heartbeat frames.

Sans-I/O: ``FrameDecoder.receive_data(bytes) -> list[Frame]`` and pure ``encode_*``
functions. The decoder never buffers more than one frame of at most ``frame_bytes_max``
(the negotiated frame_max, which counts the whole frame): a larger announced size is a 501
frame error before its payload arrives. Every decoding failure is an ``AmqpError`` with the
spec's reply code; after one the decoder is in a terminal state, because the byte stream
can no longer be trusted.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import Any, Union

from mqbroker import limits
from mqbroker.protocols.amqp import fields
from mqbroker.protocols.amqp.frame_split import split_frames
from mqbroker.protocols.amqp.spec import (
    BASIC_CLASS_ID,
    BASIC_PROPERTIES,
    FRAME_END,
    FRAME_MIN_BYTES,
    FRAME_OVERHEAD_BYTES,
    METHODS,
    PROTOCOL_HEADER,
    AmqpError,
    BasicAck,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicReject,
    FrameType,
    Method,
    ProtocolHeaderMismatch,
    ReplyCode,
)

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_PROTOCOL_HEADER = PROTOCOL_HEADER

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_METHODS = METHODS
_split_frames = split_frames

_FRAME_HEADER = struct.Struct(">BHI")
_METHOD_IDS = struct.Struct(">HH")
_CONTENT_HEADER = struct.Struct(">HHQ")
_FLAGS = struct.Struct(">H")
_SETTLE = struct.Struct(">HHQB")
_DELIVER_FRAME_HEAD = struct.Struct(">BHIHH")  # frame header, then class and method ids
_DELIVERY_TAG = struct.Struct(">Q?")
_FRAME_END_BYTE = bytes([FRAME_END])
_METHOD, _HEADER, _BODY = int(FrameType.METHOD), int(FrameType.HEADER), int(FrameType.BODY)  # plain ints compare faster  # basic.ack / nack / reject: ids, delivery tag, one octet of bits
#: Method payloads that repeat verbatim (a publisher sends the same exchange and routing key
#: again and again) decode once per connection; their dataclasses are frozen, so sharing is safe.
_REPEATING_METHODS: frozenset[type[Method]] = frozenset({BasicPublish})

#: A heartbeat frame is always the same 8 bytes.
HEARTBEAT_FRAME = _FRAME_HEADER.pack(FrameType.HEARTBEAT, 0, 0) + bytes([FRAME_END])


#: Frames are made once per frame on the hot path (three per published message): they are plain (not frozen)
#: slotted dataclasses, as MQTT's PUBLISH is (``mqtt/packets.py``), since a frozen dataclass's __init__ sets each
#: field through object.__setattr__; nothing changes one after it is made.
@dataclasses.dataclass(slots=True, kw_only=True)
class MethodFrame:
    """A decoded method on a channel."""

    channel: int
    method: Method


@dataclasses.dataclass(slots=True, kw_only=True)
class HeaderFrame:
    """A content header: body size and properties, plus the property bytes as received.

    ``properties_raw`` (flags and property list) is kept so the message is delivered with
    exactly the bytes its publisher sent.
    """

    channel: int
    class_id: int
    body_size: int
    properties: BasicProperties
    properties_raw: bytes


@dataclasses.dataclass(slots=True, kw_only=True)
class BodyFrame:
    """One chunk of a message body."""

    channel: int
    payload: bytes


@dataclasses.dataclass(slots=True, kw_only=True)
class PublishFrames:
    """Published messages alike but for their bodies, each a basic.publish with its content header and whole body,
    received together one after another (``frame_split``): the connection handles them as messages while their
    channel takes publishes, else as their frames one by one."""

    channel: int
    method: BasicPublish
    header: HeaderFrame
    bodies: list[bytes]

    def frames(self) -> list[MethodFrame | HeaderFrame | BodyFrame]:
        """The frames they came as, in order (no body frame for an empty body)."""
        method = MethodFrame(channel=self.channel, method=self.method)
        if not self.header.body_size:
            return [method, self.header] * len(self.bodies)
        return [frame for body in self.bodies
                for frame in (method, self.header, BodyFrame(channel=self.channel, payload=body))]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatFrame:
    """A heartbeat (always on channel 0)."""


Frame = Union[MethodFrame, HeaderFrame, BodyFrame, HeartbeatFrame]


def frame_error(text: str) -> AmqpError:
    """501: the frame itself is malformed (size, type, frame-end)."""
    return AmqpError(ReplyCode.FRAME_ERROR, text)


# --- encoding --------------------------------------------------------------------------


def encode_frame(frame_type: FrameType, channel: int, payload: bytes) -> bytes:
    """Wrap ``payload`` in a frame header and frame-end."""
    return _FRAME_HEADER.pack(frame_type, channel, len(payload)) + payload + bytes([FRAME_END])


def encode_method_payload(method: Method) -> bytes:
    """Class id, method id and the arguments in spec order."""
    writer = fields.Writer()
    writer.buffer += _METHOD_IDS.pack(method.CLASS_ID, method.METHOD_ID)
    for argument in method.ARGUMENTS:
        writer.write(argument.kind, getattr(method, argument.name))
    return bytes(writer.buffer)


def encode_method(channel: int, method: Method) -> bytes:
    """One complete method frame."""
    return encode_frame(FrameType.METHOD, channel, encode_method_payload(method))


def encode_properties(properties: BasicProperties) -> bytes:
    """Property flags followed by the present properties, in flag-bit order."""
    writer = fields.Writer()
    flags = 0
    for bit, argument in zip(range(15, 1, -1), BASIC_PROPERTIES):
        value = getattr(properties, argument.name)
        if value is not None:
            flags |= 1 << bit
            writer.write(argument.kind, value)
    return _FLAGS.pack(flags) + writer.buffer


def encode_message(
    channel: int, method: Method, properties_raw: bytes, body: bytes, frame_bytes_max: int
) -> bytes:
    """A content-carrying method, its header and its body split into frame_max-sized frames.

    An empty body sends no body frame at all (as RabbitMQ and the clients expect).
    """
    assert method.HAS_CONTENT, method
    return _with_content(encode_method(channel, method), channel, properties_raw, body, frame_bytes_max)


def encode_deliver(
    channel: int, consumer_tag: bytes, delivery_tag: int, redelivered: bool, exchange: str, routing_key: str,
    properties_raw: bytes, body: bytes, frame_bytes_max: int,
) -> bytes:
    """``encode_message`` of a ``BasicDeliver``, with the method frame packed directly (one per message).

    ``consumer_tag`` comes already encoded as a shortstr (the channel encodes it once per consumer).
    """
    return encode_deliver_raw(channel, consumer_tag, delivery_tag, redelivered,
                              exchange.encode("utf-8", "surrogateescape"), routing_key.encode("utf-8", "surrogateescape"),
                              properties_raw, body, frame_bytes_max)


def encode_deliver_raw(
    channel: int, consumer_tag: bytes, delivery_tag: int, redelivered: bool, exchange: bytes, routing_key: bytes,
    properties_raw: bytes, body: bytes, frame_bytes_max: int,
) -> bytes:
    """``encode_deliver`` with the exchange and routing key as the bytes of their shortstrs (as stored)."""
    arguments = b"".join((consumer_tag, _DELIVERY_TAG.pack(delivery_tag, redelivered),
                          fields.shortstr_bytes(exchange), fields.shortstr_bytes(routing_key)))
    method_frame = _DELIVER_FRAME_HEAD.pack(FrameType.METHOD, channel, len(arguments) + 4, BASIC_CLASS_ID, 60)
    return _with_content(method_frame + arguments + _FRAME_END_BYTE, channel, properties_raw, body, frame_bytes_max)


def _with_content(method_frame: bytes, channel: int, properties_raw: bytes, body: bytes, frame_bytes_max: int) -> bytes:
    header = _CONTENT_HEADER.pack(BASIC_CLASS_ID, 0, len(body)) + properties_raw
    parts = [method_frame, _FRAME_HEADER.pack(FrameType.HEADER, channel, len(header)), header, _FRAME_END_BYTE]
    chunk_bytes_max = frame_bytes_max - FRAME_OVERHEAD_BYTES
    if len(body) <= chunk_bytes_max:
        if body:
            parts += (_FRAME_HEADER.pack(FrameType.BODY, channel, len(body)), body, _FRAME_END_BYTE)
        return b"".join(parts)
    view = memoryview(body)
    for start in range(0, len(body), chunk_bytes_max):
        parts.append(encode_frame(FrameType.BODY, channel, bytes(view[start : start + chunk_bytes_max])))
    return b"".join(parts)


# --- decoding --------------------------------------------------------------------------


def decode_method(payload: bytes | memoryview) -> Method:
    """A method frame's payload → the method dataclass (540 unknown, 502 malformed)."""
    reader = fields.Reader(payload)
    class_id, method_id = reader.unpack_many(_METHOD_IDS)
    method_class = _METHODS.get((class_id, method_id))
    if method_class is None:
        raise AmqpError(
            ReplyCode.NOT_IMPLEMENTED,
            f"method {class_id}.{method_id} is unknown or not supported",
            class_id=class_id,
            method_id=method_id,
        )
    try:
        values = {argument.name: reader.read(argument.kind) for argument in method_class.ARGUMENTS}
    except AmqpError as error:
        raise AmqpError(
            error.reply_code, f"{method_class.NAME}: {error}", class_id=class_id, method_id=method_id
        ) from None
    if reader.remaining:
        raise AmqpError(
            ReplyCode.SYNTAX_ERROR,
            f"{method_class.NAME} has {reader.remaining} bytes after its last argument",
            class_id=class_id,
            method_id=method_id,
        )
    return method_class(**values)


def _decode_settle(payload: bytes) -> Method | None:
    """basic.ack / nack / reject without the generic reader (one per message); None: not one of them."""
    if len(payload) != _SETTLE.size:
        return None
    class_id, method_id, delivery_tag, bits = _SETTLE.unpack(payload)
    if class_id != BASIC_CLASS_ID:
        return None
    if method_id == 80:
        return BasicAck(delivery_tag=delivery_tag, multiple=bool(bits & 1))
    if method_id == 120:
        return BasicNack(delivery_tag=delivery_tag, multiple=bool(bits & 1), requeue=bool(bits & 2))
    if method_id == 90:
        return BasicReject(delivery_tag=delivery_tag, requeue=bool(bits & 1))
    return None


def decode_properties(raw: bytes | memoryview) -> BasicProperties:
    """Property flags and list → ``BasicProperties`` (502 on unknown flags or short data)."""
    reader = fields.Reader(raw)
    flags = reader.unpack(_FLAGS)
    if flags & 0b11:
        raise fields.syntax_error(f"content header property flags {flags:#06x} name unknown properties")
    values = {}
    for bit, argument in zip(range(15, 1, -1), BASIC_PROPERTIES):
        if flags & (1 << bit):
            values[argument.name] = reader.read(argument.kind)
    if reader.remaining:
        raise fields.syntax_error(f"content header has {reader.remaining} bytes after its properties")
    return BasicProperties(**values)


class _DecoderState(enum.Enum):
    AWAITING_PROTOCOL_HEADER = "awaiting protocol header"
    FRAMES = "frames"
    ERROR = "error"


class FrameDecoder:
    """Bytes in, frames out, with a buffer bounded by one frame of ``frame_bytes_max``."""

    __slots__ = ("_buffer", "_state", "frame_bytes_max", "_methods", "_properties", "_headers")

    def __init__(self, frame_bytes_max: int, *, expect_protocol_header: bool = True) -> None:
        assert frame_bytes_max >= FRAME_MIN_BYTES
        self._buffer = bytearray()
        self._state = _DecoderState.AWAITING_PROTOCOL_HEADER if expect_protocol_header else _DecoderState.FRAMES
        #: The largest whole frame accepted; lowered to the negotiated frame_max after tune-ok.
        self.frame_bytes_max = frame_bytes_max
        self._methods: dict[bytes, Method] = {}
        self._properties: dict[bytes, BasicProperties] = {}
        #: Content headers of publishes (frozen, so shared) by payload: body size and property list.
        self._headers: dict[bytes, HeaderFrame] = {}

    @property
    def awaiting_protocol_header(self) -> bool:
        """True until the peer's complete, correct protocol header has arrived."""
        return self._state is _DecoderState.AWAITING_PROTOCOL_HEADER

    @property
    def failed(self) -> bool:
        """True once a decoding error was raised; the stream is unusable from then on."""
        return self._state is _DecoderState.ERROR

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame (or protocol header) received so far."""
        return len(self._buffer)

    def receive_data(self, data: bytes) -> list[Frame | PublishFrames]:
        """Add ``data``; return the frames it completes (a published message's as one ``PublishFrames``). Raises
        ``AmqpError``."""
        assert self._state is not _DecoderState.ERROR, "receive_data after a decoding error"
        self._buffer += data
        try:
            if self._state is _DecoderState.AWAITING_PROTOCOL_HEADER and not self._read_protocol_header():
                return []
            return self._read_frames()
        except AmqpError:
            self._state = _DecoderState.ERROR
            self._buffer.clear()
            raise

    def _read_protocol_header(self) -> bool:
        received = bytes(self._buffer[: len(PROTOCOL_HEADER)])
        if not _PROTOCOL_HEADER.startswith(received):
            raise ProtocolHeaderMismatch(received)
        if len(received) < len(PROTOCOL_HEADER):
            return False
        del self._buffer[: len(PROTOCOL_HEADER)]
        self._state = _DecoderState.FRAMES
        return True

    def _read_frames(self) -> list[Frame | PublishFrames]:
        buffer = self._buffer
        items, position = _split_frames(buffer, self.frame_bytes_max)
        frames: list[Frame | PublishFrames] = [
            self._decode_frame(*item) if len(item) == 3 else self._publish_frames(*item)  # type: ignore[arg-type]
            for item in items
        ]
        self._refuse_malformed(buffer, position)
        del buffer[:position]
        return frames

    def _refuse_malformed(self, buffer: bytearray, position: int) -> None:
        """Raise the frame error of the frame the splitter stopped before, at ``position``, unless it is only
        incomplete (its size is judged as soon as its header is in)."""
        if len(buffer) - position < _FRAME_HEADER.size:
            return
        frame_type, channel, size = _FRAME_HEADER.unpack_from(buffer, position)
        if size + FRAME_OVERHEAD_BYTES > self.frame_bytes_max:
            raise frame_error(
                f"frame of {size + FRAME_OVERHEAD_BYTES} bytes exceeds the negotiated frame_max {self.frame_bytes_max}"
            )
        end = position + _FRAME_HEADER.size + size
        if len(buffer) <= end:
            return
        if buffer[end] != FRAME_END:
            raise frame_error(f"frame-end octet is {buffer[end]:#04x}, expected 0xce")
        raise AssertionError(f"the splitter stopped before a whole frame of type {frame_type} on channel {channel}")

    def _publish_frames(self, channel: int, method: bytes, content_header: bytes, bodies: list[bytes]) -> PublishFrames:
        decoded = self._decode_method(method)  # first, as frame by frame
        header = self._headers.get(content_header)  # a publisher's messages of one size share their header
        if header is None or header.channel != channel:
            header = self._decode_frame(_HEADER, channel, content_header)
            if len(content_header) <= limits.amqp_decode_cache_key_bytes_max:
                remember(self._headers, content_header, header)
        assert isinstance(decoded, BasicPublish) and isinstance(header, HeaderFrame)
        return PublishFrames(channel=channel, method=decoded, header=header, bodies=bodies)

    def _decode_frame(self, frame_type: int, channel: int, payload: bytes) -> Frame:
        """One frame's payload → its typed frame."""
        if frame_type == _BODY:
            return BodyFrame(channel=channel, payload=payload)
        if frame_type == _METHOD:
            return MethodFrame(channel=channel, method=self._decode_method(payload))
        if frame_type == _HEADER:
            if len(payload) < _CONTENT_HEADER.size:
                fields.Reader(payload).unpack_many(_CONTENT_HEADER)  # raises the 502
            class_id, _weight, body_size = _CONTENT_HEADER.unpack_from(payload)
            raw = payload[_CONTENT_HEADER.size :]
            return HeaderFrame(channel=channel, class_id=class_id, body_size=body_size,
                               properties=self._decode_properties(raw), properties_raw=raw)
        if frame_type == FrameType.HEARTBEAT:
            if channel != 0 or len(payload):
                raise frame_error(f"heartbeat frame on channel {channel} with {len(payload)} payload bytes")
            return HeartbeatFrame()
        raise frame_error(f"unknown frame type {frame_type}")

    def _decode_method(self, payload: bytes) -> Method:
        method = self._methods.get(payload)
        if method is not None:
            return method
        method = _decode_settle(payload) or decode_method(payload)
        if type(method) in _REPEATING_METHODS and len(payload) <= limits.amqp_decode_cache_key_bytes_max:
            remember(self._methods, payload, method)
        return method

    def _decode_properties(self, raw: bytes) -> BasicProperties:
        properties = self._properties.get(raw)
        if properties is None:
            properties = decode_properties(raw)
            if len(raw) <= limits.amqp_decode_cache_key_bytes_max:
                remember(self._properties, raw, properties)
        return properties


def remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """Keep ``value`` under ``key`` in a decode cache bounded by ``limits.amqp_decode_cache_entries_max`` (emptied
    when full: a connection's working set is a few entries)."""
    if len(cache) >= limits.amqp_decode_cache_entries_max:
        cache.clear()
    cache[key] = value
