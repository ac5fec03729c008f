# -*- test-case-name: tests.unit.records.test_header -*-
"""The 61-byte RecordBatch v2 header: read and validate it, stamp it, walk a buffer of batches.

Header layout (big-endian), byte offsets in brackets::

    baseOffset int64 [0]   batchLength int32 [8]   partitionLeaderEpoch int32 [12]
    magic int8 [16]        crc uint32 [17]         attributes int16 [21]
    lastOffsetDelta int32 [23]  baseTimestamp int64 [27]  maxTimestamp int64 [35]
    producerId int64 [43]  producerEpoch int16 [51]  baseSequence int32 [53]
    recordsCount int32 [57]  records [61...]

The CRC-32C covers bytes [21, end), so the broker can stamp the base offset and the
leader epoch in place without recomputing it. This module is the broker's whole view of a
batch on the produce and fetch paths: it never decodes records there (``decoder`` does, for
clients and the log cleaner).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from mqbroker.records.errors import CorruptRecordError

MAGIC = 2
HEADER_BYTES = 61
#: baseOffset + batchLength: the bytes not counted by batchLength.
LOG_OVERHEAD_BYTES = 12
CRC_START = 21
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

_HEADER = struct.Struct(">qiibIhiqqqhii")
#: The header up to the CRC and from the attributes on: a builder packs the second, then the first.
HEADER_BEFORE_CRC = struct.Struct(">qiibI")
HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
assert _HEADER.size == HEADER_BYTES
assert HEADER_BEFORE_CRC.size == CRC_START and HEADER_BEFORE_CRC.size + HEADER_AFTER_CRC.size == HEADER_BYTES


class TimestampType(enum.IntEnum):
    """Attribute bit 3: who set the records' timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The decoded 61-byte header of one record batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        """Total bytes of the batch, header included."""
        return self.batch_length + LOG_OVERHEAD_BYTES

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record (kept through compaction)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset that follows this batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        """Compression codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        """True for a batch written inside a transaction."""
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        """True for a control batch (transaction markers); never shown to applications."""
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the cleaner may drop this batch's tombstones (attribute bit 6; stored as the base timestamp)."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record, wrapping after int32 max as Kafka does."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(
    buffer: bytes | bytearray | memoryview, position: int = 0, *, require_whole: bool = True
) -> BatchHeader:
    """Decode the header at ``position`` and check that it is sane (and, by default, that the whole batch is present).

    Raises ``CorruptRecordError`` for a short buffer, a bad length or magic. With
    ``require_whole`` False only the 61 header bytes need be in ``buffer``: walking a file
    needs a batch's bounds before its body is read. The CRC is checked separately by
    ``check_crc`` because scanning a trusted segment does not need it.
    """
    available = len(buffer) - position
    if available < HEADER_BYTES:
        raise CorruptRecordError(f"truncated batch header at byte {position}: {available} of {HEADER_BYTES} bytes")
    header = BatchHeader(*_HEADER.unpack_from(buffer, position))
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported batch magic {header.magic}; only magic {MAGIC} is stored")
    if header.batch_length < HEADER_BYTES - LOG_OVERHEAD_BYTES:
        raise CorruptRecordError(f"batch length {header.batch_length} is shorter than a header")
    if require_whole and header.size_bytes > available:
        raise CorruptRecordError(f"truncated batch: {available} of {header.size_bytes} bytes present")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError("negative last offset delta or record count")
    return header


def compute_crc(buffer: bytes | bytearray | memoryview, position: int, size_bytes: int) -> int:
    """CRC-32C of the batch at ``position`` over the bytes the header's CRC covers."""
    view = memoryview(buffer)[position + CRC_START : position + size_bytes]
    return crc32c.crc32c(view)


def check_crc(buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader) -> None:
    """Raise ``CorruptRecordError`` unless the stored CRC matches the batch's bytes."""
    actual = compute_crc(buffer, position, header.size_bytes)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at byte {position} fails its CRC-32C check (stored {header.crc:#010x}, computed {actual:#010x})"
        )


def iter_batches(buffer: bytes | bytearray | memoryview, check: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for every batch in ``buffer``, which must hold whole batches.

    With ``check`` every batch's CRC is verified. Raises ``CorruptRecordError`` at the first
    bad batch; use ``valid_prefix_bytes`` to find how far a possibly torn buffer is good.
    """
    position = 0
    end = len(buffer)
    while position < end:
        header = read_header(buffer, position)
        if check:
            check_crc(buffer, position, header)
        yield position, header
        position += header.size_bytes


def stamp(buffer: bytearray | memoryview, position: int, base_offset: int, leader_epoch: int) -> None:
    """Write the base offset and leader epoch into the batch at ``position`` (outside the CRC)."""
    _BASE_OFFSET.pack_into(buffer, position, base_offset)
    _LEADER_EPOCH.pack_into(buffer, position + 12, leader_epoch)


def stamped_header(header: BatchHeader, base_offset: int, leader_epoch: int) -> BatchHeader:
    """``header`` as `stamp` rewrites it (built positionally: this is the broker's append path)."""
    return BatchHeader(
        base_offset,
        header.batch_length,
        leader_epoch,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )


def stamped_pieces(buffer: memoryview, batches: list[tuple[int, BatchHeader]]) -> list[bytes | memoryview]:
    """The batches of ``buffer`` as (stamped header copy, untouched body) pieces for one vectored write.

    Each ``header`` holds the base offset and leader epoch to stamp; the bodies are never copied.
    """
    pieces: list[bytes | memoryview] = []
    for position, header in batches:
        head = bytearray(buffer[position : position + HEADER_BYTES])
        stamp(head, 0, header.base_offset, header.partition_leader_epoch)
        pieces += (head, buffer[position + HEADER_BYTES : position + header.size_bytes])
    return pieces


def valid_prefix_bytes(buffer: bytes | bytearray | memoryview) -> int:
    """How many leading bytes of ``buffer`` are whole batches with good CRCs (recovery's cut point)."""
    valid_bytes = 0
    try:
        for position, header in iter_batches(buffer):
            valid_bytes = position + header.size_bytes
    except CorruptRecordError:
        return valid_bytes  # a torn or garbage tail: everything before it is good
    return valid_bytes
