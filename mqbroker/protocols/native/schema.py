"""Schema-driven binary encoding of frozen dataclasses: the message types are the spec.

A message is a ``@dataclass(frozen=True, slots=True, kw_only=True)`` whose field annotations
say how each field travels (Kafka's JSON message specs, written as Python types):

=====================================  ==========================================================
annotation                             wire form (all integers big-endian)
=====================================  ==========================================================
``Int8`` ``Int16`` ``Int32`` ``Int64``  signed integer of that width
``bool``                               int8, 0 = false, anything else = true
``str`` / ``str | None``               int16 byte length (-1 = null) + UTF-8
``bytes`` / ``bytes | None``           int32 length (-1 = null) + raw bytes
``Records``                            int32 length + RecordBatch v2 bytes, never parsed here
``tuple[T, ...]`` (``| None``)         int32 count (-1 = null) + each element
``dict[K, V]``                         int32 count + (key, value) pairs
another message dataclass              its fields in declaration order
=====================================  ==========================================================

``compile_message(cls)`` turns a dataclass into a ``MessageCodec`` once, generating straight-line
encode and decode functions. Runs of adjacent fixed-width fields are packed with a single ``struct``, and
``Records`` decode as zero-copy ``memoryview`` slices of the frame, so a Produce request or a
Fetch response costs a few steps per partition and nothing per record.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Union

from mqbroker.protocols.native.exceptions import LocalProtocolError, MalformedMessageError


@dataclasses.dataclass(frozen=True, slots=True)
class _FixedWidth:
    """Annotation marker: a fixed-width integer with this ``struct`` format character."""

    format: str


@dataclasses.dataclass(frozen=True, slots=True)
class _RawRecords:
    """Annotation marker: record-batch bytes, decoded without a copy."""


#: The decorator of every wire type: frozen, slotted, keyword-only.
message = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)

Int8 = Annotated[int, _FixedWidth("b")]
Int16 = Annotated[int, _FixedWidth("h")]
Int32 = Annotated[int, _FixedWidth("i")]
Int64 = Annotated[int, _FixedWidth("q")]
#: Concatenated RecordBatch v2 bytes; a decoded value is a read-only ``memoryview`` of the frame.
Records = Annotated[bytes | memoryview, _RawRecords()]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

#: Appends encoded pieces of ``value`` to ``parts`` (joined once at the end, so big byte
#: fields are copied once).
Encoder = Callable[[Any, list[bytes | memoryview]], None]
#: Reads one value at ``position`` of ``buffer``; returns it and the position after it.
Decoder = Callable[[memoryview, int], tuple[Any, int]]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class MessageCodec:
    """The compiled encoder and decoder of one wire type."""

    encode: Encoder
    decode: Decoder
    #: Fewest bytes one value occupies; bounds array counts a peer may announce.
    size_bytes_min: int
    #: ``struct`` format character when the type is a fixed-width scalar, else empty.
    fixed_format: str = ""


def _truncated(what: str, position: int) -> MalformedMessageError:
    """The error for a length that runs past the end of the frame."""
    return MalformedMessageError(f"{what} at byte {position} runs past the end of the frame")


def _fixed(format_character: str) -> MessageCodec:
    """A fixed-width scalar (used on its own only inside arrays and maps)."""
    packer = struct.Struct(">" + format_character)

    def encode(value: Any, parts: list[bytes | memoryview]) -> None:
        parts.append(packer.pack(value))

    def decode(buffer: memoryview, position: int) -> tuple[Any, int]:
        return packer.unpack_from(buffer, position)[0], position + packer.size

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=packer.size, fixed_format=format_character)


def _string(nullable: bool) -> MessageCodec:
    """int16 length (-1 = null) followed by UTF-8 text."""

    def encode(value: str | None, parts: list[bytes | memoryview]) -> None:
        if value is None:
            if not nullable:
                raise LocalProtocolError("a non-nullable string field holds None")
            parts.append(_INT16.pack(-1))
            return
        data = value.encode("utf-8")
        parts.append(_INT16.pack(len(data)))
        parts.append(data)

    def decode(buffer: memoryview, position: int) -> tuple[str | None, int]:
        (length,) = _INT16.unpack_from(buffer, position)
        position += 2
        if length < 0:
            if length == -1 and nullable:
                return None, position
            raise MalformedMessageError(f"string length {length} at byte {position - 2} is not allowed here")
        end = position + length
        if end > len(buffer):
            raise _truncated("string", position)
        return str(buffer[position:end], "utf-8"), end

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=2)


def _bytes(nullable: bool, copy: bool) -> MessageCodec:
    """int32 length (-1 = null) followed by raw bytes; ``copy=False`` yields a memoryview."""

    def encode(value: bytes | memoryview | None, parts: list[bytes | memoryview]) -> None:
        if value is None:
            if not nullable:
                raise LocalProtocolError("a non-nullable bytes field holds None")
            parts.append(_INT32.pack(-1))
            return
        parts.append(_INT32.pack(len(value)))
        parts.append(value)

    def decode(buffer: memoryview, position: int) -> tuple[bytes | memoryview | None, int]:
        (length,) = _INT32.unpack_from(buffer, position)
        position += 4
        if length < 0:
            if length == -1 and nullable:
                return None, position
            raise MalformedMessageError(f"bytes length {length} at byte {position - 4} is not allowed here")
        end = position + length
        if end > len(buffer):
            raise _truncated("bytes", position)
        view = buffer[position:end]
        return (view.tobytes() if copy else view), end

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=4)


def _read_count(buffer: memoryview, position: int, nullable: bool, element_bytes_min: int) -> tuple[int, int]:
    """Read an array or map count; -1 means null (returned as -1 when allowed)."""
    (count,) = _INT32.unpack_from(buffer, position)
    position += 4
    if count < 0:
        if count == -1 and nullable:
            return -1, position
        raise MalformedMessageError(f"array count {count} at byte {position - 4} is not allowed here")
    # Every element takes at least one byte, so a count larger than the rest of the frame is a
    # lie; refusing it here keeps a peer from making us loop over billions of phantom elements.
    if count * element_bytes_min > len(buffer) - position:
        raise _truncated(f"array of {count} elements", position)
    return count, position


def _array(element: MessageCodec, nullable: bool) -> MessageCodec:
    """int32 count (-1 = null) followed by the elements; decodes to a tuple."""
    assert element.size_bytes_min > 0, "array elements must occupy at least one byte"
    element_encode, element_decode = element.encode, element.decode

    def encode(value: tuple[Any, ...] | None, parts: list[bytes | memoryview]) -> None:
        if value is None:
            if not nullable:
                raise LocalProtocolError("a non-nullable array field holds None")
            parts.append(_INT32.pack(-1))
            return
        parts.append(_INT32.pack(len(value)))
        if element.fixed_format:
            parts.append(struct.pack(f">{len(value)}{element.fixed_format}", *value))
            return
        for item in value:
            element_encode(item, parts)

    def decode(buffer: memoryview, position: int) -> tuple[tuple[Any, ...] | None, int]:
        count, position = _read_count(buffer, position, nullable, element.size_bytes_min)
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

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=4)


def _map(key: MessageCodec, value: MessageCodec) -> MessageCodec:
    """int32 count followed by (key, value) pairs; decodes to a dict."""
    pair_bytes_min = key.size_bytes_min + value.size_bytes_min
    assert pair_bytes_min > 0, "map entries must occupy at least one byte"

    def encode(mapping: dict[Any, Any], parts: list[bytes | memoryview]) -> None:
        parts.append(_INT32.pack(len(mapping)))
        for item_key, item_value in mapping.items():
            key.encode(item_key, parts)
            value.encode(item_value, parts)

    def decode(buffer: memoryview, position: int) -> tuple[dict[Any, Any], int]:
        count, position = _read_count(buffer, position, False, pair_bytes_min)
        mapping = {}
        for _ in range(count):
            item_key, position = key.decode(buffer, position)
            mapping[item_key], position = value.decode(buffer, position)
        return mapping, position

    return MessageCodec(encode=encode, decode=decode, size_bytes_min=4)


def _split_optional(annotation: Any) -> tuple[Any, bool]:
    """``T | None`` -> (T, True); anything else -> (annotation, False)."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        members = [member for member in typing.get_args(annotation) if member is not type(None)]
        if len(members) == 1 and len(typing.get_args(annotation)) == 2:
            return members[0], True
    return annotation, False


def _compile_annotation(annotation: Any) -> MessageCodec:
    """The codec of one field annotation (see the module docstring for the table)."""
    if typing.get_origin(annotation) is Annotated:
        marker = annotation.__metadata__[0]
        if isinstance(marker, _FixedWidth):
            return _fixed(marker.format)
        assert isinstance(marker, _RawRecords), f"unknown wire marker {marker!r}"
        return _bytes(nullable=False, copy=False)
    inner, nullable = _split_optional(annotation)
    if inner is bool and not nullable:
        return _fixed("?")
    if inner is str:
        return _string(nullable)
    if inner is bytes:
        return _bytes(nullable, copy=True)
    origin = typing.get_origin(inner)
    if origin is tuple:
        element, ellipsis = typing.get_args(inner)
        assert ellipsis is Ellipsis, f"only homogeneous tuples travel on the wire, not {inner!r}"
        return _array(_compile_annotation(element), nullable)
    if origin is dict and not nullable:
        key, value = typing.get_args(inner)
        return _map(_compile_annotation(key), _compile_annotation(value))
    assert dataclasses.is_dataclass(inner) and not nullable, f"no wire form for {annotation!r}"
    return compile_message(inner)


_COMPILED: dict[type, MessageCodec] = {}


def compile_message(cls: type) -> MessageCodec:
    """The codec of a message dataclass (compiled on first use, then cached)."""
    codec = _COMPILED.get(cls)
    if codec is None:
        codec = _compile_struct(cls)
        _COMPILED[cls] = codec
    return codec


@dataclasses.dataclass(frozen=True, slots=True)
class _Step:
    """One step of a struct: a run of adjacent fixed-width fields, or one variable field."""

    names: tuple[str, ...]
    fixed_format: str
    codec: MessageCodec


def _compile_struct(cls: type) -> MessageCodec:
    """Group the fields into fixed-width runs and variable steps; generate encode and decode.

    The two functions are generated as Python source, one statement per step, the way
    ``dataclasses`` builds ``__init__``: a Produce request or Fetch response is on every
    message's path, and straight-line code costs a fraction of walking step closures.
    """
    hints = typing.get_type_hints(cls, include_extras=True)
    names = tuple(field.name for field in dataclasses.fields(cls))
    steps: list[_Step] = []
    for name in names:
        field_codec = _compile_annotation(hints[name])
        if field_codec.fixed_format and steps and steps[-1].fixed_format:
            previous = steps.pop()
            steps.append(_Step(previous.names + (name,), previous.fixed_format + field_codec.fixed_format, field_codec))
        else:
            steps.append(_Step((name,), field_codec.fixed_format, field_codec))
    namespace: dict[str, Any] = {"_message_class": cls}
    encode_lines = ["def encode(message, parts):", "    append = parts.append"]
    decode_lines = ["def decode(buffer, position):"]
    size_bytes_min = 0
    for index, step in enumerate(steps):
        local_names = [f"field_{name}" for name in step.names]
        if step.fixed_format:
            packer = struct.Struct(">" + step.fixed_format)
            namespace[f"_pack_{index}"], namespace[f"_unpack_{index}"] = packer.pack, packer.unpack_from
            encode_lines.append(f"    append(_pack_{index}({', '.join(f'message.{name}' for name in step.names)}))")
            decode_lines.append(f"    {', '.join(local_names)}, = _unpack_{index}(buffer, position)")
            decode_lines.append(f"    position += {packer.size}")
            size_bytes_min += packer.size
        else:
            namespace[f"_encode_{index}"], namespace[f"_decode_{index}"] = step.codec.encode, step.codec.decode
            encode_lines.append(f"    _encode_{index}(message.{step.names[0]}, parts)")
            decode_lines.append(f"    {local_names[0]}, position = _decode_{index}(buffer, position)")
            size_bytes_min += step.codec.size_bytes_min
    arguments = ", ".join(f"{name}=field_{name}" for name in names)
    decode_lines.append(f"    return _message_class({arguments}), position")
    exec("\n".join(encode_lines), namespace)  # noqa: S102 - source built above from field names only
    exec("\n".join(decode_lines), namespace)  # noqa: S102
    return MessageCodec(encode=namespace["encode"], decode=namespace["decode"], size_bytes_min=size_bytes_min)


def decode_value(codec: MessageCodec, buffer: memoryview, position: int, what: str) -> tuple[Any, int]:
    """Decode one value at ``position``; return it and the position after it.

    Raises ``MalformedMessageError`` for truncation or invalid UTF-8, so a caller sees one
    error type whatever the garbage.
    """
    try:
        return codec.decode(buffer, position)
    except struct.error as error:
        raise MalformedMessageError(f"{what} is truncated: {error}") from None
    except UnicodeDecodeError as error:
        raise MalformedMessageError(f"{what} holds a string that is not UTF-8: {error.reason}") from None


def decode_exactly(codec: MessageCodec, buffer: memoryview, position: int, what: str) -> Any:
    """Decode one value that must end exactly at the end of ``buffer`` (no trailing bytes)."""
    value, end = decode_value(codec, buffer, position, what)
    if end != len(buffer):
        raise MalformedMessageError(f"{what} has {len(buffer) - end} trailing bytes")
    return value


def encode_into(codec: MessageCodec, value: Any, parts: list[bytes | memoryview]) -> None:
    """Encode ``value`` into ``parts``; a value the wire cannot carry raises ``LocalProtocolError``."""
    try:
        codec.encode(value, parts)
    except (struct.error, OverflowError) as error:
        raise LocalProtocolError(f"cannot encode {type(value).__name__}: {error}") from None
