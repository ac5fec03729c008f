# -*- test-case-name: tests.unit.records.test_varint -*-
"""Zig-zag varints: the protobuf vectors, round trips and malformed encodings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.varint import encode_varint, read_varint


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
     (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f")],
)
def test_varints_match_the_protobuf_zigzag_vectors(value: int, encoded: bytes) -> None:
    assert encode_varint(value) == encoded
    assert read_varint(encoded, 0, len(encoded), 32) == (value, len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlongs_round_trip(value: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) <= 10
    assert read_varint(encoded, 0, len(encoded), 64) == (value, len(encoded))


@pytest.mark.parametrize(
    "encoded",
    [b"\x80\x80\x80\x80\x80\x01", b"\x80\x80\x80\x80\x10", b"\x80", b""],
    ids=["six-bytes", "beyond-32-bits", "truncated", "empty"],
)
def test_bad_varints_are_corrupt(encoded: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="varint"):
        read_varint(encoded, 0, len(encoded), 32)
