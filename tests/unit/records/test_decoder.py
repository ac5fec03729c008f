# -*- test-case-name: tests.unit.records.test_decoder -*-
"""Decoding batches: Kafka-written batches, round trips through every codec, malformed records, garbage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.builder import encode_batch
from mqbroker.records.compression import Compression
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import HEADER_BYTES, TimestampType, read_header, valid_prefix_bytes
from mqbroker.records.record import Record
from tests.unit.records.batchtools import (
    CODECS,
    KAFKA_BATCH_ONE_RECORD,
    KAFKA_BATCH_TWO_EMPTY_RECORDS,
    TIMESTAMP_MS,
    sample_records,
    with_records_section,
)


def test_batches_written_by_kafka_decode() -> None:
    assert decode_records(KAFKA_BATCH_ONE_RECORD) == [
        Record(offset=0, timestamp_ms=1503229838908, key=None, value=b"123")
    ]
    assert decode_records(KAFKA_BATCH_TWO_EMPTY_RECORDS) == [
        Record(offset=1, timestamp_ms=1503229959532, key=None, value=b""),
        Record(offset=2, timestamp_ms=1503229959700, key=None, value=b""),
    ]


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.name)
def test_records_round_trip_through_every_codec(codec: Compression) -> None:
    records = sample_records(50)
    assert decode_records(encode_batch(records, compression=codec)) == records


def test_headers_and_null_keys_and_values_round_trip() -> None:
    records = [
        Record(offset=0, timestamp_ms=TIMESTAMP_MS, key=None, value=None),
        Record(offset=1, timestamp_ms=TIMESTAMP_MS, key=b"", value=b"", headers=(("", b""),)),
        Record(
            offset=2,
            timestamp_ms=TIMESTAMP_MS,
            key=b"k",
            value=b"tombstone-next",
            headers=(("trace-id", b"abc"), ("empty", None), ("ünïcode", b"\x00\xff"), ("trace-id", b"dup")),
        ),
    ]
    assert decode_records(encode_batch(records, compression=Compression.ZSTD)) == records


def test_large_fields_and_offset_gaps_round_trip() -> None:
    records = [
        Record(offset=1000, timestamp_ms=TIMESTAMP_MS, key=b"k" * 20_000, value=b"v" * 70_000),
        Record(offset=1003, timestamp_ms=TIMESTAMP_MS - 10**9, key=b"a", value=b"b"),
        Record(offset=1000 + 2**20, timestamp_ms=TIMESTAMP_MS + 10**12, key=b"c", value=None),
    ]
    batch = encode_batch(records, base_offset=1000)
    assert read_header(batch).last_offset_delta == 2**20
    assert decode_records(batch) == records


def test_log_append_time_gives_every_record_the_batch_max_timestamp() -> None:
    batch = encode_batch(sample_records(3), timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert [record.timestamp_ms for record in decode_records(batch)] == [TIMESTAMP_MS + 2] * 3


def test_bytes_after_the_batch_are_refused() -> None:
    with pytest.raises(CorruptRecordError, match="follow the batch"):
        decode_records(encode_batch(sample_records(2)) + b"\x00")


@pytest.mark.parametrize(("count_change", "message"), [(1, "varint"), (-1, "bytes follow")])
def test_record_count_must_match_the_records(count_change: int, message: str) -> None:
    batch = encode_batch(sample_records(3))
    wrong = with_records_section(batch, batch[HEADER_BYTES:], records_count=3 + count_change)
    with pytest.raises(CorruptRecordError, match=message):
        decode_records(wrong)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (b"\x7e\x00", "runs past the records section"),
        (b"\x10\x00\x00\x00\x0ak\x02v\x00", "runs past its record"),
        (b"\x10\x00\x00\x00\x03k\x02v\x00", "runs past its record"),
        (b"\x12\x00\x00\x00\x02k\x02v\x00\x00", "record ends at byte"),
        (b"\x10\x00\x00\x04\x02k\x02v\x00", "offset delta"),
        (b"\x10\x00\x00\x00\x02k\x02v\x01", "negative record header count"),
        (b"\x10\x00\x00\x00\x01\x01\x02\x01\x01", "null key"),
        (b"\x12\x00\x00\x00\x01\x01\x02\x02\xff\x01", "not UTF-8"),
        (b"\x1e\x00\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f\x00\x01\x01\x00", "64-bit varint"),
    ],
    ids=[
        "record-past-section", "key-past-record", "negative-key-length", "record-longer-than-fields",
        "offset-delta-past-last", "negative-header-count", "null-header-key", "bad-header-key", "varlong-too-long",
    ],
)
def test_malformed_records_are_corrupt(section: bytes, message: str) -> None:
    batch = with_records_section(encode_batch(sample_records(1)), section)
    with pytest.raises(CorruptRecordError, match=message):
        decode_records(batch)


def test_compressed_records_over_the_cap_are_refused() -> None:
    batch = encode_batch(sample_records(200), compression=Compression.ZSTD)
    with pytest.raises(CorruptRecordError, match="more than 1000 bytes"):
        decode_records(batch, decompressed_bytes_max=1000)


optional_bytes = st.none() | st.binary(max_size=300)


record_headers = st.lists(st.tuples(st.text(max_size=20), optional_bytes), max_size=4).map(tuple)


@st.composite
def record_lists(draw: st.DrawFn) -> tuple[int, list[Record]]:
    """A base offset and records with increasing offsets (gaps allowed) and any int64 timestamps."""
    base_offset = draw(st.integers(min_value=0, max_value=2**62))
    offset = base_offset + draw(st.integers(min_value=0, max_value=3))
    base_timestamp = draw(st.integers(min_value=-(2**61), max_value=2**61))
    records = []
    for _ in range(draw(st.integers(min_value=1, max_value=12))):
        timestamp_ms = base_timestamp + draw(st.integers(min_value=-(2**61), max_value=2**61))
        key, value, headers = draw(optional_bytes), draw(optional_bytes), draw(record_headers)
        records.append(Record(offset=offset, timestamp_ms=timestamp_ms, key=key, value=value, headers=headers))
        offset += draw(st.integers(min_value=1, max_value=70_000))
    return base_offset, records


@given(base_and_records=record_lists(), codec=st.sampled_from(CODECS))
def test_arbitrary_records_round_trip(base_and_records: tuple[int, list[Record]], codec: Compression) -> None:
    base_offset, records = base_and_records
    batch = encode_batch(records, base_offset=base_offset, compression=codec)
    assert decode_records(batch) == records
    assert valid_prefix_bytes(batch) == len(batch)


@given(section=st.binary(max_size=200), records_count=st.integers(min_value=0, max_value=2**31 - 1))
def test_arbitrary_records_sections_raise_only_corrupt_record(section: bytes, records_count: int) -> None:
    batch = with_records_section(encode_batch(sample_records(1)), section, records_count)
    try:
        records = decode_records(batch)
    except CorruptRecordError:
        return
    assert len(records) == records_count
