"""The records package's one error: bytes that are not a valid record batch."""

from __future__ import annotations


class CorruptRecordError(Exception):
    """Bytes that are not a valid RecordBatch v2 (bad size, magic, CRC or record framing)."""
