"""One share partition's record states (KIP-932's in-flight records), pure.

A share group reads each partition of its topics through a window of the log, the *region*
``[start_offset, end_offset)``: every offset below it is done (acknowledged, dead-lettered, skipped
or handed to the delay index), every offset from ``end_offset`` on is still to be read. Inside the
region each offset is

- ``AVAILABLE``: any member may acquire it (a release may say "not before" a time: push retries);
- ``ACQUIRED``: leased to one member until a deadline (the visibility timeout), which it may renew;
- ``DEAD_LETTERING``: on its way to the dead-letter topic (done once its copy is durable);
- ``DONE``.

Offsets with one state are kept as *runs* (``first..last``), so a fetch of 500 records acquires
one run and their acknowledgement settles one run: nothing here costs per record. Each acquisition
counts a delivery; a released or expired record whose delivery count reached
``max_delivery_attempts`` is dead-lettered instead of made available, as a rejected one is. A group
with a maximum of ready records (``trim``) dead-letters the oldest available ones beyond it.

A record whose deliver-at time lies ahead leaves the region as done and is reported in
``scheduled``: the service stores it durably in the delay index. When it is due it comes back
with ``add_due`` as a *due record*, one offset outside the region, acquired before the region's
records; its delivery count and its end are written as its delay entry (``due_changed``).

The caller drains the outputs after each call: ``dead_letters`` (copy, then ``dead_lettered``),
``scheduled`` and ``due_changed`` (write them in the same state write as the snapshot), and
``changed`` (the region's ``snapshot()`` must be written). Nothing here reads a clock.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Collection, Iterator, Mapping

from mqbroker.model import AcknowledgeType
from mqbroker.shares.partition_runs import Run, coalesce, gaps, split_at, split_range
from mqbroker.shares.partition_snapshot import (
    PartitionSnapshot,
    restored_runs,
    snapshot_of,
)
from mqbroker.shares.partition_values import (
    NO_OWNER,
    AcquiredRange,
    DeadLetter,
    DeathReason,
    DueEntry,
    PartitionStats,
    RecordState,
    RunView,
    Scheduled,
)


class SharePartition:
    """The record states of one partition of a share group's topic."""

    def __init__(self, *, start_offset: int, max_delivery_attempts: int, inflight_records_max: int) -> None:
        assert start_offset >= 0 and max_delivery_attempts >= 1 and inflight_records_max >= 1
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.max_delivery_attempts = max_delivery_attempts
        self.inflight_records_max = inflight_records_max
        self._runs: list[Run] = []  # cover [start_offset, end_offset) without gaps, in order
        self._firsts: list[int] = []  # each run's first offset, for bisect
        self._available_from = start_offset  # no AVAILABLE run of the region starts below this offset
        self._due: dict[int, Run] = {}  # due delayed records by offset, oldest first
        self._due_sorted: list[int] = []
        self._deadlines: list[int] = []  # a heap of lease ends and not-before times (stale ones are harmless)
        #: Outputs, drained by the caller.
        self.dead_letters: list[DeadLetter] = []
        self.scheduled: list[Scheduled] = []
        self.due_changed: set[int] = set()
        self.changed = False

    # --- the log side ----------------------------------------------------------------------

    def room(self) -> int:
        """How many more offsets the region may read before it is full."""
        return max(0, self.inflight_records_max - (self.end_offset - self.start_offset))

    def extend(self, first: int, last: int, now_ms: int, deliver_at: Mapping[int, int] | None = None) -> None:
        """Offsets ``first..last`` were read from the log (offsets skipped before ``first`` are done).

        ``deliver_at`` holds the deliver-at times of records that carry one; those still ahead of
        ``now_ms`` are scheduled instead of made available.
        """
        assert first >= self.end_offset and last >= first, (first, last, self.end_offset)
        if first > self.end_offset:
            self._append(Run(self.end_offset, first - 1, RecordState.DONE))
        later = sorted((offset, at) for offset, at in (deliver_at or {}).items() if at > now_ms and first <= offset <= last)
        position = first
        for offset, at in later:
            if offset > position:
                self._append(Run(position, offset - 1, RecordState.AVAILABLE))
            self._append(Run(offset, offset, RecordState.DONE))
            self.scheduled.append(Scheduled(offset, at))
            position = offset + 1
        if position <= last:
            self._append(Run(position, last, RecordState.AVAILABLE))
        self._advance()

    def skip(self, first: int, last: int) -> None:
        """Offsets ``first..last`` hold nothing to deliver (control batches, batches that do not decode)."""
        assert first >= self.end_offset and last >= first, (first, last, self.end_offset)
        self._append(Run(self.end_offset, last, RecordState.DONE))
        self._advance()

    def note_log_start(self, log_start_offset: int) -> None:
        """Retention deleted the log below ``log_start_offset``: what lay there is done (gone)."""
        for offset in [offset for offset in self._due_sorted if offset < log_start_offset]:
            self._finish_due(self._due[offset])
        if log_start_offset <= self.start_offset:
            return
        if log_start_offset >= self.end_offset:
            self._runs.clear()
            self._firsts.clear()
            self.start_offset = self.end_offset = log_start_offset
        else:
            low, high = split_range(self._runs, self._firsts, self.start_offset, log_start_offset - 1)
            for run in self._runs[low:high]:
                run.state, run.owner, run.deadline_ms = RecordState.DONE, NO_OWNER, 0
            self._advance()
        self._available_from = max(self._available_from, self.start_offset)
        self.changed = True

    def add_due(self, offset: int, deliver_at_ms: int, delivery_count: int) -> None:
        """A scheduled record is due: it may be acquired (before the region's records)."""
        assert offset not in self._due, offset
        self._due[offset] = Run(offset, offset, RecordState.AVAILABLE, delivery_count, deliver_at_ms=deliver_at_ms)
        bisect.insort(self._due_sorted, offset)

    # --- members ----------------------------------------------------------------------------

    def acquire(self, member: str, records_max: int, now_ms: int, lease_ms: int, readable_end: int) -> list[AcquiredRange]:
        """Lease up to ``records_max`` available records to ``member`` until ``now_ms + lease_ms``.

        Due records go first, then the region's lowest offsets below ``readable_end`` (what the
        caller holds in memory).
        """
        acquired: list[AcquiredRange] = []
        remaining = records_max
        deadline_ms = now_ms + lease_ms
        for offset, run in self._due.items():
            if remaining <= 0:
                break
            if run.state is RecordState.AVAILABLE and run.deadline_ms <= now_ms:
                self._lease(run, member, deadline_ms)
                acquired.append(AcquiredRange(offset, offset, run.delivery_count))
                self.due_changed.add(offset)
                remaining -= 1
        index = max(0, bisect.bisect_right(self._firsts, self._available_from) - 1)
        skipped_from: int | None = None
        touched_low = index
        while remaining > 0 and index < len(self._runs):
            run = self._runs[index]
            if run.first >= readable_end:
                break
            if run.state is RecordState.AVAILABLE:
                if run.deadline_ms > now_ms:
                    skipped_from = run.first if skipped_from is None else skipped_from
                else:
                    last = min(run.last, run.first + remaining - 1, readable_end - 1)
                    if last < run.last:
                        split_at(self._runs, self._firsts, index + 1, last + 1)
                    self._lease(run, member, deadline_ms)
                    acquired.append(AcquiredRange(run.first, run.last, run.delivery_count))
                    remaining -= run.last - run.first + 1
                    self.changed = True
            index += 1
        next_unscanned = self._runs[index].first if index < len(self._runs) else self.end_offset
        self._available_from = next_unscanned if skipped_from is None else skipped_from
        if acquired:
            heapq.heappush(self._deadlines, deadline_ms)
            coalesce(self._runs, self._firsts, touched_low, index)
        return acquired

    def acknowledge(self, member: str, first: int, last: int, kind: AcknowledgeType, now_ms: int, *,
                    lease_ms: int = 0, error: str = "", available_at_ms: int = 0) -> bool:
        """Settle ``first..last``, which ``member`` must hold leased; False (and no change) otherwise.

        ``lease_ms`` is RENEW's new lease; ``error`` is kept as the last error of a released or
        rejected record (the dead-letter headers show it); ``available_at_ms`` holds a released
        record back until then.
        """
        if last < first:
            return False
        due = self._due_sorted[bisect.bisect_left(self._due_sorted, first):bisect.bisect_right(self._due_sorted, last)]
        region = list(gaps(first, last, due))
        if not all(self._due[offset].state is RecordState.ACQUIRED and self._due[offset].owner == member
                   for offset in due):
            return False
        if not all(self._held_by(member, low, high) for low, high in region):
            return False
        for offset in due:
            self._settle(self._due[offset], kind, now_ms, lease_ms, error, available_at_ms)
        for low, high in region:
            start, end = split_range(self._runs, self._firsts, low, high)
            for run in self._runs[start:end]:
                self._settle(run, kind, now_ms, lease_ms, error, available_at_ms)
            coalesce(self._runs, self._firsts, start, end)
        self._advance()
        return True

    def release_member(self, member: str, reason: str) -> int:
        """``member`` left (or was evicted): everything it holds is released; how many records."""
        return self._release_where(lambda run: run.owner == member, reason)

    def lease_owners(self) -> set[str]:
        """The members holding leases here (due records' included)."""
        return {run.owner for run in self._all_runs() if run.state is RecordState.ACQUIRED}

    def release_owners(self, owners: Collection[str], reason: str) -> int:
        """Release every lease ``owners`` hold (holders of stored leases that did not come back); how many records."""
        return self._release_where(lambda run: run.owner in owners, reason)

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` next has something to do (a lease ends or a held-back record becomes available)."""
        return self._deadlines[0] if self._deadlines else None

    def tick(self, now_ms: int) -> None:
        """Expire the leases that ended by ``now_ms``; records held back until then become available."""
        due = False
        while self._deadlines and self._deadlines[0] <= now_ms:
            heapq.heappop(self._deadlines)
            due = True
        if due:
            self._release_where(lambda run: run.deadline_ms <= now_ms, "lease expired")

    def trim(self, ready_records_max: int, unread: int) -> int:
        """Drop-head overflow: dead-letter (reason ``maxlen``) the oldest available records of the region until the
        available ones plus ``unread`` (in the log past the region, all newer) are at most ``ready_records_max``."""
        excess = sum(run.last - run.first + 1 for run in self._runs
                     if run.state is RecordState.AVAILABLE) + unread - ready_records_max
        dropped = 0
        index = max(0, bisect.bisect_right(self._firsts, self._available_from) - 1)
        while dropped < excess and index < len(self._runs):
            run = self._runs[index]
            if run.state is RecordState.AVAILABLE:
                if run.first + excess - dropped <= run.last:
                    split_at(self._runs, self._firsts, index + 1, run.first + excess - dropped)
                self._dead_letter(run, DeathReason.MAXLEN, "the queue is at its maximum length")
                dropped += run.last - run.first + 1
            index += 1
        return dropped

    # --- dead letters -----------------------------------------------------------------------

    def dead_lettered(self, first: int, last: int) -> None:
        """The dead letters ``first..last`` are durable on the dead-letter topic (or dropped): done."""
        for offset in [offset for offset in self._due_sorted if first <= offset <= last]:
            if self._due[offset].state is RecordState.DEAD_LETTERING:
                self._finish_due(self._due[offset])
        low, high = max(first, self.start_offset), min(last, self.end_offset - 1)
        if low > high:
            return
        start, end = split_range(self._runs, self._firsts, low, high)
        for run in self._runs[start:end]:
            if run.state is RecordState.DEAD_LETTERING:
                run.state = RecordState.DONE
        coalesce(self._runs, self._firsts, start, end)
        self._advance()
        self.changed = True

    # --- reading the state ------------------------------------------------------------------

    def stats(self) -> PartitionStats:
        """Counts per state and delivery counts of records not done."""
        counts = {state: 0 for state in RecordState}
        delivery_counts: dict[int, int] = {}
        for run in self._all_runs():
            size = run.last - run.first + 1
            counts[run.state] += size
            if run.state is not RecordState.DONE and run.delivery_count:
                delivery_counts[run.delivery_count] = delivery_counts.get(run.delivery_count, 0) + size
        return PartitionStats(start_offset=self.start_offset, end_offset=self.end_offset,
                              available=counts[RecordState.AVAILABLE], acquired=counts[RecordState.ACQUIRED],
                              dead_lettering=counts[RecordState.DEAD_LETTERING], due=len(self._due),
                              delivery_counts=dict(sorted(delivery_counts.items())))

    def has_available(self, now_ms: int, readable_end: int) -> bool:
        """Whether ``acquire`` would lease something now."""
        if any(run.state is RecordState.AVAILABLE and run.deadline_ms <= now_ms for run in self._due.values()):
            return True
        index = max(0, bisect.bisect_right(self._firsts, self._available_from) - 1)
        for run in self._runs[index:]:
            if run.first >= readable_end:
                return False
            if run.state is RecordState.AVAILABLE and run.deadline_ms <= now_ms:
                return True
        return False

    def runs(self) -> list[RunView]:
        """Every run, due records first (for inspection and tests)."""
        return [RunView(run.first, run.last, run.state, run.delivery_count, run.owner, run.deadline_ms, due)
                for due, runs in ((True, self._due.values()), (False, self._runs)) for run in runs]

    def undone_count(self) -> int:
        """Records of the region and due records that are not done."""
        return sum(run.last - run.first + 1 for run in self._all_runs() if run.state is not RecordState.DONE)

    def due_offsets(self) -> list[int]:
        """Offsets of the due records in memory."""
        return list(self._due_sorted)

    def acquired_count(self, member: str) -> int:
        """Records leased to ``member``."""
        return sum(run.last - run.first + 1 for run in self._all_runs()
                   if run.state is RecordState.ACQUIRED and run.owner == member)

    @property
    def due_count(self) -> int:
        """Due records held in memory."""
        return len(self._due)

    def due_entry(self, offset: int) -> DueEntry | None:
        """The delay entry of a due record (None: it is done and its entry must go)."""
        run = self._due.get(offset)
        return None if run is None else DueEntry(offset, run.deliver_at_ms, run.delivery_count)

    def snapshot(self) -> PartitionSnapshot:
        """The region as stored (``partition_snapshot``): leases kept with their owners and ends."""
        return snapshot_of(self.start_offset, self.end_offset, (
            RunView(run.first, run.last, run.state, run.delivery_count, run.owner, run.deadline_ms, False)
            for run in self._runs))

    @classmethod
    def restore(cls, snapshot: PartitionSnapshot, *, max_delivery_attempts: int,
                inflight_records_max: int) -> SharePartition:
        """A region as a new leader finds it: leases kept until their stored ends (then expired), delivery counts kept."""
        partition = cls(start_offset=snapshot.start_offset, max_delivery_attempts=max_delivery_attempts,
                        inflight_records_max=inflight_records_max)
        for run in restored_runs(snapshot):
            partition._append(Run(run.first, run.last, run.state, run.delivery_count, run.owner, run.deadline_ms))
            if run.state is RecordState.ACQUIRED:
                heapq.heappush(partition._deadlines, run.deadline_ms)
        partition._advance()
        partition.changed = False
        return partition

    # --- internals ---------------------------------------------------------------------------

    def _all_runs(self) -> Iterator[Run]:
        yield from self._due.values()
        yield from self._runs

    def _append(self, run: Run) -> None:
        assert run.first == self.end_offset, (run, self.end_offset)
        if self._runs and self._runs[-1].mergeable(run):
            self._runs[-1].last = run.last
        else:
            self._runs.append(run)
            self._firsts.append(run.first)
        self.end_offset = run.last + 1
        if run.state is RecordState.AVAILABLE:
            self._available_from = min(self._available_from, run.first)
        self.changed = True

    def _lease(self, run: Run, member: str, deadline_ms: int) -> None:
        run.state, run.owner, run.deadline_ms = RecordState.ACQUIRED, member, deadline_ms
        run.delivery_count += 1

    def _held_by(self, member: str, low: int, high: int) -> bool:
        """Every offset of ``low..high`` lies in the region, acquired by ``member``."""
        if low < self.start_offset or high >= self.end_offset:
            return False
        index = bisect.bisect_right(self._firsts, low) - 1
        while index < len(self._runs) and self._runs[index].first <= high:
            run = self._runs[index]
            if run.state is not RecordState.ACQUIRED or run.owner != member:
                return False
            index += 1
        return True

    def _settle(self, run: Run, kind: AcknowledgeType, now_ms: int, lease_ms: int, error: str,
                available_at_ms: int) -> None:
        if kind is AcknowledgeType.ACCEPT:
            self._finish(run)
        elif kind is AcknowledgeType.RENEW:
            run.deadline_ms = now_ms + lease_ms
            heapq.heappush(self._deadlines, run.deadline_ms)
        elif kind is AcknowledgeType.RELEASE:
            self._release(run, error or "released", available_at_ms)
        else:
            self._dead_letter(run, DeathReason.REJECTED, error or "rejected")

    def _release(self, run: Run, error: str, available_at_ms: int = 0) -> None:
        """Back to AVAILABLE (not before ``available_at_ms``), or dead-lettered at the delivery limit."""
        if run.delivery_count >= self.max_delivery_attempts:
            self._dead_letter(run, DeathReason.DELIVERY_LIMIT, error)
            return
        run.state, run.owner, run.deadline_ms = RecordState.AVAILABLE, NO_OWNER, available_at_ms
        if available_at_ms:
            heapq.heappush(self._deadlines, available_at_ms)
        if run.first in self._due and self._due[run.first] is run:
            self.due_changed.add(run.first)
        else:
            self._available_from = min(self._available_from, run.first)

    def _release_where(self, matches: Callable[[Run], bool], reason: str) -> int:
        """Release every acquired record (due or in the region) that ``matches``; how many."""
        released = 0
        for run in [*self._due.values(), *self._runs]:
            if run.state is RecordState.ACQUIRED and matches(run):
                self._release(run, reason)
                released += run.last - run.first + 1
        if released:
            self.changed = True
            coalesce(self._runs, self._firsts, 0, len(self._runs))
            self._advance()
        return released

    def _dead_letter(self, run: Run, reason: DeathReason, error: str) -> None:
        run.state, run.owner, run.deadline_ms = RecordState.DEAD_LETTERING, NO_OWNER, 0
        self.dead_letters.append(DeadLetter(run.first, run.last, reason, run.delivery_count, error))
        self.changed = True

    def _finish(self, run: Run) -> None:
        if run.first in self._due and self._due[run.first] is run:
            self._finish_due(run)
        else:
            run.state, run.owner, run.deadline_ms = RecordState.DONE, NO_OWNER, 0
            self.changed = True

    def _finish_due(self, run: Run) -> None:
        del self._due[run.first]
        self._due_sorted.pop(bisect.bisect_left(self._due_sorted, run.first))
        self.due_changed.add(run.first)

    def _advance(self) -> None:
        """Drop the done runs at the region's start."""
        done = 0
        for run in self._runs:
            if run.state is not RecordState.DONE:
                break
            done += 1
        if done:
            self.start_offset = self._runs[done - 1].last + 1
            del self._runs[:done]
            del self._firsts[:done]
            self.changed = True
        self._available_from = max(self._available_from, self.start_offset)

