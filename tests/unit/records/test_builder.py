# -*- test-case-name: tests.unit.records.test_builder -*-
"""Building batches: Kafka's byte layout, the header a builder writes, the cleaner's rewrite options."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker.records.builder import BatchBuilder, encode_batch, plain_batch
from mqbroker.records.compression import Compression
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import HEADER_BYTES, check_crc, read_header
from mqbroker.records.record import Record
from tests.unit.records.batchtools import (
    CODECS,
    KAFKA_BATCH_ONE_RECORD,
    KAFKA_BATCH_TWO_EMPTY_RECORDS,
    TIMESTAMP_MS,
    sample_records,
)


def test_one_record_encodes_to_the_kafka_byte_layout() -> None:
    builder = BatchBuilder()
    builder.append(TIMESTAMP_MS, b"k", b"v")
    batch = builder.build()
    # length 8, attributes 0, timestamp delta 0, offset delta 0, key "k", value "v", no headers
    assert batch[HEADER_BYTES:] == b"\x10\x00\x00\x00\x02k\x02v\x00"
    assert len(batch) == read_header(batch).size_bytes == HEADER_BYTES + 9


def test_encoding_matches_kafka_byte_for_byte() -> None:
    one = [Record(offset=0, timestamp_ms=1503229838908, key=None, value=b"123")]
    assert encode_batch(one, partition_leader_epoch=1) == KAFKA_BATCH_ONE_RECORD
    two = decode_records(KAFKA_BATCH_TWO_EMPTY_RECORDS)
    assert encode_batch(two, base_offset=1, partition_leader_epoch=2) == KAFKA_BATCH_TWO_EMPTY_RECORDS


def test_header_describes_the_records() -> None:
    timestamps = [TIMESTAMP_MS + 5, TIMESTAMP_MS, TIMESTAMP_MS + 9, TIMESTAMP_MS + 2]
    builder = BatchBuilder(
        compression=Compression.LZ4, producer_id=7, producer_epoch=3, base_sequence=40, is_transactional=True
    )
    for timestamp_ms in timestamps:
        builder.append(timestamp_ms, None, b"v")
    batch = builder.build()
    header = read_header(batch)
    check_crc(batch, 0, header)
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (0, 3, 4)
    assert (header.base_timestamp, header.max_timestamp) == (TIMESTAMP_MS + 5, TIMESTAMP_MS + 9)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 40)
    assert header.compression == Compression.LZ4 and header.is_transactional and not header.is_control
    assert header.last_sequence == 43
    assert [record.timestamp_ms for record in decode_records(batch)] == timestamps


def test_builder_size_is_the_uncompressed_batch_size() -> None:
    builder = BatchBuilder()
    assert builder.size_bytes == HEADER_BYTES and builder.records_count == 0
    for index in range(20):
        builder.append(TIMESTAMP_MS, b"k", b"x" * index)
    assert builder.size_bytes == len(builder.build())
    assert builder.records_count == 20


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.name)
def test_a_rewritten_batch_keeps_its_last_offset_and_max_timestamp(codec: Compression) -> None:
    builder = BatchBuilder(
        base_offset=100, compression=codec, producer_id=7, producer_epoch=1, base_sequence=30,
        last_offset_delta=9, max_timestamp_ms=TIMESTAMP_MS + 50,
    )
    builder.append_at(4, TIMESTAMP_MS, b"k", b"v")
    batch = builder.build()
    header = read_header(batch)
    assert (header.base_offset, header.last_offset, header.records_count) == (100, 109, 1)
    assert (header.last_sequence, header.max_timestamp, header.delete_horizon_ms) == (39, TIMESTAMP_MS + 50, None)
    assert decode_records(batch) == [Record(offset=104, timestamp_ms=TIMESTAMP_MS, key=b"k", value=b"v")]


def test_a_header_only_batch_keeps_offsets_sequences_and_timestamps() -> None:
    builder = BatchBuilder(
        base_offset=100, compression=Compression.ZSTD, producer_id=7, producer_epoch=1, base_sequence=30,
        last_offset_delta=9, max_timestamp_ms=TIMESTAMP_MS,
    )
    batch = builder.build()
    header = read_header(batch)
    check_crc(batch, 0, header)
    assert len(batch) == HEADER_BYTES and header.records_count == 0 and header.compression == 0
    assert (header.next_offset, header.last_sequence, header.base_timestamp, header.max_timestamp) == (
        110, 39, TIMESTAMP_MS, TIMESTAMP_MS,
    )
    assert decode_records(batch) == []


def test_an_empty_batch_without_a_fixed_last_offset_cannot_be_built() -> None:
    with pytest.raises(AssertionError):
        BatchBuilder().build()


def test_the_delete_horizon_is_the_base_timestamp_and_record_timestamps_are_unchanged() -> None:
    horizon_ms = TIMESTAMP_MS + 86_400_000
    builder = BatchBuilder(delete_horizon_ms=horizon_ms)
    builder.append(TIMESTAMP_MS, b"k", None)
    builder.append(TIMESTAMP_MS + 5, b"j", b"v")
    batch = builder.build()
    header = read_header(batch)
    assert header.delete_horizon_ms == horizon_ms == header.base_timestamp
    assert header.attributes & 0x40 and header.max_timestamp == TIMESTAMP_MS + 5
    assert [record.timestamp_ms for record in decode_records(batch)] == [TIMESTAMP_MS, TIMESTAMP_MS + 5]
    assert read_header(encode_batch(sample_records(1))).delete_horizon_ms is None


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.binary(max_size=300) | st.sampled_from([b"", b"v" * 16_500]), min_size=1, max_size=300),
    earlier=st.integers(min_value=0, max_value=3),
    start=st.integers(min_value=0, max_value=5),
    size_bytes_max=st.sampled_from([64, 200, 1_000, 5_000, 100_000, 10_000_000]),
    timestamp_step_ms=st.sampled_from([0, 7, -3, 10**9]),
)
def test_append_values_builds_the_batch_append_would(
    values: list[bytes], earlier: int, start: int, size_bytes_max: int, timestamp_step_ms: int
) -> None:
    bulk, one_by_one = BatchBuilder(producer_id=3, base_sequence=0), BatchBuilder(producer_id=3, base_sequence=0)
    for index in range(earlier):
        bulk.append(TIMESTAMP_MS + index, None, b"e")
        one_by_one.append(TIMESTAMP_MS + index, None, b"e")
    start = min(start, len(values) - 1)
    added = bulk.append_values(TIMESTAMP_MS + timestamp_step_ms, values, start, size_bytes_max)
    for value in values[start:start + added]:
        one_by_one.append(TIMESTAMP_MS + timestamp_step_ms, None, value)
    assert (bulk.records_count, bulk.size_bytes) == (one_by_one.records_count, one_by_one.size_bytes)
    assert bulk.build() == one_by_one.build()
    if earlier == 0:
        assert added >= 1  # an empty batch always takes the first record, whatever its size
    if start + added < len(values):  # it stopped because the next record did not fit
        one_by_one.append(TIMESTAMP_MS + timestamp_step_ms, None, values[start + added])
        assert one_by_one.size_bytes > size_bytes_max
    else:
        assert bulk.size_bytes <= size_bytes_max or bulk.records_count == 1


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.binary(max_size=300) | st.sampled_from([b"", b"v" * 16_300, b"v" * 16_500]), max_size=100),
    key=st.none() | st.binary(max_size=200),
    headers=st.sampled_from([(), (("amqp.exchange", b"x"), ("amqp.properties", b"p" * 150)), [("raw", b"list")]]),
    earlier=st.integers(min_value=0, max_value=3),
    timestamp_step_ms=st.sampled_from([0, 7, -3, 10**9]),
)
def test_append_alike_builds_the_batch_append_would(
    values: list[bytes], key: bytes | None, headers: tuple[tuple[str, bytes], ...], earlier: int,
    timestamp_step_ms: int,
) -> None:
    alike, one_by_one = BatchBuilder(), BatchBuilder()
    for index in range(earlier):
        alike.append(TIMESTAMP_MS + index, None, b"e")
        one_by_one.append(TIMESTAMP_MS + index, None, b"e")
    alike.append_alike(TIMESTAMP_MS + timestamp_step_ms, key, values, headers)
    for value in values:
        one_by_one.append(TIMESTAMP_MS + timestamp_step_ms, key, value, headers)
    assert (alike.records_count, alike.size_bytes) == (one_by_one.records_count, one_by_one.size_bytes)
    if one_by_one.records_count:
        assert alike.build() == one_by_one.build()


def test_append_alike_past_the_small_offset_deltas_goes_on_one_by_one() -> None:
    builder = BatchBuilder()
    values = [b"%d" % index for index in range(20_000)]
    builder.append_alike(TIMESTAMP_MS, b"key", values, (("h", b"v"),))
    assert [(record.key, record.value, record.headers) for record in decode_records(builder.build())] == [
        (b"key", value, (("h", b"v"),)) for value in values]


def test_append_values_past_the_small_offset_deltas_goes_on_one_by_one() -> None:
    builder = BatchBuilder()
    values = [b"%d" % index for index in range(20_000)]
    assert builder.append_values(TIMESTAMP_MS, values, 0, 10_000_000) == 20_000
    assert [record.value for record in decode_records(builder.build())] == values


def test_a_repeated_header_set_encodes_as_the_first_time() -> None:
    headers = (("mqtt.qos", b"1"), ("mqtt.client_id", b"sensor-7"))
    batches = []
    for _ in range(2):
        builder = BatchBuilder()
        builder.append(TIMESTAMP_MS, b"k", b"v", headers)
        builder.append(TIMESTAMP_MS, b"k", b"v", list(headers))  # a list: encoded, not remembered
        builder.append(TIMESTAMP_MS, b"k", b"v", (("raw", bytearray(b"x")),))  # unhashable value
        batches.append(builder.build())
    assert batches[0] == batches[1]
    assert [record.headers for record in decode_records(batches[0])] == [headers, headers, (("raw", b"x"),)]


@given(
    first=st.lists(st.tuples(st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=200),
                             st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2)
                             .map(tuple)), max_size=5),
    second=st.lists(st.tuples(st.none() | st.binary(max_size=8), st.binary(max_size=8), st.just(())), max_size=5),
    later_ms=st.integers(0, 1000),
)
@settings(max_examples=100)
def test_append_many_builds_the_batch_append_builds(
    first: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]],
    second: list[tuple[bytes | None, bytes, tuple[()]]],
    later_ms: int,
) -> None:
    one_by_one, at_once = BatchBuilder(), BatchBuilder()
    for timestamp_ms, records in ((TIMESTAMP_MS, first), (TIMESTAMP_MS + later_ms, second)):
        for key, value, headers in records:
            one_by_one.append(timestamp_ms, key, value, headers)
        at_once.append_many(timestamp_ms, records)
    assert at_once.records_count == one_by_one.records_count and at_once.size_bytes == one_by_one.size_bytes
    if one_by_one.records_count:
        assert at_once.build() == one_by_one.build()


@given(
    records=st.lists(st.tuples(st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=300),
                               st.lists(st.tuples(st.text(max_size=4), st.none() | st.binary(max_size=4)), max_size=2)
                               .map(tuple)), min_size=1, max_size=5),
    timestamp_ms=st.integers(0, 1 << 45),
)
@settings(max_examples=100)
def test_a_plain_batch_is_the_batch_the_builder_builds(
    records: list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]], timestamp_ms: int,
) -> None:
    builder = BatchBuilder()
    builder.append_many(timestamp_ms, records)
    assert plain_batch(timestamp_ms, records) == builder.build()


def test_a_plain_batch_of_one_record_costs_four_python_calls() -> None:
    """A front end's one-record write (a paced MQTT PUBLISH): ``BatchBuilder``'s path took seven Python calls and 28 in
    all (C included)."""
    import sys

    calls: list[str] = []

    def profile(frame: object, event: str, argument: object) -> None:
        if event in ("call", "c_call"):
            calls.append(event)

    records = [(b"plant/a", b"x" * 100, (("mqtt.qos", b"1"), ("mqtt.client_id", b"publisher")))]
    plain_batch(TIMESTAMP_MS, records)  # the header section is remembered
    sys.setprofile(profile)
    try:
        plain_batch(TIMESTAMP_MS, records)
    finally:
        sys.setprofile(None)
    assert calls.count("call") <= 4 and len(calls) <= 24, calls  # (``setprofile(None)`` counts one)
