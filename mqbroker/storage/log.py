"""PartitionLog: one partition's directory of segments; append assigns offsets, read returns whole batches.

Three parts of the log live beside it, mixed into `PartitionLog` and working on its state under
its lock: transactions (KIP-98, KIP-890; ``log_transactions``, with ``txn_guards`` checking what
may come in), durability (flushes, the recovery point and the epoch checkpoint; ``log_durability``)
and the cleaner's side of compaction (``log_compaction``).

Threading contract: `append`, `read` and the other operations may be called from any thread
(they hold the log's lock briefly); `flush` captures what to sync under the lock, runs the
fsyncs without it and then publishes the new durable end, so appends go on during an fsync
and every append written before the capture shares that one fsync (group commit). "Written"
(append returned) and "durable" (`durable_end_offset` passed the batch) are separate points.
"""

from __future__ import annotations

import bisect
import threading

from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import (
    CONTROL_MASK,
    LOG_OVERHEAD_BYTES,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    iter_batches,
    stamped_header,
    stamped_pieces,
)
from mqbroker.storage import checkpoint, fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.epochs import LeaderEpochCache
from mqbroker.storage.errors import LogClosedError, OffsetOutOfRangeError, RecordTooLargeError
from mqbroker.storage.log_compaction import CompactedLog
from mqbroker.storage.log_durability import DurableLog
from mqbroker.storage.log_transactions import TransactionalLog
from mqbroker.storage.log_views import AppendResult, CleanerView, ReadResult
from mqbroker.storage.producer_snapshots import load_producers, remove_snapshots_after, snapshot_offsets, write_snapshot
from mqbroker.storage.producers import CompletedTxn, ProducerEntry, ProducerStates, reject_duplicate_in_multi_batch
from mqbroker.storage.recovery import open_segments
from mqbroker.storage.retention import RetiredFiles, expired_segment_count
from mqbroker.storage.segment import Segment
from mqbroker.storage.segment_files import SegmentFiles
from mqbroker.storage.sync_state import FlushTicket, SyncState
from mqbroker.storage.txn_guards import NOT_VERIFIED, VerificationGuards
from mqbroker.storage.txn_index import AbortedTxn

__all__ = ["NOT_VERIFIED", "AppendResult", "CleanerView", "FlushTicket", "PartitionLog", "ReadResult"]

NO_TIMESTAMP = -1
#: Attributes of a batch whose producer's state an append checks and stages even without a producer id.
_PRODUCER_STATE_MASK = TRANSACTIONAL_MASK | CONTROL_MASK


class PartitionLog(TransactionalLog, DurableLog, CompactedLog):
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
        #: Where the segments' `.log` descriptors come from (the broker's bounded set of open files),
        #: and the log's lock, which the set takes before it closes one (`segment_files`).
        self._files = segments[-1].log_file.files
        self._lock = segments[-1].log_file.owner_lock
        #: Which leader epoch started at which offset (replicas compare these to find divergence).
        self.epochs = epochs if epochs is not None else LeaderEpochCache.load(directory)
        self.config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._end_offset = segments[-1].next_offset
        self._producers = producers
        self._clean_offset = clean_offset
        self._closed = False
        self._active_since_ms = now_ms
        #: What the next fsync must cover (guarded by the lock).
        self._unsynced = SyncState(durable_end_offset=self._end_offset)
        #: (log end, producer table) of the last snapshot written, to skip writing an identical one.
        self._last_snapshot: tuple[int, bytes] | None = None
        #: Serializes snapshot writers: a checkpoint (in a thread) and a roll (under the log's lock; taken second).
        self._snapshot_lock = threading.Lock()
        #: Serializes leader-epoch checkpoint writers: `persist_epochs` (in a thread) and a truncation (taken second).
        self._epochs_write_lock = threading.Lock()
        #: An epoch change starting below this offset is written at once, by the append or truncation making
        #: it: a recovery point already on disk may lie past it (the log was cut below one).
        self._epochs_written_at_once_below = 0
        self._verification_guards = VerificationGuards()
        #: Segments let go whose files wait for file.delete.delay.ms (guarded by the lock).
        self._retired = RetiredFiles()

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
        files: SegmentFiles | None = None,
    ) -> PartitionLog:
        """Open (or create) the log in ``directory``; recover it (`recovery.open_segments`) unless shut down cleanly.

        ``files`` bounds the open segment files: a broker's logs share one (`LogManager`); a log
        opened without it gets a set of its own.
        """
        lock = threading.Lock()
        with lock:  # the log's lock from the first use of its files on (the set closes none under it)
            segments, rebuild_txn_index_from, recovered_epochs = open_segments(
                directory,
                config.index_interval_bytes,
                recovery_point=recovery_point,
                log_start_offset=log_start_offset,
                clean_shutdown=clean_shutdown,
                files=files,
                lock=lock,
            )
            end_offset = segments[-1].next_offset
            log_start = min(max(log_start_offset, segments[0].base_offset), end_offset)
            snapshots = snapshot_offsets(directory)
            if snapshots and snapshots[-1] > end_offset and remove_snapshots_after(directory, end_offset):
                fs.fsync_path(directory)  # gone before the log can grow back past them
            producers = load_producers(directory, segments, end_offset, rebuild_txn_index_from,
                                       snapshots=[offset for offset in snapshots if offset <= end_offset])
            first_timestamp = segments[-1].first_timestamp
        epochs = LeaderEpochCache.load(directory)
        epochs.forget_from(end_offset)  # a recovered (cut) tail takes its epochs with it
        if recovered_epochs is not None:  # past the recovery point the batches say which epoch wrote them
            epochs.forget_from(recovered_epochs.checked_from)
            for epoch, start_offset in recovered_epochs.starts:
                epochs.assign(epoch, start_offset)
        clean_offset = min(checkpoint.read_clean_offset(directory), end_offset)
        log = cls(directory, config, segments, log_start, producers, now_ms, epochs, clean_offset)
        log._epochs_written_at_once_below = recovery_point  # a damaged log may have lost data below it
        log._active_since_ms = first_timestamp if first_timestamp >= 0 else now_ms
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
        *,
        markers_allowed: bool = False,
        verification_guard: object | None = NOT_VERIFIED,
    ) -> AppendResult:
        """Validate one or more client-built batches, assign their offsets and write them.

        Raises ``CorruptRecordError`` (framing, magic, CRC), ``RecordTooLargeError``, and for
        idempotent producers ``OutOfOrderSequenceError``, ``InvalidProducerEpochError`` or
        ``DuplicateSequenceError``. A single retried batch returns its original offsets with
        ``duplicate`` set and is not written again. With ``assign_offsets`` False (a follower
        copying its leader) the batches keep their offsets, which must not go backwards.

        Transactions: a control batch is refused (``InvalidRecordError``) unless
        ``markers_allowed`` (the broker writing a coordinator's marker) or a follower copies it;
        a transactional batch that opens its producer's transaction here needs the guard of a
        verification started before it (``InvalidTxnStateError`` otherwise, and after a marker
        for that producer voided the guard) unless ``verification_guard`` is ``NOT_VERIFIED``.
        """
        view = memoryview(data).cast("B")
        batches = self._validate(view)
        with self._lock:
            self._check_open()
            staged: dict[int, ProducerEntry] = {}
            completed: list[tuple[CompletedTxn, AbortedTxn | None]] = []
            next_offset = self._end_offset
            latest_epoch, epoch_starts = self.epochs.latest_epoch, []
            for slot, (position, header) in enumerate(batches):
                # A plain batch (no producer id, neither transactional nor control: every MQTT and AMQP append)
                # has no producer state to check or stage: ``_admit``, ``check`` and ``stage`` would do nothing.
                plain = header.producer_id == NO_PRODUCER_ID and not header.attributes & _PRODUCER_STATE_MASK
                marker = None if plain else self._admit(
                    view, position, header, staged, assign_offsets, markers_allowed, verification_guard)
                if assign_offsets:
                    duplicate = None if plain else self._producers.check(header, staged, marker)
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
                    header = stamped_header(header, next_offset, leader_epoch)
                    batches[slot] = (position, header)
                elif header.base_offset < next_offset:
                    raise CorruptRecordError(f"batch offset {header.base_offset} is below the log end {next_offset}")
                if header.partition_leader_epoch > latest_epoch:
                    latest_epoch = header.partition_leader_epoch
                    epoch_starts.append((latest_epoch, header.base_offset))
                if not plain:
                    ended = self._producers.stage(header, staged, marker)
                    if ended is not None:
                        completed.append((ended, self._producers.aborted_entry(ended, staged) if ended.aborted
                                          else None))
                next_offset = header.base_offset + header.last_offset_delta + 1  # (``header.next_offset``: no call)
            first = batches[0][1]
            active = self._segments[-1]
            if active.size_bytes > 0 and (
                not active.can_hold(len(view), next_offset - 1, self.config.segment_bytes)
                or now_ms - self._active_since_ms > self.config.segment_ms
            ):
                self._roll(first.base_offset, now_ms)
            for epoch, start_offset in epoch_starts:  # in memory; `persist_epochs` writes them off the reactor
                self.epochs.assign(epoch, start_offset)
            self.epochs.appended()
            unpersisted_from = self.epochs.unpersisted_from
            if unpersisted_from is not None and unpersisted_from < self._epochs_written_at_once_below:
                self._write_epochs()
            self._segments[-1].append(stamped_pieces(view, batches) if assign_offsets else [view], batches)
            if staged:  # a batch that ends a transaction stages its producer: nothing staged, nothing completed
                self._producers.commit(staged, [ended for ended, _ in completed])
                self._transactions_written(staged, completed)
            self._end_offset = next_offset
            self._unsynced.appended(next_offset - first.base_offset, now_ms)
            append_time = now_ms if first.attributes & TIMESTAMP_TYPE_MASK else NO_TIMESTAMP
            return AppendResult(
                base_offset=first.base_offset,
                last_offset=next_offset - 1,
                log_append_time_ms=append_time,
                log_start_offset=self._log_start_offset,
            )

    def _validate(self, view: memoryview) -> list[tuple[int, BatchHeader]]:
        """Framing, magic and CRC of every batch, and the size limit; no record is decoded."""
        batches = list(iter_batches(view, check=True))
        if not batches:
            raise CorruptRecordError("an append needs at least one record batch")
        max_message_bytes = self.config.max_message_bytes
        for _, header in batches:
            if header.batch_length + LOG_OVERHEAD_BYTES > max_message_bytes:  # (``size_bytes``: no call)
                raise RecordTooLargeError(
                    f"batch of {header.size_bytes} bytes exceeds max.message.bytes={max_message_bytes}"
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
        sealed.sync()  # before the next segment's name can be durable: else a power loss leaves a hole
        self._unsynced.sealed(sealed)
        segment = Segment(self.directory, base_offset, self.config.index_interval_bytes, self._files, self._lock)
        segment.create()
        self._segments.append(segment)
        self._active_since_ms = now_ms
        # The producers as of the new base (this append's batches are not staged in yet): an
        # unclean restart rebuilds the segment's aborted-transaction index from here.
        data = self._producers.to_bytes()
        with self._snapshot_lock:
            write_snapshot(self.directory, base_offset, data, keep_at_or_below=base_offset)
            self._last_snapshot = (base_offset, data)

    def start_leader_epoch(self, epoch: int) -> None:
        """This broker leads the partition at ``epoch`` from the log end on (in memory; see `persist_epochs`)."""
        with self._lock:
            self._check_open()
            self.epochs.begin(epoch, self._end_offset)

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

    def largest_timestamp(self) -> tuple[int, int] | None:
        """(timestamp, base offset of its batch) of the largest timestamp in the log, the first such batch on ties
        (None: the log holds no timestamped record)."""
        with self._lock:
            self._check_open()
            timestamp = max((segment.max_timestamp for segment in self._segments), default=-1)
            if timestamp < 0:
                return None
            segment = next(segment for segment in self._segments if segment.max_timestamp == timestamp)
            found = segment.offset_for_timestamp(timestamp)
            return (timestamp, max(found, self._log_start_offset)) if found is not None else None

    # -- removing data -----------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose last offset is >= ``offset`` (a follower diverging from its leader).

        Durably, before the epoch cache forgets the cut epochs (a power loss must not bring them back).
        """
        with self._lock:
            self._check_open()
            previous_end = self._end_offset
            if offset < self._end_offset:
                if offset <= self._segments[0].base_offset:
                    self._start_empty_at(offset)
                else:
                    self._delete_tail([s for s in reversed(self._segments) if s.base_offset >= offset])
                    self._segments = [s for s in self._segments if s.base_offset < offset]
                    self._segments[-1].truncate_to(offset)  # after the later segments are gone for good
                self._end_offset = self._segments[-1].next_offset
                self._log_start_offset = min(self._log_start_offset, self._end_offset)
                self._unsynced.truncated(self._end_offset)
                self._make_cut_durable(self._end_offset)
                if self._clean_offset > self._end_offset:
                    self._set_clean_offset(self._end_offset)  # what is appended next is dirty
                self._producers = load_producers(self.directory, self._segments, self._end_offset)
            self._epochs_written_at_once_below = max(self._epochs_written_at_once_below, previous_end)
            with self._epochs_write_lock:
                self.epochs.truncate_from_end(offset)  # also an epoch that began at the log end but wrote nothing

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every batch and go on, empty, from ``offset`` (a follower below its leader's log start)."""
        with self._lock:
            self._check_open()
            self._start_empty_at(offset)
            self._epochs_written_at_once_below = max(self._epochs_written_at_once_below, self._end_offset)
            self._end_offset = offset
            self._unsynced.restarted(offset)
            self._make_cut_durable(-1)
            with self._epochs_write_lock:
                self.epochs.truncate_from_end(0)
            self._set_clean_offset(offset)
            self._producers = ProducerStates()

    def _make_cut_durable(self, end_offset: int) -> None:
        """Drop the producer snapshots past ``end_offset``; fsync the cut segment, its txn index and the directory.

        Under the snapshot lock: a checkpoint writing a snapshot past the cut finishes first, and goes.
        """
        with self._snapshot_lock:
            remove_snapshots_after(self.directory, end_offset)
            self._last_snapshot = None
        self._segments[-1].sync()
        fs.fsync_path(self._segments[-1].txn_index.path)
        fs.fsync_path(self.directory)

    def _start_empty_at(self, offset: int) -> None:
        self._delete_tail(self._segments[::-1])
        segment = Segment(self.directory, offset, self.config.index_interval_bytes, self._files, self._lock)
        segment.create()
        self._segments = [segment]
        self._log_start_offset = offset

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
        with self._lock:
            self._check_open()
            self._retired.sweep(now_ms, self.config.file_delete_delay_ms)
            if not self.config.deletes:
                return 0
            count = expired_segment_count(self._segments, self.config, now_ms, max_offset)
            self._drop_prefix(count, now_ms)
            return count

    def _drop_prefix(self, count: int, now_ms: int | None = None) -> None:
        """Let the oldest ``count`` segments go: their files are removed file.delete.delay.ms after ``now_ms``
        (None: after the next retention pass), or at once with a delay of 0."""
        if count == 0:
            return
        assert count < len(self._segments), "the active segment is never deleted"
        doomed = self._segments[:count]
        if self.config.file_delete_delay_ms > 0:
            self._retired.retire(doomed, now_ms)
            self._unsynced.removed(doomed)
        else:
            self._delete_segments(doomed)
        self._segments = self._segments[count:]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self._producers.remove_before(self._log_start_offset)

    def _delete_segments(self, doomed: list[Segment]) -> None:
        for segment in doomed:
            segment.delete()
        self._unsynced.removed(doomed)

    def _delete_tail(self, newest_first: list[Segment]) -> None:
        """Delete the newest segments, newest first, durably: no hole, and nothing cut or made next outlives them."""
        self._delete_segments(newest_first)
        fs.fsync_path(self.directory)

    def expire_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget idle idempotent producers (producer.id.expiration.ms); return how many were expired."""
        with self._lock:
            self._check_open()
            return self._producers.expire(now_ms, expiration_ms)

    # -- lifecycle ---------------------------------------------------------------------------

    def snapshot_producers(self) -> None:
        """Persist the producer table as `<log end>.snapshot` (only covers what is durable after a flush)."""
        with self._lock:
            end_offset, data = self._end_offset, self._producers.to_bytes()
            active_base = self._segments[-1].base_offset
        with self._snapshot_lock:
            if (end_offset, data) == self._last_snapshot:
                return  # nothing changed since the last one: spare the fsyncs
            write_snapshot(self.directory, end_offset, data, keep_at_or_below=active_base)
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
        self.persist_epochs()
        with self._lock:
            active = self._segments[-1]
            active.finish()
            for index in (active.offset_index, active.time_index, active.txn_index):
                fs.fsync_path(index.path)
            for segment in self._segments:
                segment.close()
            self._retired.remove_all()
            self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"partition log {self.directory} is closed")
