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
slices of the frame. A non-flexible version is written out whole, nested structs, arrays and
strings inlined (``schema_inline``), so a Produce request or a Fetch response is one Python call
each way and costs a few steps per partition and nothing per record.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from typing import Annotated, Any, Union

from mqbroker.protocols.exceptions import LocalProtocolError, MalformedMessageError
from mqbroker.protocols.flexible import TaggedField, read_tags, tag_decoder, tags_encoder
from mqbroker.protocols.schema_inline import Kind, Shape, Step, StructPlan, inline_struct
from mqbroker.protocols.wire_values import (
    MessageCodec,
    array_codec,
    bytes_codec,
    fixed_codec,
    map_codec,
    nullable_struct_codec,
    string_codec,
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

def _split_optional(annotation: Any) -> tuple[Any, bool]:
    """``T | None`` -> (T, True); anything else -> (annotation, False)."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        members = [member for member in typing.get_args(annotation) if member is not type(None)]
        if len(members) == 1 and len(typing.get_args(annotation)) == 2:
            return members[0], True
    return annotation, False


def _compile_annotation(annotation: Any, version: int = 0, flexible: bool = False, nullable_allowed: bool = True,
                        inline: bool = True) -> MessageCodec:
    """The codec of one field annotation in ``version`` (see the module docstring for the table).

    ``nullable_allowed`` is False in versions before a ``T | None`` field's ``nullable_since``;
    ``inline`` is ``compile_message``'s, for the structs inside.
    """
    inner, optional = _split_optional(annotation)
    nullable = optional and nullable_allowed
    if typing.get_origin(inner) is Annotated:
        marker = inner.__metadata__[0]
        if isinstance(marker, _FixedWidth):
            assert not optional, f"fixed-width fields are never null: {annotation!r}"
            return fixed_codec(marker.format)
        assert isinstance(marker, _RawRecords), f"unknown wire marker {marker!r}"
        return bytes_codec(nullable, copy=False, compact=flexible)
    if inner is bool and not optional:
        return fixed_codec("?")
    if inner is str:
        return string_codec(nullable, flexible)
    if inner is bytes:
        return bytes_codec(nullable, copy=True, compact=flexible)
    origin = typing.get_origin(inner)
    if origin is tuple:
        element, ellipsis = typing.get_args(inner)
        assert ellipsis is Ellipsis, f"only homogeneous tuples travel on the wire, not {inner!r}"
        return array_codec(_compile_annotation(element, version, flexible, inline=inline), nullable, flexible)
    if origin is dict and not optional:
        assert not flexible, "maps do not travel in flexible versions"
        key, value = typing.get_args(inner)
        return map_codec(_compile_annotation(key), _compile_annotation(value))
    assert dataclasses.is_dataclass(inner), f"no wire form for {annotation!r}"
    struct_codec = compile_message(inner, version, flexible, inline)
    return nullable_struct_codec(struct_codec) if nullable else struct_codec


_COMPILED: dict[tuple[type, int, bool, bool], MessageCodec] = {}


def compile_message(cls: type, version: int = 0, flexible: bool = False, inline: bool = True) -> MessageCodec:
    """The codec of a message dataclass in ``version`` (compiled on first use, then cached).

    A non-flexible version is written out whole (``schema_inline``): one function each way, with the
    structs, arrays and strings inside inlined. ``inline=False`` gives the step-wise codec, which
    calls a value codec (``wire_values``) per variable field: the form of flexible versions, and
    the reference the written-out codec is tested against.
    """
    inline = inline and not flexible
    key = (cls, version, flexible, inline)
    codec = _COMPILED.get(key)
    if codec is None:
        plan = _plan(cls, version, flexible, inline)
        codec = inline_struct(cls, plan, _inline_plan) if inline else _compile_struct(cls, plan, flexible)
        _COMPILED[key] = codec
    return codec


def _default_of(field: dataclasses.Field[Any]) -> Any:
    """The value a field holds in versions that do not carry it (defaults are immutable: shared)."""
    if field.default is not dataclasses.MISSING:
        return field.default
    assert field.default_factory is not dataclasses.MISSING, f"field {field.name} missing from some versions needs a default"
    return field.default_factory()


def _plan(cls: type, version: int, flexible: bool, inline: bool) -> StructPlan:
    """The fields of ``cls`` in ``version``: fixed-width runs and variable steps, tagged fields, and
    the defaults of the fields that do not travel."""
    hints = typing.get_type_hints(cls, include_extras=True)
    plan = StructPlan(version=version, flexible=flexible)
    steps = plan.steps
    for field in dataclasses.fields(cls):
        versions: WireVersions = field.metadata.get(_WIRE_KEY, _ALWAYS)
        name = field.name
        if not versions.present(version, flexible):
            plan.absent[name] = _default_of(field)
            continue
        nullable_allowed = versions.nullable_since is None or version >= versions.nullable_since
        field_codec = _compile_annotation(hints[name], version, flexible, nullable_allowed, inline)
        if versions.tag is not None:
            plan.tagged.append(TaggedField(versions.tag, name, field_codec, _default_of(field)))
        elif field_codec.fixed_format and steps and steps[-1].fixed_format:
            previous = steps.pop()
            steps.append(Step(previous.names + (name,), previous.fixed_format + field_codec.fixed_format, field_codec))
        else:
            steps.append(Step((name,), field_codec.fixed_format, field_codec, _describe(hints[name], version, nullable_allowed)))
    return plan


def _inline_plan(cls: type, version: int) -> StructPlan:
    """The plan of a struct inside one being written out (``inline_struct`` recurses with it)."""
    return _plan(cls, version, False, True)


def _describe(annotation: Any, version: int, nullable_allowed: bool = True) -> Shape:
    """What ``schema_inline`` needs to write out a variable field of ``annotation``."""
    inner, optional = _split_optional(annotation)
    nullable = optional and nullable_allowed
    if typing.get_origin(inner) is Annotated:
        if isinstance(inner.__metadata__[0], _RawRecords):
            return Shape(kind=Kind.RECORDS, nullable=nullable)
        return Shape(kind=Kind.OTHER, nullable=nullable)
    if inner is str:
        return Shape(kind=Kind.STRING, nullable=nullable)
    if inner is bytes:
        return Shape(kind=Kind.BYTES, nullable=nullable)
    if typing.get_origin(inner) is tuple:
        element = typing.get_args(inner)[0]
        return Shape(kind=Kind.ARRAY, nullable=nullable, element=_describe(element, version),
                     element_codec=_compile_annotation(element, version))
    if dataclasses.is_dataclass(inner):
        return Shape(kind=Kind.STRUCT, nullable=nullable, struct=inner)
    return Shape(kind=Kind.OTHER, nullable=nullable)


def _compile_struct(cls: type, plan: StructPlan, flexible: bool) -> MessageCodec:
    """Generate the step-wise encode and decode functions of ``cls`` in one version.

    The two functions are generated as Python source, one statement per step, the way
    ``dataclasses`` builds ``__init__``: a run of fixed-width fields is one ``struct`` call, a
    variable field one call of its value codec.
    """
    steps, tagged, absent = plan.steps, plan.tagged, plan.absent
    namespace: dict[str, Any] = {"_message_class": cls, "read_tags": read_tags}
    encode_lines = ["def encode(message, parts):", "    append = parts.append"]
    decode_lines = ["def decode(buffer, position):"]
    for index, step in enumerate(steps):
        local_names = [f"field_{name}" for name in step.names]
        if step.fixed_format:
            packer = struct.Struct(">" + step.fixed_format)
            namespace[f"_pack_{index}"], namespace[f"_unpack_{index}"] = packer.pack, packer.unpack_from
            encode_lines.append(f"    append(_pack_{index}({', '.join(f'message.{name}' for name in step.names)}))")
            decode_lines.append(f"    {', '.join(local_names)}, = _unpack_{index}(buffer, position)")
            decode_lines.append(f"    position += {packer.size}")
        else:
            namespace[f"_encode_{index}"], namespace[f"_decode_{index}"] = step.codec.encode, step.codec.decode
            encode_lines.append(f"    _encode_{index}(message.{step.names[0]}, parts)")
            decode_lines.append(f"    {local_names[0]}, position = _decode_{index}(buffer, position)")
    if flexible:
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
    return MessageCodec(encode=namespace["encode"], decode=namespace["decode"], size_bytes_min=plan.size_bytes_min())


#: What a generated decoder raises for bytes that end too soon or a string that is not UTF-8.
DECODING_ERRORS = (struct.error, UnicodeDecodeError)
#: What a generated encoder raises for a value the wire cannot carry (an integer out of range).
ENCODING_ERRORS = (struct.error, OverflowError)


def malformed(error: Exception, what: str) -> MalformedMessageError:
    """The typed error for one of ``DECODING_ERRORS`` raised decoding ``what``."""
    if isinstance(error, UnicodeDecodeError):
        return MalformedMessageError(f"{what} holds a string that is not UTF-8: {error.reason}")
    return MalformedMessageError(f"{what} is truncated: {error}")


def trailing(what: str, extra_bytes: int) -> MalformedMessageError:
    """The error for bytes left after a value that must fill its buffer."""
    return MalformedMessageError(f"{what} has {extra_bytes} trailing bytes")


def decode_value(codec: MessageCodec, buffer: memoryview, position: int, what: str) -> tuple[Any, int]:
    """Decode one value at ``position``; return it and the position after it.

    Raises ``MalformedMessageError`` for truncation or invalid UTF-8, so a caller sees one
    error type whatever the garbage.
    """
    try:
        return codec.decode(buffer, position)
    except DECODING_ERRORS as error:
        raise malformed(error, what) from None


def decode_exactly(codec: MessageCodec, buffer: memoryview, position: int, what: str) -> Any:
    """Decode one value that must end exactly at the end of ``buffer`` (no trailing bytes)."""
    try:
        value, end = codec.decode(buffer, position)
    except DECODING_ERRORS as error:
        raise malformed(error, what) from None
    if end != len(buffer):
        raise trailing(what, len(buffer) - end)
    return value


def unencodable(value: Any, error: Exception) -> LocalProtocolError:
    """The typed error for one of ``ENCODING_ERRORS`` raised encoding ``value``."""
    return LocalProtocolError(f"cannot encode {type(value).__name__}: {error}")


def encode_into(codec: MessageCodec, value: Any, parts: list[bytes | memoryview]) -> None:
    """Encode ``value`` into ``parts``; a value the wire cannot carry raises ``LocalProtocolError``."""
    try:
        codec.encode(value, parts)
    except ENCODING_ERRORS as error:
        raise unencodable(value, error) from None
