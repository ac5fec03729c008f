"""AMQP 0-9-1 value encoding: integers, short/long strings, packed bits and field tables.

Field tables accept every tag the measured clients send, including RabbitMQ's deviations
from the spec's table (``s`` is int16, ``l`` is int64, ``x`` a byte array) and py-amqp's
``L`` for int64. Decoded values are plain Python objects; encoding picks the tags pika and
RabbitMQ use (``I``/``l`` for ints, ``d`` for floats, ``S`` for str, ``x`` for bytes), so
every decoded table re-encodes to an equal table. Strings use UTF-8 with surrogateescape:
bytes that are not UTF-8 survive a round trip unchanged.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from mqbroker.protocols.amqp.spec import AmqpError, Kind, ReplyCode

FieldValue = Any

_OCTET = struct.Struct(">B")
_SHORT = struct.Struct(">H")
_LONG = struct.Struct(">I")
_LONGLONG = struct.Struct(">Q")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_DECIMAL = struct.Struct(">Bi")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

#: Fixed-width field-table tags and their layouts.
_FIXED_TAGS: dict[bytes, struct.Struct] = {
    b"b": struct.Struct(">b"),
    b"B": struct.Struct(">B"),
    b"s": struct.Struct(">h"),
    b"u": struct.Struct(">H"),
    b"I": _INT32,
    b"i": struct.Struct(">I"),
    b"l": _INT64,
    b"L": _INT64,
    b"f": struct.Struct(">f"),
    b"d": struct.Struct(">d"),
}


def syntax_error(text: str) -> AmqpError:
    """The spec's reply for a frame whose fields do not parse (502, closes the connection)."""
    return AmqpError(ReplyCode.SYNTAX_ERROR, text)


class Reader:
    """Reads AMQP values from a payload; running past its end is a 502 syntax error."""

    __slots__ = ("_data", "position", "_bits", "_bit_index")

    def __init__(self, data: bytes | memoryview, position: int = 0) -> None:
        self._data = data
        self.position = position
        self._bits = 0
        self._bit_index = 8  # 8 = no octet of bits is open

    @property
    def remaining(self) -> int:
        """Bytes not read yet."""
        return len(self._data) - self.position

    def _take(self, size: int) -> bytes | memoryview:
        end = self.position + size
        if end > len(self._data):
            raise syntax_error(f"field runs past the end of the frame ({size} bytes at {self.position})")
        chunk = self._data[self.position : end]
        self.position = end
        self._bit_index = 8
        return chunk

    def unpack(self, layout: struct.Struct) -> Any:
        """One fixed-width value."""
        (value,) = layout.unpack(self._take(layout.size))
        return value

    def unpack_many(self, layout: struct.Struct) -> tuple[Any, ...]:
        """Several fixed-width values read as one group."""
        return layout.unpack(self._take(layout.size))

    def octet(self) -> int:
        """An unsigned 8-bit integer."""
        return int(self.unpack(_OCTET))

    def shortstr(self) -> str:
        """A string of at most 255 bytes with a 1-byte length."""
        return bytes(self._take(self.octet())).decode("utf-8", "surrogateescape")

    def longstr(self) -> bytes:
        """A byte string with a 4-byte length."""
        return bytes(self._take(self.unpack(_LONG)))

    def bit(self) -> bool:
        """One bit; consecutive bits share octets, least significant bit first."""
        if self._bit_index == 8:
            self._bits = self.octet()
            self._bit_index = 0
        value = bool(self._bits >> self._bit_index & 1)
        self._bit_index += 1
        return value

    def table(self) -> dict[str, FieldValue]:
        """A field table with its 4-byte length."""
        nested = Reader(self._take(self.unpack(_LONG)))
        table = {}
        while nested.remaining:
            name = nested.shortstr()
            table[name] = nested.field_value()
        return table

    def field_value(self) -> FieldValue:
        """One tagged value of a table or array."""
        tag = bytes(self._take(1))
        fixed = _FIXED_TAGS.get(tag)
        if fixed is not None:
            return self.unpack(fixed)
        if tag == b"t":
            return self.octet() != 0
        if tag == b"S":
            return self.longstr().decode("utf-8", "surrogateescape")
        if tag == b"x":
            return self.longstr()
        if tag == b"F":
            return self.table()
        if tag == b"A":
            nested = Reader(self._take(self.unpack(_LONG)))
            items = []
            while nested.remaining:
                items.append(nested.field_value())
            return items
        if tag == b"T":
            return self.timestamp()
        if tag == b"D":
            scale, value = self.unpack_many(_DECIMAL)
            return decimal.Decimal(value).scaleb(-scale)
        if tag == b"V":
            return None
        raise syntax_error(f"unknown field-table value type {tag!r}")

    def timestamp(self) -> datetime.datetime:
        """A 64-bit count of seconds since the epoch, as an aware UTC datetime."""
        seconds = self.unpack(_LONGLONG)
        try:
            return _EPOCH + datetime.timedelta(seconds=seconds)
        except OverflowError:
            raise syntax_error(f"timestamp {seconds} is out of range") from None

    def read(self, kind: Kind) -> Any:
        """One method argument or content property of wire type ``kind``."""
        if kind is Kind.BIT:
            return self.bit()
        return _READERS[kind](self)


_READERS = {
    Kind.OCTET: Reader.octet,
    Kind.SHORT: lambda reader: reader.unpack(_SHORT),
    Kind.LONG: lambda reader: reader.unpack(_LONG),
    Kind.LONGLONG: lambda reader: reader.unpack(_LONGLONG),
    Kind.TIMESTAMP: lambda reader: reader.unpack(_LONGLONG),
    Kind.SHORTSTR: Reader.shortstr,
    Kind.LONGSTR: Reader.longstr,
    Kind.TABLE: Reader.table,
}


class Writer:
    """Appends AMQP values to a bytearray, packing consecutive bits into octets."""

    __slots__ = ("buffer", "_bit_position", "_bit_index")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self._bit_position = 0
        self._bit_index = 8

    def write(self, kind: Kind, value: Any) -> None:
        """Append one argument or property of wire type ``kind``."""
        if kind is Kind.BIT:
            if self._bit_index == 8:
                self._bit_position = len(self.buffer)
                self.buffer.append(0)
                self._bit_index = 0
            if value:
                self.buffer[self._bit_position] |= 1 << self._bit_index
            self._bit_index += 1
            return
        self._bit_index = 8
        if kind is Kind.OCTET:
            self.buffer += _OCTET.pack(value)
        elif kind is Kind.SHORT:
            self.buffer += _SHORT.pack(value)
        elif kind is Kind.LONG:
            self.buffer += _LONG.pack(value)
        elif kind is Kind.LONGLONG or kind is Kind.TIMESTAMP:
            self.buffer += _LONGLONG.pack(value)
        elif kind is Kind.SHORTSTR:
            self.buffer += shortstr(value)
        elif kind is Kind.LONGSTR:
            self.buffer += _LONG.pack(len(value)) + value
        else:
            assert kind is Kind.TABLE, kind
            self.buffer += table(value)


def shortstr(text: str) -> bytes:
    """A shortstr: 1-byte length, then at most 255 bytes of UTF-8."""
    return shortstr_bytes(text.encode("utf-8", "surrogateescape"))


def shortstr_bytes(encoded: bytes) -> bytes:
    """A shortstr of bytes already encoded: 1-byte length, then at most 255 of them (``ValueError`` beyond)."""
    if len(encoded) > 255:
        raise ValueError(f"short string of {len(encoded)} bytes exceeds 255: {bytes(encoded[:40])!r}...")
    return _OCTET.pack(len(encoded)) + encoded


def table(values: Mapping[str, FieldValue]) -> bytes:
    """A field table with its 4-byte length prefix."""
    body = bytearray()
    for name, value in values.items():
        body += shortstr(name)
        _field_value(body, value)
    return _LONG.pack(len(body)) + body


def _field_value(body: bytearray, value: FieldValue) -> None:
    """Append one tagged value (the tag is chosen from the Python type)."""
    if value is None:
        body += b"V"
    elif isinstance(value, bool):
        body += b"t" + _OCTET.pack(value)
    elif isinstance(value, int):
        if -(2**31) <= value < 2**31:
            body += b"I" + _INT32.pack(value)
        else:
            body += b"l" + _INT64.pack(value)
    elif isinstance(value, float):
        body += b"d" + struct.pack(">d", value)
    elif isinstance(value, decimal.Decimal):
        body += b"D" + _decimal(value)
    elif isinstance(value, str):
        encoded = value.encode("utf-8", "surrogateescape")
        body += b"S" + _LONG.pack(len(encoded)) + encoded
    elif isinstance(value, (bytes, bytearray, memoryview)):
        body += b"x" + _LONG.pack(len(value)) + value
    elif isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        body += b"T" + _LONGLONG.pack(int((aware - _EPOCH).total_seconds()))
    elif isinstance(value, Mapping):
        body += b"F" + table(value)
    elif isinstance(value, Sequence):
        items = bytearray()
        for item in value:
            _field_value(items, item)
        body += b"A" + _LONG.pack(len(items)) + items
    else:
        raise TypeError(f"cannot encode {type(value).__name__} in an AMQP field table")


def _decimal(value: decimal.Decimal) -> bytes:
    """Scale octet plus a signed 32-bit unscaled value."""
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):
        raise ValueError(f"AMQP decimals cannot carry {value}")
    scale = max(0, -exponent)
    if scale > 255:
        raise ValueError(f"decimal {value} needs more than 255 decimal places")
    return _DECIMAL.pack(scale, int(value.scaleb(scale)))
