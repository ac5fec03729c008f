# -*- test-case-name: tests.unit.records.test_control -*-
"""Control batches: the transaction markers (COMMIT, ABORT) a coordinator writes, and reading any control record.

A control batch is transactional, has attribute bit 5 set and holds one record whose key is
``version int16, type int16`` (Kafka's ``ControlRecordType``); a COMMIT or ABORT marker's value
is ``version int16, coordinatorEpoch int32``.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.record import Record

_CONTROL_KEY = struct.Struct(">hh")
_END_TRANSACTION_MARKER = struct.Struct(">hi")
_CONTROL_VERSION = 0


class ControlType(enum.IntEnum):
    """The type in a control record's key (Kafka's ``ControlRecordType``)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRecord:
    """The meaning of a control batch's record; ``coordinator_epoch`` is set for COMMIT and ABORT."""

    control_type: ControlType
    coordinator_epoch: int | None


def encode_control_batch(
    control_type: ControlType, producer_id: int, producer_epoch: int, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    """A transaction marker: a transactional control batch holding one COMMIT or ABORT record."""
    assert control_type in (ControlType.COMMIT, ControlType.ABORT), control_type
    builder = BatchBuilder(
        producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True, is_control=True
    )
    key = _CONTROL_KEY.pack(_CONTROL_VERSION, control_type)
    builder.append(timestamp_ms, key, _END_TRANSACTION_MARKER.pack(_CONTROL_VERSION, coordinator_epoch))
    return builder.build()


def decode_control_record(record: Record) -> ControlRecord:
    """Read a control record's key (and a COMMIT/ABORT marker's value), as Kafka's client does."""
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        raise CorruptRecordError("control record key shorter than its 4 bytes (version, type)")
    key_version, type_id = _CONTROL_KEY.unpack_from(record.key)
    if key_version < 0:
        raise CorruptRecordError(f"control record key has negative version {key_version}")
    if type_id not in (ControlType.COMMIT, ControlType.ABORT):
        try:
            control_type = ControlType(type_id)
        except ValueError:
            control_type = ControlType.UNKNOWN  # a newer type: Kafka's clients skip it too
        return ControlRecord(control_type=control_type, coordinator_epoch=None)
    if record.value is None or len(record.value) < _END_TRANSACTION_MARKER.size:
        raise CorruptRecordError("transaction marker value shorter than its 6 bytes (version, coordinator epoch)")
    value_version, coordinator_epoch = _END_TRANSACTION_MARKER.unpack_from(record.value)
    if value_version < 0:
        raise CorruptRecordError(f"transaction marker value has negative version {value_version}")
    return ControlRecord(control_type=ControlType(type_id), coordinator_epoch=coordinator_epoch)
