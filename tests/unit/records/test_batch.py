# -*- test-case-name: tests.unit.records.test_batch -*-
"""RecordBatch v2 records: encoding, decoding, control batches, CRC and torn-buffer handling."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.compression import Compression
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.batch import (
    HEADER_BYTES,
    BatchBuilder,
    ControlRecord,
    ControlType,
    Record,
    TimestampType,
    _read_varint,
    _zigzag_varint,
    check_crc,
    compute_crc,
    decode_control_record,
    decode_records,
    encode_batch,
    encode_control_batch,
    iter_batches,
    read_header,
    stamp,
    valid_prefix_bytes,
)

TIMESTAMP_MS = 1_700_000_000_000
CODECS = list(Compression)


def _records(count: int = 3, base_offset: int = 0) -> list[Record]:
    return [
        Record(
            offset=base_offset + index,
            timestamp_ms=TIMESTAMP_MS + index,
            key=b"key-%d" % index,
            value=b"value-%d" % index * 10,
        )
        for index in range(count)
    ]


def _recrc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed, so a mutation reaches the record decoder."""
    stamped = bytearray(batch)
    struct.pack_into(">I", stamped, 17, compute_crc(stamped, 0, len(stamped)))
    return bytes(stamped)


def _with_records_section(batch: bytes, section: bytes, records_count: int | None = None) -> bytes:
    """An uncompressed batch whose records section (and maybe count) is replaced, CRC fixed."""
    header = bytearray(batch[:HEADER_BYTES])
    struct.pack_into(">i", header, 8, HEADER_BYTES - 12 + len(section))
    if records_count is not None:
        struct.pack_into(">i", header, 57, records_count)
    return _recrc(bytes(header) + section)


# --- varints -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"),
     (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-(2**31), b"\xff\xff\xff\xff\x0f")],
)
def test_varints_match_the_protobuf_zigzag_vectors(value: int, encoded: bytes) -> None:
    assert _zigzag_varint(value) == encoded
    assert _read_varint(encoded, 0, len(encoded), 32) == (value, len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varlongs_round_trip(value: int) -> None:
    encoded = _zigzag_varint(value)
    assert len(encoded) <= 10
    assert _read_varint(encoded, 0, len(encoded), 64) == (value, len(encoded))


@pytest.mark.parametrize(
    "encoded",
    [b"\x80\x80\x80\x80\x80\x01", b"\x80\x80\x80\x80\x10", b"\x80", b""],
    ids=["six-bytes", "beyond-32-bits", "truncated", "empty"],
)
def test_bad_varints_are_corrupt(encoded: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="varint"):
        _read_varint(encoded, 0, len(encoded), 32)


# --- encoding and decoding ---------------------------------------------------------------------


def test_one_record_encodes_to_the_kafka_byte_layout() -> None:
    builder = BatchBuilder()
    builder.append(TIMESTAMP_MS, b"k", b"v")
    batch = builder.build()
    # length 8, attributes 0, timestamp delta 0, offset delta 0, key "k", value "v", no headers
    assert batch[HEADER_BYTES:] == b"\x10\x00\x00\x00\x02k\x02v\x00"
    assert len(batch) == read_header(batch).size_bytes == HEADER_BYTES + 9


# Two batches as a Kafka 0.11 broker stored them (the fixture kafka-python's tests use).
KAFKA_BATCH_ONE_RECORD = bytes.fromhex(
    "00000000000000000000003b00000001020318a2700000000000000000015dff7b063c0000015dff7b063c"
    "ffffffffffffffffffffffffffff0000000112000000010631323300"
)
KAFKA_BATCH_TWO_EMPTY_RECORDS = bytes.fromhex(
    "0000000000000001000000400000000202c85cbd230000000000010000015dff7cdd6c0000015dff7cde14"
    "ffffffffffffffffffffffffffff000000020c0000000100000e00d00202010000"
)


def test_batches_written_by_kafka_decode() -> None:
    assert decode_records(KAFKA_BATCH_ONE_RECORD) == [
        Record(offset=0, timestamp_ms=1503229838908, key=None, value=b"123")
    ]
    assert decode_records(KAFKA_BATCH_TWO_EMPTY_RECORDS) == [
        Record(offset=1, timestamp_ms=1503229959532, key=None, value=b""),
        Record(offset=2, timestamp_ms=1503229959700, key=None, value=b""),
    ]


def test_encoding_matches_kafka_byte_for_byte() -> None:
    one = [Record(offset=0, timestamp_ms=1503229838908, key=None, value=b"123")]
    assert encode_batch(one, partition_leader_epoch=1) == KAFKA_BATCH_ONE_RECORD
    two = decode_records(KAFKA_BATCH_TWO_EMPTY_RECORDS)
    assert encode_batch(two, base_offset=1, partition_leader_epoch=2) == KAFKA_BATCH_TWO_EMPTY_RECORDS


@pytest.mark.parametrize("codec", CODECS, ids=lambda codec: codec.name)
def test_records_round_trip_through_every_codec(codec: Compression) -> None:
    records = _records(50)
    assert decode_records(encode_batch(records, compression=codec)) == records


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
    batch = encode_batch(_records(3), timestamp_type=TimestampType.LOG_APPEND_TIME)
    assert [record.timestamp_ms for record in decode_records(batch)] == [TIMESTAMP_MS + 2] * 3


def test_stamp_sets_offsets_and_epoch_and_leaves_the_crc_valid() -> None:
    batch = bytearray(encode_batch(_records(3), compression=Compression.GZIP))
    stamp(batch, 0, base_offset=5000, leader_epoch=12)
    header = read_header(batch)
    check_crc(batch, 0, header)
    assert (header.base_offset, header.partition_leader_epoch, header.next_offset) == (5000, 12, 5003)
    assert [record.offset for record in decode_records(batch)] == [5000, 5001, 5002]


def test_a_header_can_be_read_before_the_rest_of_its_batch() -> None:
    batch = encode_batch(_records(3, base_offset=40), base_offset=40)
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        read_header(batch[:HEADER_BYTES])
    header = read_header(batch[:HEADER_BYTES], require_whole=False)
    assert header == read_header(batch) and header.size_bytes == len(batch)
    with pytest.raises(CorruptRecordError, match="truncated batch header"):
        read_header(batch[: HEADER_BYTES - 1], require_whole=False)
    with pytest.raises(CorruptRecordError, match="magic"):
        read_header(batch[:16] + b"\x01" + batch[17:HEADER_BYTES], require_whole=False)


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
    assert read_header(encode_batch(_records(1))).delete_horizon_ms is None


# --- control batches ---------------------------------------------------------------------------


@pytest.mark.parametrize("control_type", [ControlType.COMMIT, ControlType.ABORT], ids=lambda kind: kind.name)
def test_transaction_markers_round_trip(control_type: ControlType) -> None:
    batch = encode_control_batch(control_type, producer_id=9, producer_epoch=2, coordinator_epoch=17, timestamp_ms=5)
    header = read_header(batch)
    check_crc(batch, 0, header)
    assert header.is_control and header.is_transactional and header.records_count == 1
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 2, -1)
    (record,) = decode_records(batch)
    assert record.key == struct.pack(">hh", 0, control_type)
    assert decode_control_record(record) == ControlRecord(control_type=control_type, coordinator_epoch=17)


def _control(key: bytes | None, value: bytes | None = None) -> Record:
    return Record(offset=0, timestamp_ms=0, key=key, value=value)


def test_other_and_unknown_control_types_carry_no_epoch() -> None:
    leader_change = decode_control_record(_control(struct.pack(">hh", 0, 2), b"opaque"))
    assert leader_change == ControlRecord(control_type=ControlType.LEADER_CHANGE, coordinator_epoch=None)
    unknown = decode_control_record(_control(struct.pack(">hh", 3, 99)))
    assert unknown.control_type is ControlType.UNKNOWN


@pytest.mark.parametrize(
    "record",
    [
        _control(None),
        _control(b"\x00\x00\x00"),
        _control(struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1)),
        _control(struct.pack(">hh", 0, 1), None),
        _control(struct.pack(">hh", 0, 0), b"\x00\x00\x00\x00\x01"),
        _control(struct.pack(">hh", 0, 0), struct.pack(">hi", -2, 1)),
    ],
    ids=["null-key", "short-key", "negative-key-version", "null-value", "short-value", "negative-value-version"],
)
def test_malformed_control_records_are_corrupt(record: Record) -> None:
    with pytest.raises(CorruptRecordError):
        decode_control_record(record)


# --- corruption --------------------------------------------------------------------------------


def test_a_flipped_bit_fails_the_crc() -> None:
    batch = bytearray(encode_batch(_records(3)))
    batch[-5] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        check_crc(batch, 0, read_header(batch))
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        decode_records(batch)


def test_bytes_after_the_batch_are_refused() -> None:
    with pytest.raises(CorruptRecordError, match="follow the batch"):
        decode_records(encode_batch(_records(2)) + b"\x00")


@pytest.mark.parametrize(("count_change", "message"), [(1, "varint"), (-1, "bytes follow")])
def test_record_count_must_match_the_records(count_change: int, message: str) -> None:
    batch = encode_batch(_records(3))
    wrong = _with_records_section(batch, batch[HEADER_BYTES:], records_count=3 + count_change)
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
    batch = _with_records_section(encode_batch(_records(1)), section)
    with pytest.raises(CorruptRecordError, match=message):
        decode_records(batch)


def test_compressed_records_over_the_cap_are_refused() -> None:
    batch = encode_batch(_records(200), compression=Compression.ZSTD)
    with pytest.raises(CorruptRecordError, match="more than 1000 bytes"):
        decode_records(batch, decompressed_bytes_max=1000)


# --- valid prefix (recovery) -------------------------------------------------------------------


def test_valid_prefix_stops_before_a_torn_batch() -> None:
    first, second, third = (encode_batch(_records(3)) for _ in range(3))
    log = first + second + third[:-7]
    assert valid_prefix_bytes(log) == len(first) + len(second)
    assert [position for position, _ in iter_batches(log[: len(first) + len(second)])] == [0, len(first)]


def test_valid_prefix_stops_before_garbage_and_a_bad_crc() -> None:
    batch = encode_batch(_records(3))
    damaged = bytearray(batch)
    damaged[-1] ^= 0xFF
    assert valid_prefix_bytes(batch + b"\x00" * 100) == len(batch)
    assert valid_prefix_bytes(batch + bytes(damaged) + batch) == len(batch)
    assert valid_prefix_bytes(b"") == 0
    assert valid_prefix_bytes(batch * 3) == 3 * len(batch)


# --- properties --------------------------------------------------------------------------------

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


def _only_corrupt_record_escapes(data: bytes) -> None:
    """Feed ``data`` to every reader; each either succeeds or raises CorruptRecordError."""
    for reader in (read_header, lambda buffer: list(iter_batches(buffer)), decode_records):
        with contextlib.suppress(CorruptRecordError):
            reader(data)
    prefix = valid_prefix_bytes(data)
    assert 0 <= prefix <= len(data)
    assert sum(header.size_bytes for _, header in iter_batches(data[:prefix])) == prefix


@given(st.binary(max_size=400))
def test_garbage_raises_only_corrupt_record(garbage: bytes) -> None:
    _only_corrupt_record_escapes(garbage)


@given(
    codec=st.sampled_from(CODECS),
    mutations=st.lists(st.tuples(st.floats(min_value=0, max_value=1, exclude_max=True), st.integers(0, 255)), max_size=4),
    cut=st.integers(min_value=0, max_value=20),
    fix_crc=st.booleans(),
)
def test_mutated_batches_raise_only_corrupt_record(
    codec: Compression, mutations: list[tuple[float, int]], cut: int, fix_crc: bool
) -> None:
    batch = bytearray(encode_batch(_records(4), compression=codec))
    for fraction, replacement in mutations:
        batch[int(fraction * len(batch))] = replacement
    mutated = bytes(batch[: len(batch) - cut])
    if fix_crc and len(mutated) >= HEADER_BYTES:
        mutated = _recrc(mutated)
    _only_corrupt_record_escapes(mutated)


@given(section=st.binary(max_size=200), records_count=st.integers(min_value=0, max_value=2**31 - 1))
def test_arbitrary_records_sections_raise_only_corrupt_record(section: bytes, records_count: int) -> None:
    batch = _with_records_section(encode_batch(_records(1)), section, records_count)
    try:
        records = decode_records(batch)
    except CorruptRecordError:
        return
    assert len(records) == records_count
