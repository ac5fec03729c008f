# -*- test-case-name: tests.unit.records.test_decoder -*-
"""Decoding record batches into records: for clients, front ends and the log cleaner, never the broker's hot path.

``decode_records`` checks one batch (header, CRC), decompresses its records section within a
bound and reads every record; ``decode_records_as`` builds the caller's own value per record,
``decode_rows`` the caller's tuple type with no Python call per record (a consumer's messages),
``decode_values`` only the values (or (key, value) pairs): no offset, timestamp or row object per record.
Any malformed input raises ``CorruptRecordError``.

The records section is read by the compiled decoder (``_section.c``) when it is built, else by
its reference, ``section.decode_section_python`` (for values, ``section.decode_section_values_python``);
``COMPILED_SECTION_DECODER`` says which.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mqbroker.records.compression import DECOMPRESSED_BYTES_MAX, decompress
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import (
    HEADER_BYTES,
    TIMESTAMP_TYPE_MASK,
    check_crc,
    read_header,
)
from mqbroker.records.record import Record, RecordHeader
from mqbroker.records.section import decode_section_python, decode_section_values_python


try:
    from mqbroker.records._section import decode_section, decode_section_values
except ImportError:  # built without a C compiler: the reference decoders, slower but the same records and errors
    decode_section = decode_section_python
    decode_section_values = decode_section_values_python

#: True when the records section is read by the compiled decoder (a consumer then reads several times faster).
COMPILED_SECTION_DECODER = decode_section is not decode_section_python

T = TypeVar("T")
TupleT = TypeVar("TupleT", bound=tuple[Any, ...])


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
    return decode_section(*_section_arguments(batch, decompressed_bytes_max), make, None)


def decode_rows(
    batch: bytes | bytearray | memoryview,
    row_type: type[TupleT],
    leading: tuple[Any, ...],
    *,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX,
) -> list[TupleT]:
    """``decode_records``, each record as a ``row_type`` holding ``(*leading, offset, key, value, headers, timestamp_ms)``.

    ``row_type`` is ``tuple`` or a ``NamedTuple`` class. The compiled decoder fills the rows with no
    Python call per record, and leaves them out of the cyclic garbage collector when nothing in them
    can hold a cycle (``leading`` of untracked values such as str and int, a row type without
    ``__dict__``): a consumer's rows then cost no full collection anything.
    """
    return decode_section(*_section_arguments(batch, decompressed_bytes_max), row_type, leading)


def decode_values(
    batch: bytes | bytearray | memoryview, start_offset: int, with_keys: bool = False, *,
    decompressed_bytes_max: int = DECOMPRESSED_BYTES_MAX,
) -> tuple[int | None, list[Any]]:
    """``decode_records`` reduced to (the first offset, the values) of the records at or after ``start_offset``;
    with ``with_keys`` each value is a (key, value) pair. The first offset is None when no record is kept.

    The compiled decoder builds no offset, timestamp, headers or row object per record: only the value bytes.
    The batch and every record are checked as ``decode_records`` checks them.
    """
    section, base_offset, _, last_offset_delta, records_count, _ = _section_arguments(batch, decompressed_bytes_max)
    return decode_section_values(section, base_offset, last_offset_delta, records_count, start_offset, with_keys)


def _section_arguments(
    batch: bytes | bytearray | memoryview, decompressed_bytes_max: int,
) -> tuple[bytes, int, int, int, int, int | None]:
    """``decode_section``'s first arguments for exactly one batch, its CRC checked: the decompressed records section,
    base offset, base timestamp, last offset delta, records count and LOG_APPEND_TIME timestamp (or None)."""
    header = read_header(batch)
    if header.size_bytes != len(batch):
        raise CorruptRecordError(f"{len(batch) - header.size_bytes} bytes follow the batch; pass exactly one batch")
    check_crc(batch, 0, header)
    section = decompress(header.compression, bytes(memoryview(batch)[HEADER_BYTES:]), decompressed_bytes_max)
    log_append_time = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    return (section, header.base_offset, header.base_timestamp, header.last_offset_delta, header.records_count,
            log_append_time)
