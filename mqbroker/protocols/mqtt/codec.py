"""Sans-I/O MQTT 3.1.1 / 5.0 codec: ``encode(packet, level)`` and a streaming ``PacketDecoder``.

The decoder keeps at most one incomplete packet, and refuses a packet whose announced size
exceeds ``packet_bytes_max`` as soon as its fixed header arrives (before the body), so its
buffer never grows past the bound. Every decoding failure is an ``MqttProtocolError``
carrying the reason code the specification requires; nothing else escapes.

The primitives and the 5.0 property block are in ``fields.py``. The protocol level decides whether properties and reason codes are on the wire. A server
decoder starts without a level and learns it from the CONNECT packet, which must come
first [MQTT-3.1.0-1].
"""

from __future__ import annotations

import sys
from array import array

from mqbroker.protocols.mqtt.errors import MqttProtocolError, malformed, protocol_error
from mqbroker.protocols.mqtt.fields import (
    U16,
    VARIABLE_BYTE_INTEGER_MAX,
    Reader,
    decode_properties,
    encode_binary,
    encode_properties,
    encode_string,
    encode_variable_byte_integer,
    read_packet_id,
)
from mqbroker.protocols.mqtt.packets import (
    NO_PROPERTIES,
    PROTOCOL_LEVEL_5,
    SUBACK_FAILURE_3_1_1,
    SUPPORTED_PROTOCOL_LEVELS,
    WILL,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PublishResponse,
    PubRec,
    PubRel,
    ReasonCode,
    RetainHandling,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    UnsubAck,
    Unsubscribe,
    Will,
    packet_type_of,
)

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_U16 = U16

#: The absolute largest MQTT packet: one type byte, four length bytes, the largest body.
PACKET_BYTES_MAX_ABSOLUTE = 1 + 4 + VARIABLE_BYTE_INTEGER_MAX
#: Fixed-header flags required for each type; PUBLISH carries DUP/QoS/RETAIN instead.
_REQUIRED_FLAGS = {packet_type: 0 for packet_type in PacketType} | {
    PacketType.PUBREL: 0b0010,
    PacketType.SUBSCRIBE: 0b0010,
    PacketType.UNSUBSCRIBE: 0b0010,
}
_FIRST_BYTES = [bytes([value]) for value in range(0x100)]
_EMPTY_PROPERTIES = b"\x00"  # a 5.0 property block of length 0
_SIMPLE_RESPONSES: dict[PacketType, type[PublishResponse]] = {
    PacketType.PUBACK: PubAck,
    PacketType.PUBREC: PubRec,
    PacketType.PUBREL: PubRel,
    PacketType.PUBCOMP: PubComp,
}


# ---------------------------------------------------------------------------- encoding


def encode(packet: Packet, protocol_level: int) -> bytes:
    """The wire bytes of ``packet`` at ``protocol_level`` (4 drops what 3.1.1 cannot carry)."""
    assert protocol_level in SUPPORTED_PROTOCOL_LEVELS, protocol_level
    packet_type = packet_type_of(packet)
    flags, body = _ENCODERS[packet_type](packet, protocol_level == PROTOCOL_LEVEL_5)
    return b"".join((_FIRST_BYTES[packet_type << 4 | flags], encode_variable_byte_integer(len(body)), body))


def _encode_connect(packet: Connect, v5: bool) -> tuple[int, bytes]:
    flags = (0x02 if packet.clean_start else 0) | (0x80 if packet.username is not None else 0)
    flags |= 0x40 if packet.password is not None else 0
    if packet.will is not None:
        flags |= 0x04 | packet.will.qos << 3 | (0x20 if packet.will.retain else 0)
    body = bytearray(encode_string(packet.protocol_name))
    body += bytes([packet.protocol_level, flags]) + _U16.pack(packet.keep_alive_s)
    if v5:
        body += encode_properties(packet.properties)
    body += encode_string(packet.client_id)
    if packet.will is not None:
        if v5:
            body += encode_properties(packet.will.properties)
        body += encode_string(packet.will.topic) + encode_binary(packet.will.payload)
    if packet.username is not None:
        body += encode_string(packet.username)
    if packet.password is not None:
        body += encode_binary(packet.password)
    return 0, bytes(body)


def _encode_connack(packet: ConnAck, v5: bool) -> tuple[int, bytes]:
    body = bytes([1 if packet.session_present else 0, packet.reason_code])
    return 0, body + (encode_properties(packet.properties) if v5 else b"")


def _encode_publish(packet: Publish, v5: bool) -> tuple[int, bytes]:
    assert (packet.packet_id is None) == (packet.qos == 0), "a packet id exactly when QoS > 0"
    flags = (0x08 if packet.dup else 0) | packet.qos << 1 | (0x01 if packet.retain else 0)
    parts = [encode_string(packet.topic)]
    if packet.packet_id is not None:
        parts.append(_U16.pack(packet.packet_id))
    if v5:
        parts.append(encode_properties(packet.properties))
    parts.append(packet.payload)
    return flags, b"".join(parts)


def encode_plain_publish(topic_field: bytes, payload: bytes, qos: int, retain: bool, packet_id: int, v5: bool) -> bytes:
    """The bytes ``encode`` gives a QoS 1/2 ``Publish`` without properties and DUP 0, from its topic already encoded
    as a string field (``encode_string``): the outbound flows encode each delivery with this, one call, no packet
    object read."""
    body_bytes = len(topic_field) + len(payload) + (3 if v5 else 2)
    length = _FIRST_BYTES[body_bytes] if body_bytes < 0x80 else encode_variable_byte_integer(body_bytes)  # one byte: inline
    return b"".join((_FIRST_BYTES[0x30 | qos << 1 | retain], length, topic_field, _U16.pack(packet_id),
                     _EMPTY_PROPERTIES if v5 else b"", payload))


def _no_properties(properties: Properties) -> bool:
    return properties is NO_PROPERTIES or properties == NO_PROPERTIES  # identity first: the usual case, and cheap


def _encode_publish_response(packet: PublishResponse, v5: bool) -> tuple[int, bytes]:
    flags = _REQUIRED_FLAGS[packet_type_of(packet)]  # type: ignore[arg-type]
    body = _U16.pack(packet.packet_id)
    if not v5 or (packet.reason_code == ReasonCode.SUCCESS and _no_properties(packet.properties)):
        return flags, body  # the short form [MQTT-3.4.2.1]
    if _no_properties(packet.properties):
        return flags, body + bytes([packet.reason_code])
    return flags, body + bytes([packet.reason_code]) + encode_properties(packet.properties)


def _encode_subscribe(packet: Subscribe, v5: bool) -> tuple[int, bytes]:
    body = bytearray(_U16.pack(packet.packet_id))
    if v5:
        body += encode_properties(packet.properties)
    for request in packet.subscriptions:
        options = request.qos
        if v5:
            options |= (0x04 if request.no_local else 0) | (0x08 if request.retain_as_published else 0)
            options |= request.retain_handling << 4
        body += encode_string(request.topic_filter) + bytes([options])
    return 0b0010, bytes(body)


def _encode_suback(packet: SubAck, v5: bool) -> tuple[int, bytes]:
    body = bytearray(_U16.pack(packet.packet_id))
    if v5:
        body += encode_properties(packet.properties) + bytes(packet.reason_codes)
    else:
        body += bytes(SUBACK_FAILURE_3_1_1 if code >= 0x80 else code for code in packet.reason_codes)
    return 0, bytes(body)


def _encode_unsubscribe(packet: Unsubscribe, v5: bool) -> tuple[int, bytes]:
    body = bytearray(_U16.pack(packet.packet_id))
    if v5:
        body += encode_properties(packet.properties)
    for topic_filter in packet.topic_filters:
        body += encode_string(topic_filter)
    return 0b0010, bytes(body)


def _encode_unsuback(packet: UnsubAck, v5: bool) -> tuple[int, bytes]:
    body = _U16.pack(packet.packet_id)
    if v5:
        body += encode_properties(packet.properties) + bytes(packet.reason_codes)
    return 0, body


def _encode_empty(packet: PingReq | PingResp, v5: bool) -> tuple[int, bytes]:
    return 0, b""


def _encode_disconnect_or_auth(packet: Disconnect | Auth, v5: bool) -> tuple[int, bytes]:
    assert v5 or isinstance(packet, Disconnect), "AUTH exists only at level 5"
    if not v5 or (packet.reason_code == ReasonCode.SUCCESS and _no_properties(packet.properties)):
        return 0, b""
    if _no_properties(packet.properties):
        return 0, bytes([packet.reason_code])
    return 0, bytes([packet.reason_code]) + encode_properties(packet.properties)


_ENCODERS = {
    PacketType.CONNECT: _encode_connect,
    PacketType.CONNACK: _encode_connack,
    PacketType.PUBLISH: _encode_publish,
    PacketType.PUBACK: _encode_publish_response,
    PacketType.PUBREC: _encode_publish_response,
    PacketType.PUBREL: _encode_publish_response,
    PacketType.PUBCOMP: _encode_publish_response,
    PacketType.SUBSCRIBE: _encode_subscribe,
    PacketType.SUBACK: _encode_suback,
    PacketType.UNSUBSCRIBE: _encode_unsubscribe,
    PacketType.UNSUBACK: _encode_unsuback,
    PacketType.PINGREQ: _encode_empty,
    PacketType.PINGRESP: _encode_empty,
    PacketType.DISCONNECT: _encode_disconnect_or_auth,
    PacketType.AUTH: _encode_disconnect_or_auth,
}


# ---------------------------------------------------------------------------- decoding


def _decode_connect(reader: Reader, flags: int, level: int | None) -> Connect:
    protocol_name = reader.string()
    protocol_level = reader.byte()
    if protocol_name != "MQTT" or protocol_level not in SUPPORTED_PROTOCOL_LEVELS:
        raise MqttProtocolError(
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION,
            f"protocol {protocol_name!r} level {protocol_level} is not supported; use MQTT 3.1.1 (4) or "
            "5.0 (5) [MQTT-3.1.2-1, MQTT-3.1.2-2]",
        )
    v5 = protocol_level == PROTOCOL_LEVEL_5
    connect_flags = reader.byte()
    if connect_flags & 0x01:
        raise malformed("CONNECT reserved flag is set [MQTT-3.1.2-3]")
    will_flag, will_qos, will_retain = bool(connect_flags & 0x04), connect_flags >> 3 & 0x03, bool(connect_flags & 0x20)
    if will_qos == 3:
        raise malformed("will QoS 3 is invalid [MQTT-3.1.2-12]")
    if not will_flag and (will_qos or will_retain):
        raise malformed("will QoS or will retain set without the will flag [MQTT-3.1.2-11, MQTT-3.1.2-13]")
    has_username, has_password = bool(connect_flags & 0x80), bool(connect_flags & 0x40)
    if not v5 and has_password and not has_username:
        raise malformed("password flag set without the user name flag [MQTT-3.1.2-22]")
    keep_alive_s = reader.u16()
    properties = decode_properties(reader, PacketType.CONNECT) if v5 else NO_PROPERTIES
    client_id = reader.string()
    will = None
    if will_flag:
        will_properties = decode_properties(reader, WILL) if v5 else NO_PROPERTIES
        will = Will(
            topic=reader.string(), payload=reader.binary(), qos=will_qos, retain=will_retain,
            properties=will_properties,
        )
    username = reader.string() if has_username else None
    password = reader.binary() if has_password else None
    reader.expect_end("CONNECT payload")
    return Connect(
        protocol_name=protocol_name, protocol_level=protocol_level, clean_start=bool(connect_flags & 0x02),
        keep_alive_s=keep_alive_s, client_id=client_id, will=will, username=username, password=password,
        properties=properties,
    )


def _decode_connack(reader: Reader, flags: int, level: int) -> ConnAck:
    acknowledge_flags = reader.byte()
    if acknowledge_flags & 0xFE:
        raise malformed("CONNACK reserved flags are set [MQTT-3.2.2-1]")
    reason_code = reader.byte()
    properties = decode_properties(reader, PacketType.CONNACK) if level == PROTOCOL_LEVEL_5 else NO_PROPERTIES
    reader.expect_end("CONNACK")
    return ConnAck(session_present=bool(acknowledge_flags), reason_code=reason_code, properties=properties)


def _decode_publish(reader: Reader, flags: int, level: int) -> Publish:
    qos = flags >> 1 & 0x03
    if qos == 3:
        raise malformed("PUBLISH with QoS 3 [MQTT-3.3.1-4]")
    dup = bool(flags & 0x08)
    if dup and qos == 0:
        raise malformed("DUP set on a QoS 0 PUBLISH [MQTT-3.3.1-2]")
    topic = reader.string()
    packet_id = read_packet_id(reader) if qos else None
    properties = decode_properties(reader, PacketType.PUBLISH) if level == PROTOCOL_LEVEL_5 else NO_PROPERTIES
    return Publish(
        topic=topic, payload=reader.rest(), qos=qos, retain=bool(flags & 0x01), dup=dup, packet_id=packet_id,
        properties=properties,
    )


def _decode_publish_response(reader: Reader, packet_type: PacketType, level: int) -> PublishResponse:
    cls = _SIMPLE_RESPONSES[packet_type]
    packet_id = read_packet_id(reader)
    if level != PROTOCOL_LEVEL_5 or not reader.remaining:
        reader.expect_end(packet_type.name)
        return cls(packet_id=packet_id)
    reason_code = reader.byte()
    properties = decode_properties(reader, packet_type) if reader.remaining else NO_PROPERTIES
    reader.expect_end(packet_type.name)
    return cls(packet_id=packet_id, reason_code=reason_code, properties=properties)


def _decode_subscribe(reader: Reader, flags: int, level: int) -> Subscribe:
    v5 = level == PROTOCOL_LEVEL_5
    packet_id = read_packet_id(reader)
    properties = decode_properties(reader, PacketType.SUBSCRIBE) if v5 else NO_PROPERTIES
    requests = []
    while reader.remaining:
        topic_filter = reader.string()
        options = reader.byte()
        if options & (0xC0 if v5 else 0xFC):
            raise malformed("SUBSCRIBE options reserved bits are set [MQTT-3.8.3-5]")
        if options & 0x03 == 3 or options >> 4 & 0x03 == 3:
            raise malformed("SUBSCRIBE requests QoS 3 or retain handling 3 [MQTT-3.8.3-5]")
        requests.append(SubscriptionRequest(
            topic_filter=topic_filter, qos=options & 0x03, no_local=bool(options & 0x04),
            retain_as_published=bool(options & 0x08), retain_handling=RetainHandling(options >> 4 & 0x03),
        ))
    if not requests:
        raise protocol_error("SUBSCRIBE without any topic filter [MQTT-3.8.3-2]")
    return Subscribe(packet_id=packet_id, subscriptions=tuple(requests), properties=properties)


def _decode_suback(reader: Reader, flags: int, level: int) -> SubAck:
    packet_id = read_packet_id(reader)
    properties = decode_properties(reader, PacketType.SUBACK) if level == PROTOCOL_LEVEL_5 else NO_PROPERTIES
    return SubAck(packet_id=packet_id, reason_codes=tuple(reader.rest()), properties=properties)


def _decode_unsubscribe(reader: Reader, flags: int, level: int) -> Unsubscribe:
    packet_id = read_packet_id(reader)
    properties = decode_properties(reader, PacketType.UNSUBSCRIBE) if level == PROTOCOL_LEVEL_5 else NO_PROPERTIES
    topic_filters = []
    while reader.remaining:
        topic_filters.append(reader.string())
    if not topic_filters:
        raise protocol_error("UNSUBSCRIBE without any topic filter [MQTT-3.10.3-2]")
    return Unsubscribe(packet_id=packet_id, topic_filters=tuple(topic_filters), properties=properties)


def _decode_unsuback(reader: Reader, flags: int, level: int) -> UnsubAck:
    packet_id = read_packet_id(reader)
    if level != PROTOCOL_LEVEL_5:
        reader.expect_end("UNSUBACK")
        return UnsubAck(packet_id=packet_id)
    properties = decode_properties(reader, PacketType.UNSUBACK)
    return UnsubAck(packet_id=packet_id, reason_codes=tuple(reader.rest()), properties=properties)


def _decode_empty(cls: type) -> object:
    def decode(reader: Reader, flags: int, level: int) -> object:
        reader.expect_end(cls.__name__.upper())
        return cls()

    return decode


def _decode_disconnect_or_auth(cls: type[Disconnect] | type[Auth]) -> object:
    packet_type = PacketType.DISCONNECT if cls is Disconnect else PacketType.AUTH

    def decode(reader: Reader, flags: int, level: int) -> Disconnect | Auth:
        if level != PROTOCOL_LEVEL_5:
            if cls is Auth:
                raise malformed("packet type 15 is reserved in MQTT 3.1.1 [MQTT-2.2.1-1]")
            reader.expect_end("DISCONNECT")
            return cls()
        if not reader.remaining:
            return cls()
        reason_code = reader.byte()
        properties = decode_properties(reader, packet_type) if reader.remaining else NO_PROPERTIES
        reader.expect_end(packet_type.name)
        return cls(reason_code=reason_code, properties=properties)

    return decode


def _responses(packet_type: PacketType) -> object:
    return lambda reader, flags, level: _decode_publish_response(reader, packet_type, level)


_DECODERS = {
    PacketType.CONNECT: _decode_connect,
    PacketType.CONNACK: _decode_connack,
    PacketType.PUBLISH: _decode_publish,
    PacketType.PUBACK: _responses(PacketType.PUBACK),
    PacketType.PUBREC: _responses(PacketType.PUBREC),
    PacketType.PUBREL: _responses(PacketType.PUBREL),
    PacketType.PUBCOMP: _responses(PacketType.PUBCOMP),
    PacketType.SUBSCRIBE: _decode_subscribe,
    PacketType.SUBACK: _decode_suback,
    PacketType.UNSUBSCRIBE: _decode_unsubscribe,
    PacketType.UNSUBACK: _decode_unsuback,
    PacketType.PINGREQ: _decode_empty(PingReq),
    PacketType.PINGRESP: _decode_empty(PingResp),
    PacketType.DISCONNECT: _decode_disconnect_or_auth(Disconnect),
    PacketType.AUTH: _decode_disconnect_or_auth(Auth),
}


#: The packet type of the first byte's high nibble (an Enum call per packet costs more than the decoding).
_PACKET_TYPE_OF_NIBBLE: list[PacketType | None] = [None] + [PacketType(value) for value in range(1, 16)]


def decode_packet(first_byte: int, body: bytes | bytearray | memoryview, protocol_level: int | None) -> Packet:
    """Decode one packet from its first byte and body; level None accepts only CONNECT."""
    packet_type = _PACKET_TYPE_OF_NIBBLE[first_byte >> 4]
    if packet_type is None:
        raise malformed("packet type 0 is reserved [MQTT-2.1.2]")
    flags = first_byte & 0x0F
    if packet_type is not PacketType.PUBLISH and flags != _REQUIRED_FLAGS[packet_type]:
        raise malformed(f"{packet_type.name} has reserved fixed-header flags 0b{flags:04b} [MQTT-2.1.3-1]")
    if protocol_level is None and packet_type is not PacketType.CONNECT:
        raise protocol_error(f"the first packet must be CONNECT, not {packet_type.name} [MQTT-3.1.0-1]")
    packet = _DECODERS[packet_type](Reader(memoryview(body)), flags, protocol_level)
    return packet  # type: ignore[return-value]


_PUBLISH = int(PacketType.PUBLISH)
#: A PUBACK's first byte (no flags): one with a packet id and nothing else is decoded inline.
_PUBACK_FIRST_BYTE = PacketType.PUBACK << 4
#: The first two bytes of a successful PUBACK in the short form (fixed header, remaining length 2), as a 16-bit value.
_SHORT_PUBACK_HEADER = _PUBACK_FIRST_BYTE << 8 | 2
_LITTLE_ENDIAN = sys.byteorder == "little"


def _plain_publish(data: bytes, start: int, end: int, flags: int, level: int) -> Publish | None:
    """The PUBLISH in ``data[start:end]`` decoded without a ``Reader``, or None to leave it to ``decode_packet``.

    Nearly every packet a broker receives is a PUBLISH without properties: this decodes those
    field by field from the received bytes. Anything else (QoS 3, DUP on QoS 0, a short or
    malformed field, packet id 0, a 5.0 property block that is not empty) returns None, and
    ``decode_packet`` decodes it, or raises the error it always raised.
    """
    qos = flags >> 1 & 0x03
    if qos == 3 or (flags & 0x08 and not qos):
        return None
    position = start + 2
    if position > end:
        return None
    topic_end = position + (data[start] << 8 | data[start + 1])
    if topic_end > end:
        return None
    try:
        topic = data[position:topic_end].decode("utf-8")  # strict: rejects overlongs and encoded surrogates
    except UnicodeDecodeError:
        return None
    if "\x00" in topic:
        return None
    position = topic_end
    packet_id = None
    if qos:
        if position + 2 > end:
            return None
        packet_id = data[position] << 8 | data[position + 1]
        if not packet_id:
            return None
        position += 2
    if level == PROTOCOL_LEVEL_5:
        if position >= end or data[position]:
            return None  # properties (or a missing block): the general decoder
        position += 1
    return Publish(topic=topic, payload=data[position:end], qos=qos, retain=bool(flags & 0x01), dup=bool(flags & 0x08),
                   packet_id=packet_id)


class PacketDecoder:
    """Streaming decoder: ``receive_data(bytes) -> list[Packet]`` with a bounded buffer.

    ``packet_bytes_max`` bounds a whole packet (fixed header included), which is what
    MQTT 5.0's Maximum Packet Size means; a larger announced size raises
    PACKET_TOO_LARGE (0x95) before the body is buffered. Without a ``protocol_level`` the
    decoder is a server's: it accepts CONNECT first and adopts its level.
    """

    __slots__ = ("_buffer", "_packet_bytes_max", "protocol_level")

    def __init__(self, *, packet_bytes_max: int, protocol_level: int | None = None) -> None:
        assert 2 <= packet_bytes_max <= PACKET_BYTES_MAX_ABSOLUTE, packet_bytes_max
        self._buffer = bytearray()
        self._packet_bytes_max = packet_bytes_max
        self.protocol_level = protocol_level

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet decoded (always below the packet bound)."""
        return len(self._buffer)

    def allow_packets_up_to(self, packet_bytes_max: int) -> None:
        """Change the packet bound (the server raises it from the pre-authentication bound once CONNECT is accepted)."""
        assert 2 <= packet_bytes_max <= PACKET_BYTES_MAX_ABSOLUTE, packet_bytes_max
        self._packet_bytes_max = packet_bytes_max

    def plain_pubacks(self, data: bytes) -> array[int] | None:
        """The packet ids of ``data`` if it is nothing but whole PUBACKs in the short form (fixed header and packet
        id: a subscriber's usual read) and nothing is buffered; else None, and ``receive_data`` decodes it. Read
        straight from the bytes, without a packet object or a step of Python per PUBACK."""
        if self._buffer or not data or data[0] != _PUBACK_FIRST_BYTE or len(data) & 3 or self.protocol_level is None:
            return None  # (a publisher's read: its first byte is a PUBLISH's)
        words = array("H", data)
        if _LITTLE_ENDIAN:
            words.byteswap()
        headers, packet_ids = words[0::2], words[1::2]
        if headers.count(_SHORT_PUBACK_HEADER) < len(headers) or 0 in packet_ids:
            return None  # not all PUBACKs (or packet id 0, malformed): the general decoder answers
        return packet_ids

    def receive_data(self, data: bytes) -> list[Packet]:
        """Add ``data``; return the packets it completes. Raises ``MqttProtocolError``."""
        buffer = self._buffer
        if buffer:
            buffer += data
            data = bytes(buffer)  # one copy per read; every packet below is a slice of it
        packets: list[Packet] = []
        position = 0
        size = len(data)
        level = self.protocol_level
        while position < size:
            first_byte = data[position]
            if position + 1 < size and data[position + 1] < 0x80 and data[position + 1] + 2 <= self._packet_bytes_max:
                header_bytes, body_bytes = 2, data[position + 1]  # the usual one-byte remaining length, inline
            else:
                header = self._fixed_header(data, position)
                if header is None:
                    break
                header_bytes, body_bytes = header
            end = position + header_bytes + body_bytes
            if end > size:
                break
            start = position + header_bytes
            packet = None
            if level is not None:
                if first_byte >> 4 == _PUBLISH:
                    packet = _plain_publish(data, start, end, first_byte & 0x0F, level)
                elif first_byte == _PUBACK_FIRST_BYTE and body_bytes == 2 and (data[start] or data[start + 1]):
                    packet = PubAck(packet_id=data[start] << 8 | data[start + 1])  # a subscriber's usual PUBACK
            if packet is None:
                packet = decode_packet(first_byte, data[start:end], level)
                if level is None and isinstance(packet, Connect):
                    self.protocol_level = level = packet.protocol_level
            packets.append(packet)
            position = end
        if position < size:
            buffer[:] = data[position:]  # the incomplete packet's bytes (bounded by _fixed_header)
        else:
            buffer.clear()
        return packets

    def _fixed_header(self, buffer: bytes, position: int) -> tuple[int, int] | None:
        """(header length, body length) of the packet at ``position``, or None if incomplete."""
        length, shift = 0, 0
        for index in range(1, 5):
            if position + index >= len(buffer):
                return None
            digit = buffer[position + index]
            length += (digit & 0x7F) << shift
            shift += 7
            if not digit & 0x80:
                if index > 1 and digit == 0:
                    raise malformed("remaining length is not minimally encoded [MQTT-1.5.5-1]")
                if 1 + index + length > self._packet_bytes_max:
                    raise MqttProtocolError(
                        ReasonCode.PACKET_TOO_LARGE,
                        f"packet of {1 + index + length} bytes exceeds the maximum packet size of "
                        f"{self._packet_bytes_max} bytes [MQTT-3.2.2-15]",
                    )
                return 1 + index, length
        raise malformed("remaining length longer than 4 bytes [MQTT-1.5.5]")

