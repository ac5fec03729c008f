# -*- test-case-name: tests.unit.records.test_control -*-
"""Control batches: building the transaction markers (COMMIT, ABORT) a partition leader appends, and reading any control record.

A control batch is transactional, has attribute bit 5 set and holds one record whose key is
``version int16, type int16`` (Kafka's ``ControlRecordType``); a COMMIT or ABORT marker's value
is ``version int16, coordinatorEpoch int32``. The meaning of those bytes lives in ``markers``
(the partition log reads it there); this module builds markers and reads decoded records.
"""

from __future__ import annotations

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.markers import (
    CONTROL_KEY,
    CONTROL_VERSION,
    END_TRANSACTION_MARKER,
    ControlRecord,
    ControlType,
    interpret_control,
)
from mqbroker.records.record import Record

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_CONTROL_KEY = CONTROL_KEY
_END_TRANSACTION_MARKER = END_TRANSACTION_MARKER

__all__ = ["ControlRecord", "ControlType", "decode_control_record", "encode_control_batch"]


def encode_control_batch(
    control_type: ControlType, producer_id: int, producer_epoch: int, coordinator_epoch: int, timestamp_ms: int
) -> bytes:
    """A transaction marker: a transactional control batch holding one COMMIT or ABORT record."""
    assert control_type in (ControlType.COMMIT, ControlType.ABORT), control_type
    builder = BatchBuilder(
        producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True, is_control=True
    )
    key = _CONTROL_KEY.pack(CONTROL_VERSION, control_type)
    builder.append(timestamp_ms, key, _END_TRANSACTION_MARKER.pack(CONTROL_VERSION, coordinator_epoch))
    return builder.build()


def decode_control_record(record: Record) -> ControlRecord:
    """Read a control record's key (and a COMMIT/ABORT marker's value), as Kafka's client does."""
    return interpret_control(record.key, record.value)
