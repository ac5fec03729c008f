"""Compaction: keep the newest record per key in the sealed segments, drop expired tombstones.

The only module that decodes individual records. As in Kafka's log cleaner, a compacted log
is a clean part (already compacted) followed by a dirty part; the partition's
`cleaner-offset-checkpoint` (written atomically by `PartitionLog.mark_clean`) records where
the clean part ends. A pass runs when the dirty part's share of the cleanable bytes reaches
``min.cleanable.dirty.ratio`` (or when forced). Cleanable means sealed (the active segment is
never touched) and older than ``min.compaction.lag.ms``. A pass:

1. maps every key in the dirty segments to its newest offset (the clean part holds one
   record per key already, so the dirty part alone decides what is superseded);
2. rewrites each cleanable segment, clean part included, without the superseded records.
   A rewritten batch keeps its base offset and its ``lastOffsetDelta`` even when its first or
   last records go, so offsets and producer sequences stay continuous (gaps appear, order never
   changes). A batch left empty disappears, unless it is a producer's latest batch: then it is
   kept as a header-only batch so the idempotent producer state survives a rebuild from the log.
   Control batches are kept.
3. Tombstones (null values) are kept for ``delete.retention.ms`` counted from the pass that
   first cleaned them: that pass stamps their batch with a delete horizon (attribute bit 6, the
   horizon in the base timestamp, KIP-534) and a later pass past the horizon drops them.

Transactions follow Kafka's cleaner: nothing at or past the first offset of an open transaction
is cleaned (the log's stable end); the records of aborted transactions (known from the
segments' `.txnindex`) are removed whatever their key and never count as a key's newest value;
a marker stays while any batch of its transaction stays (even as a header: replaying the log
must not find a transaction without its end), and once none does it gets a delete horizon like a
tombstone and goes after it, an ABORT marker taking its `.txnindex` entry with it (the rewritten
index is written as `<base>.txnindex.cleaned` before the swap's commit point).

Each rewritten segment goes to `<base>.log.cleaned`, is fsynced, renamed to `<base>.log.swap`
(the commit point) and then renamed over `<base>.log` under the log's lock; `PartitionLog.open`
finishes a swap a crash interrupted and deletes a `.cleaned` leftover, so a crash at any moment
leaves a readable log that lost no newest value. The checkpoint moves only after every swap, so
a crash before it just makes the next pass redo work. Appends and reads go on during a pass.
Tombstones that expire are removed by the next pass that runs (by ratio, or forced).
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.compression import Compression
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import TIMESTAMP_TYPE_MASK, BatchHeader, TimestampType, iter_batches
from mqbroker.records.markers import read_control
from mqbroker.records.record import Record
from mqbroker.storage import fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX, Segment
from mqbroker.storage.txn_index import AbortedTxn, encode_entries


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanResult:
    """What one compaction pass did; ``dirty_ratio`` is the share of dirty bytes it found."""

    segments_rewritten: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    dirty_ratio: float = 0.0
    ran: bool = False


class _Transactions:
    """Which transactional batches are aborted, and which transactions still have a batch kept in this pass."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for entry in sorted(aborted, key=lambda entry: entry.first_offset):
            self._ranges.setdefault(entry.producer_id, []).append((entry.first_offset, entry.last_offset))
        #: Producers whose current transaction has a batch this pass keeps (its marker must stay).
        self._retained: set[int] = set()

    def aborted(self, header: BatchHeader) -> bool:
        """True for a data batch of a transaction that its producer aborted."""
        if not header.is_transactional:
            return False
        ranges = self._ranges.get(header.producer_id, ())
        slot = bisect.bisect_right(ranges, (header.base_offset, float("inf"))) - 1
        return slot >= 0 and ranges[slot][0] <= header.base_offset <= ranges[slot][1]

    def kept(self, header: BatchHeader) -> None:
        """A transactional batch stays: its transaction's marker must stay too."""
        if header.is_transactional:
            self._retained.add(header.producer_id)

    def ended(self, producer_id: int) -> bool:
        """A marker of ``producer_id``: True if a batch of the transaction it ends stays."""
        if producer_id in self._retained:
            self._retained.discard(producer_id)
            return True
        return False


@dataclass(frozen=True, slots=True, kw_only=True)
class _Rules:
    """What a pass keeps: the newest offset per key, the producers' latest batches, transactions, the clock."""

    newest: dict[bytes, int]
    producer_last_offsets: dict[int, int]
    transactions: _Transactions
    now_ms: int
    delete_retention_ms: int


@dataclass(slots=True)
class _Rewrite:
    """One segment's rewrite: where it went, what it dropped, and the ABORT markers dropped with it."""

    path: str
    records_removed: int = 0
    changed: bool = False
    dropped_markers: set[int] = field(default_factory=set)


def dirty_ratio(log: PartitionLog, now_ms: int) -> float:
    """Dirty bytes / cleanable bytes of ``log`` now (0.0 when nothing is cleanable)."""
    view = log.cleaner_view()
    return _dirty_share(_cleanable(view.segments, log.config, now_ms, view.stable_end_offset), view.first_dirty_offset)


def clean(log: PartitionLog, now_ms: int, *, force: bool = False) -> CleanResult:
    """Compact ``log`` if it is compacted and its dirty ratio reached min.cleanable.dirty.ratio (or ``force``)."""
    if not log.config.compacts:
        return CleanResult()
    view = log.cleaner_view()
    segments = _cleanable(view.segments, log.config, now_ms, view.stable_end_offset)
    ratio = _dirty_share(segments, view.first_dirty_offset)
    dirty = [segment for segment in segments if segment.next_offset > view.first_dirty_offset]
    if not segments or not (force or (dirty and ratio >= log.config.min_cleanable_dirty_ratio)):
        return CleanResult(dirty_ratio=ratio)
    clean_end = segments[-1].next_offset  # before the rewrite can shrink it
    transactions = _Transactions(view.aborted)
    rules = _Rules(
        newest=_newest_offsets(dirty, transactions),
        producer_last_offsets=view.producer_last_offsets,
        transactions=transactions,
        now_ms=now_ms,
        delete_retention_ms=log.config.delete_retention_ms,
    )
    rewritten = removed = before = after = 0
    for segment in segments:
        before += segment.size_bytes
        rewrite = _rewrite(segment, rules)
        if not rewrite.changed:
            fs.unlink(rewrite.path)
            after += segment.size_bytes
            continue
        txn_index = _rewrite_txn_index(segment, rewrite.dropped_markers)
        swap = segment.path + SWAP_SUFFIX
        fs.replace(rewrite.path, swap)  # the commit point: from here on recovery completes the swap
        after += os.path.getsize(swap)
        log.swap_in(segment, swap, txn_index)
        rewritten += 1
        removed += rewrite.records_removed
    log.mark_clean(clean_end, view.generation)
    return CleanResult(
        segments_rewritten=rewritten,
        records_removed=removed,
        bytes_before=before,
        bytes_after=after,
        dirty_ratio=ratio,
        ran=True,
    )


def _cleanable(sealed: list[Segment], config: LogConfig, now_ms: int, stable_end_offset: int) -> list[Segment]:
    """The sealed segments from the oldest up to the first one younger than min.compaction.lag.ms or reaching
    an open transaction (``stable_end_offset``)."""
    segments = []
    for segment in sealed:
        if segment.max_timestamp > now_ms - config.min_compaction_lag_ms or segment.next_offset > stable_end_offset:
            break
        segments.append(segment)
    return segments


def _dirty_share(segments: list[Segment], first_dirty_offset: int) -> float:
    total = sum(segment.size_bytes for segment in segments)
    dirty = sum(segment.size_bytes for segment in segments if segment.next_offset > first_dirty_offset)
    return dirty / total if total else 0.0


def _newest_offsets(segments: list[Segment], transactions: _Transactions) -> dict[bytes, int]:
    """Pass 1: the offset of the newest record of every key in ``segments`` (aborted records do not count)."""
    newest: dict[bytes, int] = {}
    for segment in segments:
        for header, batch in _batches(segment):
            if header.is_control or transactions.aborted(header):
                continue
            for record in decode_records(batch):
                if record.key is not None:
                    newest[record.key] = record.offset
    return newest


def _batches(segment: Segment) -> list[tuple[BatchHeader, bytes]]:
    with open(segment.path, "rb") as file:
        data = file.read(segment.size_bytes)
    return [(header, data[position : position + header.size_bytes]) for position, header in iter_batches(data)]


def _rewrite(segment: Segment, rules: _Rules) -> _Rewrite:
    """Pass 2: write what ``segment`` keeps to its `.cleaned` file."""
    rewrite = _Rewrite(path=segment.path + CLEANED_SUFFIX)
    with fs.open_file(rewrite.path, "wb") as output:
        for header, batch in _batches(segment):
            if header.is_control:
                kept, removed = _filter_marker(header, batch, rules)
                if kept is None:
                    rewrite.dropped_markers.add(header.base_offset)
            else:
                kept, removed = _filter_batch(header, batch, rules)
            rewrite.records_removed += removed
            rewrite.changed = rewrite.changed or kept is not batch
            if kept is not None:
                output.write(kept)
        output.flush()
        fs.fsync(output.fileno())
    return rewrite


def _rewrite_txn_index(segment: Segment, dropped_markers: set[int]) -> str | None:
    """Write the segment's `.txnindex` without the entries of dropped markers (fsynced); None if unchanged."""
    entries = segment.txn_index.entries()
    kept = [entry for entry in entries if entry.last_offset not in dropped_markers]
    if len(kept) == len(entries):
        return None
    path = segment.txn_index.path + CLEANED_SUFFIX
    with fs.open_file(path, "wb") as output:
        output.write(encode_entries(kept))
        output.flush()
        fs.fsync(output.fileno())
    return path


def _filter_batch(header: BatchHeader, batch: bytes, rules: _Rules) -> tuple[bytes | None, int]:
    """The batch as compaction leaves it (``batch`` itself when unchanged, None when gone) and the records removed."""
    decoded = decode_records(batch)
    aborted = rules.transactions.aborted(header)
    kept = [] if aborted else [record for record in decoded if _keeps(record, header, rules)]
    removed = len(decoded) - len(kept)
    horizon_ms = header.delete_horizon_ms
    if horizon_ms is None and any(record.value is None for record in kept):
        horizon_ms = rules.now_ms + rules.delete_retention_ms  # the tombstones' clock starts now
    if not kept and rules.producer_last_offsets.get(header.producer_id) != header.last_offset:
        return None, removed  # a producer's latest batch stays, if only as a header: its sequences live on
    rules.transactions.kept(header)
    if removed == 0 and horizon_ms == header.delete_horizon_ms:
        return batch, 0
    return _rebuild(header, kept, horizon_ms), removed


def _filter_marker(header: BatchHeader, batch: bytes, rules: _Rules) -> tuple[bytes | None, int]:
    """A control batch as compaction leaves it: a marker goes a delete horizon after the last batch it ends went."""
    if not read_control(batch, 0, header).is_marker or rules.transactions.ended(header.producer_id):
        return batch, 0
    horizon_ms = header.delete_horizon_ms
    if horizon_ms is None:
        return _rebuild(header, decode_records(batch), rules.now_ms + rules.delete_retention_ms), 0
    if rules.now_ms < horizon_ms:
        return batch, 0
    return None, 1


def _keeps(record: Record, header: BatchHeader, rules: _Rules) -> bool:
    if record.key is None:
        return True  # compaction has nothing to go by; Kafka refuses such records on compacted topics
    if rules.newest.get(record.key, record.offset) > record.offset:
        return False
    horizon_ms = header.delete_horizon_ms
    return record.value is not None or horizon_ms is None or rules.now_ms < horizon_ms


def _rebuild(header: BatchHeader, kept: list[Record], delete_horizon_ms: int | None) -> bytes:
    """A batch with ``header``'s identity (offsets, producer, epoch, codec, max timestamp) holding only ``kept``."""
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    builder = BatchBuilder(
        base_offset=header.base_offset,
        compression=Compression(header.compression),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append_time else TimestampType.CREATE_TIME,
        last_offset_delta=header.last_offset_delta,
        max_timestamp_ms=header.max_timestamp,
        delete_horizon_ms=delete_horizon_ms,
    )
    for record in kept:
        builder.append_at(record.offset - header.base_offset, record.timestamp_ms, record.key, record.value, record.headers)
    return builder.build()
