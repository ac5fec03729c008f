"""The codecs of single values as closures: scalars, strings, bytes, arrays, maps, nullable structs.

The building blocks of ``schema``: a struct's generated code calls them for the fields it does not
write out itself (maps, flexible versions' compact forms, tagged fields), and the step-wise codec
(``compile_message(..., inline=False)``) is made of them alone.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from mqbroker.protocols.exceptions import LocalProtocolError, MalformedMessageError
from mqbroker.protocols.flexible import decode_uvarint, encode_uvarint, truncated

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

#: Appends encoded pieces of ``value`` to ``parts`` (joined once at the end, so big byte
#: fields are copied once).
Encoder = Callable[[Any, list[bytes | memoryview]], None]
#: Reads one value at ``position`` of ``buffer``; returns it and the position after it.
Decoder = Callable[[memoryview, int], tuple[Any, int]]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MessageCodec:
    """The compiled encoder and decoder of one wire type (in one version)."""

    encode: Encoder
    decode: Decoder
    #: Fewest bytes one value occupies; bounds array counts a peer may announce.
    size_bytes_min: int
    #: ``struct`` format when the type is a fixed-width scalar, else empty.
    fixed_format: str = ""


def fixed_codec(format_character: str) -> MessageCodec:
    """A fixed-width scalar (used on its own only inside arrays, maps and tagged fields)."""
    packer = struct.Struct(">" + format_character)

    def encode(value: Any, parts: list[bytes | memoryview]) -> None:
        parts.append(packer.pack(value))

    def decode(buffer: memoryview, position: int) -> tuple[Any, int]:
        return packer.unpack_from(buffer, position)[0], position + packer.size

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=packer.size, fixed_format=format_character)


def _length_prefix(width: int, compact: bool) -> tuple[Callable[[int], bytes], Callable[[memoryview, int], tuple[int, int]]]:
    """Writer and reader of a length or count: int16/int32 with -1 = null, or a compact uvarint (n + 1)."""
    if compact:
        def read_compact(buffer: memoryview, position: int) -> tuple[int, int]:
            value, position = decode_uvarint(buffer, position)
            return value - 1, position

        return (lambda length: encode_uvarint(length + 1)), read_compact
    packer = _INT16 if width == 2 else _INT32

    def read_fixed(buffer: memoryview, position: int) -> tuple[int, int]:
        return packer.unpack_from(buffer, position)[0], position + width

    return packer.pack, read_fixed


def string_codec(nullable: bool, compact: bool = False) -> MessageCodec:
    """A length (-1 = null) followed by UTF-8 text."""
    write_length, read_length = _length_prefix(2, compact)
    null = write_length(-1)

    def encode(value: str | None, parts: list[bytes | memoryview]) -> None:
        if value is None:
            if not nullable:
                raise LocalProtocolError("a non-nullable string field holds None")
            parts.append(null)
            return
        data = value.encode("utf-8")
        parts.append(write_length(len(data)))
        parts.append(data)

    def decode(buffer: memoryview, position: int) -> tuple[str | None, int]:
        start = position
        length, position = read_length(buffer, position)
        if length < 0:
            if length == -1 and nullable:
                return None, position
            raise MalformedMessageError(f"string length {length} at byte {start} is not allowed here")
        end = position + length
        if end > len(buffer):
            raise truncated("string", position)
        return str(buffer[position:end], "utf-8"), end

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=1 if compact else 2)


def bytes_codec(nullable: bool, copy: bool, compact: bool = False) -> MessageCodec:
    """A length (-1 = null) followed by raw bytes; ``copy=False`` yields a memoryview."""
    write_length, read_length = _length_prefix(4, compact)
    null = write_length(-1)

    def encode(value: bytes | memoryview | None, parts: list[bytes | memoryview]) -> None:
        if value is None:
            if not nullable:
                raise LocalProtocolError("a non-nullable bytes field holds None")
            parts.append(null)
            return
        parts.append(write_length(len(value)))
        parts.append(value)

    def decode(buffer: memoryview, position: int) -> tuple[bytes | memoryview | None, int]:
        start = position
        length, position = read_length(buffer, position)
        if length < 0:
            if length == -1 and nullable:
                return None, position
            raise MalformedMessageError(f"bytes length {length} at byte {start} is not allowed here")
        end = position + length
        if end > len(buffer):
            raise truncated("bytes", position)
        view = buffer[position:end]
        return (view.tobytes() if copy else view), end

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=1 if compact else 4)


def _checked_count(count: int, start: int, buffer: memoryview, position: int, nullable: bool,
                   element_bytes_min: int) -> int:
    """Validate an array or map count just read; -1 means null (returned as -1 when allowed)."""
    if count < 0:
        if count == -1 and nullable:
            return -1
        raise MalformedMessageError(f"array count {count} at byte {start} is not allowed here")
    # Every element takes at least one byte, so a count larger than the rest of the frame is a
    # lie; refusing it here keeps a peer from making us loop over billions of phantom elements.
    if count * element_bytes_min > len(buffer) - position:
        raise truncated(f"array of {count} elements", position)
    return count


def array_codec(element: MessageCodec, nullable: bool, compact: bool = False) -> MessageCodec:
    """A count (-1 = null) followed by the elements; decodes to a tuple."""
    assert element.size_bytes_min > 0, "array elements must occupy at least one byte"
    element_encode, element_decode = element.encode, element.decode
    write_count, read_count = _length_prefix(4, compact)
    null = write_count(-1)

    def encode(value: tuple[Any, ...] | None, parts: list[bytes | memoryview]) -> None:
        if value is None:
            if not nullable:
                raise LocalProtocolError("a non-nullable array field holds None")
            parts.append(null)
            return
        parts.append(write_count(len(value)))
        if element.fixed_format:
            parts.append(struct.pack(f">{len(value)}{element.fixed_format}", *value))
            return
        for item in value:
            element_encode(item, parts)

    def decode(buffer: memoryview, position: int) -> tuple[tuple[Any, ...] | None, int]:
        start = position
        count, position = read_count(buffer, position)
        count = _checked_count(count, start, buffer, position, nullable, element.size_bytes_min)
        if count == -1:
            return None, position
        if element.fixed_format:
            values = struct.unpack_from(f">{count}{element.fixed_format}", buffer, position)
            return values, position + count * element.size_bytes_min
        items = []
        for _ in range(count):
            item, position = element_decode(buffer, position)
            items.append(item)
        return tuple(items), position

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=1 if compact else 4)


def map_codec(key: MessageCodec, value: MessageCodec) -> MessageCodec:
    """int32 count followed by (key, value) pairs; decodes to a dict."""
    pair_bytes_min = key.size_bytes_min + value.size_bytes_min
    assert pair_bytes_min > 0, "map entries must occupy at least one byte"

    def encode(mapping: dict[Any, Any], parts: list[bytes | memoryview]) -> None:
        parts.append(_INT32.pack(len(mapping)))
        for item_key, item_value in mapping.items():
            key.encode(item_key, parts)
            value.encode(item_value, parts)

    def decode(buffer: memoryview, position: int) -> tuple[dict[Any, Any], int]:
        (count,) = _INT32.unpack_from(buffer, position)
        count = _checked_count(count, position, buffer, position + 4, False, pair_bytes_min)
        position += 4
        mapping = {}
        for _ in range(count):
            item_key, position = key.decode(buffer, position)
            mapping[item_key], position = value.decode(buffer, position)
        return mapping, position

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=4)


_NULL_STRUCT, _PRESENT_STRUCT = b"\xff", b"\x01"


def nullable_struct_codec(struct_codec: MessageCodec) -> MessageCodec:
    """A struct that may be null: an int8 marker (negative: null), then the struct when present."""

    def encode(value: Any, parts: list[bytes | memoryview]) -> None:
        if value is None:
            parts.append(_NULL_STRUCT)
        else:
            parts.append(_PRESENT_STRUCT)
            struct_codec.encode(value, parts)

    def decode(buffer: memoryview, position: int) -> tuple[Any, int]:
        (marker,) = struct.unpack_from(">b", buffer, position)
        if marker < 0:
            return None, position + 1
        return struct_codec.decode(buffer, position + 1)

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=1)
