"""A record as applications see it: absolute offset, timestamp, key, value and headers.

Inside a batch a record is stored with varint fields (``builder`` writes them, ``decoder`` reads them)::

    length varint  attributes int8 (0)  timestampDelta varlong  offsetDelta varint
    keyLength varint (-1 null)  key  valueLength varint (-1 null)  value
    headersCount varint  [headerKeyLength varint  headerKey utf-8  headerValueLength varint  headerValue]
"""

from __future__ import annotations

from dataclasses import dataclass

#: One record header: a UTF-8 key and a nullable value (keys may repeat).
RecordHeader = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One decoded record, with its absolute offset and timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[RecordHeader, ...] = ()
