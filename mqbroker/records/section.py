# -*- test-case-name: tests.unit.records.test_section -*-
"""The records section of a batch decoded in Python: the reference for the compiled decoder, and the fallback.

``_section.c`` (built by setup.py as ``mqbroker.records._section``) is a line-for-line port of
``decode_section_python``: same arguments, same records, same ``CorruptRecordError`` messages.
``decoder`` uses the compiled one (about an eighth of the CPU per record: a consumer reading 100-byte
records was bound by this loop) and this one only where the extension is not built (no C compiler;
``decoder.COMPILED_SECTION_DECODER`` says which). This module stays the specification:
``tests/unit/records/test_section.py`` fuzzes the compiled decoder against it (valid, truncated,
mutated and garbage sections alike: equal rows, or the same error with the same message).
``decode_section_values_python`` is the reference of the compiled values-only entry point (a consumer's
``poll_values``), built on ``decode_section_python`` (``tests/unit/records/test_section_values.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.record import RecordHeader
from mqbroker.records.varint import read_varint


def decode_section_python(
    data: bytes,
    base_offset: int,
    base_timestamp: int,
    last_offset_delta: int,
    records_count: int,
    log_append_time: int | None,
    make: Callable[..., Any],
    leading: tuple[Any, ...] | None,
) -> list[Any]:
    """The records of ``data`` (a batch's decompressed records section) by the batch header's fields.

    Each record is ``make(offset, key, value, headers, timestamp_ms)``, or with ``leading`` a row
    of the tuple type ``make`` (``tuple`` or a ``NamedTuple`` class) holding ``leading`` and those fields.
    ``log_append_time`` (the batch's max timestamp, for a LOG_APPEND_TIME batch) replaces every
    record's timestamp. Malformed input raises ``CorruptRecordError``.
    """
    # Varints of one byte (and the record's and the value's lengths of two) are decoded inline:
    # they are nearly every varint in practice, and a call per field would double the cost.
    # Every position is still checked against the record's end; an index past the section
    # raises IndexError, reported as corruption.
    if leading is not None:  # a NamedTuple's __new__ fills it as the compiled decoder does, and costs less than _row
        make = functools.partial(_row, leading) if make is tuple else functools.partial(make, *leading)
    size = len(data)
    records: list[Any] = []
    append = records.append
    position = 0
    previous_offset_delta = -1
    try:
        for _ in range(records_count):
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
        raise CorruptRecordError(f"{size - position} bytes follow the batch's {records_count} records")
    return records


def decode_section_values_python(
    data: bytes, base_offset: int, last_offset_delta: int, records_count: int, start_offset: int, with_keys: bool,
) -> tuple[int | None, list[Any]]:
    """The reference of the compiled ``decode_section_values``: (the first kept record's offset or None, the values
    (``with_keys``: (key, value) pairs) of the records at or after ``start_offset``), every record checked as
    ``decode_section_python`` checks it."""
    rows = decode_section_python(data, base_offset, 0, last_offset_delta, records_count, None, tuple, ())
    kept = [row for row in rows if row[0] >= start_offset]
    first_offset = kept[0][0] if kept else None
    return first_offset, [(row[1], row[2]) for row in kept] if with_keys else [row[2] for row in kept]


def _row(leading: tuple[Any, ...], *fields: Any) -> tuple[Any, ...]:
    return leading + fields


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
