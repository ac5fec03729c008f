# -*- test-case-name: tests.unit.records.test_fields -*-
"""Big-endian fields of the broker's internal records (``__consumer_offsets``, ``__transaction_state``).

Integers are big-endian; a string is an int32 byte length (-1: null) and UTF-8; an array is an
int32 count followed by its elements. ``FieldReader`` raises the error its caller names for any
shortfall or malformed field, so each internal topic reports garbage with its own typed error.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class FieldWriter:
    """Appends big-endian fields to a byte buffer."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def int8(self, value: int) -> FieldWriter:
        """One signed byte."""
        self.buffer += _INT8.pack(value)
        return self

    def int16(self, value: int) -> FieldWriter:
        """A signed 16-bit integer."""
        self.buffer += _INT16.pack(value)
        return self

    def int32(self, value: int) -> FieldWriter:
        """A signed 32-bit integer."""
        self.buffer += _INT32.pack(value)
        return self

    def int64(self, value: int) -> FieldWriter:
        """A signed 64-bit integer."""
        self.buffer += _INT64.pack(value)
        return self

    def string(self, value: str | None) -> FieldWriter:
        """An int32 length (-1 for None) and UTF-8 bytes."""
        if value is None:
            return self.int32(-1)
        encoded = value.encode("utf-8")
        self.int32(len(encoded))
        self.buffer += encoded
        return self

    def bytes(self) -> bytes:
        """What was written."""
        return bytes(self.buffer)


class FieldReader:
    """Reads big-endian fields of ``data``; anything short or malformed raises ``error(message)``."""

    def __init__(self, data: bytes, what: str, error: Callable[[str], Exception]) -> None:
        self.data = data
        self.position = 0
        self.what = what
        self._error = error

    def fail(self, reason: str) -> Exception:
        """The caller's error type, naming the record part and the byte position."""
        return self._error(f"corrupt {self.what} at byte {self.position}: {reason}")

    def _take(self, count: int) -> bytes:
        if count > len(self.data) - self.position:
            raise self.fail(f"needs {count} more bytes, has {len(self.data) - self.position}")
        chunk = self.data[self.position : self.position + count]
        self.position += count
        return chunk

    def int8(self) -> int:
        """One signed byte."""
        return int(_INT8.unpack(self._take(1))[0])

    def int16(self) -> int:
        """A signed 16-bit integer."""
        return int(_INT16.unpack(self._take(2))[0])

    def int32(self) -> int:
        """A signed 32-bit integer."""
        return int(_INT32.unpack(self._take(4))[0])

    def int64(self) -> int:
        """A signed 64-bit integer."""
        return int(_INT64.unpack(self._take(8))[0])

    def count(self) -> int:
        """An array length; each element takes at least one byte, which bounds it by what is left."""
        value = self.int32()
        if not 0 <= value <= len(self.data) - self.position:
            raise self.fail(f"array length {value} is impossible")
        return value

    def nullable_string(self) -> str | None:
        """An int32-length UTF-8 string, or None for length -1."""
        length = self.int32()
        if length == -1:
            return None
        if length < 0:
            raise self.fail(f"string length {length} is negative")
        try:
            return self._take(length).decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(f"string is not UTF-8 ({error.reason})") from None

    def string(self) -> str:
        """A string that must not be null."""
        value = self.nullable_string()
        if value is None:
            raise self.fail("required string is null")
        return value

    def version(self, expected: int) -> None:
        """An int16 version that must equal ``expected``."""
        found = self.int16()
        if found != expected:
            raise self.fail(f"version {found} is not supported (expected {expected})")

    def done(self) -> None:
        """Nothing may follow the last field."""
        if self.position != len(self.data):
            raise self.fail(f"{len(self.data) - self.position} trailing bytes")
