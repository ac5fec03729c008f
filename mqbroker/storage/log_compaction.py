# -*- test-case-name: tests.unit.storage.test_cleaner -*-
"""The partition log's side of compaction: the view a cleaner pass works from, its clean end, and the swap of a rewritten segment.

`CompactedLog` is mixed into `PartitionLog` and works on that log's state under its lock; the
pass itself (reading, deciding, rewriting) is `cleaner`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from mqbroker.storage import checkpoint, fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log_views import CleanerView
from mqbroker.storage.producers import ProducerStates
from mqbroker.storage.segment import Segment
from mqbroker.storage.segment_files import SegmentFiles
from mqbroker.storage.sync_state import SyncState


class CompactedLog:
    """What the cleaner asks of a partition log: its sealed segments, where they are dirty, and a swap."""

    # The partition log's state this part works on (set by `PartitionLog.__init__`).
    directory: str
    config: LogConfig
    _lock: threading.Lock
    _files: SegmentFiles
    _segments: list[Segment]
    _log_start_offset: int
    _end_offset: int
    _clean_offset: int
    _producers: ProducerStates
    _unsynced: SyncState
    _check_open: Callable[[], None]

    def cleaner_view(self) -> CleanerView:
        """The sealed segments, where their dirty part starts and the batches producers need kept."""
        with self._lock:
            self._check_open()
            for segment in self._segments[:-1]:
                segment.ensure_tail()  # here, under the lock: the cleaner reads the tail state off it
            first_open = min(self._producers.ongoing.values(), default=None)
            sealed = list(self._segments[:-1])
            return CleanerView(
                segments=sealed,
                first_dirty_offset=max(self._clean_offset, self._log_start_offset),
                producer_last_offsets=self._producers.last_batch_offsets(),
                stable_end_offset=self._end_offset if first_open is None else first_open,
                aborted=[entry for segment in self._segments for entry in segment.txn_index.entries()],
                generation=self._unsynced.generation,
            )

    def mark_clean(self, offset: int, generation: int) -> None:
        """Record that compaction covered everything below ``offset`` (atomically checkpointed).

        Ignored when the log was truncated since the pass took its `cleaner_view` (``generation``).
        """
        with self._lock:
            self._check_open()
            if generation == self._unsynced.generation and offset > self._clean_offset:
                self._set_clean_offset(min(offset, self._end_offset))

    def _set_clean_offset(self, offset: int) -> None:
        self._clean_offset = offset
        checkpoint.write_clean_offset(self.directory, offset)

    def swap_in(self, old: Segment, swap_path: str, txn_index_path: str | None = None) -> None:
        """Replace sealed segment ``old`` by its rewritten, fsynced ``swap_path`` (compaction's last step).

        ``txn_index_path`` is its rewritten aborted-transaction index (fsynced too, written before
        the swap's commit point): it goes in first, so a crash between the renames leaves recovery
        a `.log.swap` to finish beside the index that belongs to it.
        """
        with self._lock:
            self._check_open()
            if old not in self._segments[:-1]:
                fs.unlink(swap_path)  # retention or a truncation removed it meanwhile
                if txn_index_path is not None:
                    fs.unlink(txn_index_path)
                return
            if txn_index_path is not None:
                fs.replace(txn_index_path, old.txn_index.path)
            old.drop_indexes()
            fs.replace(swap_path, old.path)
            slot = self._segments.index(old)
            segment = Segment(self.directory, old.base_offset, self.config.index_interval_bytes, self._files, self._lock)
            segment.txn_index.load(old.base_offset, self._segments[slot + 1].base_offset)
            self._segments[slot] = segment
            self._unsynced.replaced([old])
