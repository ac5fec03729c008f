"""Schema-driven binary encoding of frozen dataclasses: the message types are the spec.

Shared by the native and the Kafka codecs. A message is a
``@dataclass(frozen=True, slots=True, kw_only=True)`` whose field annotations say how each
field travels (Kafka's message specifications, written as Python types):

=====================================  ==========================================================
annotation                             wire form (all integers big-endian)
=====================================  ==========================================================
``Int8`` ``Int16`` ``Int32`` ``Int64``  signed integer of that width (``UInt16`` unsigned,
                                       ``Float64`` IEEE double)
``bool``                               int8, 0 = false, anything else = true
``Uuid``                               16 raw bytes
``str`` / ``str | None``               int16 byte length (-1 = null) + UTF-8
``bytes`` / ``bytes | None``           int32 length (-1 = null) + raw bytes
``Records`` (``| None``)               int32 length + RecordBatch v2 bytes, never parsed here
``tuple[T, ...]`` (``| None``)         int32 count (-1 = null) + each element
``dict[K, V]``                         int32 count + (key, value) pairs (not in flexible versions)
another message dataclass              its fields in declaration order (``| None``: an int8
                                       marker first, -1 = null, 1 = present)
=====================================  ==========================================================

**Versions.** A message is compiled for one ``version`` and says per field, with
``wire(since=, until=)``, in which versions the field travels; in other versions it keeps its
default. ``wire(nullable_since=)`` narrows where a ``T | None`` field may be null. In
*flexible* versions (Kafka's KIP-482) lengths and counts become unsigned varints of the value
plus one (0 = null: "compact" strings, bytes and arrays), and every struct ends with a
tagged-field section: a varint count, then per field a varint tag, a varint size and the
value. ``wire(tag=N)`` puts a field there; it is sent only when it differs from its default,
and tags a reader does not know are skipped.

``compile_message(cls, version, flexible)`` turns a dataclass into a ``MessageCodec`` once per
version, generating straight-line encode and decode functions. Runs of adjacent fixed-width
fields are packed with a single ``struct``, and ``Records`` decode as zero-copy ``memoryview``
slices of the frame, so a Produce request or a Fetch response costs a few steps per partition
and nothing per record.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, Union

from mqbroker.protocols.exceptions import LocalProtocolError, MalformedMessageError
from mqbroker.protocols.flexible import (
    TaggedField,
    decode_uvarint,
    encode_uvarint,
    read_tags,
    tag_decoder,
    tags_encoder,
    truncated,
)


@dataclasses.dataclass(frozen=True, slots=True)
class _FixedWidth:
    """Annotation marker: a fixed-width value with this ``struct`` format."""

    format: str


@dataclasses.dataclass(frozen=True, slots=True)
class _RawRecords:
    """Annotation marker: record-batch bytes, decoded without a copy."""


@dataclasses.dataclass(frozen=True, slots=True)
class WireVersions:
    """In which versions a field travels, where it may be null, and its tag if it is a tagged field."""

    since: int = 0
    until: int | None = None
    nullable_since: int | None = None
    tag: int | None = None

    def present(self, version: int, flexible: bool) -> bool:
        """Whether the field is on the wire in ``version``."""
        if version < self.since or (self.until is not None and version > self.until):
            return False
        return self.tag is None or flexible


_WIRE_KEY = "wire"
_ALWAYS = WireVersions()


def wire(*, since: int = 0, until: int | None = None, nullable_since: int | None = None, tag: int | None = None,
         default: Any = dataclasses.MISSING, default_factory: Any = dataclasses.MISSING) -> Any:
    """A field that travels only in versions ``since``..``until`` (or as tagged field ``tag``).

    Outside those versions it holds ``default`` (or ``default_factory()``); a field missing from
    some versions, or tagged, needs one.
    """
    versions = WireVersions(since=since, until=until, nullable_since=nullable_since, tag=tag)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={_WIRE_KEY: versions})


#: The decorator of every wire type: frozen, slotted, keyword-only.
message = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)

Int8 = Annotated[int, _FixedWidth("b")]
Int16 = Annotated[int, _FixedWidth("h")]
Int32 = Annotated[int, _FixedWidth("i")]
Int64 = Annotated[int, _FixedWidth("q")]
UInt16 = Annotated[int, _FixedWidth("H")]
Float64 = Annotated[float, _FixedWidth("d")]
#: A 16-byte identifier (Kafka's topic ids); ``ZERO_UUID`` means none.
Uuid = Annotated[bytes, _FixedWidth("16s")]
ZERO_UUID = bytes(16)
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
    """The compiled encoder and decoder of one wire type (in one version)."""

    encode: Encoder
    decode: Decoder
    #: Fewest bytes one value occupies; bounds array counts a peer may announce.
    size_bytes_min: int
    #: ``struct`` format when the type is a fixed-width scalar, else empty.
    fixed_format: str = ""


# -- scalar and sized codecs --------------------------------------------------------------------


def _fixed(format_character: str) -> MessageCodec:
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


def _string(nullable: bool, compact: bool = False) -> MessageCodec:
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


def _bytes(nullable: bool, copy: bool, compact: bool = False) -> MessageCodec:
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


def _array(element: MessageCodec, nullable: bool, compact: bool = False) -> MessageCodec:
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
        (count,) = _INT32.unpack_from(buffer, position)
        count = _checked_count(count, position, buffer, position + 4, False, pair_bytes_min)
        position += 4
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


def _compile_annotation(annotation: Any, version: int = 0, flexible: bool = False, nullable_allowed: bool = True) -> MessageCodec:
    """The codec of one field annotation in ``version`` (see the module docstring for the table).

    ``nullable_allowed`` is False in versions before a ``T | None`` field's ``nullable_since``.
    """
    inner, optional = _split_optional(annotation)
    nullable = optional and nullable_allowed
    if typing.get_origin(inner) is Annotated:
        marker = inner.__metadata__[0]
        if isinstance(marker, _FixedWidth):
            assert not optional, f"fixed-width fields are never null: {annotation!r}"
            return _fixed(marker.format)
        assert isinstance(marker, _RawRecords), f"unknown wire marker {marker!r}"
        return _bytes(nullable, copy=False, compact=flexible)
    if inner is bool and not optional:
        return _fixed("?")
    if inner is str:
        return _string(nullable, flexible)
    if inner is bytes:
        return _bytes(nullable, copy=True, compact=flexible)
    origin = typing.get_origin(inner)
    if origin is tuple:
        element, ellipsis = typing.get_args(inner)
        assert ellipsis is Ellipsis, f"only homogeneous tuples travel on the wire, not {inner!r}"
        return _array(_compile_annotation(element, version, flexible), nullable, flexible)
    if origin is dict and not optional:
        assert not flexible, "maps do not travel in flexible versions"
        key, value = typing.get_args(inner)
        return _map(_compile_annotation(key), _compile_annotation(value))
    assert dataclasses.is_dataclass(inner), f"no wire form for {annotation!r}"
    struct_codec = compile_message(inner, version, flexible)
    return _nullable_struct(struct_codec) if nullable else struct_codec


_NULL_STRUCT, _PRESENT_STRUCT = b"\xff", b"\x01"


def _nullable_struct(struct_codec: MessageCodec) -> MessageCodec:
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


_COMPILED: dict[tuple[type, int, bool], MessageCodec] = {}


def compile_message(cls: type, version: int = 0, flexible: bool = False) -> MessageCodec:
    """The codec of a message dataclass in ``version`` (compiled on first use, then cached)."""
    key = (cls, version, flexible)
    codec = _COMPILED.get(key)
    if codec is None:
        codec = _compile_struct(cls, version, flexible)
        _COMPILED[key] = codec
    return codec


@dataclasses.dataclass(frozen=True, slots=True)
class _Step:
    """One step of a struct: a run of adjacent fixed-width fields, or one variable field."""

    names: tuple[str, ...]
    fixed_format: str
    codec: MessageCodec


def _default_of(field: dataclasses.Field[Any]) -> Any:
    """The value a field holds in versions that do not carry it (defaults are immutable: shared)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    assert field.default_factory is not dataclasses.MISSING, f"field {field.name} missing from some versions needs a default"
    return field.default_factory()


def _plan(cls: type, version: int, flexible: bool) -> tuple[list[_Step], list[TaggedField], dict[str, Any]]:
    """The fields of ``cls`` in ``version``: fixed-width runs and variable steps, tagged fields, and
    the defaults of the fields that do not travel."""
    hints = typing.get_type_hints(cls, include_extras=True)
    steps: list[_Step] = []
    tagged: list[TaggedField] = []
    absent: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        versions: WireVersions = field.metadata.get(_WIRE_KEY, _ALWAYS)
        name = field.name
        if not versions.present(version, flexible):
            absent[name] = _default_of(field)
            continue
        nullable_allowed = versions.nullable_since is None or version >= versions.nullable_since
        field_codec = _compile_annotation(hints[name], version, flexible, nullable_allowed)
        if versions.tag is not None:
            tagged.append(TaggedField(versions.tag, name, field_codec, _default_of(field)))
        elif field_codec.fixed_format and steps and steps[-1].fixed_format:
            previous = steps.pop()
            steps.append(_Step(previous.names + (name,), previous.fixed_format + field_codec.fixed_format, field_codec))
        else:
            steps.append(_Step((name,), field_codec.fixed_format, field_codec))
    return steps, tagged, absent


def _compile_struct(cls: type, version: int, flexible: bool) -> MessageCodec:
    """Generate the encode and decode functions of ``cls`` in one version.

    The two functions are generated as Python source, one statement per step, the way
    ``dataclasses`` builds ``__init__``: a Produce request or Fetch response is on every
    message's path, and straight-line code costs a fraction of walking step closures.
    """
    steps, tagged, absent = _plan(cls, version, flexible)
    namespace: dict[str, Any] = {"_message_class": cls, "read_tags": read_tags}
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
    if flexible:
        size_bytes_min += 1  # the tagged-field count
        if tagged:
            namespace["_encode_tags"] = tags_encoder(tagged)
            encode_lines.append("    _encode_tags(message, parts)")
        else:
            encode_lines.append("    append(b'\\x00')")
        decode_lines.append("    tags, position = read_tags(buffer, position)")
        for field in tagged:
            namespace[f"_tag_{field.name}"], namespace[f"_default_{field.name}"] = tag_decoder(field), field.default
            decode_lines.append(f"    field_{field.name} = _tag_{field.name}(tags[{field.tag}]) if {field.tag} in tags "
                                f"else _default_{field.name}")
    for name, default in absent.items():
        namespace[f"_default_{name}"] = default
        decode_lines.append(f"    field_{name} = _default_{name}")
    arguments = ", ".join(f"{field.name}=field_{field.name}" for field in dataclasses.fields(cls))
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
