# -*- test-case-name: tests.unit.records.test_decoder -*-
"""Decoding record batches into records: for clients, front ends and the log cleaner, never the broker's hot path.

``decode_records`` checks one batch (header, CRC), decompresses its records section within a
bound and reads every record; ``decode_records_as`` builds the caller's own value per record.
Any malformed input raises ``CorruptRecordError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from mqbroker.records.compression import DECOMPRESSED_BYTES_MAX, decompress
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import (
    HEADER_BYTES,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    check_crc,
    read_header,
)
from mqbroker.records.record import Record, RecordHeader
from mqbroker.records.varint import read_varint

T = TypeVar("T")


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
    # The consumer's hot loop. Varints of one byte (and the record's and the value's lengths of
    # two) are decoded inline: they are nearly every varint in practice, and a call per field
    # would double the cost.
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
            if position + 1 < size and (byte := data[position]) < 0x80:
                length = (byte >> 1) ^ -(byte & 1)
                position += 1
            elif position + 1 < size and data[position + 1] < 0x80:
                unsigned = (data[position] & 0x7F) | data[position + 1] << 7
                length = (unsigned >> 1) ^ -(unsigned & 1)
                position += 2
            else:
                length, position = read_varint(data, position, size, 32)
            end = position + length
            if length < 0 or end > size:
                raise CorruptRecordError(f"record of {length} bytes at byte {position} runs past the records section")
            byte = data[position + 1]  # position holds the unused attributes byte
            if byte < 0x80 and position + 2 < end:
                timestamp_delta = (byte >> 1) ^ -(byte & 1)
                position += 2
            else:
                timestamp_delta, position = read_varint(data, position + 1, end, 64)
            byte = data[position]
            if byte < 0x80 and position + 1 < end:
                offset_delta = (byte >> 1) ^ -(byte & 1)
                position += 1
            else:
                offset_delta, position = read_varint(data, position, end, 32)
            if not previous_offset_delta < offset_delta <= last_offset_delta:
                raise CorruptRecordError(f"record offset delta {offset_delta} is out of order or past the batch's last")
            previous_offset_delta = offset_delta
            if data[position] == 1 and position + 1 < end:  # zig-zag 1 is -1: a null key
                key = None
                position += 1
            else:
                key, position = _read_nullable_bytes(data, position, end)
            byte = data[position]
            if 1 < byte < 0x80 and not byte & 1:  # a short value (a non-negative one-byte length)
                stop = position + 1 + (byte >> 1)
                if stop > end:
                    raise CorruptRecordError(f"field of {byte >> 1} bytes at byte {position + 1} runs past its record")
                value = data[position + 1 : stop]
                position = stop
            elif byte >= 0x80 and data[position + 1] < 0x80 and not byte & 1:  # a two-byte non-negative length
                stop = position + 2 + (((byte & 0x7F) | data[position + 1] << 7) >> 1)
                if stop > end:
                    raise CorruptRecordError(f"field of {stop - position - 2} bytes at byte {position + 2} runs past "
                                             "its record")
                value = data[position + 2 : stop]
                position = stop
            else:
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


def _read_nullable_bytes(data: bytes, position: int, end: int) -> tuple[bytes | None, int]:
    length, position = read_varint(data, position, end, 32)
    if length == -1:
        return None, position
    if length < -1 or position + length > end:
        raise CorruptRecordError(f"field of {length} bytes at byte {position} runs past its record")
    return data[position : position + length], position + length


def _read_headers(data: bytes, position: int, end: int) -> tuple[tuple[RecordHeader, ...], int]:
    count, position = read_varint(data, position, end, 32)
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
