"""The share partition's record states: leases, verdicts, expiry, the delivery limit, delays, snapshots.

The data-driven scripts in ``tests/interaction/testdata/share_*.txt`` walk the common paths; these
tests pin single rules, and a hypothesis state machine drives random members, verdicts, expiries and
delays against a model: no record is ever leased to two members at once, and once everything has
been settled every record read was accepted exactly once or dead-lettered exactly once.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mqbroker.model import AcknowledgeType
from mqbroker.shares.partition import SharePartition
from mqbroker.shares.partition_values import (
    AcquiredRange,
    DeadLetter,
    DeathReason,
    DueEntry,
    RecordState,
    Scheduled,
)

LEASE_MS = 1_000


def new_partition(*, start: int = 0, attempts: int = 3, inflight: int = 1_000) -> SharePartition:
    return SharePartition(start_offset=start, max_delivery_attempts=attempts, inflight_records_max=inflight)


def read(partition: SharePartition, first: int, last: int, now_ms: int = 0) -> None:
    partition.extend(first, last, now_ms)


def test_one_acquisition_of_a_run_costs_one_range_whatever_its_size() -> None:
    """500 records read together are leased as one range and settled as one run."""
    partition = new_partition()
    read(partition, 0, 499)
    assert partition.acquire("a", 500, 0, LEASE_MS, 500) == [AcquiredRange(0, 499, 1)]
    assert len(partition.runs()) == 1
    assert partition.acknowledge("a", 0, 499, AcknowledgeType.ACCEPT, 10)
    assert partition.runs() == [] and partition.start_offset == 500


def test_acquire_stops_at_the_records_limit_and_the_readable_end() -> None:
    """A member gets no more than it asked for, and nothing past what the caller holds in memory."""
    partition = new_partition()
    read(partition, 0, 99)
    assert partition.acquire("a", 10, 0, LEASE_MS, 100) == [AcquiredRange(0, 9, 1)]
    assert partition.acquire("b", 1_000, 0, LEASE_MS, 50) == [AcquiredRange(10, 49, 1)]
    assert partition.acquire("c", 1_000, 0, LEASE_MS, 50) == []
    assert partition.acquire("c", 1_000, 0, LEASE_MS, 100) == [AcquiredRange(50, 99, 1)]


def test_the_region_is_bounded_by_the_inflight_limit() -> None:
    """``room`` shrinks as offsets are read and grows back as the start advances."""
    partition = new_partition(inflight=10)
    read(partition, 0, 7)
    assert partition.room() == 2
    partition.acquire("a", 4, 0, LEASE_MS, 8)
    partition.acknowledge("a", 0, 3, AcknowledgeType.ACCEPT, 0)
    assert partition.room() == 6


def test_a_verdict_on_records_the_member_does_not_hold_changes_nothing() -> None:
    """Another member's records, unread offsets and empty ranges are refused as a whole."""
    partition = new_partition()
    read(partition, 0, 9)
    partition.acquire("a", 5, 0, LEASE_MS, 10)
    partition.acquire("b", 5, 0, LEASE_MS, 10)
    before = partition.runs()
    assert not partition.acknowledge("b", 3, 6, AcknowledgeType.ACCEPT, 0)
    assert not partition.acknowledge("a", 0, 10, AcknowledgeType.ACCEPT, 0)
    assert not partition.acknowledge("a", 4, 3, AcknowledgeType.ACCEPT, 0)
    assert partition.runs() == before


def test_a_released_record_comes_back_with_its_delivery_counted() -> None:
    """RELEASE makes a record available at once; the next acquisition is its second delivery."""
    partition = new_partition()
    read(partition, 0, 4)
    partition.acquire("a", 5, 0, LEASE_MS, 5)
    assert partition.acknowledge("a", 2, 2, AcknowledgeType.RELEASE, 5)
    assert partition.acquire("b", 5, 5, LEASE_MS, 5) == [AcquiredRange(2, 2, 2)]


def test_a_release_may_hold_the_record_back_until_a_time() -> None:
    """A release with ``available_at_ms`` (push retries) is not acquired before that time."""
    partition = new_partition()
    read(partition, 0, 0)
    partition.acquire("a", 1, 0, LEASE_MS, 1)
    partition.acknowledge("a", 0, 0, AcknowledgeType.RELEASE, 10, available_at_ms=500)
    assert not partition.has_available(499, 1)
    assert partition.acquire("a", 1, 499, LEASE_MS, 1) == []
    assert partition.next_deadline_ms() is not None and partition.next_deadline_ms() <= 500
    partition.tick(500)
    assert partition.has_available(500, 1)
    assert partition.acquire("a", 1, 500, LEASE_MS, 1) == [AcquiredRange(0, 0, 2)]


def test_an_expired_lease_makes_the_record_available_again() -> None:
    """The visibility timeout: after ``lease_ms`` without a verdict, anyone may acquire the record."""
    partition = new_partition()
    read(partition, 0, 2)
    partition.acquire("a", 3, 0, LEASE_MS, 3)
    assert partition.next_deadline_ms() == LEASE_MS
    partition.tick(LEASE_MS - 1)
    assert partition.acquire("b", 3, LEASE_MS - 1, LEASE_MS, 3) == []
    partition.tick(LEASE_MS)
    assert partition.acquire("b", 3, LEASE_MS, LEASE_MS, 3) == [AcquiredRange(0, 2, 2)]
    assert not partition.acknowledge("a", 0, 2, AcknowledgeType.ACCEPT, LEASE_MS)


def test_a_renewed_lease_outlives_its_first_deadline() -> None:
    """RENEW restarts the lease from now: the first deadline passes without expiring it."""
    partition = new_partition()
    read(partition, 0, 0)
    partition.acquire("a", 1, 0, LEASE_MS, 1)
    assert partition.acknowledge("a", 0, 0, AcknowledgeType.RENEW, 900, lease_ms=LEASE_MS)
    partition.tick(LEASE_MS)
    assert [run.state for run in partition.runs()] == [RecordState.ACQUIRED]
    partition.tick(900 + LEASE_MS)
    assert [run.state for run in partition.runs()] == [RecordState.AVAILABLE]


def test_a_rejected_record_is_dead_lettered_with_its_error_then_done() -> None:
    """REJECT: the record goes out as a dead letter and is done once the copy is durable."""
    partition = new_partition()
    read(partition, 0, 1)
    partition.acquire("a", 2, 0, LEASE_MS, 2)
    assert partition.acknowledge("a", 0, 0, AcknowledgeType.REJECT, 0, error="bad json")
    assert partition.dead_letters == [DeadLetter(0, 0, DeathReason.REJECTED, 1, "bad json")]
    assert partition.start_offset == 0, "not done before its copy is durable"
    partition.dead_letters.clear()
    partition.dead_lettered(0, 0)
    assert partition.start_offset == 1


def test_the_last_allowed_delivery_that_expires_is_dead_lettered() -> None:
    """After ``max_delivery_attempts`` deliveries an expiry dead-letters the record instead of releasing it."""
    partition = new_partition(attempts=2)
    read(partition, 0, 0)
    now_ms = 0
    for attempt in (1, 2):
        assert partition.acquire("a", 1, now_ms, LEASE_MS, 1) == [AcquiredRange(0, 0, attempt)]
        now_ms += LEASE_MS
        partition.tick(now_ms)
    assert partition.dead_letters == [DeadLetter(0, 0, DeathReason.DELIVERY_LIMIT, 2, "lease expired")]
    assert partition.acquire("a", 1, now_ms, LEASE_MS, 1) == []


def test_a_departed_member_gives_back_everything_it_held() -> None:
    """``release_member`` releases only that member's leases and says how many."""
    partition = new_partition()
    read(partition, 0, 9)
    partition.acquire("a", 4, 0, LEASE_MS, 10)
    partition.acquire("b", 4, 0, LEASE_MS, 10)
    assert partition.release_member("a", "left") == 4
    assert partition.acquired_count("a") == 0 and partition.acquired_count("b") == 4
    assert partition.acquire("c", 10, 0, LEASE_MS, 10) == [AcquiredRange(0, 3, 2), AcquiredRange(8, 9, 1)]


def test_a_record_due_later_is_scheduled_and_comes_back_first_when_due() -> None:
    """A deliver-at time ahead leaves the region as done; ``add_due`` brings it back ahead of the region."""
    partition = new_partition()
    partition.extend(0, 4, 100, deliver_at={2: 5_000, 3: 50})
    assert partition.scheduled == [Scheduled(2, 5_000)]
    assert partition.acquire("a", 10, 100, LEASE_MS, 5) == [AcquiredRange(0, 1, 1), AcquiredRange(3, 4, 1)]
    partition.add_due(2, 5_000, 0)
    assert partition.acquire("b", 10, 5_000, LEASE_MS, 5) == [AcquiredRange(2, 2, 1)]
    assert partition.due_entry(2) == DueEntry(2, 5_000, 1)
    partition.due_changed.clear()
    assert partition.acknowledge("b", 2, 2, AcknowledgeType.ACCEPT, 5_001)
    assert partition.due_changed == {2} and partition.due_entry(2) is None


def test_a_snapshot_keeps_delivery_counts_and_a_new_leader_keeps_the_leases_until_they_end() -> None:
    """``restore(snapshot())``: done stays done, a lease stays with its member until its end, counts are kept."""
    partition = new_partition(start=10)
    read(partition, 10, 19)
    partition.acquire("a", 5, 0, LEASE_MS, 20)
    partition.acknowledge("a", 11, 12, AcknowledgeType.ACCEPT, 0)
    restored = SharePartition.restore(partition.snapshot(), max_delivery_attempts=3, inflight_records_max=1_000)
    assert (restored.start_offset, restored.end_offset) == (10, 20)
    assert restored.snapshot() == partition.snapshot()
    assert restored.acquire("b", 100, 0, 10 * LEASE_MS, 20) == [AcquiredRange(15, 19, 1)]
    assert restored.next_deadline_ms() == LEASE_MS
    assert restored.acknowledge("a", 13, 13, AcknowledgeType.RELEASE, 10)
    restored.tick(LEASE_MS)
    assert restored.acquire("c", 100, LEASE_MS, LEASE_MS, 20) == [AcquiredRange(10, 10, 2), AcquiredRange(13, 14, 2)]


def test_a_restored_lease_counts_towards_the_delivery_limit() -> None:
    """A record delivered before the host moved is dead-lettered at the limit after it, not delivered afresh."""
    partition = new_partition(attempts=2)
    read(partition, 0, 0)
    partition.acquire("a", 1, 0, LEASE_MS, 1)
    restored = SharePartition.restore(partition.snapshot(), max_delivery_attempts=2, inflight_records_max=1_000)
    restored.tick(LEASE_MS)
    assert restored.acquire("b", 1, LEASE_MS, LEASE_MS, 1) == [AcquiredRange(0, 0, 2)]
    assert restored.acknowledge("b", 0, 0, AcknowledgeType.RELEASE, LEASE_MS + 1)
    assert [(dead.first, dead.reason, dead.delivery_count) for dead in restored.dead_letters] == [
        (0, DeathReason.DELIVERY_LIMIT, 2)]


def test_records_below_the_log_start_are_done() -> None:
    """Retention deleting the log under the region settles what lay there, leased or not."""
    partition = new_partition()
    read(partition, 0, 9)
    partition.acquire("a", 3, 0, LEASE_MS, 10)
    partition.note_log_start(5)
    assert partition.start_offset == 5 and partition.acquired_count("a") == 0
    partition.note_log_start(50)
    assert (partition.start_offset, partition.end_offset) == (50, 50)


# --- the property: one holder at a time, and every record settled exactly once -------------------


@dataclasses.dataclass
class Lease:
    member: str
    deadline_ms: int


class SharePartitionMachine(RuleBasedStateMachine):
    """Random members, verdicts, expiries and delays against a model of who holds what."""

    members = ("a", "b", "c")

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 3
        self.partition = SharePartition(start_offset=0, max_delivery_attempts=self.attempts, inflight_records_max=64)
        self.now_ms = 0
        self.read_to = 0
        self.leases: dict[int, Lease] = {}
        self.counts: dict[int, int] = {}
        self.held_back: dict[int, int] = {}  # released with a not-before time
        self.scheduled: dict[int, int] = {}  # offset → deliver-at, in the delay index
        self.due: set[int] = set()
        self.accepted: list[int] = []
        self.dead: list[int] = []
        self.dead_lettering: list[DeadLetter] = []

    # -- the log and the clock ---------------------------------------------------------------

    @rule(count=st.integers(1, 20), delays=st.lists(st.integers(0, 3_000), max_size=3), gap=st.integers(0, 2))
    def read_more(self, count: int, delays: list[int], gap: int) -> None:
        first = self.read_to + gap
        last = min(first + count - 1, self.partition.start_offset + self.partition.inflight_records_max - 1)
        if last < first:
            return
        deliver_at = {first + index % count: self.now_ms + delay for index, delay in enumerate(delays)}
        deliver_at = {offset: at for offset, at in deliver_at.items() if offset <= last}
        self.partition.extend(first, last, self.now_ms, deliver_at)
        for scheduled in self.partition.scheduled:
            self.scheduled[scheduled.offset] = scheduled.deliver_at_ms
        self.partition.scheduled.clear()
        for offset in range(first, last + 1):
            self.counts.setdefault(offset, 0)
        for offset in range(self.read_to, first):
            self.accepted.append(offset)  # skipped offsets are done, as if settled
        self.read_to = last + 1

    @rule(elapsed_ms=st.one_of(st.sampled_from([0, 250, 500, LEASE_MS]), st.integers(0, 2 * LEASE_MS)))
    def time_passes(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        for offset, lease in list(self.leases.items()):
            if lease.deadline_ms <= self.now_ms:
                self._given_back(offset, "lease expired")
        self.partition.tick(self.now_ms)
        self._collect_dead_letters()

    @precondition(lambda self: any(at <= self.now_ms for at in self.scheduled.values()))
    @rule()
    def delays_come_due(self) -> None:
        for offset, at in sorted(self.scheduled.items()):
            if at <= self.now_ms:
                del self.scheduled[offset]
                self.due.add(offset)
                self.partition.add_due(offset, at, self.counts[offset])

    # -- members -------------------------------------------------------------------------------

    @rule(member=st.sampled_from(members), records_max=st.integers(1, 30))
    def acquire(self, member: str, records_max: int) -> None:
        ranges = self.partition.acquire(member, records_max, self.now_ms, LEASE_MS, self.read_to)
        offsets = [offset for r in ranges for offset in range(r.first, r.last + 1)]
        assert len(offsets) <= records_max
        assert len(set(offsets)) == len(offsets)
        for acquired in ranges:
            for offset in range(acquired.first, acquired.last + 1):
                assert offset not in self.leases, f"{offset} leased to {self.leases[offset].member} and {member}"
                assert offset not in self.accepted and offset not in self.dead, offset
                assert offset not in self.scheduled, f"{offset} delivered before it was due"
                assert self.held_back.get(offset, 0) <= self.now_ms, f"{offset} delivered before its not-before time"
                assert acquired.delivery_count == self.counts[offset] + 1
                self.counts[offset] += 1
                self.leases[offset] = Lease(member, self.now_ms + LEASE_MS)
                self.held_back.pop(offset, None)

    @rule(data=st.data(), kind=st.sampled_from(list(AcknowledgeType)), member=st.sampled_from(members))
    def acknowledge(self, data: st.DataObject, kind: AcknowledgeType, member: str) -> None:
        mine = sorted(offset for offset, lease in self.leases.items() if lease.member == member)
        candidates = mine or [0]
        first = data.draw(st.sampled_from(candidates))
        last = first + data.draw(st.integers(0, 4))
        holds_all = all(self.leases.get(offset, Lease("", 0)).member == member for offset in range(first, last + 1))
        available_at_ms = self.now_ms + data.draw(st.sampled_from([0, 0, 500]))
        settled = self.partition.acknowledge(member, first, last, kind, self.now_ms, lease_ms=LEASE_MS,
                                             error="verdict", available_at_ms=available_at_ms)
        assert settled == holds_all, (member, first, last, kind)
        if settled:
            for offset in range(first, last + 1):
                self._settle(offset, kind, available_at_ms)
        self._collect_dead_letters()

    @rule(member=st.sampled_from(members))
    def member_leaves(self, member: str) -> None:
        mine = [offset for offset, lease in self.leases.items() if lease.member == member]
        for offset in mine:
            self._given_back(offset, "left")
        assert self.partition.release_member(member, "left") == len(mine)
        self._collect_dead_letters()

    @rule(maximum=st.integers(0, 20), unread=st.integers(0, 5))
    def trim(self, maximum: int, unread: int) -> None:
        """Drop-head: exactly the oldest available records of the region beyond the maximum go (reason maxlen)."""
        gone = set(self.accepted) | set(self.dead) | set(self.leases) | set(self.scheduled) | self.due
        available = [offset for offset in range(self.partition.start_offset, self.read_to) if offset not in gone]
        expected = available[:max(0, len(available) + unread - maximum)]
        assert self.partition.trim(maximum, unread) == len(expected)
        dropped = {offset for letter in self.partition.dead_letters for offset in range(letter.first, letter.last + 1)
                   if letter.reason is DeathReason.MAXLEN}
        assert dropped == set(expected)
        for offset in expected:
            self.dead.append(offset)
            self.held_back.pop(offset, None)
        self._collect_dead_letters()

    @precondition(lambda self: self.dead_lettering)
    @rule(data=st.data())
    def dead_letter_is_durable(self, data: st.DataObject) -> None:
        letter = self.dead_lettering.pop(data.draw(st.integers(0, len(self.dead_lettering) - 1)))
        self.partition.dead_lettered(letter.first, letter.last)

    # -- checks --------------------------------------------------------------------------------

    @invariant()
    def states_agree_with_the_model(self) -> None:
        leased = {offset for view in self.partition.runs() if view.state is RecordState.ACQUIRED
                  for offset in range(view.first, view.last + 1)}
        assert leased == set(self.leases)
        for view in self.partition.runs():
            if view.state is RecordState.ACQUIRED:
                assert {self.leases[offset].member for offset in range(view.first, view.last + 1)} == {view.owner}
        on_the_way = {offset for letter in self.dead_lettering for offset in range(letter.first, letter.last + 1)}
        assert sorted(self.partition.due_offsets()) == sorted(
            offset for offset in self.due
            if offset not in self.accepted and (offset not in self.dead or offset in on_the_way))

    def teardown(self) -> None:
        """Settle everything: every record read was accepted or dead-lettered, exactly once."""
        for _ in range(4 * self.attempts + 4):
            self.now_ms += 10 * LEASE_MS
            self.time_passes(0)
            if self.scheduled:
                self.delays_come_due()
            while self.dead_lettering:
                letter = self.dead_lettering.pop()
                self.partition.dead_lettered(letter.first, letter.last)
            for member in self.members:
                self.acquire(member, 1_000)
            for offset in sorted(self.leases):
                lease = self.leases[offset]
                assert self.partition.acknowledge(lease.member, offset, offset, AcknowledgeType.ACCEPT, self.now_ms)
                self._settle(offset, AcknowledgeType.ACCEPT, 0)
        assert not self.leases and not self.scheduled and not self.dead_lettering
        settled = self.accepted + self.dead
        assert sorted(settled) == list(range(self.read_to)), "each record settled exactly once"
        assert self.partition.undone_count() == 0
        assert self.partition.start_offset == self.partition.end_offset == self.read_to
        assert all(count <= self.attempts for count in self.counts.values())

    # -- the model ----------------------------------------------------------------------------

    def _settle(self, offset: int, kind: AcknowledgeType, available_at_ms: int) -> None:
        if kind is AcknowledgeType.ACCEPT:
            del self.leases[offset]
            self.accepted.append(offset)
        elif kind is AcknowledgeType.RENEW:
            self.leases[offset].deadline_ms = self.now_ms + LEASE_MS
        elif kind is AcknowledgeType.RELEASE:
            if self._given_back(offset, "verdict") and available_at_ms > self.now_ms:
                self.held_back[offset] = available_at_ms
        else:
            del self.leases[offset]
            self.dead.append(offset)

    def _given_back(self, offset: int, reason: str) -> bool:
        """A lease ends without acceptance: available again, or dead-lettered at the limit."""
        del self.leases[offset]
        if self.counts[offset] >= self.attempts:
            self.dead.append(offset)
            return False
        return True

    def _collect_dead_letters(self) -> None:
        for letter in self.partition.dead_letters:
            for offset in range(letter.first, letter.last + 1):
                assert offset in self.dead, f"{offset} dead-lettered unexpectedly"
                expected = self.counts[offset]
                assert letter.delivery_count == expected
                if letter.reason is DeathReason.DELIVERY_LIMIT:
                    assert expected >= self.attempts
            self.dead_lettering.append(letter)
        self.partition.dead_letters.clear()


TestSharePartitionMachine = SharePartitionMachine.TestCase
TestSharePartitionMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


@pytest.mark.parametrize("kind", [AcknowledgeType.RELEASE, AcknowledgeType.REJECT])
def test_a_dead_letter_reports_the_last_error(kind: AcknowledgeType) -> None:
    """The error of the verdict that ended a record's life is in its dead letter (for the origin headers)."""
    partition = new_partition(attempts=1)
    read(partition, 0, 0)
    partition.acquire("a", 1, 0, LEASE_MS, 1)
    partition.acknowledge("a", 0, 0, kind, 0, error="timeout calling payments")
    assert [letter.last_error for letter in partition.dead_letters] == ["timeout calling payments"]
