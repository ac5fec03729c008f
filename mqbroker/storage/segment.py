"""One segment: a `.log` file of whole record batches plus its derived `.index`, `.timeindex` and `.txnindex`.

A segment is named by its base offset (20 digits). Its offset and time indexes are loaded
lazily, checked against the log when loaded, and rebuilt from the log when missing or
doubtful. Its aborted-transaction index (``txn_index``) needs the producers' state to be
rebuilt, so the partition log rebuilds it (``producer_snapshots.load_producers``). Its `.log`
descriptor comes from a bounded set shared by the broker's logs (`segment_files`), fetched for
each call under its log's lock: it may be closed between calls and reopened. A segment knows
nothing of durability policy: the partition log decides when to fsync.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence

from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import HEADER_BYTES, LOG_OVERHEAD_BYTES, BatchHeader, check_crc, read_header
from mqbroker.records.markers import ControlRecord, read_control
from mqbroker.storage import fs
from mqbroker.storage.index import SparseIndex, offset_index, time_index
from mqbroker.storage.segment_files import OPEN_MAX_DEFAULT, SegmentFile, SegmentFiles
from mqbroker.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX)
#: Compaction's output while it is written (`<base>.log.cleaned`) and once it is complete (`.swap`).
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
#: A segment's files between the log letting them go and their removal (file.delete.delay.ms).
DELETED_SUFFIX = ".deleted"
#: Bytes read at once when scanning a segment's batches.
SCAN_CHUNK_BYTES = 4 * 1024 * 1024
#: Bytes read at once when walking from an index entry to the batch that holds an offset.
SEEK_CHUNK_BYTES = 8 * 1024
#: Batches appended last whose positions a segment remembers (up to twice as many: the oldest go in bulk):
#: readers following the tail find their next batch without walking headers from the previous sparse index entry.
RECENT_BATCHES_MAX = 256
RELATIVE_OFFSET_MAX = 2**31 - 1
#: Most buffers one pwritev takes.
IOV_MAX = os.sysconf("SC_IOV_MAX")


def file_name(base_offset: int, suffix: str) -> str:
    """Segment file name: the base offset as 20 zero-padded digits plus the suffix."""
    return f"{base_offset:020d}{suffix}"


def _write_all(fd: int, pieces: Sequence[bytes | bytearray | memoryview], position: int) -> int:
    """Write ``pieces`` one after another from ``position``; return the bytes written."""
    end = position
    for first in range(0, len(pieces), IOV_MAX):
        chunk = pieces[first : first + IOV_MAX]
        chunk_bytes = sum(map(len, chunk))
        written = os.pwritev(fd, chunk, end)
        if written < chunk_bytes:  # short writes are rare on regular files: finish from a joined copy
            rest = memoryview(b"".join(chunk))
            while written < chunk_bytes:
                written += os.pwrite(fd, rest[written:], end + written)
        end += chunk_bytes
    return end - position


class Segment:
    """A `.log` file plus its sparse indexes; appends go to the end, reads start at batch boundaries."""

    def __init__(
        self,
        directory: str,
        base_offset: int,
        index_interval_bytes: int,
        files: SegmentFiles | None = None,
        lock: threading.Lock | None = None,
    ) -> None:
        """``files``: the bounded set of open files to use; ``lock``: the lock its log holds while using it."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.path = os.path.join(directory, file_name(base_offset, LOG_SUFFIX))
        #: The `.log` file, opened on demand (``files``: its log's, or its broker's, bounded set of open files).
        self.log_file: SegmentFile = (files or SegmentFiles(OPEN_MAX_DEFAULT)).file(self.path, lock)
        self.offset_index: SparseIndex = offset_index(os.path.join(directory, file_name(base_offset, INDEX_SUFFIX)))
        self.time_index: SparseIndex = time_index(os.path.join(directory, file_name(base_offset, TIME_INDEX_SUFFIX)))
        self.txn_index = TransactionIndex(os.path.join(directory, file_name(base_offset, TXN_INDEX_SUFFIX)))
        self._size_bytes: int | None = None
        # The tail state below is known once `load_tail` or `recover` ran (always for the active segment).
        self._next_offset: int | None = None
        self._max_timestamp = -1
        self._first_timestamp = -1
        self._bytes_since_index = 0
        #: base offset -> (position, header) of the last RECENT_BATCHES_MAX (to twice as many) batches appended.
        self._recent_batches: dict[int, tuple[int, BatchHeader]] = {}
        #: Both sparse indexes are in memory (``ensure_indexes`` ran): an append does not ask them each time.
        self._indexes_loaded = False

    # -- files -------------------------------------------------------------------------------

    def _pread(self, size: int, position: int) -> bytes:
        return os.pread(self.log_file.descriptor(), size, position)

    def create(self) -> None:
        """Create the empty files of a new segment."""
        self.log_file.descriptor(create=True)
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self._size_bytes = 0
        self._next_offset = self.base_offset

    @property
    def size_bytes(self) -> int:
        """Bytes in the `.log` file."""
        if self._size_bytes is None:
            self._size_bytes = os.stat(self.path).st_size
        return self._size_bytes

    @property
    def next_offset(self) -> int:
        """The offset after the segment's last batch (its base offset when empty)."""
        self.ensure_tail()
        assert self._next_offset is not None
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch max timestamp in the segment (-1 when none)."""
        self.ensure_tail()
        return self._max_timestamp

    @property
    def first_timestamp(self) -> int:
        """Max timestamp of the segment's first batch (-1 when empty): the start of its age."""
        self.ensure_tail()
        return self._first_timestamp

    def ensure_tail(self) -> None:
        """Learn the tail state (`load_tail`) unless it is known: after this the properties above read no file."""
        if self._next_offset is None:
            self.load_tail()

    def sync(self) -> None:
        """fsync the `.log` file (a cut; appends are synced through a flush's pin of `log_file`)."""
        fs.fsync(self.log_file.descriptor())

    def close(self) -> None:
        """Write pending index entries and close the file."""
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self.txn_index.write_pending()
        self.log_file.close()

    def drop_indexes(self) -> None:
        """Close the file and delete the indexes, before a rewritten `.log` replaces this one."""
        self.log_file.close()
        for path in (self.offset_index.path, self.time_index.path):
            if os.path.exists(path):
                fs.unlink(path)

    def delete(self) -> None:
        """Close and remove the segment's files (the log first, so leftovers are only indexes)."""
        self.log_file.close()
        for path in self._file_paths():
            if os.path.exists(path):
                fs.unlink(path)

    def retire(self) -> list[str]:
        """Close the segment and rename its files ``.deleted`` (the log first); return the new paths.

        Whoever retires them removes them later; a restart removes any left (``recovery``).
        """
        self.log_file.close()
        retired = []
        for path in self._file_paths():
            if os.path.exists(path):
                fs.replace(path, path + DELETED_SUFFIX)
                retired.append(path + DELETED_SUFFIX)
        return retired

    def _file_paths(self) -> tuple[str, ...]:
        return self.path, self.offset_index.path, self.time_index.path, self.txn_index.path

    # -- appending ---------------------------------------------------------------------------

    def append(self, pieces: Sequence[bytes | bytearray | memoryview], batches: list[tuple[int, BatchHeader]]) -> None:
        """Write whole stamped batches, given as consecutive byte pieces, at the end of the segment.

        ``batches`` are their (position counted from the first piece, header). One ``pwritev``
        writes the pieces, so the caller need not join (copy) them first.
        """
        if not self._indexes_loaded:
            self.ensure_indexes()
        start = self.size_bytes
        size_bytes = _write_all(self.log_file.descriptor(), pieces, start)
        recent = self._recent_batches
        for position, header in batches:
            self._track(start + position, header)
            recent[header.base_offset] = (start + position, header)
        if len(recent) > 2 * RECENT_BATCHES_MAX:  # the oldest dropped in bulk, not one per append
            for base_offset in list(recent)[:-RECENT_BATCHES_MAX]:
                del recent[base_offset]
        self._size_bytes = start + size_bytes

    def _track(self, position: int, header: BatchHeader) -> None:
        """Advance the tail state over one batch and add index entries every index interval."""
        assert self._next_offset is not None and header.base_offset >= self._next_offset, "offsets go backwards"
        # ``header``'s ``last_offset``, ``max_timestamp`` and ``size_bytes`` from its fields: no call per batch
        last_offset = header.base_offset + header.last_offset_delta
        relative_last = last_offset - self.base_offset
        assert 0 <= relative_last <= RELATIVE_OFFSET_MAX, "batch does not fit the segment's relative offsets"
        max_timestamp = header.max_timestamp
        if self._first_timestamp < 0 and self._next_offset == self.base_offset:
            self._first_timestamp = max_timestamp
        if max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
        if self._bytes_since_index > self.index_interval_bytes:
            self.offset_index.append(relative_last, position)
            self._add_time_entry(relative_last)
            self._bytes_since_index = 0
        self._bytes_since_index += header.batch_length + LOG_OVERHEAD_BYTES
        self._next_offset = last_offset + 1

    def _add_time_entry(self, relative_last: int) -> None:
        last = self.time_index.last()
        if self._max_timestamp >= 0 and (last is None or self._max_timestamp > last[0]):
            self.time_index.append(self._max_timestamp, relative_last)

    def finish(self) -> None:
        """Seal a segment that stops being active: a last time entry so its max timestamp survives."""
        self.ensure_indexes()
        if self.next_offset > self.base_offset:
            self._add_time_entry(self.next_offset - 1 - self.base_offset)
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self.txn_index.write_pending()

    def can_hold(self, size_bytes: int, last_offset: int, segment_bytes: int) -> bool:
        """False when a batch would push the segment past ``segment_bytes`` or its offset range."""
        held_bytes = self.size_bytes
        if held_bytes > 0 and held_bytes + size_bytes > segment_bytes:
            return False
        return last_offset - self.base_offset <= RELATIVE_OFFSET_MAX

    # -- indexes and tail state ---------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Load the indexes on first use; rebuild them from the log if they do not match it."""
        if self._indexes_loaded:
            return
        if not (self.offset_index.loaded and self.time_index.loaded):
            good = self.offset_index.load(self._offset_index_matches) and self.time_index.load(self._time_index_sane)
            if not good:
                self._rebuild_indexes()
        self._indexes_loaded = True  # a loaded index stays loaded (compaction swaps in a new segment)

    def _offset_index_matches(self, index: SparseIndex) -> bool:
        last = index.last()
        if last is None:
            return True
        relative_last, position = last
        if index.entries()[0][0] < 0 or position + HEADER_BYTES > self.size_bytes:
            return False
        try:
            header = read_header(self._pread(HEADER_BYTES, position), 0, require_whole=False)
        except CorruptRecordError:
            return False  # an entry the `.log` never had (a power loss kept more of the index than of it)
        return header.last_offset == self.base_offset + relative_last

    def _time_index_sane(self, index: SparseIndex) -> bool:
        return all(0 <= relative <= RELATIVE_OFFSET_MAX for _, relative in index.entries())

    def _rebuild_indexes(self) -> None:
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_tail()
        for position, header in self.scan(0, self.size_bytes, verify=False):
            self._track(position, header)

    def _reset_tail(self) -> None:
        self._recent_batches.clear()
        self._next_offset = self.base_offset
        self._max_timestamp = -1
        self._first_timestamp = -1
        self._bytes_since_index = 0

    def load_tail(self) -> None:
        """Learn the next offset and max timestamp by walking from the last index entry (no CRC checks)."""
        self.ensure_indexes()
        if self._next_offset is not None:
            return  # a rebuild just walked the whole segment
        self._reset_tail()
        start = 0
        last = self.offset_index.last()
        if last is not None:
            start = last[1]
            self._next_offset = self.base_offset + last[0]  # the batch at ``start`` ends here; walked below
        timed = self.time_index.last()
        self._max_timestamp = timed[0] if timed is not None else -1
        if self.size_bytes > 0:
            first = read_header(self._pread(HEADER_BYTES, 0), 0, require_whole=False)
            self._first_timestamp = first.max_timestamp
        self._bytes_since_index = self.size_bytes - start
        for _, header in self.scan(start, self.size_bytes, verify=False):
            self._max_timestamp = max(self._max_timestamp, header.max_timestamp)
            self._next_offset = header.next_offset

    # -- reading -----------------------------------------------------------------------------

    def scan(self, start: int, end: int, verify: bool) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of the batches in [start, end).

        With ``verify`` each batch must be whole and pass its CRC, else ``CorruptRecordError``
        is raised at it; without, the bytes are trusted and only headers are read.
        """
        position = start
        want = SCAN_CHUNK_BYTES
        while position < end:
            chunk = self._pread(min(want, end - position), position)
            cursor = 0
            want = SCAN_CHUNK_BYTES
            while len(chunk) - cursor >= HEADER_BYTES:
                header = read_header(chunk, cursor, require_whole=False)
                size = header.size_bytes
                if cursor + size > len(chunk) and verify:
                    if position + cursor + size > end:
                        raise CorruptRecordError(f"batch at byte {position + cursor} runs past the end of {self.path}")
                    want = max(want, size)
                    break
                if verify:
                    check_crc(chunk, cursor, header)
                yield position + cursor, header
                cursor += size
            if cursor == 0 and want == SCAN_CHUNK_BYTES:
                raise CorruptRecordError(f"truncated batch header at byte {position} of {self.path}")
            position += cursor

    def read_control(self, position: int, header: BatchHeader) -> ControlRecord:
        """The meaning of the control batch at ``position`` (``CorruptRecordError`` if it is not one)."""
        return read_control(self._pread(header.size_bytes, position), 0, header)

    def position_of(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset``: (position, header), or None."""
        recent = self._recent_batches.get(offset)
        if recent is not None:
            return recent
        self.ensure_indexes()
        entry = self.offset_index.floor(offset - self.base_offset)
        start = entry[1] if entry is not None else 0
        end = self.size_bytes
        while start < end:
            chunk = self._pread(min(SEEK_CHUNK_BYTES, end - start), start)
            cursor = 0
            while len(chunk) - cursor >= HEADER_BYTES:
                header = read_header(chunk, cursor, require_whole=False)
                if header.last_offset >= offset:
                    return start + cursor, header
                cursor += header.size_bytes
            if cursor == 0:
                raise CorruptRecordError(f"truncated batch header at byte {start} of {self.path}")
            start += cursor
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int) -> bytes:
        """Whole batches from the one holding ``offset``, ending before any batch reaching ``max_offset``.

        At least one batch is returned (even one larger than ``max_bytes``) unless none qualifies.
        """
        data = self._read_indexed(offset, max_bytes, max_offset)
        if data is not None:
            return data
        found = self.position_of(offset)
        if found is None or found[1].last_offset >= max_offset:
            return b""
        position, first = found
        limit = position + max(max_bytes, first.size_bytes)
        end = self._batch_boundary(position, limit, max_offset)
        if end is not None:
            return self._pread(end - position, position)  # one copy: the bytes returned
        data = self._pread(min(limit, self.size_bytes) - position, position)
        cursor = 0
        while len(data) - cursor >= HEADER_BYTES:
            header = read_header(data, cursor, require_whole=False)
            if header.last_offset >= max_offset or cursor + header.size_bytes > len(data):
                break
            cursor += header.size_bytes
        assert cursor > 0, f"first batch at byte {position} of {self.path} could not be read whole"
        return data if cursor == len(data) else data[:cursor]

    def _read_indexed(self, offset: int, max_bytes: int, max_offset: int) -> bytes | None:
        """A sequential reader's fast path: one pread and no header walk, or None to take the slow path.

        It applies when the batch ending at ``offset - 1`` and the next indexed batch are both in
        the index (every batch is once batches outgrow index.interval.bytes) and the returned
        batches end at a boundary the index knows. The first header then only needs checking:
        an unindexed batch between the two entries would hold ``offset`` instead.
        """
        self.ensure_indexes()
        position = self.offset_index.value_after(offset - 1 - self.base_offset)
        if position is None:
            return None
        end = self._batch_boundary(position, position + max_bytes, max_offset)
        if end is None:
            return None
        data = self._pread(end - position, position)
        return data if read_header(data).base_offset <= offset else None

    def _batch_boundary(self, position: int, limit: int, max_offset: int) -> int | None:
        """A batch boundary in (position, limit] with every batch before it below ``max_offset``, if known.

        The segment end, the start of a recent batch based at ``max_offset`` and the indexed batch starts are
        boundaries known without reading the log. The recent batch is checked before the index: a consumer
        reading up to the high watermark while later batches wait for their fsync gets every batch below it,
        not only those up to the last indexed one (the rest would cost it another fetch round trip).
        """
        if self.size_bytes <= limit and self.next_offset <= max_offset:
            return self.size_bytes
        recent = self._recent_batches.get(max_offset)
        if recent is not None and position < recent[0] <= limit:
            return recent[0]
        entry = self.offset_index.last_within(max_offset - self.base_offset, limit)
        # An entry (last offset L, start p): the batches before p end below p's base <= L <= max_offset.
        return entry[1] if entry is not None and entry[1] > position else None

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Base offset of the first batch whose max timestamp is >= ``timestamp_ms``."""
        self.ensure_indexes()
        entry = self.time_index.below(timestamp_ms)
        start_offset = self.base_offset + entry[1] + 1 if entry is not None else self.base_offset
        found = self.position_of(start_offset)
        if found is None:
            return None
        for _, header in self.scan(found[0], self.size_bytes, verify=False):
            if header.max_timestamp >= timestamp_ms:
                return header.base_offset
        return None

    # -- recovery and truncation -------------------------------------------------------------

    def recover(self, epoch_starts: list[tuple[int, int]] | None = None) -> int:
        """Check every batch (framing, CRC, offsets), rebuild the indexes, cut a torn or garbage tail.

        Returns the number of bytes cut. Adds to ``epoch_starts`` (leader epoch, base offset) of
        each valid batch whose leader epoch differs from the previous batch's.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_tail()
        size = self.size_bytes
        valid_bytes = 0
        try:
            for position, header in self.scan(0, size, verify=True):
                if header.base_offset < self.next_offset or header.last_offset - self.base_offset > RELATIVE_OFFSET_MAX:
                    break
                self._track(position, header)
                valid_bytes = position + header.size_bytes
                if epoch_starts is not None and (not epoch_starts or epoch_starts[-1][0] != header.partition_leader_epoch):
                    epoch_starts.append((header.partition_leader_epoch, header.base_offset))
        except CorruptRecordError:
            pass  # everything from the first invalid byte on is cut below
        if valid_bytes < size:
            self._cut(valid_bytes)
        return size - valid_bytes

    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose last offset is >= ``offset``."""
        found = self.position_of(offset)
        if found is None:
            return
        position = found[0]
        self.offset_index.truncate(lambda _, entry_position: entry_position < position)
        relative_end = found[1].base_offset - self.base_offset
        self.time_index.truncate(lambda _, relative: relative < relative_end)
        self._cut(position)
        if self.txn_index.loaded:
            self.txn_index.truncate_from(found[1].base_offset)
        self._next_offset = None
        self.load_tail()

    def _cut(self, position: int) -> None:
        self._recent_batches.clear()
        os.ftruncate(self.log_file.descriptor(), position)
        self._size_bytes = position
