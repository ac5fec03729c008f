"""Delayed delivery: the deliver-at time of a record, read from its headers, pure.

Two record headers hold a record back from a share group (every protocol can set them: a record
header natively and over Kafka, a user property over MQTT 5, ``x-delay`` among an AMQP message's
headers):

- ``x-deliver-at``: epoch milliseconds, as decimal ASCII (``1767225600000``);
- ``x-delay``: milliseconds after the record's timestamp, as decimal ASCII (``30000``), RabbitMQ's
  delayed-message convention.

When both are present the later time wins; a value that is not a non-negative integer is ignored
(the record is delivered at once). A batch is only decoded when its bytes contain one of the
header names: a share group reading records without delays does no work per record.
"""

from __future__ import annotations

from mqbroker.records.builder import encode_batch
from mqbroker.records.compression import decompress
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import HEADER_BYTES, BatchHeader, iter_batches
from mqbroker.records.record import Record, RecordHeader

DELIVER_AT_HEADER = "x-deliver-at"
DELAY_HEADER = "x-delay"
_MARKERS = (DELIVER_AT_HEADER.encode(), DELAY_HEADER.encode())
#: Longest header value read as a number (an epoch in ms has 13 digits).
_NUMBER_LENGTH_MAX = 20


def _milliseconds(value: bytes | None) -> int | None:
    if value is None or not 0 < len(value) <= _NUMBER_LENGTH_MAX or not value.isdigit():
        return None
    return int(value)


def deliver_at_of(timestamp_ms: int, headers: tuple[RecordHeader, ...]) -> int | None:
    """The record's deliver-at time from its headers, or None if it has none."""
    times = []
    for name, value in headers:
        if name == DELIVER_AT_HEADER:
            at = _milliseconds(value)
        elif name == DELAY_HEADER:
            delay = _milliseconds(value)
            at = None if delay is None else timestamp_ms + delay
        else:
            continue
        if at is not None:
            times.append(at)
    return max(times) if times else None


def may_hold_delays(buffer: bytes, position: int, header: BatchHeader) -> bool:
    """Whether the batch at ``position`` could carry a delay header (False: certainly none)."""
    if header.is_control:
        return False
    start, end = position + HEADER_BYTES, position + header.size_bytes
    if header.compression:
        try:
            body = decompress(header.compression, buffer[start:end])
        except CorruptRecordError:
            return False  # the consumer reports the batch; nothing to schedule
        return any(marker in body for marker in _MARKERS)
    return any(buffer.find(marker, start, end) >= 0 for marker in _MARKERS)


def may_hold_delays_anywhere(buffer: bytes) -> bool:
    """Whether an uncompressed batch among ``buffer``'s could carry a delay header (False: certainly none). One
    search of a whole read, not two per batch: CPython searches a short haystack step by step where its bytes are
    the markers' letters (a body of ``xxx…`` cost ~6 µs a batch), a long one in linear time."""
    return any(marker in buffer for marker in _MARKERS)


def delayed_records(buffer: bytes, position: int, header: BatchHeader) -> list[tuple[Record, int]]:
    """The batch's records that have a deliver-at time, with it (none if the batch does not decode)."""
    if not may_hold_delays(buffer, position, header):
        return []
    try:
        records = decode_records(buffer[position : position + header.size_bytes])
    except CorruptRecordError:
        return []
    delayed = []
    for record in records:
        at = deliver_at_of(record.timestamp_ms, record.headers)
        if at is not None:
            delayed.append((record, at))
    return delayed


def one_record_batch(record: Record) -> bytes:
    """``record`` alone in a batch at its own offset (what a due record is served as)."""
    return encode_batch([record], base_offset=record.offset)


def record_batch_at(buffer: bytes, offset: int) -> bytes | None:
    """The record at ``offset`` among ``buffer``'s batches, alone in a batch (None: not there, or unreadable)."""
    try:
        for position, header in iter_batches(buffer, check=False):
            if header.is_control or not header.base_offset <= offset <= header.last_offset:
                continue
            for record in decode_records(buffer[position : position + header.size_bytes]):
                if record.offset == offset:
                    return one_record_batch(record)
    except CorruptRecordError:
        return None
    return None
