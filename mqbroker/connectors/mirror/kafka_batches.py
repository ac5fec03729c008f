"""Records a Kafka client consumed, as the RecordBatch v2 bytes the mirror copies. Pure.

A Kafka client library hands over records one by one, never the batches the source cluster
stored. To copy them like batches read over the native protocol (``batches.copy_batches``), the
records of one partition are encoded again into batches that keep each record's source offset
(as base offset plus delta: gaps left by compaction, transaction markers or aborted records stay
gaps) and its key, value, headers and timestamp. A batch ends at ``BATCH_RECORDS_MAX`` records or
``BATCH_BYTES_MAX`` bytes, so none exceeds what a topic accepts by default.
"""

from __future__ import annotations

from collections.abc import Sequence

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.record import RecordHeader

#: One consumed record: (offset, timestamp_ms, key, value, headers).
ConsumedRecord = tuple[int, int, bytes | None, bytes | None, tuple[RecordHeader, ...]]

#: Records per batch built from consumed records (the native producer's default batch is about as large).
BATCH_RECORDS_MAX = 1000
#: Bytes per batch built from consumed records: well under the default max.message.bytes (1 MiB).
BATCH_BYTES_MAX = 512 * 1024


def batches_of(records: Sequence[ConsumedRecord]) -> bytes:
    """``records`` (one partition's, offsets ascending) as consecutive batches keeping their offsets."""
    parts: list[bytes] = []
    builder: BatchBuilder | None = None
    base_offset = 0
    for offset, timestamp_ms, key, value, headers in records:
        if builder is not None and (builder.records_count >= BATCH_RECORDS_MAX or builder.size_bytes >= BATCH_BYTES_MAX):
            parts.append(builder.build())
            builder = None
        if builder is None:
            builder = BatchBuilder(base_offset=offset)
            base_offset = offset
        builder.append_at(offset - base_offset, timestamp_ms, key, value, headers)
    if builder is not None:
        parts.append(builder.build())
    return b"".join(parts)
