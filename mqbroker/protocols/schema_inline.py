"""A struct's codec written out whole: one generated function each way, nested structs inlined.

``schema`` plans a message type (its fixed-width runs, its variable fields and their shapes) and
hands non-flexible versions here. The generated decoder reads a Produce request, with its topics,
partitions, strings and record bytes, in one Python call, where the step-wise codec makes a call
per variable field, per array and per struct; the encoder likewise. Errors and bytes are those of
the step-wise codec (``wire_values``): a hypothesis test holds the two to each other for every
native and Kafka message in every non-flexible version.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from collections.abc import Callable
from typing import Any

from mqbroker.protocols.exceptions import LocalProtocolError, MalformedMessageError
from mqbroker.protocols.flexible import TaggedField, truncated
from mqbroker.protocols.wire_values import MessageCodec


class Kind(enum.Enum):
    """How a variable field travels (fixed-width fields are runs of a plan, never shapes)."""

    STRING = "string"
    BYTES = "bytes"
    RECORDS = "records"
    ARRAY = "array"
    STRUCT = "struct"
    #: Anything else (maps): its value codec is called.
    OTHER = "other"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """A variable field's wire form: what the written-out code does for it."""

    kind: Kind
    nullable: bool
    #: ARRAY: the element's shape and value codec (its fixed format and its fewest bytes).
    element: Shape | None = None
    element_codec: MessageCodec | None = None
    #: STRUCT: the message type.
    struct: type | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One step of a struct: a run of adjacent fixed-width fields, or one variable field."""

    names: tuple[str, ...]
    fixed_format: str
    codec: MessageCodec
    #: A variable field's shape (None for a fixed-width run).
    shape: Shape | None = None


@dataclasses.dataclass(slots=True, kw_only=True)
class StructPlan:
    """A message type in one version: its steps, its tagged fields, the defaults of the fields that do not travel."""

    version: int
    flexible: bool
    steps: list[Step] = dataclasses.field(default_factory=list)
    tagged: list[TaggedField] = dataclasses.field(default_factory=list)
    absent: dict[str, Any] = dataclasses.field(default_factory=dict)

    def size_bytes_min(self) -> int:
        """Fewest bytes a value occupies (the tagged-field count of a flexible version included)."""
        fixed = sum(struct.calcsize(">" + step.fixed_format) for step in self.steps if step.fixed_format)
        variable = sum(step.codec.size_bytes_min for step in self.steps if not step.fixed_format)
        return fixed + variable + (1 if self.flexible else 0)


#: The plan of a struct met inside another, by type and version.
PlanOf = Callable[[type, int], StructPlan]

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def _bad_length(what: str, length: int, start: int) -> MalformedMessageError:
    return MalformedMessageError(f"{what} length {length} at byte {start} is not allowed here")


def _bad_count(count: int, start: int) -> MalformedMessageError:
    return MalformedMessageError(f"array count {count} at byte {start} is not allowed here")


def _truncated_array(count: int, position: int) -> MalformedMessageError:
    return truncated(f"array of {count} elements", position)


#: Names every generated function may use.
_HELPERS: dict[str, Any] = {
    "_bad_length": _bad_length, "_bad_count": _bad_count, "_truncated": truncated,
    "_truncated_array": _truncated_array, "_local_error": LocalProtocolError,
    "_pack_array": struct.pack, "_unpack_array": struct.unpack_from,
    "_unpack_b": _INT8.unpack_from, "_unpack_h": _INT16.unpack_from, "_unpack_i": _INT32.unpack_from,
    "_pack_h": _INT16.pack, "_pack_i": _INT32.pack,
}
#: Width and reader of a length prefix, per kind.
_SIZED = {Kind.STRING: (2, "_unpack_h"), Kind.BYTES: (4, "_unpack_i"), Kind.RECORDS: (4, "_unpack_i")}
#: The null form, per kind: a length or count of -1, or a struct's marker.
_NULL = {Kind.STRING: b"\xff" * 2, Kind.BYTES: b"\xff" * 4, Kind.RECORDS: b"\xff" * 4, Kind.ARRAY: b"\xff" * 4,
         Kind.STRUCT: b"\xff"}
#: The value a decoded length-prefixed field holds.
_DECODED = {Kind.STRING: "str(buffer[position:end], 'utf-8')", Kind.BYTES: "buffer[position:end].tobytes()",
            Kind.RECORDS: "buffer[position:end]"}
#: What the errors of a length-prefixed field call it (the step-wise codec's words: records are bytes).
_WHAT = {Kind.STRING: "string", Kind.BYTES: "bytes", Kind.RECORDS: "bytes", Kind.ARRAY: "array"}


class _Source:
    """The lines of one generated function, and the namespace its names refer to."""

    def __init__(self, namespace: dict[str, Any], first_line: str) -> None:
        self.namespace = namespace
        self.lines = [first_line]
        self._names = 0

    def local(self, stem: str) -> str:
        """A fresh local name."""
        self._names += 1
        return f"{stem}_{self._names}"

    def constant(self, stem: str, value: Any) -> str:
        """A fresh name bound to ``value``."""
        name = self.local("_" + stem)
        self.namespace[name] = value
        return name

    def add(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def define(self, name: str, filename: str) -> Callable[..., Any]:
        exec(compile("\n".join(self.lines), filename, "exec"), self.namespace)  # noqa: S102 - built from field names only
        return self.namespace[name]  # type: ignore[no-any-return]


def inline_struct(cls: type, plan: StructPlan, plan_of: PlanOf) -> MessageCodec:
    """The written-out codec of ``cls`` (``plan``: a non-flexible version); ``plan_of`` plans the structs inside."""
    assert not plan.flexible and not plan.tagged, "only non-flexible versions are written out"
    namespace = dict(_HELPERS)
    filename = f"<codec of {cls.__name__} v{plan.version}>"
    decoder = _Source(namespace, "def decode(buffer, position):")
    _decode_struct(decoder, cls, plan, plan_of, "decoded", 1)
    decoder.add(1, "return decoded, position")
    if any("buffer_bytes" in line for line in decoder.lines):
        decoder.lines.insert(1, "    buffer_bytes = len(buffer)")
    encoder = _Source(namespace, "def encode(message, parts):")
    encoder.add(1, "append = parts.append")
    _encode_struct(encoder, plan, plan_of, "message", 1)
    return MessageCodec(encode=encoder.define("encode", filename), decode=decoder.define("decode", filename),
                        size_bytes_min=plan.size_bytes_min())


# -- decoding -----------------------------------------------------------------------------------


def _decode_struct(source: _Source, cls: type, plan: StructPlan, plan_of: PlanOf, target: str, depth: int) -> None:
    """Read one ``cls`` value at ``position`` into ``target``."""
    prefix = source.local("field")
    for step in plan.steps:
        if step.fixed_format:
            unpack = source.constant("unpack", struct.Struct(">" + step.fixed_format).unpack_from)
            source.add(depth, f"{', '.join(f'{prefix}_{name}' for name in step.names)}, = {unpack}(buffer, position)")
            source.add(depth, f"position += {struct.calcsize('>' + step.fixed_format)}")
        else:
            assert step.shape is not None
            _decode_field(source, step.shape, step.codec, plan.version, plan_of, f"{prefix}_{step.names[0]}", depth)
    arguments = []
    for field in dataclasses.fields(cls):
        if field.name in plan.absent:
            arguments.append(f"{field.name}={source.constant('default', plan.absent[field.name])}")
        else:
            arguments.append(f"{field.name}={prefix}_{field.name}")
    source.add(depth, f"{target} = {source.constant(cls.__name__, cls)}({', '.join(arguments)})")


def _decode_field(source: _Source, shape: Shape, codec: MessageCodec, version: int, plan_of: PlanOf, target: str,
                  depth: int) -> None:
    """Read one variable value of ``shape`` (value codec ``codec``) into ``target``."""
    kind = shape.kind
    if kind in _SIZED:
        width, unpack = _SIZED[kind]
        what = _WHAT[kind]
        source.add(depth, f"length, = {unpack}(buffer, position)")
        source.add(depth, f"position += {width}")
        _decode_null(source, shape, target, f"_bad_length({what!r}, length, position - {width})", "length", depth)
        source.add(depth, "else:")
        source.add(depth + 1, "end = position + length")
        source.add(depth + 1, f"if end > buffer_bytes: raise _truncated({what!r}, position)")
        source.add(depth + 1, f"{target} = {_DECODED[kind]}")
        source.add(depth + 1, "position = end")
    elif kind is Kind.ARRAY:
        _decode_array(source, shape, version, plan_of, target, depth)
    elif kind is Kind.STRUCT:
        assert shape.struct is not None
        if shape.nullable:
            source.add(depth, "if _unpack_b(buffer, position)[0] < 0:")
            source.add(depth + 1, f"{target} = None")
            source.add(depth + 1, "position += 1")
            source.add(depth, "else:")
            depth += 1
            source.add(depth, "position += 1")
        _decode_struct(source, shape.struct, plan_of(shape.struct, version), plan_of, target, depth)
    else:
        source.add(depth, f"{target}, position = {source.constant('decode', codec.decode)}(buffer, position)")


def _decode_null(source: _Source, shape: Shape, target: str, error: str, length: str, depth: int) -> None:
    """The branch of a negative length or count: null (-1, where allowed) or ``error``."""
    source.add(depth, f"if {length} < 0:")
    if shape.nullable:
        source.add(depth + 1, f"if {length} != -1: raise {error}")
        source.add(depth + 1, f"{target} = None")
    else:
        source.add(depth + 1, f"raise {error}")


def _decode_array(source: _Source, shape: Shape, version: int, plan_of: PlanOf, target: str, depth: int) -> None:
    """Read a count (-1 = null) and that many elements into ``target`` (a tuple)."""
    element, element_codec = shape.element, shape.element_codec
    assert element is not None and element_codec is not None
    count = source.local("count")
    source.add(depth, f"{count}, = _unpack_i(buffer, position)")
    source.add(depth, "position += 4")
    _decode_null(source, shape, target, f"_bad_count({count}, position - 4)", count, depth)
    # Every element takes at least one byte, so a count larger than the rest of the frame is a lie.
    source.add(depth, f"elif {count} * {element_codec.size_bytes_min} > buffer_bytes - position: "
                      f"raise _truncated_array({count}, position)")
    source.add(depth, "else:")
    if element_codec.fixed_format:
        source.add(depth + 1, f"{target} = _unpack_array(f'>{{{count}}}{element_codec.fixed_format}', buffer, position)")
        source.add(depth + 1, f"position += {count} * {element_codec.size_bytes_min}")
        return
    items, index, item = source.local("items"), source.local("index"), source.local("item")
    source.add(depth + 1, f"{items} = [None] * {count}")
    source.add(depth + 1, f"for {index} in range({count}):")
    _decode_field(source, element, element_codec, version, plan_of, item, depth + 2)
    source.add(depth + 2, f"{items}[{index}] = {item}")
    source.add(depth + 1, f"{target} = tuple({items})")


# -- encoding -----------------------------------------------------------------------------------


def _encode_struct(source: _Source, plan: StructPlan, plan_of: PlanOf, value: str, depth: int) -> None:
    """Append the encoding of the struct in local ``value``."""
    for step in plan.steps:
        if step.fixed_format:
            pack = source.constant("pack", struct.Struct(">" + step.fixed_format).pack)
            source.add(depth, f"append({pack}({', '.join(f'{value}.{name}' for name in step.names)}))")
        else:
            assert step.shape is not None
            field = source.local("value")
            source.add(depth, f"{field} = {value}.{step.names[0]}")
            _encode_field(source, step.shape, step.codec, plan.version, plan_of, field, depth)


def _encode_field(source: _Source, shape: Shape, codec: MessageCodec, version: int, plan_of: PlanOf, value: str,
                  depth: int) -> None:
    """Append the encoding of the variable value in local ``value``."""
    kind = shape.kind
    if kind is Kind.OTHER:
        source.add(depth, f"{source.constant('encode', codec.encode)}({value}, parts)")
        return
    if kind is Kind.STRUCT and not shape.nullable:  # None fails reading its fields, as in the step-wise codec
        _encode_struct(source, plan_of(shape.struct, version), plan_of, value, depth)  # type: ignore[arg-type]
        return
    source.add(depth, f"if {value} is None:")
    if not shape.nullable:
        source.add(depth + 1, f"raise _local_error('a non-nullable {_WHAT[kind]} field holds None')")
    else:
        source.add(depth + 1, f"append({_NULL[kind]!r})")
    source.add(depth, "else:")
    depth += 1
    if kind is Kind.STRING:
        source.add(depth, f"data = {value}.encode('utf-8')")
        source.add(depth, "append(_pack_h(len(data)))")
        source.add(depth, "append(data)")
    elif kind is Kind.STRUCT:
        source.add(depth, r"append(b'\x01')")
        _encode_struct(source, plan_of(shape.struct, version), plan_of, value, depth)  # type: ignore[arg-type]
    else:
        source.add(depth, f"append(_pack_i(len({value})))")
        if kind is not Kind.ARRAY:
            source.add(depth, f"append({value})")
            return
        element, element_codec = shape.element, shape.element_codec
        assert element is not None and element_codec is not None
        if element_codec.fixed_format:
            source.add(depth, f"append(_pack_array(f'>{{len({value})}}{element_codec.fixed_format}', *{value}))")
            return
        item = source.local("item")
        source.add(depth, f"for {item} in {value}:")
        _encode_field(source, element, element_codec, version, plan_of, item, depth + 1)
