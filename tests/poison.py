"""Poison batches: framing and CRC-32C right, records garbage (what the log accepts but readers cannot decode)."""

from __future__ import annotations

import struct

from tests.unit.records.batchtools import with_fixed_crc, with_records_section
from tests.unit.storage.logtools import make_batch

#: The issue's example: 19 bytes that are no record, after a 61-byte header (80 bytes in all).
GARBAGE_RECORDS = bytes.fromhex("ffffffffffffffffff0123456789abcdef0011")


def poison_batch(garbage: bytes = GARBAGE_RECORDS, records_count: int = 1) -> bytes:
    """A batch with a valid header and CRC whose records section is ``garbage`` (offsets 0..records_count-1)."""
    batch = bytearray(with_records_section(make_batch([b"x"]), garbage, records_count))
    struct.pack_into(">i", batch, 23, records_count - 1)  # lastOffsetDelta
    return with_fixed_crc(batch)
