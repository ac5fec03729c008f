"""Share-group semantics of a classic queue over its log."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mqbroker.protocols.amqp.queue_arguments import DeathReason, QueuePolicy
from mqbroker.protocols.amqp.queue_state import QueuedMessage, QueueState, RangeSet


def messages(start: int, count: int, timestamp_ms: int = 0, expiration_ms: int | None = None) -> list[QueuedMessage]:
    return [QueuedMessage(offset=o, timestamp_ms=timestamp_ms, expiration_ms=expiration_ms) for o in range(start, start + count)]


def queue_with(count: int, policy: QueuePolicy | None = None) -> QueueState:
    state = QueueState(policy=policy or QueuePolicy(), now_ms=0)
    state.note_log_end(count)
    state.receive(messages(0, count))
    return state


def test_messages_are_delivered_in_offset_order_and_acks_advance_the_watermark() -> None:
    state = queue_with(3)
    leases = [state.take("c", now_ms=1) for _ in range(3)]
    assert [lease.message.offset for lease in leases if lease] == [0, 1, 2]
    assert state.take("c", now_ms=1) is None
    state.ack(1)
    assert state.low_watermark == 0 and state.is_done(1)
    state.ack(0)
    assert state.low_watermark == 2
    state.ack(2)
    assert state.low_watermark == 3 and state.ready_count == 0 and state.leased_count == 0


def test_requeued_message_comes_back_first_flagged_redelivered() -> None:
    state = queue_with(3)
    first = state.take("c", now_ms=1)
    state.take("c", now_ms=1)
    assert first is not None and not first.redelivered
    state.requeue(0)
    again = state.take("c", now_ms=2)
    assert again is not None and again.message.offset == 0 and again.redelivered and again.delivery_count == 2


def test_consumer_loss_requeues_only_its_leases() -> None:
    state = queue_with(4)
    state.take("a", now_ms=0)
    state.take("b", now_ms=0)
    state.take("a", now_ms=0)
    state.release_consumer("a")
    assert state.leased_to("b") == [1]
    assert [state.take("b", now_ms=0).message.offset for _ in range(3)] == [0, 2, 3]


def test_reject_without_requeue_dead_letters() -> None:
    state = queue_with(1)
    state.take("c", now_ms=0)
    state.reject(0)
    [dead] = state.pop_dead_letters()
    assert dead.reason is DeathReason.REJECTED and dead.message.offset == 0
    assert state.is_done(0) and state.pop_dead_letters() == []


def test_delivery_limit_dead_letters_on_the_requeue_that_reaches_it() -> None:
    state = queue_with(1, QueuePolicy(delivery_limit=2))
    state.take("c", now_ms=0)
    state.requeue(0)
    assert state.pop_dead_letters() == []
    state.take("c", now_ms=0)
    state.requeue(0)
    [dead] = state.pop_dead_letters()
    assert dead.reason is DeathReason.DELIVERY_LIMIT and state.take("c", now_ms=0) is None


def test_message_ttl_expires_on_delivery_attempt() -> None:
    state = QueueState(policy=QueuePolicy(message_ttl_ms=100), now_ms=0)
    state.receive(messages(0, 1, timestamp_ms=0) + messages(1, 1, timestamp_ms=50))
    lease = state.take("c", now_ms=120)
    assert lease is not None and lease.message.offset == 1
    assert [dead.reason for dead in state.pop_dead_letters()] == [DeathReason.EXPIRED]


def test_per_message_expiration_is_the_shorter_of_the_two() -> None:
    state = QueueState(policy=QueuePolicy(message_ttl_ms=1000), now_ms=0)
    state.receive(messages(0, 1, expiration_ms=10))
    state.expire(now_ms=10)
    assert state.take("c", now_ms=10) is None and state.is_done(0)


def test_max_length_drops_the_head_and_ignores_leased_messages() -> None:
    state = queue_with(2, QueuePolicy(max_length=2))
    state.take("c", now_ms=0)
    state.note_log_end(4)
    state.receive(messages(2, 2))
    assert [dead.message.offset for dead in state.pop_dead_letters()] == [1]
    assert state.ready_count == 2 and state.leased_count == 1


def test_purge_drops_read_and_unread_ready_messages_but_not_leases() -> None:
    state = queue_with(3)
    state.take("c", now_ms=0)
    state.note_log_end(10)
    assert state.purge() == 9
    assert state.ready_count == 0 and state.cursor == 10 and state.low_watermark == 0
    state.ack(0)
    assert state.low_watermark == 10


def test_retention_below_the_cursor_marks_unread_messages_gone() -> None:
    state = QueueState(policy=QueuePolicy(), now_ms=0)
    state.note_log_end(10)
    state.note_log_start(6)
    assert state.cursor == 6 and state.low_watermark == 6 and state.ready_count == 4


def test_x_expires_deletes_an_unused_queue_only_without_consumers() -> None:
    state = QueueState(policy=QueuePolicy(expires_ms=1000), now_ms=0)
    assert not state.unused_expired(999, consumer_count=0)
    assert not state.unused_expired(5000, consumer_count=1)
    assert state.unused_expired(1000, consumer_count=0)
    state.touch(1000)
    assert not state.unused_expired(1999, consumer_count=0)


def test_snapshot_restores_done_offsets_and_delivery_counts() -> None:
    state = queue_with(5)
    for _ in range(4):
        state.take("c", now_ms=7)
    state.ack(0)
    state.ack(2)
    restored = QueueState.restore(state.snapshot(), policy=QueuePolicy())
    assert restored.low_watermark == 1 and restored.cursor == 1 and restored.last_used_ms == 7
    restored.note_log_end(5)
    restored.receive(messages(0, 5))
    offered = [restored.take("c2", now_ms=8) for _ in range(4)]
    assert [(lease.message.offset, lease.redelivered) for lease in offered if lease] == [
        (1, True), (3, True), (4, False)
    ]


@given(snapshot=st.binary(max_size=120))
def test_garbage_snapshots_raise_only_value_error(snapshot: bytes) -> None:
    try:
        QueueState.restore(snapshot, policy=QueuePolicy())
    except ValueError:
        pass


def test_offsets_that_do_not_decode_are_done_and_read_past() -> None:
    state = QueueState(policy=QueuePolicy(), now_ms=0)
    state.receive(messages(0, 2))
    state.skip_unreadable(2, 4)
    assert state.cursor == 5 and state.unread_count == 0
    for offset in (0, 1):
        state.ack(state.take("c", now_ms=0).message.offset)  # type: ignore[union-attr]
    assert state.low_watermark == 5


@pytest.mark.parametrize("snapshot", [b"", b"\x01" + b"\x00" * 10, QueueState(policy=QueuePolicy(), now_ms=0).snapshot() + b"x"])
def test_damaged_snapshot_is_a_value_error(snapshot: bytes) -> None:
    with pytest.raises(ValueError):
        QueueState.restore(snapshot, policy=QueuePolicy())


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 8)), max_size=30), st.integers(0, 70))
def test_range_set_matches_a_plain_set(ranges: list[tuple[int, int]], probe: int) -> None:
    reference: set[int] = set()
    ranges_set = RangeSet()
    for start, length in ranges:
        ranges_set.add(start, start + length)
        reference.update(range(start, start + length))
    assert (probe in ranges_set) == (probe in reference)
    assert ranges_set.count_between(10, 40) == len(reference & set(range(10, 40)))
    spans = list(ranges_set)
    assert all(end < next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))


class QueueMachine(RuleBasedStateMachine):
    """Random publish/read/deliver/ack/nack/reject/consumer-loss/restart sequences lose nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = QueuePolicy(delivery_limit=4, max_length=None)
        self.state = QueueState(policy=self.policy, now_ms=0)
        self.published = 0
        self.acked: list[int] = []
        self.dead: list[int] = []
        self.leases: dict[int, str] = {}  # what the consumers hold

    def _collect_dead(self) -> None:
        self.dead += [dead.message.offset for dead in self.state.pop_dead_letters()]

    @rule(count=st.integers(1, 4))
    def publish(self, count: int) -> None:
        self.published += count
        self.state.note_log_end(self.published)

    @rule()
    def read(self) -> None:
        self.state.receive(messages(max(0, self.state.cursor - 2), self.published - max(0, self.state.cursor - 2)))
        self._collect_dead()

    @rule(consumer=st.sampled_from(["a", "b"]))
    def deliver(self, consumer: str) -> None:
        lease = self.state.take(consumer, now_ms=0)
        if lease is not None:
            assert lease.message.offset not in self.leases
            self.leases[lease.message.offset] = consumer
        self._collect_dead()

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), outcome=st.sampled_from(["ack", "requeue", "reject"]))
    def settle(self, data: st.DataObject, outcome: str) -> None:
        offset = data.draw(st.sampled_from(sorted(self.leases)))
        del self.leases[offset]
        if outcome == "ack":
            self.state.ack(offset)
            self.acked.append(offset)
        else:
            getattr(self.state, outcome)(offset)
        self._collect_dead()

    @rule(consumer=st.sampled_from(["a", "b"]))
    def lose_consumer(self, consumer: str) -> None:
        self.state.release_consumer(consumer)
        self.leases = {offset: owner for offset, owner in self.leases.items() if owner != consumer}
        self._collect_dead()

    @rule()
    def restart(self) -> None:
        self.state = QueueState.restore(self.state.snapshot(), policy=self.policy)
        self.state.note_log_end(self.published)
        self.leases.clear()  # every connection died with the broker

    @invariant()
    def every_message_is_settled_at_most_once(self) -> None:
        settled = self.acked + self.dead
        assert len(settled) == len(set(settled))

    @invariant()
    def done_is_exactly_what_was_settled(self) -> None:
        settled = set(self.acked) | set(self.dead)
        assert {o for o in range(self.published) if self.state.is_done(o)} == settled

    @invariant()
    def nothing_is_lost(self) -> None:
        settled = len(self.acked) + len(self.dead)
        assert settled + self.state.leased_count + self.state.ready_count == self.published
        assert self.state.leased_count == len(self.leases)

    def teardown(self) -> None:
        # Drain: every message ends up acked or dead-lettered exactly once.
        self.state.receive(messages(self.state.cursor, self.published - self.state.cursor))
        for offset in list(self.leases):
            self.state.ack(offset)
            self.acked.append(offset)
        while (lease := self.state.take("drain", now_ms=0)) is not None:
            self.state.ack(lease.message.offset)
            self.acked.append(lease.message.offset)
        self._collect_dead()
        assert sorted(self.acked + self.dead) == list(range(self.published))


QueueMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestQueueMachine = QueueMachine.TestCase


@settings(max_examples=100)
@given(acked=st.sets(st.integers(0, 29)), stray=st.sets(st.integers(30, 40)))
def test_a_multiple_ack_leaves_the_same_state_as_acking_one_by_one(acked: set[int], stray: set[int]) -> None:
    one_by_one, at_once = queue_with(30), queue_with(30)
    for state in (one_by_one, at_once):
        while state.take("c", now_ms=1) is not None:
            pass
    for offset in sorted(acked | stray):
        one_by_one.ack(offset)
    at_once.ack_all(list(acked | stray))  # offsets never leased are ignored, as ack ignores them
    assert at_once.snapshot() == one_by_one.snapshot()
    assert at_once.leased_count == one_by_one.leased_count == 30 - len(acked)
    assert all(at_once.is_done(offset) == (offset in acked) for offset in range(30))
