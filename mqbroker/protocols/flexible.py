"""The pieces of Kafka's flexible versions (KIP-482): unsigned varints and tagged-field sections.

Pure helpers of the codec engine (``schema``): a flexible version writes lengths and counts as
unsigned varints of the value plus one, and ends every struct with a tagged-field section (a
varint count, then per field a varint tag, a varint size and the value).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from mqbroker.protocols.exceptions import LocalProtocolError, MalformedMessageError


def truncated(what: str, position: int) -> MalformedMessageError:
    """The error for a length that runs past the end of the frame."""
    return MalformedMessageError(f"{what} at byte {position} runs past the end of the frame")



_SMALL_UVARINTS = tuple(bytes((value,)) for value in range(128))


def encode_uvarint(value: int) -> bytes:
    """``value`` (0 <= value < 2**32) as an unsigned varint: 7 bits a byte, low bits first."""
    if value < 128:
        return _SMALL_UVARINTS[value]
    if not 0 <= value < 2**32:
        raise LocalProtocolError(f"{value} does not fit an unsigned varint")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_uvarint(buffer: memoryview, position: int) -> tuple[int, int]:
    """Read an unsigned varint of at most 5 bytes (32 bits); return it and the position after it."""
    end = len(buffer)
    if position >= end:
        raise truncated("varint", position)
    byte = buffer[position]
    if byte < 0x80:
        return byte, position + 1
    value = byte & 0x7F
    shift = 7
    start = position
    position += 1
    while True:
        if position >= end:
            raise truncated("varint", start)
        byte = buffer[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise MalformedMessageError(f"varint at byte {start} is longer than 5 bytes")


@dataclasses.dataclass(frozen=True, slots=True)
class TaggedField:
    """A field of a struct's tagged-field section (flexible versions only)."""

    tag: int
    name: str
    #: The value's ``MessageCodec``.
    codec: Any
    default: Any


def read_tags(buffer: memoryview, position: int) -> tuple[dict[int, memoryview], int]:
    """A tagged-field section: each tag's value bytes (unknown tags are the caller's to ignore)."""
    start = position
    count, position = decode_uvarint(buffer, position)
    if count * 2 > len(buffer) - position:  # a tag and a size take a byte each at least
        raise truncated(f"tagged-field section of {count} fields", start)
    tags: dict[int, memoryview] = {}
    for _ in range(count):
        tag, position = decode_uvarint(buffer, position)
        size, position = decode_uvarint(buffer, position)
        end = position + size
        if end > len(buffer):
            raise truncated(f"tagged field {tag}", position)
        tags[tag] = buffer[position:end]
        position = end
    return tags, position


def tag_decoder(field: TaggedField) -> Callable[[memoryview], Any]:
    """Decodes one tagged field's value, which must fill its announced size exactly."""
    decode = field.codec.decode

    def decode_tag(view: memoryview) -> Any:
        value, end = decode(view, 0)
        if end != len(view):
            raise MalformedMessageError(f"tagged field {field.name} has {len(view) - end} bytes past its value")
        return value

    return decode_tag


def tags_encoder(tagged: list[TaggedField]) -> Callable[[Any, list[bytes | memoryview]], None]:
    """Writes a struct's tagged-field section: the fields that differ from their defaults, by tag."""
    ordered = sorted(tagged, key=lambda field: field.tag)

    def encode_tags(message: Any, parts: list[bytes | memoryview]) -> None:
        sent = [(field, getattr(message, field.name)) for field in ordered]
        sent = [(field, value) for field, value in sent if value != field.default]
        parts.append(encode_uvarint(len(sent)))
        for field, value in sent:
            value_parts: list[bytes | memoryview] = []
            field.codec.encode(value, value_parts)
            parts.append(encode_uvarint(field.tag))
            parts.append(encode_uvarint(sum(map(len, value_parts))))
            parts.extend(value_parts)

    return encode_tags
