"""The shared codec engine: per-version fields, flexible (compact) encodings, tagged fields, varints."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.protocols.exceptions import LocalProtocolError, MalformedMessageError
from mqbroker.protocols.flexible import decode_uvarint, encode_uvarint
from mqbroker.protocols.schema import Int16, Int32, compile_message, decode_exactly, encode_into, message, wire


@message
class Point:
    """A nested struct."""

    x: Int32
    label: str | None = wire(tag=0, since=2, default=None)


@message
class Sample:
    """Fields of every kind of versioning."""

    id: Int32
    name: str | None = wire(nullable_since=2)
    points: tuple[Point, ...]
    note: str = wire(since=1, default="")
    legacy: Int16 = wire(until=1, default=-1)
    blob: bytes | None = None
    extra: Int32 = wire(tag=5, since=2, default=0)


def _encode(value: object, version: int, flexible: bool) -> bytes:
    parts: list[bytes | memoryview] = []
    encode_into(compile_message(type(value), version, flexible), value, parts)
    return b"".join(parts)


def _decode(cls: type, data: bytes, version: int, flexible: bool) -> object:
    return decode_exactly(compile_message(cls, version, flexible), memoryview(data), 0, cls.__name__)


def test_a_field_travels_only_in_its_versions_and_keeps_its_default_elsewhere() -> None:
    value = Sample(id=1, name="a", points=(), note="n", legacy=7)
    assert _decode(Sample, _encode(value, 0, False), 0, False) == Sample(id=1, name="a", points=(), legacy=7)
    assert _decode(Sample, _encode(value, 1, False), 1, False) == value
    assert _decode(Sample, _encode(value, 2, True), 2, True) == Sample(id=1, name="a", points=(), note="n")


def test_compact_lengths_are_unsigned_varints_of_the_length_plus_one() -> None:
    value = Sample(id=1, name=None, points=(Point(x=3),), blob=None)
    data = _encode(value, 2, True)
    # id, name null (0), one point (2) = x + its empty tag section, note "" (1), blob null (0), struct tags (0)
    assert data == struct.pack(">i", 1) + b"\x00" + b"\x02" + struct.pack(">i", 3) + b"\x00" + b"\x01" + b"\x00" + b"\x00"


def test_non_flexible_versions_use_fixed_width_lengths_and_minus_one_for_null() -> None:
    data = _encode(Sample(id=1, name="ab", points=(), blob=None), 0, False)
    assert data == struct.pack(">ih2sihi", 1, 2, b"ab", 0, -1, -1)  # id, name, no points, legacy, null blob
    assert _decode(Sample, data, 0, False) == Sample(id=1, name="ab", points=(), blob=None)


def test_null_is_refused_before_the_field_becomes_nullable() -> None:
    with pytest.raises(LocalProtocolError):
        _encode(Sample(id=1, name=None, points=()), 1, False)
    null_name = struct.pack(">ih", 1, -1) + struct.pack(">i", 0) + struct.pack(">h", 0) + struct.pack(">i", -1)
    with pytest.raises(MalformedMessageError, match="not allowed"):
        _decode(Sample, null_name, 1, False)


@message
class Paged:
    """A nullable struct field (Kafka's cursors)."""

    cursor: Point | None = None


def test_a_nullable_struct_is_an_int8_marker_then_the_struct_when_present() -> None:
    assert _encode(Paged(cursor=None), 0, True) == b"\xff\x00"
    present = _encode(Paged(cursor=Point(x=3)), 0, True)
    assert present == b"\x01" + struct.pack(">i", 3) + b"\x00" + b"\x00"
    assert _decode(Paged, present, 0, True) == Paged(cursor=Point(x=3))
    assert _decode(Paged, b"\x80\x00", 0, True) == Paged(cursor=None)  # any negative marker is null


def test_tagged_fields_are_sent_only_when_they_differ_from_their_default() -> None:
    plain = _encode(Sample(id=1, name="", points=(Point(x=1),)), 2, True)
    tagged = _encode(Sample(id=1, name="", points=(Point(x=1, label="l"),), extra=9), 2, True)
    assert len(tagged) > len(plain)
    assert _decode(Sample, tagged, 2, True) == Sample(id=1, name="", points=(Point(x=1, label="l"),), extra=9)


def test_unknown_tags_are_skipped() -> None:
    data = bytearray(_encode(Point(x=4), 2, True))
    assert data[-1] == 0
    data[-1:] = b"\x01" + b"\x07" + b"\x02" + b"zz"  # one tagged field, tag 7, two bytes
    assert _decode(Point, bytes(data), 2, True) == Point(x=4)


def test_a_tagged_value_must_fill_its_announced_size() -> None:
    data = _encode(Point(x=4, label="ab"), 2, True)
    broken = data[:5] + b"\x01\x00\x05" + data[8:] + b"\x00\x00"  # the size says 5, the value takes 3
    with pytest.raises(MalformedMessageError):
        _decode(Point, broken, 2, True)


@given(st.integers(0, 2**32 - 1))
def test_uvarints_round_trip(value: int) -> None:
    encoded = encode_uvarint(value)
    assert decode_uvarint(memoryview(encoded), 0) == (value, len(encoded))


def test_a_varint_longer_than_five_bytes_is_refused() -> None:
    with pytest.raises(MalformedMessageError, match="longer than 5 bytes"):
        decode_uvarint(memoryview(b"\xff" * 6 + b"\x01"), 0)
    with pytest.raises(MalformedMessageError, match="past the end"):
        decode_uvarint(memoryview(b"\xff\xff"), 0)


@given(data=st.binary(max_size=120), version=st.integers(0, 2))
def test_garbage_raises_only_the_malformed_message_error(data: bytes, version: int) -> None:
    try:
        _decode(Sample, data, version, version >= 2)
    except MalformedMessageError:
        pass
