"""Batches rewritten in another compression codec (a topic's ``compression.type``), records untouched.

A batch's records section is the same bytes whatever the codec, so a batch changes codec by
decompressing and compressing that section and writing a new header: attributes, batch length
and CRC change; offsets, timestamps, producer id, epoch and sequence stay as the client sent them.
No record is decoded.
"""

from __future__ import annotations

import crc32c

from mqbroker.records.compression import Compression, compress, decompress
from mqbroker.records.header import (
    COMPRESSION_MASK,
    HEADER_AFTER_CRC,
    HEADER_BEFORE_CRC,
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC,
    iter_batches,
)

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_HEADER_AFTER_CRC = HEADER_AFTER_CRC
_HEADER_BEFORE_CRC = HEADER_BEFORE_CRC


def recompressed(buffer: bytes | memoryview, compression: Compression) -> bytes | memoryview:
    """``buffer``'s batches with every data batch in ``compression`` (``buffer`` itself if none had to change).

    Control batches are left as they are. Raises ``CorruptRecordError`` for a batch that fails its
    checks or does not decompress.
    """
    view = memoryview(buffer)
    pieces: list[bytes | memoryview] = []
    changed = False
    for position, header in iter_batches(view):
        end = position + header.size_bytes
        if header.is_control or header.compression == compression:
            pieces.append(view[position:end])
            continue
        changed = True
        section = compress(compression, decompress(header.compression, bytes(view[position + HEADER_BYTES:end])))
        after = _HEADER_AFTER_CRC.pack(
            (header.attributes & ~COMPRESSION_MASK) | compression, header.last_offset_delta, header.base_timestamp,
            header.max_timestamp, header.producer_id, header.producer_epoch, header.base_sequence,
            header.records_count)
        crc = crc32c.crc32c(section, crc32c.crc32c(after))
        batch_length = HEADER_BYTES - LOG_OVERHEAD_BYTES + len(section)
        pieces += (_HEADER_BEFORE_CRC.pack(header.base_offset, batch_length, header.partition_leader_epoch, MAGIC, crc),
                   after, section)
    return b"".join(pieces) if changed else buffer
