# -*- test-case-name: tests.unit.storage.test_log_transactions -*-
"""The partition log's transactions (KIP-98, KIP-890): what read_committed readers may see, and the bookkeeping of writes.

From batch headers and markers the log keeps each producer's open transaction, the last stable
offset and the aborted-transaction index of every segment; `TransactionalLog` is the part of
`PartitionLog` that admits transactional batches (``txn_guards``: markers, verified transaction
starts), indexes aborts as they are written and answers a read_committed fetch. It is mixed into
`PartitionLog` and works on that log's state under that log's lock.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable

from mqbroker.records.header import BatchHeader
from mqbroker.records.markers import ControlRecord
from mqbroker.storage.producers import CompletedTxn, ProducerEntry, ProducerStates
from mqbroker.storage.segment import Segment
from mqbroker.storage.sync_state import SyncState
from mqbroker.storage.txn_guards import VerificationGuards, control_of
from mqbroker.storage.txn_index import AbortedTxn, collect_aborted


class TransactionalLog:
    """A partition log's transaction reads (last stable offset, aborted transactions) and write bookkeeping."""

    # The partition log's state this part works on (set by `PartitionLog.__init__`).
    _lock: threading.Lock
    _segments: list[Segment]
    _log_start_offset: int
    _producers: ProducerStates
    _unsynced: SyncState
    _verification_guards: VerificationGuards
    _check_open: Callable[[], None]

    # -- writing (under the log's lock, from `PartitionLog.append`) ----------------------------

    def _admit(
        self,
        view: memoryview,
        position: int,
        header: BatchHeader,
        staged: dict[int, ProducerEntry],
        assign_offsets: bool,
        markers_allowed: bool,
        verification_guard: object | None,
    ) -> ControlRecord | None:
        """The batch's marker (None for data); refuse a client's marker or an unverified transaction start."""
        marker = control_of(view, position, header, refuse=assign_offsets and not markers_allowed)
        if assign_offsets:
            opens = self._producers.starts_transaction(header, staged)
            self._verification_guards.check(header, opens, verification_guard)
        return marker

    def _transactions_written(
        self, staged: dict[int, ProducerEntry], completed: list[tuple[CompletedTxn, AbortedTxn | None]]
    ) -> None:
        """After a write: open transactions and markers void their producers' guards; aborts are indexed."""
        self._verification_guards.void(staged)
        active = self._segments[-1]
        for _, entry in completed:
            if entry is not None:
                active.txn_index.append(entry)
        if completed:
            active.txn_index.write_pending()
            self._unsynced.txn_indexed(active)

    def start_verification(self, producer_id: int) -> object:
        """The guard of a transaction verification for ``producer_id`` (append with it once verified)."""
        with self._lock:
            return self._verification_guards.start(producer_id)

    def needs_verification(self, producer_id: int, producer_epoch: int = -1) -> bool:
        """True unless ``producer_id`` has an open transaction here, begun at ``producer_epoch`` or later (its
        next transactional batch opens one; a newer epoch's batch opens a new one, transaction version 2)."""
        with self._lock:
            return not self._producers.has_open_transaction(producer_id, producer_epoch)

    # -- reading -------------------------------------------------------------------------------

    def last_stable_offset(self, high_watermark: int) -> int:
        """The end of what read_committed readers may see: the first offset of an open (or unreplicated) transaction, capped at ``high_watermark``."""
        with self._lock:
            self._check_open()
            first_unstable = self._producers.first_unstable_offset(high_watermark)
            stable = high_watermark if first_unstable is None or first_unstable > high_watermark else first_unstable
            start = self._log_start_offset
            return stable if stable > start else start

    def has_unreplicated_markers(self) -> bool:
        """Whether finished transactions wait for the high watermark to pass their markers (see `last_stable_offset`)."""
        with self._lock:
            return bool(self._producers.unreplicated)

    def aborted_transactions(self, start_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_offset) (a read_committed fetch lists them)."""
        with self._lock:
            self._check_open()
            slot = max(0, bisect.bisect_right(self._segments, start_offset, key=lambda s: s.base_offset) - 1)
            return collect_aborted(self._segments[slot:], start_offset, upper_offset)

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each transaction open in this partition."""
        with self._lock:
            return dict(self._producers.ongoing)
