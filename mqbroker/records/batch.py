# -*- test-case-name: tests.unit.records.test_batch -*-
"""RecordBatch v2: the on-disk and on-wire unit of storage (magic 2, 61-byte header).

Header layout (big-endian), byte offsets in brackets::

    baseOffset int64 [0]   batchLength int32 [8]   partitionLeaderEpoch int32 [12]
    magic int8 [16]        crc uint32 [17]         attributes int16 [21]
    lastOffsetDelta int32 [23]  baseTimestamp int64 [27]  maxTimestamp int64 [35]
    producerId int64 [43]  producerEpoch int16 [51]  baseSequence int32 [53]
    recordsCount int32 [57]  records [61...]

The CRC-32C covers bytes [21, end), so the broker can stamp the base offset and the
leader epoch in place without recomputing it. This module's header functions are the
broker's whole view of a batch on the produce and fetch paths: it never decodes records there.

The rest of the module is the record codec the clients (and the log cleaner) use:
``BatchBuilder`` encodes records straight into bytes on the producer's hot path,
``decode_records`` turns a batch back into ``Record`` values, and the control-batch helpers
write and read transaction markers. Records use zig-zag varints (protobuf ``sint32`` /
``sint64``, Kafka's ``ByteUtils.writeVarint``)::

    length varint  attributes int8 (0)  timestampDelta varlong  offsetDelta varint
    keyLength varint (-1 null)  key  valueLength varint (-1 null)  value
    headersCount varint  [headerKeyLength varint  headerKey utf-8  headerValueLength varint  headerValue]
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import crc32c

from mqbroker.records.compression import DECOMPRESSED_BYTES_MAX, Compression, compress, decompress
from mqbroker.records.errors import CorruptRecordError

MAGIC = 2
HEADER_BYTES = 61
#: baseOffset + batchLength: the bytes not counted by batchLength.
LOG_OVERHEAD_BYTES = 12
#: Most bytes a record adds beyond its key, value and header bytes: length, attributes,
#: timestamp delta, offset delta (Kafka's 21) plus the key length, value length and header count.
RECORD_OVERHEAD_BYTES_MAX = 21 + 5 + 5 + 5
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
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
assert _HEADER.size == HEADER_BYTES


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


def valid_prefix_bytes(buffer: bytes | bytearray | memoryview) -> int:
    """How many leading bytes of ``buffer`` are whole batches with good CRCs (recovery's cut point)."""
    valid_bytes = 0
    try:
        for position, header in iter_batches(buffer):
            valid_bytes = position + header.size_bytes
    except CorruptRecordError:
        return valid_bytes  # a torn or garbage tail: everything before it is good
    return valid_bytes


# --- records: the client side of the format -------------------------------------------------


class TimestampType(enum.IntEnum):
    """Attribute bit 3: who set the records' timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


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


RecordHeader = tuple[str, bytes | None]
T = TypeVar("T")


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One decoded record, with its absolute offset and timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[RecordHeader, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRecord:
    """The meaning of a control batch's record; ``coordinator_epoch`` is set for COMMIT and ABORT."""

    control_type: ControlType
    coordinator_epoch: int | None


_HEADER_BEFORE_CRC = struct.Struct(">qiibI")
_HEADER_AFTER_CRC = struct.Struct(">hiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")
_END_TRANSACTION_MARKER = struct.Struct(">hi")
_CONTROL_VERSION = 0
assert _HEADER_BEFORE_CRC.size == CRC_START and _HEADER_BEFORE_CRC.size + _HEADER_AFTER_CRC.size == HEADER_BYTES

_INT32_MAX = (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _zigzag_varint(value: int) -> bytes:
    """Zig-zag encode ``value`` (an int64) into 7-bit little-endian groups, high bit = more follow."""
    assert _INT64_MIN <= value <= _INT64_MAX, value
    unsigned = (value << 1) ^ (value >> 63)
    groups = bytearray()
    while unsigned >= 0x80:
        groups.append(unsigned & 0x7F | 0x80)
        unsigned >>= 7
    groups.append(unsigned)
    return bytes(groups)


# Lengths and deltas are nearly always small: look their encodings up instead of computing them.
_SMALL_VARINTS: dict[int, bytes] = {value: _zigzag_varint(value) for value in range(-1, 1 << 14)}
# The record attributes byte is always 0, so it is stored with the timestamp delta that follows it.
_ATTRIBUTES_AND_TIMESTAMP_DELTAS: dict[int, bytes] = {
    delta: b"\x00" + encoded for delta, encoded in _SMALL_VARINTS.items()
}
_NULL_LENGTH = _SMALL_VARINTS[-1]
_NO_HEADERS = _SMALL_VARINTS[0]


def _encode_headers(headers: Sequence[RecordHeader]) -> bytes:
    parts = [_SMALL_VARINTS.get(len(headers)) or _zigzag_varint(len(headers))]
    for header_key, header_value in headers:
        encoded_key = header_key.encode()
        parts.append(_SMALL_VARINTS.get(len(encoded_key)) or _zigzag_varint(len(encoded_key)))
        parts.append(encoded_key)
        if header_value is None:
            parts.append(_NULL_LENGTH)
        else:
            parts.append(_SMALL_VARINTS.get(len(header_value)) or _zigzag_varint(len(header_value)))
            parts.append(header_value)
    return b"".join(parts)


def _encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[RecordHeader],
) -> bytes:
    """One record, length prefix included; the per-record cost of every producer."""
    body = b"".join(
        (
            _ATTRIBUTES_AND_TIMESTAMP_DELTAS.get(timestamp_delta) or b"\x00" + _zigzag_varint(timestamp_delta),
            _SMALL_VARINTS.get(offset_delta) or _zigzag_varint(offset_delta),
            _NULL_LENGTH if key is None else _SMALL_VARINTS.get(len(key)) or _zigzag_varint(len(key)),
            key or b"",
            _NULL_LENGTH if value is None else _SMALL_VARINTS.get(len(value)) or _zigzag_varint(len(value)),
            value or b"",
            _encode_headers(headers) if headers else _NO_HEADERS,
        )
    )
    return (_SMALL_VARINTS.get(len(body)) or _zigzag_varint(len(body))) + body


def _attributes(compression: Compression, timestamp_type: TimestampType, is_transactional: bool, is_control: bool) -> int:
    attributes = compression | (TIMESTAMP_TYPE_MASK if timestamp_type is TimestampType.LOG_APPEND_TIME else 0)
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    return attributes


class BatchBuilder:
    """Encodes records into one batch as they are appended; ``build()`` returns the batch bytes.

    This is the producer's hot path, so ``append`` goes straight from arguments to bytes. The
    first record's timestamp becomes the batch's base timestamp. ``size_bytes`` (uncompressed)
    tells the producer when the batch is full.

    The log cleaner rewrites batches with three more options, as Kafka's cleaner does:
    ``last_offset_delta`` keeps the original batch's last offset (and so its producer's last
    sequence) when records are removed, and lets ``build`` write a header-only batch with no
    records; ``max_timestamp_ms`` keeps the original max timestamp; ``delete_horizon_ms`` sets
    attribute bit 6 and stores the horizon as the base timestamp (record timestamps stay deltas
    from it, so they decode unchanged).
    """

    __slots__ = (
        "_attributes",
        "_base_offset",
        "_base_sequence",
        "_base_timestamp",
        "_compression",
        "_fixed_last_offset_delta",
        "_last_offset_delta",
        "_max_timestamp",
        "_partition_leader_epoch",
        "_producer_epoch",
        "_producer_id",
        "_records",
        "_size_bytes",
    )

    def __init__(
        self,
        *,
        base_offset: int = 0,
        compression: Compression = Compression.NONE,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        last_offset_delta: int | None = None,
        max_timestamp_ms: int = NO_TIMESTAMP,
        delete_horizon_ms: int | None = None,
    ) -> None:
        assert last_offset_delta is None or 0 <= last_offset_delta <= _INT32_MAX, last_offset_delta
        self._compression = Compression(compression)
        self._attributes = _attributes(self._compression, TimestampType(timestamp_type), is_transactional, is_control)
        if delete_horizon_ms is not None:
            self._attributes |= DELETE_HORIZON_MASK
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._partition_leader_epoch = partition_leader_epoch
        self._records: list[bytes] = []
        self._last_offset_delta = -1
        self._fixed_last_offset_delta = last_offset_delta
        self._base_timestamp = NO_TIMESTAMP if delete_horizon_ms is None else delete_horizon_ms
        self._max_timestamp = max_timestamp_ms
        self._size_bytes = HEADER_BYTES

    @property
    def records_count(self) -> int:
        """Records appended so far."""
        return len(self._records)

    @property
    def size_bytes(self) -> int:
        """Bytes of the batch built now, before compression."""
        return self._size_bytes

    def append(
        self, timestamp_ms: int, key: bytes | None, value: bytes | None, headers: Sequence[RecordHeader] = ()
    ) -> None:
        """Add a record at the next offset."""
        self.append_at(self._last_offset_delta + 1, timestamp_ms, key, value, headers)

    def append_at(
        self,
        offset_delta: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[RecordHeader] = (),
    ) -> None:
        """Add a record ``offset_delta`` past the base offset; compaction rewrites batches with gaps."""
        highest = _INT32_MAX if self._fixed_last_offset_delta is None else self._fixed_last_offset_delta
        assert self._last_offset_delta < offset_delta <= highest, (self._last_offset_delta, offset_delta)
        if not self._records and not self._attributes & DELETE_HORIZON_MASK:
            self._base_timestamp = timestamp_ms
        if timestamp_ms > self._max_timestamp:
            self._max_timestamp = timestamp_ms
        record = _encode_record(offset_delta, timestamp_ms - self._base_timestamp, key, value, headers)
        self._records.append(record)
        self._last_offset_delta = offset_delta
        self._size_bytes += len(record)

    def build(self) -> bytes:
        """The finished batch: header, CRC-32C and (compressed) records.

        A batch without records is only built with a fixed ``last_offset_delta`` (the
        cleaner's header-only batch); it has no records section, so no compression either.
        """
        last_offset_delta, attributes, base_timestamp = self._last_offset_delta, self._attributes, self._base_timestamp
        if self._fixed_last_offset_delta is not None:
            last_offset_delta = self._fixed_last_offset_delta
        if self._records:
            records_section = compress(self._compression, b"".join(self._records))
        else:
            assert self._fixed_last_offset_delta is not None, "only a header-only batch of the cleaner holds no record"
            records_section = b""
            attributes &= ~COMPRESSION_MASK
            if not attributes & DELETE_HORIZON_MASK:
                base_timestamp = self._max_timestamp  # Kafka's empty header: both timestamps the original max
        after_crc = _HEADER_AFTER_CRC.pack(
            attributes,
            last_offset_delta,
            base_timestamp,
            self._max_timestamp,
            self._producer_id,
            self._producer_epoch,
            self._base_sequence,
            len(self._records),
        )
        crc = crc32c.crc32c(records_section, crc32c.crc32c(after_crc))
        batch_length = HEADER_BYTES - LOG_OVERHEAD_BYTES + len(records_section)
        before_crc = _HEADER_BEFORE_CRC.pack(self._base_offset, batch_length, self._partition_leader_epoch, MAGIC, crc)
        return b"".join((before_crc, after_crc, records_section))


def encode_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
) -> bytes:
    """Encode records, whose offsets must increase from ``base_offset``, into one batch."""
    builder = BatchBuilder(
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        partition_leader_epoch=partition_leader_epoch,
        timestamp_type=timestamp_type,
    )
    for record in records:
        builder.append_at(record.offset - base_offset, record.timestamp_ms, record.key, record.value, record.headers)
    return builder.build()


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


def decode_records(
    batch: bytes | bytearray | memoryview, *, decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX
) -> list[Record]:
    """Check and decode exactly one batch into records with absolute offsets and timestamps.

    Any malformed input (bad header, CRC, compression, varint, length, count or trailing
    bytes) raises ``CorruptRecordError``; decompression stops at ``decompressed_bytes_max``.
    """
    return decode_records_as(batch, _make_record, decompressed_bytes_max=decompressed_bytes_max)


def _make_record(
    offset: int, key: bytes | None, value: bytes | None, headers: tuple[RecordHeader, ...], timestamp_ms: int
) -> Record:
    return Record(offset=offset, timestamp_ms=timestamp_ms, key=key, value=value, headers=headers)


def decode_records_as(
    batch: bytes | bytearray | memoryview,
    make: Callable[[int, bytes | None, bytes | None, tuple[RecordHeader, ...], int], T],
    *,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX,
) -> list[T]:
    """``decode_records``, building each record with ``make(offset, key, value, headers, timestamp_ms)``.

    For callers that want their own value per record (a consumer's message tuple) without
    building a ``Record`` first: on a consumer's hot path that halves the work per record.
    """
    header = read_header(batch)
    if header.size_bytes != len(batch):
        raise CorruptRecordError(f"{len(batch) - header.size_bytes} bytes follow the batch; pass exactly one batch")
    check_crc(batch, 0, header)
    section = decompress(header.compression, bytes(memoryview(batch)[HEADER_BYTES:]), decompressed_bytes_max)
    return _decode_section(section, header, make)


def _decode_section(
    data: bytes, header: BatchHeader, make: Callable[[int, bytes | None, bytes | None, tuple[RecordHeader, ...], int], T]
) -> list[T]:
    # The consumer's hot loop. Varints of one byte (and lengths of two) are decoded inline:
    # they are nearly every varint in practice, and a call per field would double the cost.
    # Every position is still checked against the record's end; an index past the section
    # raises IndexError, reported as corruption.
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    base_offset, base_timestamp, last_offset_delta = header.base_offset, header.base_timestamp, header.last_offset_delta
    size = len(data)
    records: list[T] = []
    append = records.append
    position = 0
    previous_offset_delta = -1
    try:
        for _ in range(header.records_count):
            length, position = _read_varint(data, position, size, 32)
            end = position + length
            if length < 0 or end > size:
                raise CorruptRecordError(f"record of {length} bytes at byte {position} runs past the records section")
            byte = data[position + 1]  # position holds the unused attributes byte
            if byte < 0x80 and position + 2 < end:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                position += 2
            else:
                timestamp_delta, position = _read_varint(data, position + 1, end, 64)
            byte = data[position]
            if byte < 0x80 and position + 1 < end:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                position += 1
            else:
                offset_delta, position = _read_varint(data, position, end, 32)
            if not previous_offset_delta < offset_delta <= last_offset_delta:
                raise CorruptRecordError(f"record offset delta {offset_delta} is out of order or past the batch's last")
            previous_offset_delta = offset_delta
            if data[position] == 1 and position + 1 < end:  # zig-zag 1 is -1: a null key
                key = None
                position += 1
            else:
                key, position = _read_nullable_bytes(data, position, end)
            value, position = _read_nullable_bytes(data, position, end)
            if position + 1 == end and data[position] == 0:  # the common case: no headers
                headers: tuple[RecordHeader, ...] = ()
                position = end
            else:
                headers, position = _read_headers(data, position, end)
            if position != end:
                raise CorruptRecordError(f"record ends at byte {position} but its length says {end}")
            timestamp_ms = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
            append(make(base_offset + offset_delta, key, value, headers, timestamp_ms))
    except IndexError:
        raise CorruptRecordError("a record runs past the end of the records section") from None
    if position != size:
        raise CorruptRecordError(f"{size - position} bytes follow the batch's {header.records_count} records")
    return records


def _read_varint(data: bytes, position: int, end: int, bits: int) -> tuple[int, int]:
    """Read a zig-zag varint of at most ``bits`` bits that must end before ``end``."""
    # Fast paths: deltas, counts and record lengths nearly always fit one or two bytes.
    if position + 1 < end:
        first, second = data[position], data[position + 1]
        if first < 0x80:
            return (first >> 1) ^ -(first & 1), position + 1
        if second < 0x80:
            unsigned = (first & 0x7F) | (second << 7)
            return (unsigned >> 1) ^ -(unsigned & 1), position + 2
    unsigned = 0
    shift = 0
    index = position
    limit = min(end, position + (bits + 6) // 7)
    while index < limit:
        byte = data[index]
        index += 1
        unsigned |= (byte & 0x7F) << shift
        if byte < 0x80:
            if unsigned >> bits:
                break
            return (unsigned >> 1) ^ -(unsigned & 1), index
        shift += 7
    raise CorruptRecordError(f"bad {bits}-bit varint at byte {position}: truncated, too long or out of range")


def _read_nullable_bytes(data: bytes, position: int, end: int) -> tuple[bytes | None, int]:
    length, position = _read_varint(data, position, end, 32)
    if length == -1:
        return None, position
    if length < -1 or position + length > end:
        raise CorruptRecordError(f"field of {length} bytes at byte {position} runs past its record")
    return data[position : position + length], position + length


def _read_headers(data: bytes, position: int, end: int) -> tuple[tuple[RecordHeader, ...], int]:
    count, position = _read_varint(data, position, end, 32)
    if count < 0:
        raise CorruptRecordError(f"negative record header count {count}")
    headers = []
    for _ in range(count):
        header_key, position = _read_nullable_bytes(data, position, end)
        if header_key is None:
            raise CorruptRecordError("record header with a null key")
        try:
            decoded_key = header_key.decode()
        except UnicodeDecodeError as error:
            raise CorruptRecordError(f"record header key is not UTF-8: {error}") from error
        header_value, position = _read_nullable_bytes(data, position, end)
        headers.append((decoded_key, header_value))
    return tuple(headers), position
