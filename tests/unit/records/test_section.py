# -*- test-case-name: tests.unit.records.test_section -*-
"""The compiled records-section decoder against its Python reference: same records, same errors, never a crash.

``test_decoder`` tests whole-batch decoding through the compiled decoder (the one ``decoder`` uses);
here every input, valid or not, goes through both, and their rows or errors must be equal.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

# The consumer's row (two leading fields, then the record's) is the tuple type the decoder fills here.
from mqbroker.client.consumer import Message as Row
from mqbroker.records import decoder
from mqbroker.records._section import decode_section
from mqbroker.records.builder import encode_batch
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import HEADER_BYTES, read_header
from mqbroker.records.record import Record
from mqbroker.records.section import decode_section_python
from mqbroker.records.varint import encode_varint

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def outcome(decode: Any, *arguments: Any) -> tuple[Any, ...]:
    """What one decoder made of ``arguments``: its rows, or its error's type and message."""
    try:
        return ("rows", decode(*arguments))
    except CorruptRecordError as error:
        return ("error", type(error), str(error))


def assert_same_outcome(*arguments: Any) -> tuple[Any, ...]:
    """Both decoders give equal rows, or the same typed error with the same message."""
    compiled = outcome(decode_section, *arguments)
    assert compiled == outcome(decode_section_python, *arguments)
    return compiled


def section_arguments(batch: bytes, make: Any = tuple, leading: tuple[Any, ...] | None = ("t", 3)) -> list[Any]:
    """``decode_section``'s arguments for an uncompressed batch (rows of ``make`` with ``leading`` by default)."""
    header = read_header(batch)
    return [batch[HEADER_BYTES:], header.base_offset, header.base_timestamp, header.last_offset_delta,
            header.records_count, None, make, leading]


def test_the_compiled_decoder_is_built_and_used() -> None:
    assert decoder.COMPILED_SECTION_DECODER
    assert decoder.decode_section is decode_section


# Values of every size class: none, empty, short, and 16 KiB and more (three-byte length varints).
large_bytes = st.tuples(st.integers(min_value=16_384, max_value=70_000), st.binary(min_size=1, max_size=8)).map(
    lambda size_and_pattern: (size_and_pattern[1] * size_and_pattern[0])[: size_and_pattern[0]])
field_bytes = st.none() | st.just(b"") | st.binary(max_size=200) | large_bytes
record_headers = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=40)), max_size=3).map(tuple)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """A valid uncompressed batch: offset gaps, timestamps below the first (negative deltas), any fields."""
    base_offset = draw(st.integers(min_value=0, max_value=2**62))
    base_timestamp = draw(st.integers(min_value=0, max_value=2**50))
    records, offset = [], base_offset
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        timestamp_ms = base_timestamp + draw(st.integers(min_value=-(2**40), max_value=2**40))
        records.append(Record(offset=offset, timestamp_ms=timestamp_ms, key=draw(field_bytes),
                              value=draw(field_bytes), headers=draw(record_headers)))
        offset += draw(st.integers(min_value=1, max_value=70_000))
    return encode_batch(records, base_offset=base_offset)


@given(batch=batches())
def test_valid_batches_decode_to_the_same_records(batch: bytes) -> None:
    records = decoder.decode_records(batch)
    kind, rows = assert_same_outcome(*section_arguments(batch, Row))
    assert kind == "rows" and all(type(row) is Row for row in rows)
    assert [Record(offset=row.offset, timestamp_ms=row.timestamp, key=row.key, value=row.value, headers=row.headers)
            for row in rows] == records
    kind, calls = assert_same_outcome(*section_arguments(batch, lambda *fields: fields, None))
    assert calls == [tuple(row)[2:] for row in rows]
    assert assert_same_outcome(*section_arguments(batch, tuple, ()))[1] == calls


@given(batch=batches(), log_append_time=INT64)
def test_log_append_time_replaces_every_timestamp(batch: bytes, log_append_time: int) -> None:
    arguments = section_arguments(batch)
    arguments[5] = log_append_time
    kind, rows = assert_same_outcome(*arguments)
    assert {row[-1] for row in rows} == {log_append_time}


@given(batch=batches(), cut=st.integers(min_value=0), edits=st.lists(st.tuples(st.integers(min_value=0),
                                                                                 st.integers(0, 255)), max_size=4))
def test_truncated_and_mutated_sections_give_the_same_error(batch: bytes, cut: int,
                                                            edits: list[tuple[int, int]]) -> None:
    arguments = section_arguments(batch)
    section = bytearray(arguments[0][: cut % (len(arguments[0]) + 1)])
    for position, byte in edits:
        if section:
            section[position % len(section)] = byte
    arguments[0] = bytes(section)
    assert_same_outcome(*arguments)


@given(section=st.binary(max_size=300), base_offset=INT64, base_timestamp=INT64,
       last_offset_delta=st.integers(min_value=-1, max_value=2**31 - 1),
       records_count=st.integers(min_value=0, max_value=6) | st.integers(min_value=-(2**31), max_value=2**31 - 1),
       log_append_time=st.none() | INT64)
def test_garbage_gives_the_same_error_or_the_same_records(
    section: bytes, base_offset: int, base_timestamp: int, last_offset_delta: int, records_count: int,
    log_append_time: int | None,
) -> None:
    assert_same_outcome(section, base_offset, base_timestamp, last_offset_delta, records_count, log_append_time,
                        Row, ("t", 0))


def record_bytes(*fields: bytes) -> bytes:
    """One record's bytes: its length varint, then ``fields`` joined."""
    body = b"".join(fields)
    return encode_varint(len(body)) + body


# attributes, timestamp delta 0, offset delta 0, null key, value b"v", no headers
GOOD_RECORD = record_bytes(b"\x00", b"\x00", b"\x00", b"\x01", b"\x02v", b"\x00")
# the same at offset delta 1
NEXT_RECORD = record_bytes(b"\x00", b"\x00", b"\x02", b"\x01", b"\x02v", b"\x00")


@pytest.mark.parametrize(
    ("section", "records_count", "message"),
    [
        (GOOD_RECORD[:-1], 1, "record of 7 bytes at byte 1 runs past the records section"),
        (b"\x00", 1, "runs past the end of the records section"),
        (b"\xff\xff\xff\xff\x7f" + GOOD_RECORD[1:], 1, "bad 32-bit varint at byte 0"),
        (b"\xff\xff\xff\xff\xff\x01", 1, "bad 32-bit varint at byte 0"),
        (record_bytes(b"\x00", b"\xff" * 10 + b"\x01", b"\x00\x01\x02v\x00"), 1, "bad 64-bit varint at byte 2"),
        (b"\x7e" + GOOD_RECORD[1:], 1, "record of 63 bytes at byte 1 runs past the records section"),
        (record_bytes(b"\x00\x00\x00", b"\xfe\xff\x03", b"\x02v\x00"), 1, "field of 32767 bytes at byte 7"),
        (record_bytes(b"\x00\x00\x00\x01", b"\x80\x80\x02", b"v\x00"), 1, "field of 16384 bytes at byte 8"),
        (record_bytes(b"\x00\x00\x01\x01\x02v\x00"), 1, "offset delta -1 is out of order"),
        (GOOD_RECORD + NEXT_RECORD, 1, f"{len(NEXT_RECORD)} bytes follow the batch's 1 records"),
        (GOOD_RECORD + NEXT_RECORD, 3, "bad 32-bit varint at byte 16"),
        (GOOD_RECORD * 2, 2, "record offset delta 0 is out of order"),
        (GOOD_RECORD, 2**31 - 1, "bad 32-bit varint at byte 8"),
        (record_bytes(b"\x00\x00\x00\x01\x02v", b"\x02\x02\xff\x01"), 1, "record header key is not UTF-8"),
        (record_bytes(b"\x00\x00\x00\x01\x02v", b"\x02\x01\x01"), 1, "record header with a null key"),
        (record_bytes(b"\x00\x00\x00\x01\x02v", b"\x01"), 1, "negative record header count -1"),
        (record_bytes(b"\x00\x00\x00\x01\x02v\x00", b"\x00"), 1, "record ends at byte 8 but its length says 9"),
    ],
    ids=["truncated-record", "record-past-section-end", "varint-over-32-bits", "varint-too-long", "varlong-too-long",
         "record-past-section", "value-past-record", "long-value-past-record", "negative-offset-delta",
         "count-below-records", "count-above-records", "repeated-offset-delta", "huge-count", "header-key-not-utf8",
         "null-header-key", "negative-header-count", "record-longer-than-fields"],
)
def test_malformed_sections_raise_the_typed_error_both_ways(section: bytes, records_count: int, message: str) -> None:
    kind, error_type, error_message = assert_same_outcome(section, 0, 0, 10, records_count, None, tuple, ())
    assert (kind, error_type) == ("error", CorruptRecordError)
    assert message in error_message


def test_a_header_key_that_is_not_utf8_keeps_the_unicode_error_as_its_cause() -> None:
    section = record_bytes(b"\x00\x00\x00\x01\x02v", b"\x02\x02\xff\x01")
    with pytest.raises(CorruptRecordError) as raised:
        decode_section(section, 0, 0, 0, 1, None, tuple, ())
    assert isinstance(raised.value.__cause__, UnicodeDecodeError)


def test_offsets_and_timestamps_past_int64_are_python_ints_as_in_the_reference() -> None:
    section = record_bytes(b"\x00", encode_varint(2**62), encode_varint(5), b"\x01\x02v\x00")
    kind, rows = assert_same_outcome(section, 2**63 - 3, 2**63 - 1, 5, 1, None, tuple, ())
    assert rows == [(2**63 + 2, None, b"v", (), 2**63 - 1 + 2**62)]


def test_memoryviews_and_bytearrays_are_read_like_bytes() -> None:
    for data in (GOOD_RECORD, memoryview(GOOD_RECORD), bytearray(GOOD_RECORD)):
        assert decode_section(data, 7, 9, 0, 1, None, tuple, ()) == [(7, None, b"v", (), 9)]


@pytest.mark.parametrize(
    ("make", "leading", "message"),
    [(Record, ("x",), "make must be a tuple type"), (tuple, ["x"], "leading must be a tuple"),
     (None, None, "make must be callable")],
)
def test_wrong_argument_types_are_type_errors(make: Any, leading: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        decode_section(GOOD_RECORD, 0, 0, 0, 1, None, make, leading)


class RowWithAttributes(tuple):  # type: ignore[type-arg]
    """A tuple type whose instances have a ``__dict__``: one could hold a cycle."""


def test_rows_that_cannot_hold_a_cycle_are_left_out_of_the_collector() -> None:
    section = record_bytes(b"\x00\x00\x00\x01\x02v", b"\x02\x02h\x02x")
    (row,) = decode_section(section, 0, 0, 0, 1, None, Row, ("t", 0))
    assert row.headers == (("h", b"x"),)
    assert not gc.is_tracked(row) and not gc.is_tracked(row.headers) and not gc.is_tracked(row.headers[0])
    (tracked,) = decode_section(section, 0, 0, 0, 1, None, RowWithAttributes, ("t", 0))
    assert gc.is_tracked(tracked)
    (tracked_leading,) = decode_section(section, 0, 0, 0, 1, None, Row, ([], 0))
    assert gc.is_tracked(tracked_leading)
