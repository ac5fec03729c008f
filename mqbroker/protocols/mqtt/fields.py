"""MQTT's wire primitives (§1.5) and the 5.0 property block (§2.2.2), sans-I/O.

``Reader`` reads the fields of one packet body from a memoryview and raises the
``MqttProtocolError`` the specification requires for anything malformed; the ``encode_*``
functions write them. ``codec.py`` builds the packets from these.
"""

from __future__ import annotations

import struct

from mqbroker.protocols.mqtt.errors import MqttProtocolError, malformed, protocol_error
from mqbroker.protocols.mqtt.packets import (
    BOOLEAN_BYTE_PROPERTIES,
    NO_PROPERTIES,
    NONZERO_PROPERTIES,
    PROPERTY_SPECS,
    REPEATABLE_PROPERTIES,
    PacketType,
    Properties,
    PropertyId,
    PropertyType,
)

#: Largest value a variable byte integer (four bytes) can carry (§1.5.5).
VARIABLE_BYTE_INTEGER_MAX = 268_435_455
U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_ONE_BYTE = [bytes([value]) for value in range(0x80)]  # variable byte integers below 128


# ---------------------------------------------------------------------------- primitives


def encode_variable_byte_integer(value: int) -> bytes:
    """The minimal 1-4 byte encoding of ``value`` [MQTT-1.5.5-1]."""
    assert 0 <= value <= VARIABLE_BYTE_INTEGER_MAX, value
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while True:
        value, digit = divmod(value, 128)
        out.append(digit | (0x80 if value else 0))
        if not value:
            return bytes(out)


def encode_string(text: str) -> bytes:
    data = text.encode("utf-8")
    assert len(data) <= 0xFFFF, "UTF-8 strings are at most 65,535 bytes"
    return U16.pack(len(data)) + data


def encode_binary(data: bytes) -> bytes:
    assert len(data) <= 0xFFFF, "binary data is at most 65,535 bytes"
    return U16.pack(len(data)) + data


class Reader:
    """Reads primitive fields from one packet body; running short is a malformed packet."""

    __slots__ = ("_data", "_position", "_end")

    def __init__(self, data: memoryview) -> None:
        self._data = data
        self._position = 0
        self._end = len(data)

    @property
    def remaining(self) -> int:
        return self._end - self._position

    def take(self, count: int) -> memoryview:
        position = self._position
        end = position + count
        if end > self._end:
            raise self._short(end)
        self._position = end
        return self._data[position:end]

    def rest(self) -> bytes:
        return bytes(self.take(self.remaining))

    def byte(self) -> int:
        position = self._position
        if position >= self._end:
            raise self._short(position + 1)
        self._position = position + 1
        return self._data[position]

    def u16(self) -> int:
        # inline, not through take(): every PUBLISH has one or two (topic length, packet identifier)
        position = self._position
        if position + 2 > self._end:
            raise self._short(position + 2)
        self._position = position + 2
        data = self._data
        return data[position] << 8 | data[position + 1]

    def _short(self, needed_end: int) -> MqttProtocolError:
        return malformed(f"packet ends {needed_end - self._end} bytes early [MQTT-1.5]")

    def u32(self) -> int:
        return int(_U32.unpack(self.take(4))[0])

    def variable_byte_integer(self) -> int:
        value, shift = 0, 0
        for count in range(1, 5):
            digit = self.byte()
            value += (digit & 0x7F) << shift
            if not digit & 0x80:
                if count > 1 and digit == 0:
                    raise malformed("variable byte integer is not minimally encoded [MQTT-1.5.5-1]")
                return value
            shift += 7
        raise malformed("variable byte integer longer than 4 bytes [MQTT-1.5.5]")

    def binary(self) -> bytes:
        return bytes(self.take(self.u16()))

    def string(self) -> str:
        return decode_utf8(self.take(self.u16()))

    def sub_reader(self, count: int) -> Reader:
        return Reader(self.take(count))

    def expect_end(self, what: str) -> None:
        if self.remaining:
            raise malformed(f"{self.remaining} unexpected bytes after the {what}")


def decode_utf8(data: bytes | memoryview) -> str:
    """Decode an MQTT UTF-8 string: well-formed, no surrogates, no U+0000 [MQTT-1.5.4-1, -2]."""
    try:
        text = str(data, "utf-8")  # strict: rejects overlongs and encoded surrogates
    except UnicodeDecodeError as error:
        raise malformed(f"ill-formed UTF-8 string ({error.reason}) [MQTT-1.5.4-1]") from None
    if "\x00" in text:
        raise malformed("UTF-8 string contains U+0000 [MQTT-1.5.4-2]")
    return text


def read_packet_id(reader: Reader) -> int:
    packet_id = reader.u16()
    if packet_id == 0:
        raise malformed("packet identifier 0 is not allowed [MQTT-2.2.1-3]")
    return packet_id


# ---------------------------------------------------------------------------- properties


def encode_properties(properties: Properties) -> bytes:
    """The 5.0 property block (length prefix included)."""
    if properties is NO_PROPERTIES:
        return b"\x00"  # most packets: no need to look at every property
    body = bytearray()
    for property_id, spec in PROPERTY_SPECS.items():
        value = getattr(properties, spec.name)
        if value is None or value == ():
            continue
        values = value if property_id in REPEATABLE_PROPERTIES else (value,)
        for one in values:
            body += encode_variable_byte_integer(property_id)
            body += _encode_property_value(spec.type, one)
    return encode_variable_byte_integer(len(body)) + body


def _encode_property_value(property_type: PropertyType, value: object) -> bytes:
    if property_type is PropertyType.BYTE:
        return bytes([value])  # type: ignore[list-item]
    if property_type is PropertyType.TWO_BYTE_INTEGER:
        return U16.pack(value)
    if property_type is PropertyType.FOUR_BYTE_INTEGER:
        return _U32.pack(value)
    if property_type is PropertyType.VARIABLE_BYTE_INTEGER:
        return encode_variable_byte_integer(value)  # type: ignore[arg-type]
    if property_type is PropertyType.UTF8_STRING:
        return encode_string(value)  # type: ignore[arg-type]
    if property_type is PropertyType.BINARY:
        return encode_binary(value)  # type: ignore[arg-type]
    name, text = value  # type: ignore[misc]
    return encode_string(name) + encode_string(text)


def _read_property_value(reader: Reader, property_type: PropertyType) -> object:
    if property_type is PropertyType.BYTE:
        return reader.byte()
    if property_type is PropertyType.TWO_BYTE_INTEGER:
        return reader.u16()
    if property_type is PropertyType.FOUR_BYTE_INTEGER:
        return reader.u32()
    if property_type is PropertyType.VARIABLE_BYTE_INTEGER:
        return reader.variable_byte_integer()
    if property_type is PropertyType.UTF8_STRING:
        return reader.string()
    if property_type is PropertyType.BINARY:
        return reader.binary()
    return (reader.string(), reader.string())


def decode_properties(reader: Reader, where: PacketType | str) -> Properties:
    """Read a property block allowed in ``where`` (a packet type, or ``WILL``)."""
    block = reader.sub_reader(reader.variable_byte_integer())
    values: dict[str, object] = {}
    repeated: dict[str, list[object]] = {}
    while block.remaining:
        raw_id = block.variable_byte_integer()
        try:
            property_id = PropertyId(raw_id)
        except ValueError:
            raise malformed(f"unknown property identifier 0x{raw_id:02X} [MQTT-2.2.2-2]") from None
        spec = PROPERTY_SPECS[property_id]
        if where not in spec.allowed_in:
            raise malformed(f"property {property_id.name} is not allowed in {_name(where)} [MQTT-2.2.2-2]")
        value = _read_property_value(block, spec.type)
        _check_property_value(property_id, value)
        if property_id in REPEATABLE_PROPERTIES:
            repeated.setdefault(spec.name, []).append(value)
        elif spec.name in values:
            raise protocol_error(f"property {property_id.name} appears twice in {_name(where)} [MQTT-2.2.2]")
        else:
            values[spec.name] = value
    for name, items in repeated.items():
        values[name] = tuple(items)
    if where == PacketType.SUBSCRIBE and len(repeated.get("subscription_identifiers", ())) > 1:
        raise protocol_error("SUBSCRIBE carries more than one subscription identifier [MQTT-3.8.2.1.2]")
    return Properties(**values) if values else NO_PROPERTIES  # type: ignore[arg-type]


def _check_property_value(property_id: PropertyId, value: object) -> None:
    if property_id in BOOLEAN_BYTE_PROPERTIES and value not in (0, 1):
        raise protocol_error(f"property {property_id.name} must be 0 or 1, got {value} [MQTT-2.2.2]")
    if property_id in NONZERO_PROPERTIES and value == 0:
        raise protocol_error(f"property {property_id.name} must not be 0 [MQTT-2.2.2]")


def _name(where: PacketType | str) -> str:
    return where.name if isinstance(where, PacketType) else "the will properties"
