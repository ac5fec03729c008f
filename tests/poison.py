"""Poison batches: framing and CRC-32C right, records garbage (what the log accepts but readers cannot decode)."""

from __future__ import annotations

import struct

from mqbroker.records.batch import HEADER_BYTES, compute_crc
from tests.unit.storage.logtools import make_batch

#: The issue's example: 19 bytes that are no record, after a 61-byte header (80 bytes in all).
GARBAGE_RECORDS = bytes.fromhex("ffffffffffffffffff0123456789abcdef0011")


def poison_batch(garbage: bytes = GARBAGE_RECORDS, records_count: int = 1) -> bytes:
    """A batch with a valid header and CRC whose records section is ``garbage``."""
    header = bytearray(make_batch([b"x"])[:HEADER_BYTES])
    struct.pack_into(">i", header, 8, HEADER_BYTES - 12 + len(garbage))  # batchLength
    struct.pack_into(">i", header, 23, records_count - 1)  # lastOffsetDelta
    struct.pack_into(">i", header, 57, records_count)  # recordsCount
    batch = bytearray(bytes(header) + garbage)
    struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
    return bytes(batch)
