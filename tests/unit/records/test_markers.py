"""Markers read straight from a control batch's bytes (what the partition log does), and garbage refused."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.compression import Compression
from mqbroker.records.control import encode_control_batch
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import read_header
from mqbroker.records.markers import ControlRecord, ControlType, read_control


@pytest.mark.parametrize("kind", [ControlType.COMMIT, ControlType.ABORT], ids=lambda kind: kind.name)
def test_a_marker_is_read_from_its_batch(kind):
    batch = encode_control_batch(kind, producer_id=3, producer_epoch=1, coordinator_epoch=42, timestamp_ms=7)
    control = read_control(batch, 0, read_header(batch))
    assert control == ControlRecord(control_type=kind, coordinator_epoch=42)
    assert control.is_marker and control.committed is (kind is ControlType.COMMIT)


def test_a_marker_is_read_at_its_position_in_a_buffer():
    batch = encode_control_batch(ControlType.ABORT, 3, 1, 2, 7)
    buffer = b"\x00" * 13 + batch
    assert read_control(buffer, 13, read_header(buffer, 13)).control_type is ControlType.ABORT


def _control_batch(key: bytes, value: bytes | None, compression: Compression = Compression.NONE) -> bytes:
    builder = BatchBuilder(is_transactional=True, is_control=True, compression=compression)
    builder.append(0, key, value)
    return builder.build()


def test_other_control_types_are_not_markers_and_compressed_or_data_batches_are_refused():
    leader_change = _control_batch(struct.pack(">hh", 0, 2), b"x")
    assert not read_control(leader_change, 0, read_header(leader_change)).is_marker
    compressed = _control_batch(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 1), Compression.GZIP)
    with pytest.raises(CorruptRecordError):
        read_control(compressed, 0, read_header(compressed))
    data = BatchBuilder()
    data.append(0, None, b"v")
    plain = data.build()
    with pytest.raises(CorruptRecordError):
        read_control(plain, 0, read_header(plain))


@given(st.binary(max_size=64), st.one_of(st.none(), st.binary(max_size=16)))
def test_garbage_keys_and_values_are_corrupt_or_read(key, value):
    batch = _control_batch(key, value)
    try:
        control = read_control(batch, 0, read_header(batch))
    except CorruptRecordError:
        return
    assert isinstance(control.control_type, ControlType)


@given(st.binary(min_size=1, max_size=40), st.integers(0, 60))
def test_a_garbled_records_section_is_corrupt_or_read(garbage, cut):
    batch = bytearray(encode_control_batch(ControlType.COMMIT, 1, 0, 0, 0))
    body = bytes(batch[61:])
    mutated = bytes(batch[:61]) + (garbage + body)[: max(1, len(body) - cut % len(body))]
    struct.pack_into(">i", bytearray(mutated), 8, len(mutated) - 12)
    fixed = bytearray(mutated)
    struct.pack_into(">i", fixed, 8, len(fixed) - 12)
    try:
        read_control(bytes(fixed), 0, read_header(bytes(fixed)))
    except CorruptRecordError:
        pass
