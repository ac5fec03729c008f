# -*- test-case-name: tests.unit.records.test_markers -*-
"""What a control batch means, read straight from its bytes: the one record a partition log ever looks into.

A control batch is transactional, has attribute bit 5 set and holds exactly one record whose
key is ``version int16, type int16`` (Kafka's ``ControlRecordType``); a COMMIT or ABORT
marker's value is ``version int16, coordinatorEpoch int32`` (``EndTransactionMarker``). The
partition log needs that meaning to keep its last stable offset and its aborted-transaction
index, on every append, follower copy and recovery replay; a marker is a whole batch and
rare, so reading its record here is per batch, never per record. Markers are written by
brokers, uncompressed, as Kafka writes them; a compressed control batch is refused as corrupt.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import HEADER_BYTES, BatchHeader
from mqbroker.records.varint import read_varint

CONTROL_KEY = struct.Struct(">hh")
END_TRANSACTION_MARKER = struct.Struct(">hi")
CONTROL_VERSION = 0


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

    @property
    def is_marker(self) -> bool:
        """True for a transaction marker (COMMIT or ABORT)."""
        return self.control_type in (ControlType.COMMIT, ControlType.ABORT)

    @property
    def committed(self) -> bool:
        """True for a COMMIT marker."""
        return self.control_type is ControlType.COMMIT


def interpret_control(key: bytes | memoryview | None, value: bytes | memoryview | None) -> ControlRecord:
    """A control record's key (and a marker's value), read as Kafka's client reads them.

    A negative version is corrupt; a newer version is read as version 0; an unknown type is
    ``UNKNOWN`` (Kafka's readers skip it too).
    """
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError("control record key shorter than its 4 bytes (version, type)")
    key_version, type_id = CONTROL_KEY.unpack_from(key)
    if key_version < 0:
        raise CorruptRecordError(f"control record key has negative version {key_version}")
    if type_id not in (ControlType.COMMIT, ControlType.ABORT):
        try:
            control_type = ControlType(type_id)
        except ValueError:
            control_type = ControlType.UNKNOWN
        return ControlRecord(control_type=control_type, coordinator_epoch=None)
    if value is None or len(value) < END_TRANSACTION_MARKER.size:
        raise CorruptRecordError("transaction marker value shorter than its 6 bytes (version, coordinator epoch)")
    value_version, coordinator_epoch = END_TRANSACTION_MARKER.unpack_from(value)
    if value_version < 0:
        raise CorruptRecordError(f"transaction marker value has negative version {value_version}")
    return ControlRecord(control_type=ControlType(type_id), coordinator_epoch=coordinator_epoch)


def read_control(buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader) -> ControlRecord:
    """The meaning of the control batch at ``position`` (whole in ``buffer``), from its single record.

    Raises ``CorruptRecordError`` for a batch that is not an uncompressed control batch with
    exactly one well-framed record.
    """
    if not header.is_control:
        raise CorruptRecordError("not a control batch")
    if header.compression or header.records_count != 1:
        raise CorruptRecordError(
            f"control batch with compression {header.compression} and {header.records_count} records; "
            "a marker is one uncompressed record"
        )
    view = memoryview(buffer)
    start, end = position + HEADER_BYTES, position + header.size_bytes
    if end > len(view):
        raise CorruptRecordError("control batch runs past the end of the buffer")
    length, cursor = read_varint(view, start, end, 32)
    if length < 0 or cursor + length != end:
        raise CorruptRecordError(f"control record of {length} bytes does not fill its batch")
    cursor += 1  # the unused attributes byte
    _, cursor = read_varint(view, cursor, end, 64)  # timestamp delta
    _, cursor = read_varint(view, cursor, end, 32)  # offset delta
    key, cursor = _nullable(view, cursor, end)
    value, _ = _nullable(view, cursor, end)
    return interpret_control(key, value)


def _nullable(view: memoryview, position: int, end: int) -> tuple[memoryview | None, int]:
    length, position = read_varint(view, position, end, 32)
    if length == -1:
        return None, position
    if length < -1 or position + length > end:
        raise CorruptRecordError(f"control record field of {length} bytes runs past its record")
    return view[position : position + length], position + length
