"""PartitionLog: one partition's directory of segments; append assigns offsets, read returns whole batches.

Threading contract: `append`, `read` and the other operations may be called from any thread
(they hold the log's lock briefly); `flush` captures what to sync under the lock, runs the
fsyncs without it and then publishes the new durable end, so appends go on during an fsync
and every append written before the capture shares that one fsync (group commit). "Written"
(append returned) and "durable" (`durable_end_offset` passed the batch) are separate points.
"""

from __future__ import annotations

import bisect
import os
import threading
from dataclasses import dataclass
from typing import NamedTuple

from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import (
    HEADER_BYTES,
    NO_PARTITION_LEADER_EPOCH,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    iter_batches,
    stamp,
)
from mqbroker.storage import checkpoint, fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.epochs import LeaderEpochCache
from mqbroker.storage.errors import CorruptFileError, LogClosedError, OffsetOutOfRangeError, RecordTooLargeError
from mqbroker.storage.producers import ProducerEntry, ProducerStates, reject_duplicate_in_multi_batch
from mqbroker.storage.segment import CLEANED_SUFFIX, INDEX_SUFFIXES, LOG_SUFFIX, SWAP_SUFFIX, Segment, file_name

SNAPSHOT_SUFFIX = ".snapshot"
#: Where the log's clean (compacted) part ends: the first dirty offset, in the partition directory.
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
SNAPSHOTS_KEPT = 2
#: Leftovers of an interrupted write or delete, removed when a log is opened.
LEFTOVER_SUFFIXES = (".tmp", ".deleted")
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendResult:
    """Where an append landed; ``duplicate`` marks a producer retry answered with its original offsets."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanerView:
    """A consistent picture of what the cleaner may rewrite, taken under the log's lock."""

    #: The sealed segments, oldest first (the active segment is never cleaned).
    segments: list[Segment]
    #: Offsets below this were compacted by an earlier pass (the log start if higher).
    first_dirty_offset: int
    #: Producer id -> last offset of its latest batch: compaction keeps that batch, if only as a header.
    producer_last_offsets: dict[int, int]
    #: Changes when the log is truncated, so a pass that raced a truncation records nothing.
    generation: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadResult:
    """Whole batches read from the log plus the log's bounds at the time of the read."""

    records: bytes
    log_start_offset: int
    log_end_offset: int


def _stamped_pieces(view: memoryview, batches: list[tuple[int, BatchHeader]]) -> list[bytes | memoryview]:
    """The batches to write as (stamped header copy, untouched body) pieces: the body is never copied."""
    pieces: list[bytes | memoryview] = []
    for position, header in batches:
        head = bytearray(view[position : position + HEADER_BYTES])
        stamp(head, 0, header.base_offset, header.partition_leader_epoch)
        pieces += (head, view[position + HEADER_BYTES : position + header.size_bytes])
    return pieces


def _stamped(header: BatchHeader, base_offset: int, leader_epoch: int) -> BatchHeader:
    """The header as `stamp` rewrote it (positional: this is the append hot path)."""
    return BatchHeader(
        base_offset,
        header.batch_length,
        leader_epoch,
        header.magic,
        header.crc,
        header.attributes,
        header.last_offset_delta,
        header.base_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.records_count,
    )


class FlushTicket(NamedTuple):
    """One fsync in progress: the descriptors to sync and the end they make durable."""

    handles: list[int]
    end_offset: int
    generation: int


class PartitionLog:
    """A partition's ordered segments with offsets, durability bookkeeping and producer state.

    Build one with `PartitionLog.open`; the constructor only stores what it is given.
    """

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        segments: list[Segment],
        log_start_offset: int,
        producers: ProducerStates,
        now_ms: int,
        epochs: LeaderEpochCache | None = None,
        clean_offset: int = 0,
    ) -> None:
        assert segments, "a log always has an active segment"
        self.directory = directory
        #: Which leader epoch started at which offset (replicas compare these to find divergence).
        self.epochs = epochs if epochs is not None else LeaderEpochCache.load(directory)
        self.config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._end_offset = segments[-1].next_offset
        self._durable_end_offset = self._end_offset
        self._producers = producers
        self._clean_offset = clean_offset
        self._lock = threading.Lock()
        self._closed = False
        self._active_since_ms = now_ms
        # Durability bookkeeping, guarded by the lock.
        self._generation = 0
        self._sealed_unsynced: list[Segment] = []
        self._directory_unsynced = False
        self._unflushed_messages = 0
        self._unflushed_since_ms: int | None = None
        #: (log end, producer table) of the last snapshot written, to skip writing an identical one.
        self._last_snapshot: tuple[int, bytes] | None = None

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str,
        config: LogConfig,
        now_ms: int,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
    ) -> PartitionLog:
        """Open (or create) the log in ``directory``; recover it unless it was shut down cleanly.

        Recovery checks every batch from the segment holding ``recovery_point`` (and always the
        last segment), cuts the log at the first invalid byte and drops the segments after it.
        It rescans that first segment from its beginning, not from the recovery point: it needs
        no trusted position inside a segment, and costs at most one segment of CRC checks more
        (`benchmarks/storage_bench.py` measures ``recovery_s_per_gib``: 0.1-0.3 s per GiB here).
        """
        os.makedirs(directory, exist_ok=True)
        _remove_leftovers(directory)
        segments = [Segment(directory, base, config.index_interval_bytes) for base in _segment_bases(directory)]
        if not segments:
            segments = [Segment(directory, log_start_offset, config.index_interval_bytes)]
            segments[0].create()
            fs.fsync_path(directory)
        elif clean_shutdown:
            segments[-1].load_tail()
        else:
            segments = _recover(directory, segments, recovery_point)
        end_offset = segments[-1].next_offset
        log_start = min(max(log_start_offset, segments[0].base_offset), end_offset)
        producers = _load_producers(directory, segments, end_offset)
        epochs = LeaderEpochCache.load(directory)
        epochs.truncate_from_end(end_offset)  # a recovered (cut) tail takes its epochs with it
        clean_offset = min(_read_clean_offset(directory), end_offset)
        log = cls(directory, config, segments, log_start, producers, now_ms, epochs, clean_offset)
        log._active_since_ms = segments[-1].first_timestamp if segments[-1].first_timestamp >= 0 else now_ms
        return log

    # -- bounds ------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset a reader may ask for."""
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self._end_offset

    @property
    def durable_end_offset(self) -> int:
        """Every batch below this offset is on stable storage (fsynced)."""
        return self._durable_end_offset

    @property
    def size_bytes(self) -> int:
        """Bytes of all segments' `.log` files."""
        with self._lock:
            return sum(segment.size_bytes for segment in self._segments)

    def segment_bases(self) -> list[int]:
        """Base offsets of the segments, oldest first."""
        with self._lock:
            return [segment.base_offset for segment in self._segments]

    # -- appending ---------------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        now_ms: int,
        leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        assign_offsets: bool = True,
    ) -> AppendResult:
        """Validate one or more client-built batches, assign their offsets and write them.

        Raises ``CorruptRecordError`` (framing, magic, CRC), ``RecordTooLargeError``, and for
        idempotent producers ``OutOfOrderSequenceError``, ``InvalidProducerEpochError`` or
        ``DuplicateSequenceError``. A single retried batch returns its original offsets with
        ``duplicate`` set and is not written again. With ``assign_offsets`` False (a follower
        copying its leader) the batches keep their offsets, which must not go backwards.
        """
        view = memoryview(data).cast("B")
        batches = self._validate(view)
        with self._lock:
            self._check_open()
            staged: dict[int, ProducerEntry] = {}
            next_offset = self._end_offset
            latest_epoch, epoch_starts = self.epochs.latest_epoch, []
            for slot, (position, header) in enumerate(batches):
                if assign_offsets:
                    duplicate = self._producers.check(header, staged)
                    if duplicate is not None:
                        if len(batches) > 1:
                            raise reject_duplicate_in_multi_batch(header)
                        return AppendResult(
                            base_offset=duplicate.first_offset,
                            last_offset=duplicate.last_offset,
                            log_append_time_ms=NO_TIMESTAMP,
                            log_start_offset=self._log_start_offset,
                            duplicate=True,
                        )
                    header = _stamped(header, next_offset, leader_epoch)
                    batches[slot] = (position, header)
                elif header.base_offset < next_offset:
                    raise CorruptRecordError(f"batch offset {header.base_offset} is below the log end {next_offset}")
                if header.partition_leader_epoch > latest_epoch:
                    latest_epoch = header.partition_leader_epoch
                    epoch_starts.append((latest_epoch, header.base_offset))
                self._producers.stage(header, staged)
                next_offset = header.next_offset
            first, last = batches[0][1], batches[-1][1]
            active = self._segments[-1]
            if active.size_bytes > 0 and (
                not active.can_hold(len(view), last.last_offset, self.config.segment_bytes)
                or now_ms - self._active_since_ms > self.config.segment_ms
            ):
                self._roll(first.base_offset, now_ms)
            for epoch, start_offset in epoch_starts:  # before the batches can be durable: the cache is never behind
                self.epochs.assign(epoch, start_offset)
            self._segments[-1].append(_stamped_pieces(view, batches) if assign_offsets else [view], batches)
            self._producers.commit(staged)
            self._end_offset = next_offset
            self._unflushed_messages += next_offset - first.base_offset
            if self._unflushed_since_ms is None:
                self._unflushed_since_ms = now_ms
            append_time = now_ms if first.attributes & TIMESTAMP_TYPE_MASK else NO_TIMESTAMP
            return AppendResult(
                base_offset=first.base_offset,
                last_offset=last.last_offset,
                log_append_time_ms=append_time,
                log_start_offset=self._log_start_offset,
            )

    def _validate(self, view: memoryview) -> list[tuple[int, BatchHeader]]:
        """Framing, magic and CRC of every batch, and the size limit; no record is decoded."""
        batches = list(iter_batches(view, check=True))
        if not batches:
            raise CorruptRecordError("an append needs at least one record batch")
        for _, header in batches:
            if header.size_bytes > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {header.size_bytes} bytes exceeds max.message.bytes={self.config.max_message_bytes}"
                )
        return batches

    def roll(self, now_ms: int) -> None:
        """Start a new active segment at the log end (no-op when the active one is empty)."""
        with self._lock:
            self._check_open()
            if self._segments[-1].size_bytes > 0:
                self._roll(self._end_offset, now_ms)

    def _roll(self, base_offset: int, now_ms: int) -> None:
        sealed = self._segments[-1]
        sealed.finish()
        self._sealed_unsynced.append(sealed)
        segment = Segment(self.directory, base_offset, self.config.index_interval_bytes)
        segment.create()
        self._segments.append(segment)
        self._directory_unsynced = True
        self._active_since_ms = now_ms

    # -- durability --------------------------------------------------------------------------

    def needs_flush(self, now_ms: int) -> bool:
        """True when unsynced appends are due: at once under `sync`, by flush.ms/flush.messages otherwise."""
        with self._lock:
            if self._unflushed_messages == 0 or self._unflushed_since_ms is None:
                return False
            if self.config.flush_policy == "sync":
                return True
            return (
                self._unflushed_messages >= self.config.flush_messages
                or now_ms - self._unflushed_since_ms >= self.config.flush_ms
            )

    def flush(self) -> int:
        """fsync everything appended so far (lock not held during the fsync); return the durable end."""
        ticket = self.begin_flush()
        try:
            for handle in ticket.handles:
                fs.fsync(handle)
        except BaseException:
            self.end_flush(ticket, synced=False)
            raise
        return self.end_flush(ticket, synced=True)

    def begin_flush(self) -> FlushTicket:
        """Capture what an fsync must cover: descriptors to sync (the caller syncs them, then calls `end_flush`)."""
        with self._lock:
            self._check_open()
            handles = [segment.duplicate_handle() for segment in self._sealed_unsynced]
            for segment in self._sealed_unsynced:
                handles += [os.open(index.path, os.O_RDONLY) for index in (segment.offset_index, segment.time_index)]
            handles.append(self._segments[-1].duplicate_handle())
            if self._directory_unsynced:
                handles.append(os.open(self.directory, os.O_RDONLY))
            ticket = FlushTicket(handles, self._end_offset, self._generation)
            self._sealed_unsynced = []
            self._directory_unsynced = False
            self._unflushed_messages = 0
            self._unflushed_since_ms = None
        return ticket

    def end_flush(self, ticket: FlushTicket, synced: bool) -> int:
        """Close a flush's descriptors; if they were synced, publish its end as durable. Returns the durable end."""
        for handle in ticket.handles:
            os.close(handle)
        with self._lock:
            # A truncation during the fsync may have replaced what was captured: publish nothing then.
            if synced and ticket.generation == self._generation and ticket.end_offset > self._durable_end_offset:
                self._durable_end_offset = ticket.end_offset
            return self._durable_end_offset

    # -- reading -----------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> ReadResult:
        """Whole batches from the batch holding ``offset``: at least one if any, none reaching ``max_offset``."""
        with self._lock:
            self._check_open()
            if offset < self._log_start_offset or offset > self._end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside the log [{self._log_start_offset}, {self._end_offset}]"
                )
            limit = self._end_offset if max_offset is None else min(max_offset, self._end_offset)
            data = b""
            slot = max(0, bisect.bisect_right(self._segments, offset, key=lambda s: s.base_offset) - 1)
            while not data and slot < len(self._segments) and self._segments[slot].base_offset < limit:
                segment = self._segments[slot]
                data = segment.read(max(offset, segment.base_offset), max_bytes, limit)
                slot += 1
            return ReadResult(records=data, log_start_offset=self._log_start_offset, log_end_offset=self._end_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The base offset of the first batch with a timestamp >= ``timestamp_ms`` (None if none)."""
        with self._lock:
            self._check_open()
            for segment in self._segments:
                if segment.max_timestamp >= timestamp_ms:
                    found = segment.offset_for_timestamp(timestamp_ms)
                    if found is not None:
                        return max(found, self._log_start_offset)
            return None

    # -- removing data -----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose last offset is >= ``offset`` (a follower diverging from its leader)."""
        with self._lock:
            self._check_open()
            self.epochs.truncate_from_end(offset)  # also an epoch that began at the log end but wrote nothing
            if offset >= self._end_offset:
                return
            if offset <= self._segments[0].base_offset:
                self._start_empty_at(offset)
            else:
                self._delete_segments([s for s in self._segments if s.base_offset >= offset])
                self._segments = [s for s in self._segments if s.base_offset < offset]
                self._segments[-1].truncate_to(offset)
            self._sealed_unsynced = [s for s in self._sealed_unsynced if s in self._segments[:-1]]
            self._end_offset = self._segments[-1].next_offset
            self._log_start_offset = min(self._log_start_offset, self._end_offset)
            self._durable_end_offset = min(self._durable_end_offset, self._end_offset)
            self._generation += 1
            self._directory_unsynced = True
            if self._clean_offset > self._end_offset:
                self._clean_offset = self._end_offset  # what is appended next is dirty
                checkpoint.write_offset(os.path.join(self.directory, CLEANER_CHECKPOINT), self._clean_offset)
            _remove_snapshots_after(self.directory, self._end_offset)
            self._producers = _load_producers(self.directory, self._segments, self._end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every batch and go on, empty, from ``offset`` (a follower below its leader's log start)."""
        with self._lock:
            self._check_open()
            self.epochs.truncate_from_end(0)
            self._start_empty_at(offset)
            self._sealed_unsynced = []
            self._end_offset = self._durable_end_offset = offset
            self._generation += 1
            self._clean_offset = offset
            checkpoint.write_offset(os.path.join(self.directory, CLEANER_CHECKPOINT), self._clean_offset)
            _remove_snapshots_after(self.directory, -1)
            self._producers = ProducerStates()

    def _start_empty_at(self, offset: int) -> None:
        self._delete_segments(self._segments)
        segment = Segment(self.directory, offset, self.config.index_interval_bytes)
        segment.create()
        self._segments = [segment]
        self._log_start_offset = offset
        self._directory_unsynced = True

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` and drop the segments wholly below it."""
        with self._lock:
            self._check_open()
            if offset > self._end_offset:
                raise OffsetOutOfRangeError(f"cannot delete records before {offset}: the log ends at {self._end_offset}")
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self._drop_prefix(sum(1 for s in self._segments[1:] if s.base_offset <= offset))
            return self._log_start_offset

    def apply_retention(self, now_ms: int, max_offset: int | None = None) -> int:
        """Delete old segments by retention.ms and retention.bytes (never the active one); return how many.

        With ``max_offset`` (the broker passes its high watermark) a segment holding any offset at
        or above it is kept, so retention never removes data consumers have not been allowed to see.
        """
        if not self.config.deletes:
            return 0
        with self._lock:
            self._check_open()
            total_bytes = sum(segment.size_bytes for segment in self._segments)
            count = 0
            for segment, following in zip(self._segments, self._segments[1:]):
                if max_offset is not None and following.base_offset > max_offset:
                    break  # offsets up to the next segment's base may lie in this one (compaction leaves gaps)
                too_old = self.config.retention_ms >= 0 and segment.max_timestamp < now_ms - self.config.retention_ms
                too_big = self.config.retention_bytes >= 0 and total_bytes - segment.size_bytes >= self.config.retention_bytes
                if not (too_old or too_big):
                    break
                total_bytes -= segment.size_bytes
                count += 1
            self._drop_prefix(count)
            return count

    def _drop_prefix(self, count: int) -> None:
        if count == 0:
            return
        assert count < len(self._segments), "the active segment is never deleted"
        self._delete_segments(self._segments[:count])
        self._segments = self._segments[count:]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self._producers.remove_before(self._log_start_offset)

    def _delete_segments(self, doomed: list[Segment]) -> None:
        for segment in doomed:
            if segment in self._sealed_unsynced:
                self._sealed_unsynced.remove(segment)
            segment.delete()
        self._directory_unsynced = True

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget idle idempotent producers (producer.id.expiration.ms); return how many were expired."""
        with self._lock:
            self._check_open()
            return self._producers.expire(now_ms, expiration_ms)

    # -- segments for the cleaner ------------------------------------------------------------

    def cleaner_view(self) -> CleanerView:
        """The sealed segments, where their dirty part starts and the batches producers need kept."""
        with self._lock:
            self._check_open()
            return CleanerView(
                segments=list(self._segments[:-1]),
                first_dirty_offset=max(self._clean_offset, self._log_start_offset),
                producer_last_offsets=self._producers.last_batch_offsets(),
                generation=self._generation,
            )

    def mark_clean(self, offset: int, generation: int) -> None:
        """Record that compaction covered everything below ``offset`` (atomically checkpointed).

        Ignored when the log was truncated since the pass took its `cleaner_view` (``generation``).
        """
        with self._lock:
            self._check_open()
            if generation == self._generation and offset > self._clean_offset:
                self._clean_offset = min(offset, self._end_offset)
                checkpoint.write_offset(os.path.join(self.directory, CLEANER_CHECKPOINT), self._clean_offset)

    def swap_in(self, old: Segment, swap_path: str) -> None:
        """Replace sealed segment ``old`` by its rewritten, fsynced ``swap_path`` (compaction's last step)."""
        with self._lock:
            self._check_open()
            if old not in self._segments[:-1]:
                os.unlink(swap_path)  # retention or a truncation removed it meanwhile
                return
            old.drop_indexes()
            fs.replace(swap_path, old.path)
            self._segments[self._segments.index(old)] = Segment(
                self.directory, old.base_offset, self.config.index_interval_bytes
            )
            self._sealed_unsynced = [s for s in self._sealed_unsynced if s is not old]

    # -- lifecycle ---------------------------------------------------------------------------

    def snapshot_producers(self) -> None:
        """Persist the producer table as `<log end>.snapshot` (only covers what is durable after a flush)."""
        with self._lock:
            end_offset, data = self._end_offset, self._producers.to_bytes()
        if (end_offset, data) == self._last_snapshot:
            return  # nothing changed since the last one: spare the fsyncs
        checkpoint.write_atomically(os.path.join(self.directory, file_name(end_offset, SNAPSHOT_SUFFIX)), data)
        for stale in _snapshot_offsets(self.directory)[:-SNAPSHOTS_KEPT]:
            os.unlink(os.path.join(self.directory, file_name(stale, SNAPSHOT_SUFFIX)))
        self._last_snapshot = (end_offset, data)

    def reconfigure(self, config: LogConfig) -> None:
        """Apply changed settings (they take effect on the next append, roll or retention pass)."""
        with self._lock:
            self.config = config

    def close(self) -> None:
        """Flush, persist producer state and index tails, and release the files (a clean shutdown)."""
        if self._closed:
            return
        self.flush()
        self.snapshot_producers()
        with self._lock:
            active = self._segments[-1]
            active.finish()
            for index in (active.offset_index, active.time_index):
                fs.fsync_path(index.path)
            for segment in self._segments:
                segment.close()
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"partition log {self.directory} is closed")


# -- directory helpers -------------------------------------------------------------------------


def _segment_bases(directory: str) -> list[int]:
    return sorted(int(name[: -len(LOG_SUFFIX)]) for name in os.listdir(directory) if name.endswith(LOG_SUFFIX))


def _snapshot_offsets(directory: str) -> list[int]:
    return sorted(
        int(name[: -len(SNAPSHOT_SUFFIX)]) for name in os.listdir(directory) if name.endswith(SNAPSHOT_SUFFIX)
    )


def _remove_leftovers(directory: str) -> None:
    """Finish interrupted swaps; delete temp files, half-written or half-deleted files, orphan indexes."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.endswith(LOG_SUFFIX + CLEANED_SUFFIX):
            os.unlink(path)
        elif name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            target = path[: -len(SWAP_SUFFIX)]
            Segment(directory, int(name[:20]), 0).drop_indexes()
            fs.replace(path, target)
    bases = set(_segment_bases(directory))
    for name in os.listdir(directory):
        orphan_index = name.endswith(INDEX_SUFFIXES) and int(name.split(".")[0]) not in bases
        if name.endswith(LEFTOVER_SUFFIXES) or orphan_index:
            os.unlink(os.path.join(directory, name))


def _read_clean_offset(directory: str) -> int:
    """The cleaner checkpoint's offset; 0 (everything dirty, which is always safe) if missing or damaged."""
    try:
        return checkpoint.read_offset(os.path.join(directory, CLEANER_CHECKPOINT)) or 0
    except CorruptFileError:
        return 0


def _remove_snapshots_after(directory: str, offset: int) -> None:
    for snapshot in _snapshot_offsets(directory):
        if snapshot > offset:
            os.unlink(os.path.join(directory, file_name(snapshot, SNAPSHOT_SUFFIX)))


def _recover(directory: str, segments: list[Segment], recovery_point: int) -> list[Segment]:
    """Validate the segments from the one holding the recovery point; cut at the first bad byte."""
    first = max(0, bisect.bisect_right(segments, recovery_point, key=lambda s: s.base_offset) - 1)
    for slot in range(first, len(segments)):
        segment = segments[slot]
        if slot > 0 and segment.base_offset < segments[slot - 1].next_offset:
            return _keep_segments(directory, segments, slot)
        cut_bytes = segment.recover()
        fs.fsync_path(segment.path)
        if slot < len(segments) - 1:
            segment.finish()
            if cut_bytes:
                return _keep_segments(directory, segments, slot + 1)
    fs.fsync_path(directory)
    return segments


def _keep_segments(directory: str, segments: list[Segment], count: int) -> list[Segment]:
    """Delete the segments after the first ``count`` (they follow a cut, so they cannot be trusted)."""
    for doomed in segments[count:]:
        doomed.delete()
    fs.fsync_path(directory)
    return segments[:count]


def _load_producers(directory: str, segments: list[Segment], end_offset: int) -> ProducerStates:
    """The newest usable snapshot at or below ``end_offset``, plus the batch headers after it."""
    states, start_offset = ProducerStates(), segments[0].base_offset
    for snapshot in reversed(_snapshot_offsets(directory)):
        if snapshot > end_offset:
            continue
        with open(os.path.join(directory, file_name(snapshot, SNAPSHOT_SUFFIX)), "rb") as file:
            try:
                states, start_offset = ProducerStates.from_bytes(file.read()), snapshot
                break
            except CorruptFileError:
                continue  # an older snapshot, or a full replay, rebuilds the same state
    for slot, segment in enumerate(segments):
        if slot + 1 < len(segments) and segments[slot + 1].base_offset <= start_offset:
            continue  # decided by base offsets alone, so a clean start leaves old indexes unread
        found = segment.position_of(start_offset)
        if found is None:
            continue
        for _, header in segment.scan(found[0], segment.size_bytes, verify=False):
            if header.base_offset >= start_offset:
                states.replay(header)
    return states
