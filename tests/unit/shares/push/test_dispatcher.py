"""The push dispatcher on a fake clock, over a real share partition, with an endpoint the test answers.

The host below is the share service's two push calls over one ``SharePartition`` (acquire, settle,
dead letters counted as durable at once); the sender records each POST and the test answers it
(a status, a timeout, a connection error) when it likes. A hypothesis test answers at random and
checks what subscribers rely on: no record is in two POSTs at once, at most ``max_outstanding``
POSTs are in flight, and every record ends up accepted by the endpoint or dead-lettered.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, TimeoutError, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock

from mqbroker.model import AcknowledgeType
from mqbroker.records.builder import encode_batch
from mqbroker.records.record import Record
from mqbroker.shares import messages as m
from mqbroker.shares.partition import SharePartition
from mqbroker.shares.partition_values import AcquiredRange
from mqbroker.shares.push.dispatcher import (
    ACCEPT_INTERVAL_S,
    LEASE_MARGIN_MS,
    PUSH_MEMBER,
    PushDispatcher,
)
from mqbroker.shares.push.signing import PushRequest, verify
from mqbroker.shares.settings import PushSettings, ShareGroupSettings

TOPIC = "orders"
SECRET = "s3cret"


@dataclasses.dataclass
class FakeGroup:
    """What the dispatcher reads of a hosted group."""

    settings: ShareGroupSettings
    group_id: str = "billing-push"
    watchers: list = dataclasses.field(default_factory=list)


class PartitionHost:
    """``push_acquire`` / ``push_settle`` over one share partition of ``count`` records."""

    def __init__(self, clock: Clock, count: int, *, attempts: int = 3, headers: Sequence = ()) -> None:
        self.clock = clock
        self.partition = SharePartition(start_offset=0, max_delivery_attempts=attempts, inflight_records_max=10_000)
        self.partition.extend(0, count - 1, 0)
        records = [Record(offset=offset, timestamp_ms=1_000 + offset, key=f"k{offset}".encode(),
                          value=f"v{offset}".encode(), headers=tuple(headers[offset]) if headers else ())
                   for offset in range(count)]
        self.batch = encode_batch(records, base_offset=0)
        self.count = count
        self.dead: list[int] = []
        self.accepted: list[int] = []
        self.refused: list[m.Acknowledgement] = []
        self.settle_calls = 0

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def push_acquire(self, group: FakeGroup, member_id: str, records_max: int,
                     lease_ms: int) -> list[m.SharePartitionRecords]:
        ranges = self.partition.acquire(member_id, records_max, self.now_ms(), lease_ms, self.count)
        if not ranges:
            return []
        return [m.SharePartitionRecords(topic=TOPIC, partition=0, records=self.batch, acquired=tuple(ranges))]

    def push_settle(self, group: FakeGroup, member_id: str, acknowledgements: Sequence[m.Acknowledgement], *,
                    lease_ms: int, available_at_ms: int = 0) -> Deferred[None]:
        assert member_id == PUSH_MEMBER
        self.settle_calls += 1
        for ack in acknowledgements:
            if self.partition.acknowledge(member_id, ack.first_offset, ack.last_offset, ack.kind, self.now_ms(),
                                          lease_ms=lease_ms, error=ack.error, available_at_ms=available_at_ms):
                if ack.kind is AcknowledgeType.ACCEPT:
                    self.accepted.extend(range(ack.first_offset, ack.last_offset + 1))
            else:
                self.refused.append(ack)
        self._dead_letters_are_durable()
        return succeed(None)

    def answers_settle(self) -> None:
        """The dispatcher's next turn, and its settling of what the endpoint accepted meanwhile."""
        self.clock.advance(0)
        self.clock.advance(ACCEPT_INTERVAL_S)

    def advance(self, group: FakeGroup, seconds: float) -> None:
        """Time passes: leases end, held-back records return, and the watchers hear of it."""
        self.clock.advance(0)
        self.clock.advance(seconds)
        self.partition.tick(self.now_ms())
        self._dead_letters_are_durable()
        for watcher in list(group.watchers):
            watcher()

    def _dead_letters_are_durable(self) -> None:
        for letter in self.partition.dead_letters:
            self.dead.extend(range(letter.first, letter.last + 1))
            self.partition.dead_lettered(letter.first, letter.last)
        self.partition.dead_letters.clear()


@dataclasses.dataclass
class Post:
    request: PushRequest
    timeout_s: float
    answer: Deferred

    def offsets(self) -> list[int]:
        if "X-MQ-Offset" in self.request.headers:
            return [int(self.request.headers["X-MQ-Offset"])]
        return [message["offset"] for message in json.loads(self.request.body)["messages"]]


class RecordingSender:
    """A ``PushSender`` that keeps every POST for the test to answer."""

    def __init__(self) -> None:
        self.posts: list[Post] = []
        self.closed = False

    def post(self, request: PushRequest, timeout_s: float) -> Deferred[int]:
        post = Post(request, timeout_s, Deferred())
        self.posts.append(post)
        return post.answer

    def close(self) -> None:
        self.closed = True

    def open_posts(self) -> list[Post]:
        return [post for post in self.posts if not post.answer.called]


def start(count: int, *, attempts: int = 3, headers: Sequence = (), **push: object) -> tuple[
        PushDispatcher, PartitionHost, RecordingSender, FakeGroup]:
    clock = Clock()
    clock.advance(1)
    push_settings = PushSettings(endpoint="http://127.0.0.1:1/hook", secret=SECRET, **push)  # type: ignore[arg-type]
    group = FakeGroup(ShareGroupSettings(max_delivery_attempts=attempts, push=push_settings))
    host = PartitionHost(clock, count, attempts=attempts, headers=headers)
    sender = RecordingSender()
    dispatcher = PushDispatcher(group, host, sender=sender, clock=clock, rng=random.Random(7))  # type: ignore[arg-type]
    dispatcher.start()
    return dispatcher, host, sender, group


def test_each_record_is_posted_signed_and_a_2xx_accepts_it() -> None:
    """One POST per record, signed with the subscription's secret; a 200 settles it as accepted."""
    dispatcher, host, sender, _ = start(3)
    assert [post.offsets() for post in sender.posts] == [[0], [1], [2]]
    for post in sender.posts:
        headers = post.request.headers
        assert verify(SECRET, headers["X-MQ-Timestamp"], post.request.body, headers["X-MQ-Signature"])
        assert headers["X-MQ-Attempt"] == "1" and post.timeout_s == 10.0
        post.answer.callback(204)
    host.answers_settle()
    assert sorted(host.accepted) == [0, 1, 2] and dispatcher.delivered == 3
    assert host.settle_calls == 1, "answers of one reactor turn are settled together"
    assert host.partition.undone_count() == 0 and not host.refused


def test_records_are_leased_for_the_ack_deadline_plus_a_margin() -> None:
    """A POST that hangs past its deadline is still leased: nobody else gets the record meanwhile."""
    _, host, _, _ = start(1, ack_deadline_ms=2_000)
    (run,) = host.partition.runs()
    assert run.deadline_ms == host.now_ms() + 2_000 + LEASE_MARGIN_MS


def test_no_more_than_max_outstanding_posts_are_in_flight() -> None:
    """With 10 records and ``max_outstanding`` 3, three POSTs go out; each answer lets the next one go."""
    _, host, sender, _ = start(10, max_outstanding=3)
    assert len(sender.open_posts()) == 3
    sender.posts[0].answer.callback(200)
    host.answers_settle()
    assert len(sender.open_posts()) == 3 and len(sender.posts) == 4
    while sender.open_posts():
        sender.open_posts()[0].answer.callback(200)
        host.answers_settle()
    assert sorted(host.accepted) == list(range(10))


def test_a_failed_post_is_retried_after_a_backoff_with_the_attempt_counted() -> None:
    """HTTP 500 releases the record until its backoff ends; then it is POSTed again as attempt 2."""
    dispatcher, host, sender, group = start(1, backoff_initial_ms=1_000, backoff_max_ms=1_000)
    sender.posts[0].answer.callback(500)
    assert dispatcher.failed_attempts == 1 and len(sender.posts) == 1
    (run,) = host.partition.runs()
    held_until_ms = run.deadline_ms
    assert host.now_ms() <= held_until_ms <= host.now_ms() + 1_000
    host.advance(group, (held_until_ms - host.now_ms()) / 1000)
    assert len(sender.posts) == 2 and sender.posts[1].request.headers["X-MQ-Attempt"] == "2"


def test_timeouts_and_connection_errors_are_failed_attempts_too() -> None:
    """No answer in time and a refused connection each count an attempt; at the limit the record is dead-lettered."""
    dispatcher, host, sender, group = start(1, attempts=2, backoff_initial_ms=1, backoff_max_ms=1)
    sender.posts[0].answer.errback(TimeoutError())
    host.advance(group, 0.01)
    assert len(sender.posts) == 2
    sender.posts[1].answer.errback(ConnectionRefusedError())
    host.advance(group, 0.01)
    assert host.dead == [0] and dispatcher.failed_attempts == 2 and len(sender.posts) == 2


def test_a_poison_record_does_not_hold_up_the_others() -> None:
    """One record the endpoint always refuses is dead-lettered; the rest are accepted meanwhile."""
    _, host, sender, group = start(5, attempts=3, backoff_initial_ms=10, backoff_max_ms=10)
    for _ in range(10):
        for post in sender.open_posts():
            post.answer.callback(500 if post.offsets() == [2] else 200)
        host.advance(group, 0.02)
    assert sorted(host.accepted) == [0, 1, 3, 4] and host.dead == [2]


def test_batching_posts_several_records_as_one_json_body() -> None:
    """``batch_max_messages`` 4 over 10 records: three POSTs; one 200 accepts the whole batch."""
    dispatcher, host, sender, _ = start(10, batch_max_messages=4)
    assert [post.offsets() for post in sender.posts] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert sender.posts[0].request.headers["X-MQ-Batch-Size"] == "4"
    for post in sender.posts:
        post.answer.callback(200)
    host.answers_settle()
    assert dispatcher.delivered == 10 and sorted(host.accepted) == list(range(10))


def test_records_the_filter_does_not_want_are_accepted_without_a_post() -> None:
    """A filter on a header: non-matching records are settled at once, matching ones POSTed."""
    headers = [[("type", b"paid" if offset % 2 else b"draft")] for offset in range(6)]
    _, host, sender, _ = start(6, headers=headers, filter='header.type = "paid"')
    assert [post.offsets() for post in sender.posts] == [[1], [3], [5]]
    host.answers_settle()
    assert sorted(host.accepted) == [0, 2, 4]


def test_the_rate_limit_spaces_posts_out() -> None:
    """At 2 POSTs a second, a burst of two goes at once and the third waits for its token."""
    _, host, sender, _ = start(10, rate_per_second=2)
    for post in sender.posts:
        post.answer.callback(200)
    sent = len(sender.posts)
    assert sent == 2
    host.clock.advance(0.6)
    assert len(sender.posts) == sent + 1


def test_a_stopped_dispatcher_posts_and_settles_nothing_more() -> None:
    """After ``stop`` an answer to a POST in flight changes nothing: its lease ends with the hosting."""
    dispatcher, host, sender, group = start(2, max_outstanding=1)
    dispatcher.stop()
    sender.posts[0].answer.callback(200)
    host.advance(group, 0.1)
    assert len(sender.posts) == 1 and host.accepted == [] and sender.closed and group.watchers == []


answers = st.sampled_from(["200", "204", "500", "timeout", "refused"])


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 12), max_outstanding=st.integers(1, 4), batch=st.integers(1, 3),
       attempts=st.integers(1, 3), script=st.lists(st.tuples(answers, st.integers(0, 3)), min_size=1, max_size=60))
def test_every_record_is_accepted_or_dead_lettered_and_never_in_two_posts_at_once(
        count: int, max_outstanding: int, batch: int, attempts: int, script: list[tuple[str, int]]) -> None:
    """Random answers in a random order, then a healthy endpoint: each record is settled exactly once."""
    _, host, sender, group = start(count, attempts=attempts, max_outstanding=max_outstanding,
                                   batch_max_messages=batch, backoff_initial_ms=5, backoff_max_ms=20)

    def check_in_flight() -> None:
        open_posts = sender.open_posts()
        assert len(open_posts) <= max_outstanding
        offsets = [offset for post in open_posts for offset in post.offsets()]
        assert len(offsets) == len(set(offsets)), "a record is in two POSTs at once"

    def answer(post: Post, kind: str) -> None:
        if kind == "timeout":
            post.answer.errback(TimeoutError())
        elif kind == "refused":
            post.answer.errback(ConnectionRefusedError())
        else:
            post.answer.callback(int(kind))

    for kind, which in script:
        check_in_flight()
        open_posts = sender.open_posts()
        if open_posts:
            answer(open_posts[which % len(open_posts)], kind)
        host.advance(group, 0.01)
    for _ in range(200):
        check_in_flight()
        for post in sender.open_posts():
            answer(post, "200")
        host.advance(group, 0.05)
        if host.partition.undone_count() == 0:
            break
    assert sorted(host.accepted + host.dead) == list(range(count))
    assert not host.refused, "the dispatcher only settles records it holds"


def test_a_batch_is_decoded_once_while_its_records_are_acquired_a_few_at_a_time(monkeypatch) -> None:
    """Acquiring one record at a time out of a big batch decodes it once; a due record's own batch is not mistaken
    for the big batch starting at the same offset."""
    from mqbroker.shares.push import dispatcher as module

    decodes = []
    real = module.decode_records
    monkeypatch.setattr(module, "decode_records", lambda batch: decodes.append(1) or real(batch))
    big = encode_batch([Record(offset=offset, timestamp_ms=0, key=None, value=b"%d" % offset) for offset in range(100)])
    due = encode_batch([Record(offset=0, timestamp_ms=0, key=None, value=b"due")])
    decoded = module.DecodedBatches(batches_max=2)
    for offset in range(100):
        answer = m.SharePartitionRecords(topic=TOPIC, partition=0, records=big,
                                         acquired=(AcquiredRange(offset, offset, 1),))
        assert [d.record.value for d in decoded.deliveries(answer)] == [b"%d" % offset]
    assert len(decodes) == 1
    answer = m.SharePartitionRecords(topic=TOPIC, partition=0, records=due, acquired=(AcquiredRange(0, 0, 4),))
    assert [(d.record.value, d.attempt) for d in decoded.deliveries(answer)] == [(b"due", 4)]
    garbage = m.SharePartitionRecords(topic=TOPIC, partition=0, records=b"\x00" * 80,
                                      acquired=(AcquiredRange(0, 0, 1),))
    assert decoded.deliveries(garbage) == []
