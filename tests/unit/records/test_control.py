# -*- test-case-name: tests.unit.records.test_control -*-
"""Control batches: transaction markers round trip; other, unknown and malformed control records."""

from __future__ import annotations

import struct

import pytest

from mqbroker.records.control import ControlRecord, ControlType, decode_control_record, encode_control_batch
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import check_crc, read_header
from mqbroker.records.record import Record


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
