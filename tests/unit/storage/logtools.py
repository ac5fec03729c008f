"""Helpers shared by the partition-log tests: build client batches, open logs, read everything back."""

from __future__ import annotations

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.header import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, iter_batches
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog

SMALL_SEGMENTS = LogConfig(segment_bytes=4096, index_interval_bytes=256)


def make_batch(
    values: list[bytes],
    timestamp_ms: int = 1_000,
    keys: list[bytes | None] | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
) -> bytes:
    """A client-built batch (base offset 0) holding ``values``, as a producer would send it."""
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence)
    for slot, value in enumerate(values):
        builder.append(timestamp_ms, keys[slot] if keys else None, value)
    return builder.build()


def payload_batch(tag: int, record_count: int = 1, value_bytes: int = 40, timestamp_ms: int = 1_000) -> bytes:
    """A batch whose values identify it by ``tag``."""
    return make_batch([tag.to_bytes(8, "big") * (value_bytes // 8)] * record_count, timestamp_ms)


def read_all(log: PartitionLog, start: int | None = None, max_bytes: int = 1 << 20) -> list[bytes]:
    """Every batch from ``start`` (the log start by default) to the log end, as bytes."""
    offset = log.log_start_offset if start is None else start
    batches = []
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes).records
        if not data:
            break
        for position, header in iter_batches(data):
            batches.append(bytes(data[position : position + header.size_bytes]))
            offset = header.next_offset
    return batches


def open_log(directory: str, config: LogConfig = SMALL_SEGMENTS, now_ms: int = 0, **options: object) -> PartitionLog:
    """Open a log the way tests need it (small segments by default)."""
    return PartitionLog.open(str(directory), config, now_ms, **options)  # type: ignore[arg-type]
