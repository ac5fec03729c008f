"""Compaction: keep the newest record per key in the sealed segments, drop old tombstones.

The only module that decodes individual records. Offsets and order are preserved (gaps
appear); the active segment is never touched. Each sealed segment is rewritten to
`<base>.log.cleaned`, fsynced, renamed to `<base>.log.swap` (the commit point) and then
renamed over `<base>.log` under the log's lock; `PartitionLog.open` finishes a swap a crash
interrupted and deletes a `.cleaned` leftover, so a crash at any moment leaves a readable log
that lost no newest value. Appends and reads go on while a segment is rewritten.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mqbroker.storage import fs, records
from mqbroker.storage.compression import Compression
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.records import BatchBuilder, BatchHeader, Record, TimestampType
from mqbroker.storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX, Segment


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanResult:
    """What one compaction pass did."""

    segments_rewritten: int
    records_removed: int
    bytes_before: int
    bytes_after: int


def clean(log: PartitionLog, now_ms: int) -> CleanResult:
    """Compact ``log``'s sealed segments older than min.compaction.lag.ms (a no-op unless compacted)."""
    config = log.config
    if not config.compacts:
        return CleanResult(segments_rewritten=0, records_removed=0, bytes_before=0, bytes_after=0)
    segments = []
    for segment in log.sealed_segments():
        if segment.max_timestamp > now_ms - config.min_compaction_lag_ms:
            break
        segments.append(segment)
    newest = _newest_offsets(segments)
    tombstone_horizon_ms = now_ms - config.delete_retention_ms
    rewritten = removed = before = after = 0
    for segment in segments:
        kept, dropped = _rewrite(segment, newest, tombstone_horizon_ms)
        before += segment.size_bytes
        if dropped == 0:
            os.unlink(kept)
            after += segment.size_bytes
            continue
        swap = segment.path + SWAP_SUFFIX
        fs.replace(kept, swap)  # the commit point: from here on recovery completes the swap
        after += os.path.getsize(swap)
        log.swap_in(segment, swap)
        rewritten += 1
        removed += dropped
    return CleanResult(segments_rewritten=rewritten, records_removed=removed, bytes_before=before, bytes_after=after)


def _newest_offsets(segments: list[Segment]) -> dict[bytes, int]:
    """Pass 1: the offset of the newest record of every key in ``segments``."""
    newest: dict[bytes, int] = {}
    for segment in segments:
        for header, batch in _batches(segment):
            if header.is_control:
                continue
            for record in records.decode_records(batch):
                if record.key is not None:
                    newest[record.key] = record.offset
    return newest


def _batches(segment: Segment) -> list[tuple[BatchHeader, bytes]]:
    with open(segment.path, "rb") as file:
        data = file.read(segment.size_bytes)
    return [(header, data[position : position + header.size_bytes]) for position, header in records.iter_batches(data)]


def _rewrite(segment: Segment, newest: dict[bytes, int], tombstone_horizon_ms: int) -> tuple[str, int]:
    """Pass 2: write the kept records of ``segment`` to its `.cleaned` file; return (path, records dropped)."""
    path = segment.path + CLEANED_SUFFIX
    dropped = 0
    with open(path, "wb") as output:
        for header, batch in _batches(segment):
            if header.is_control:
                output.write(batch)
                continue
            decoded = records.decode_records(batch)
            kept = [record for record in decoded if _keeps(record, newest, tombstone_horizon_ms)]
            dropped += len(decoded) - len(kept)
            if len(kept) == len(decoded):
                output.write(batch)
            elif kept:
                output.write(_encode_like(header, kept))
        output.flush()
        fs.fsync(output.fileno())
    return path, dropped


def _keeps(record: Record, newest: dict[bytes, int], tombstone_horizon_ms: int) -> bool:
    if record.key is None:
        return True  # compaction has nothing to go by; Kafka refuses such records on compacted topics
    if newest.get(record.key, record.offset) != record.offset:
        return False
    return record.value is not None or record.timestamp_ms >= tombstone_horizon_ms


def _encode_like(header: BatchHeader, kept: list[Record]) -> bytes:
    """A batch with ``header``'s identity (offset, producer, epoch, codec) holding only ``kept``."""
    log_append_time = bool(header.attributes & records.TIMESTAMP_TYPE_MASK)
    builder = BatchBuilder(
        base_offset=header.base_offset,
        compression=Compression(header.compression),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME,
    )
    for record in kept:
        builder.append_at(record.offset - header.base_offset, record.timestamp_ms, record.key, record.value, record.headers)
    return builder.build()
