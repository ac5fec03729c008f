# -*- test-case-name: tests.unit.records.test_header -*-
"""The batch header: reading it early, stamping it, its CRC, the valid prefix of a torn buffer, garbage."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.builder import encode_batch
from mqbroker.records.compression import Compression
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import HEADER_BYTES, check_crc, iter_batches, read_header, stamp, valid_prefix_bytes
from tests.unit.records.batchtools import CODECS, sample_records, with_fixed_crc


def test_stamp_sets_offsets_and_epoch_and_leaves_the_crc_valid() -> None:
    batch = bytearray(encode_batch(sample_records(3), compression=Compression.GZIP))
    stamp(batch, 0, base_offset=5000, leader_epoch=12)
    header = read_header(batch)
    check_crc(batch, 0, header)
    assert (header.base_offset, header.partition_leader_epoch, header.next_offset) == (5000, 12, 5003)
    assert [record.offset for record in decode_records(batch)] == [5000, 5001, 5002]


def test_a_header_can_be_read_before_the_rest_of_its_batch() -> None:
    batch = encode_batch(sample_records(3, base_offset=40), base_offset=40)
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        read_header(batch[:HEADER_BYTES])
    header = read_header(batch[:HEADER_BYTES], require_whole=False)
    assert header == read_header(batch) and header.size_bytes == len(batch)
    with pytest.raises(CorruptRecordError, match="truncated batch header"):
        read_header(batch[: HEADER_BYTES - 1], require_whole=False)
    with pytest.raises(CorruptRecordError, match="magic"):
        read_header(batch[:16] + b"\x01" + batch[17:HEADER_BYTES], require_whole=False)


def test_a_flipped_bit_fails_the_crc() -> None:
    batch = bytearray(encode_batch(sample_records(3)))
    batch[-5] ^= 0x01
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        check_crc(batch, 0, read_header(batch))
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        decode_records(batch)


def test_valid_prefix_stops_before_a_torn_batch() -> None:
    first, second, third = (encode_batch(sample_records(3)) for _ in range(3))
    log = first + second + third[:-7]
    assert valid_prefix_bytes(log) == len(first) + len(second)
    assert [position for position, _ in iter_batches(log[: len(first) + len(second)])] == [0, len(first)]


def test_valid_prefix_stops_before_garbage_and_a_bad_crc() -> None:
    batch = encode_batch(sample_records(3))
    damaged = bytearray(batch)
    damaged[-1] ^= 0xFF
    assert valid_prefix_bytes(batch + b"\x00" * 100) == len(batch)
    assert valid_prefix_bytes(batch + bytes(damaged) + batch) == len(batch)
    assert valid_prefix_bytes(b"") == 0
    assert valid_prefix_bytes(batch * 3) == 3 * len(batch)


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
    batch = bytearray(encode_batch(sample_records(4), compression=codec))
    for fraction, replacement in mutations:
        batch[int(fraction * len(batch))] = replacement
    mutated = bytes(batch[: len(batch) - cut])
    if fix_crc and len(mutated) >= HEADER_BYTES:
        mutated = with_fixed_crc(mutated)
    _only_corrupt_record_escapes(mutated)
