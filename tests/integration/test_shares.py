"""Share groups (queues on the log) against real broker processes and real clients (issue 20).

Many consumers on one partition, each record leased to one of them at a time; lease expiry and
renewal; the delivery limit and rejection sending records to the dead-letter topic with their origin
headers; deliver-at times kept across a kill -9; and a kill -9 of the broker mid-stream after which
every acknowledged record has been delivered and none is acknowledged twice.
"""

from __future__ import annotations

import pathlib
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import CancelledError

from mqbroker.client import Consumer, Producer, ShareConsumer
from mqbroker.client.connection import BlockingConnection
from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.client.share_core import AcknowledgedCallback
from mqbroker.client.twisted import TwistedShareConsumer
from mqbroker.errors import CorruptMessageError, InvalidRecordStateError
from mqbroker.records import dead_letters
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import wait_for
from tests.integration.nativewire import produce_batch
from tests.integration.share_support import (
    ShareChild,
    acknowledged,
    create_group,
    create_topic,
    delivered,
    kill_children,
    produce,
    unanswered,
)
from tests.poison import poison_batch

LEASE_MS = 2_000


@pytest.fixture(autouse=True)
def _children_killed() -> Iterator[None]:
    """Consumer processes end with their test, whatever its outcome."""
    yield
    kill_children()


@pytest.fixture
def broker(tmp_path: pathlib.Path) -> Iterator[BrokerProcess]:
    """A single broker of the test's own (it kills it), killed at the end; the others share ``shared_broker``."""
    process = BrokerProcess(data_dir=tmp_path / "data")
    process.start()
    yield process
    process.kill()


def _consumer(broker: BrokerProcess, group: str, topic: str, name: str, **options: object) -> ShareConsumer:
    return ShareConsumer(broker.bootstrap, group_id=group, topics=[topic], client_id=name, fetch_wait_ms=200,
                         request_timeout_s=10.0, **options)  # type: ignore[arg-type]


def _poll_until(consumer: ShareConsumer, wanted: int, timeout_s: float) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < wanted and time.monotonic() < deadline:
        got += consumer.poll(0.5)
    return got


async def _twisted_poll_until(consumer: TwistedShareConsumer, wanted: int, timeout_s: float) -> list:
    """``_poll_until`` for a Twisted share consumer."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < wanted and time.monotonic() < deadline:
        got += await consumer.poll()
    return got


def test_five_consumers_share_one_partition_and_a_killed_ones_leases_go_to_the_others(
        shared_broker: BrokerProcess) -> None:
    create_topic(shared_broker.bootstrap, "jobs", partitions=1)
    create_group(shared_broker.bootstrap, "workers", ["jobs"], lease_ms=str(LEASE_MS))
    holder = ShareChild(shared_broker.bootstrap, "workers", "jobs", "holder", mode="hold")
    assert holder.joined.wait(30), holder.errors()
    produce(shared_broker.bootstrap, "jobs", (b"job-%d" % n for n in range(50)))
    held = wait_for(holder.held, 30, "the holder to lease records")
    workers = [ShareChild(shared_broker.bootstrap, "workers", "jobs", f"worker-{n}") for n in range(5)]
    for worker in workers:
        assert worker.joined.wait(30), worker.errors()
    holder.kill()  # mid-lease: its records come back only when their leases end
    produce(shared_broker.bootstrap, "jobs", (b"job-%d" % n for n in range(50, 2_000)))

    wait_for(lambda: len(acknowledged(workers)) == 2_000, 90, "all 2,000 records acknowledged")
    counts = acknowledged(workers)
    assert set(counts) == {(0, offset) for offset in range(2_000)}
    assert max(counts.values()) == 1, "a record was acknowledged twice"
    deliveries = [delivery for worker in workers for delivery in worker.snapshot()[0]]
    by_offset = Counter(offset for _, offset, _, _ in deliveries)
    held_set = set(held)
    # One consumer at a time: a record the holder did not take was delivered once, to one worker.
    assert all(count == 1 for offset, count in by_offset.items() if offset not in held_set)
    # The held records came back to a worker as second deliveries, once their leases ended.
    redelivered = {offset: (count, at) for _, offset, count, at in deliveries if offset in held_set}
    assert set(redelivered) == held_set
    assert all(count == 2 for count, _ in redelivered.values())
    # Not before their leases ran out (on a loaded machine the workers may join after that, while the
    # holder still lives: its leases end all the same). Times are when this process read each report, so
    # a late report of the holder's delivery shortens the gap seen: half the lease still tells a lease
    # that ran from one handed back at once.
    held_at = min(at for _, offset, _, at in holder.snapshot()[0] if offset in held_set)
    assert min(at for _, at in redelivered.values()) - held_at >= LEASE_MS / 1000 / 2
    # Parallelism beyond the partition count: most workers did some of the work.
    assert sum(1 for worker in workers if worker.snapshot()[1]) >= 3
    for worker in workers:
        assert not worker.refusals()
        worker.kill()


def test_an_unsettled_lease_expires_to_another_consumer_and_a_renewed_one_does_not(
        shared_broker: BrokerProcess) -> None:
    create_topic(shared_broker.bootstrap, "slow", partitions=1)
    create_group(shared_broker.bootstrap, "slow-workers", ["slow"], lease_ms=str(LEASE_MS))
    produce(shared_broker.bootstrap, "slow", (b"m%d" % n for n in range(10)))
    with _consumer(shared_broker, "slow-workers", "slow", "a", records_max=10) as first, \
            _consumer(shared_broker, "slow-workers", "slow", "b") as second:
        assert first.wait_joined(30) and second.wait_joined(30)
        leased = _poll_until(first, 10, 20)
        leased_at = time.monotonic()
        assert [m.offset for m in leased] == list(range(10))
        assert all(m.delivery_count == 1 for m in leased)
        renewed = first.extend_lease(leased[:5], 20_000)
        assert [o.error for o in renewed] == [None]
        assert second.poll(0.5) == []  # all ten are leased to the first consumer
        taken_over = _poll_until(second, 5, 20)
        assert time.monotonic() - leased_at >= LEASE_MS / 1000 * 0.9
        assert [(m.offset, m.delivery_count) for m in taken_over] == [(n, 2) for n in range(5, 10)]
        first.acknowledge(leased[:5])
        assert [o.error for o in first.commit()] == [None]  # renewed: still the first consumer's
        first.acknowledge(leased[5:])  # (a range is settled whole or not at all: commit these apart)
        refused = first.commit()
        assert [type(o.error) for o in refused] == [InvalidRecordStateError]  # expired: the second holds them
        second.acknowledge(taken_over)
        assert [o.error for o in second.commit()] == [None]
    with ShareGroupAdmin(shared_broker.bootstrap) as admin:
        partition = admin.describe("slow-workers").partitions[0]
    assert (partition.start_offset, partition.acquired, partition.available, partition.lag) == (10, 0, 0, 0)


def test_delivery_limit_and_rejection_dead_letter_records_with_their_origin(shared_broker: BrokerProcess) -> None:
    create_topic(shared_broker.bootstrap, "orders", partitions=1)
    create_topic(shared_broker.bootstrap, "orders.dlq", partitions=1)
    create_group(shared_broker.bootstrap, "billing", ["orders"], lease_ms="10000", max_delivery_attempts="3",
                 dead_letter_topic="orders.dlq")
    values = [b"order-%d" % n for n in range(20)]
    values[5], values[7] = b"poison", b"malformed"
    produce(shared_broker.bootstrap, "orders", values)
    accepted: Counter[int] = Counter()
    poison_attempts = []
    with _consumer(shared_broker, "billing", "orders", "billing-1") as consumer:
        deadline = time.monotonic() + 30
        while len(accepted) < 18 or len(poison_attempts) < 3:
            assert time.monotonic() < deadline, (accepted, poison_attempts)
            for message in consumer.poll(0.5):
                if message.value == b"poison":
                    poison_attempts.append(message.delivery_count)
                    consumer.release(message, error="payment service said 500")
                elif message.value == b"malformed":
                    consumer.reject(message, error="not JSON")
                else:
                    consumer.ack(message)
                    accepted[message.offset] += 1
            consumer.commit()
        assert poison_attempts == [1, 2, 3]
        assert set(accepted.values()) == {1}
        assert consumer.poll(1.0) == []  # nothing comes back after the third attempt
    with Consumer(shared_broker.bootstrap, topics=["orders.dlq"], auto_offset_reset="earliest") as reader:
        letters: list = []
        deadline = time.monotonic() + 20
        while len(letters) < 2 and time.monotonic() < deadline:
            letters += reader.poll(0.5)
    by_value = {letter.value: dict(letter.headers) for letter in letters}
    assert set(by_value) == {b"poison", b"malformed"}
    assert by_value[b"malformed"] == {
        dead_letters.HEADER_ERROR: b"not JSON", dead_letters.HEADER_ATTEMPTS: b"1",
        dead_letters.HEADER_TOPIC: b"orders", dead_letters.HEADER_PARTITION: b"0", dead_letters.HEADER_OFFSET: b"7",
        dead_letters.HEADER_REASON: b"rejected", dead_letters.HEADER_GROUP: b"billing",
    }
    poison = by_value[b"poison"]
    assert (poison[dead_letters.HEADER_OFFSET], poison[dead_letters.HEADER_ATTEMPTS],
            poison[dead_letters.HEADER_REASON], poison[dead_letters.HEADER_ERROR]) == (
        b"5", b"3", b"delivery_limit", b"payment service said 500")
    with ShareGroupAdmin(shared_broker.bootstrap) as admin:
        described = admin.describe("billing")
    assert (described.dead_lettered, described.dead_letter_depth) == (2, 2)
    assert described.partitions[0].start_offset == 20


@pytest.mark.alone  # bounds a time or rate: no other test's load meanwhile
def test_deliver_at_times_survive_a_kill_9_and_records_arrive_on_time(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "reminders", partitions=1)
    create_group(broker.bootstrap, "reminders-now", ["reminders"])
    create_group(broker.bootstrap, "reminders-later", ["reminders"], delivery_delay_ms="4000")
    deliver_at_ms = int(time.time() * 1000) + 6_000
    produce(broker.bootstrap, "reminders", [b"now-1", b"now-2"])
    produce(broker.bootstrap, "reminders", [b"at-1", b"at-2"], headers=[("x-deliver-at", str(deliver_at_ms).encode())])
    produce(broker.bootstrap, "reminders", [b"delay-1"], headers=[("x-delay", b"6000")])
    with _consumer(broker, "reminders-now", "reminders", "early") as early:
        got = _poll_until(early, 2, 10)
        assert [m.value for m in got] == [b"now-1", b"now-2"]
        early.acknowledge(got)
        assert [o.error for o in early.commit()] == [None]
        assert early.poll(1.0) == []  # the others are not due yet
    broker.kill()
    broker.restart()
    arrivals: dict[bytes, float] = {}
    with _consumer(broker, "reminders-now", "reminders", "late") as late:
        assert late.wait_joined(30)
        serving_ms = time.time() * 1000  # restarted and joined: from here on the broker owes punctuality
        deadline = time.monotonic() + 30
        while len(arrivals) < 3 and time.monotonic() < deadline:
            messages = late.poll(0.5)
            arrivals.update((m.value, time.time() * 1000) for m in messages)
            late.acknowledge(messages)
    assert set(arrivals) == {b"at-1", b"at-2", b"delay-1"}  # not now-1 or now-2 again: they were acknowledged
    for value in (b"at-1", b"at-2"):
        assert arrivals[value] >= deliver_at_ms, (value, arrivals[value] - deliver_at_ms)
        lateness_ms = arrivals[value] - max(deliver_at_ms, serving_ms)
        assert lateness_ms < 2_000, (value, lateness_ms)
    assert arrivals[b"delay-1"] >= deliver_at_ms - 500  # x-delay counts from the record's timestamp
    # The group's own delay (SQS DelaySeconds) holds back even records without a header.
    with _consumer(broker, "reminders-later", "reminders", "patient") as patient:
        produced_at_ms = time.time() * 1000
        produce(broker.bootstrap, "reminders", [b"later"])
        seen: list = []
        deadline = time.monotonic() + 20
        while not any(m.value == b"later" for m in seen) and time.monotonic() < deadline:
            seen += patient.poll(0.5)
        arrived_ms = time.time() * 1000
    assert any(m.value == b"later" for m in seen)
    assert arrived_ms - produced_at_ms >= 4_000 - 100


def test_kill_9_of_the_broker_mid_stream_loses_no_acknowledged_record(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "stream", partitions=2)
    create_group(broker.bootstrap, "stream-workers", ["stream"], lease_ms="3000")
    workers = [ShareChild(broker.bootstrap, "stream-workers", "stream", f"w{n}") for n in range(3)]
    for worker in workers:
        assert worker.joined.wait(30), worker.errors()
    produced: set[tuple[int, int]] = set()
    stop = threading.Event()
    lock = threading.Lock()

    def produce_steadily() -> None:
        with Producer(broker.bootstrap, acks="all", linger_ms=1, request_timeout_ms=5_000) as producer:
            number = 0
            while not stop.is_set():
                def delivered(error: object, metadata: object) -> None:
                    if error is None:
                        with lock:
                            produced.add((metadata.partition, metadata.offset))  # type: ignore[attr-defined]
                producer.send("stream", b"record-%d" % number, on_delivery=delivered)
                number += 1
                time.sleep(0.002)
            producer.flush(30)

    producing = threading.Thread(target=produce_steadily)
    producing.start()
    try:
        wait_for(lambda: len(acknowledged(workers)) >= 300, 60, "the workers to acknowledge records")
        broker.kill()
        time.sleep(0.5)
        broker.restart()
        with lock:
            before = len(produced)
        wait_for(lambda: len(produced) > before + 300, 60, "producing after the restart")
    finally:
        stop.set()
        producing.join(60)
    def settled() -> bool:
        return set(acknowledged(workers)) | unanswered(workers) >= produced

    wait_for(settled, 90, "every produced record acknowledged")
    with ShareGroupAdmin(broker.bootstrap) as admin:
        wait_for(lambda: all(p.lag == 0 and p.acquired == 0 and p.available == 0
                               for p in admin.describe("stream-workers").partitions), 30, "nothing left in the group")
    counts = acknowledged(workers)
    assert set(delivered(workers)) >= produced
    twice = sorted(record for record, count in counts.items() if count > 1)
    assert not twice, f"acknowledged twice: {twice[:10]}"
    # An acknowledgement lost with the connection was either stored (the record is done: the group has
    # nothing left) or not (the record came back and was acknowledged again): never lost.
    for worker in workers:
        assert worker.process.poll() is None, worker.errors()
        worker.kill()


def _twisted_consumer(broker: BrokerProcess, name: str, **options: object) -> TwistedShareConsumer:
    """A Twisted member of share group ``name`` reading topic ``name``."""
    return TwistedShareConsumer(reactor, broker.bootstrap, group_id=name, topics=[name], fetch_wait_ms=200,
                                **options)  # type: ignore[arg-type]


#: Long enough that a record leased and not returned by a poll cannot come back within the test.
HELD_LEASE_MS = 60_000


def _half_poisoned_queue(broker: BrokerProcess, name: str) -> None:
    """Topic and share group ``name``: partition 0 holds records 0-4; partition 1 records 10-14, a batch that does
    not decode (offsets 5-6), then record 17."""
    create_topic(broker.bootstrap, name, partitions=2)
    produce(broker.bootstrap, name, (b"%d" % n for n in range(5)), partition=0)
    produce(broker.bootstrap, name, (b"%d" % n for n in range(10, 15)), partition=1)
    assert produce_batch(broker.ports["native"], name, 1, poison_batch()) == 0
    produce(broker.bootstrap, name, [b"17"], partition=1)
    create_group(broker.bootstrap, name, [name], lease_ms=str(HELD_LEASE_MS))


GOOD_RECORDS = [b"%d" % n for n in [*range(5), *range(10, 15), 17]]


def test_a_share_poll_returns_the_records_beside_a_poison_batch_and_the_next_raises(
        shared_broker: BrokerProcess) -> None:
    """The fetch that leases the batch that does not decode leases the good records too: they are returned (raised
    past, they stayed leased to this consumer, unread, until their leases ended), with the acknowledgements'
    outcomes; ``CorruptMessageError`` comes from the poll after, and the consumer reads on."""
    _half_poisoned_queue(shared_broker, "half-poisoned")
    outcomes: list = []
    with _consumer(shared_broker, "half-poisoned", "half-poisoned", "reader",
                   on_acknowledged=outcomes.extend) as consumer:
        assert consumer.wait_joined(30)
        received, raised = [], 0
        deadline = time.monotonic() + 15
        while (len(received) < len(GOOD_RECORDS) or not raised) and time.monotonic() < deadline:
            try:
                received += consumer.poll(0.5)
            except CorruptMessageError:
                raised += 1
        assert sorted(message.value for message in received) == sorted(GOOD_RECORDS) and raised == 1
        consumer.acknowledge(received)
        assert consumer.poll(0.5) == []  # the verdicts go with it
        assert outcomes and all(outcome.error is None for outcome in outcomes)


@pytest_twisted.ensureDeferred
async def test_a_twisted_share_poll_returns_the_records_beside_a_poison_batch_and_the_next_raises(
        shared_broker: BrokerProcess) -> None:
    """As for the blocking consumer; and the error is the poll's, not the consumer's: it reads on after it."""
    _half_poisoned_queue(shared_broker, "half-poisoned-twisted")
    outcomes: list = []
    consumer = _twisted_consumer(shared_broker, "half-poisoned-twisted", on_acknowledged=outcomes.extend)
    try:
        received, raised = [], 0
        deadline = time.monotonic() + 15
        while (len(received) < len(GOOD_RECORDS) or not raised) and time.monotonic() < deadline:
            try:
                received += await consumer.poll()
            except CorruptMessageError:
                raised += 1
        assert sorted(message.value for message in received) == sorted(GOOD_RECORDS) and raised == 1
        consumer.acknowledge(received)
        assert await consumer.poll() == []  # the verdicts go with it
        assert outcomes and all(outcome.error is None for outcome in outcomes)
    finally:
        await consumer.close()


def _queue_of_twenty(broker: BrokerProcess, name: str) -> None:
    create_topic(broker.bootstrap, name, partitions=1)
    produce(broker.bootstrap, name, (b"%d" % n for n in range(20)))
    create_group(broker.bootstrap, name, [name], lease_ms=str(HELD_LEASE_MS))


def _raising_once(calls: list) -> AcknowledgedCallback:
    def on_acknowledged(outcomes: list) -> None:
        calls.append(outcomes)
        if len(calls) == 1:
            raise RuntimeError("the application's callback failed")
    return on_acknowledged


def test_the_records_of_a_share_poll_whose_acknowledged_callback_raised_come_from_the_next_poll(
        shared_broker: BrokerProcess) -> None:
    """The second poll carries the first one's verdicts and leases ten more records; ``on_acknowledged`` raises
    from it: the next poll returns those records (lost before: leased to this consumer until their leases ended)."""
    _queue_of_twenty(shared_broker, "ack-callback-raises")
    calls: list = []
    with _consumer(shared_broker, "ack-callback-raises", "ack-callback-raises", "reader", records_max=10,
                   on_acknowledged=_raising_once(calls)) as consumer:
        assert consumer.wait_joined(30)
        received, raised = [], 0
        deadline = time.monotonic() + 15
        while len(received) < 20 and time.monotonic() < deadline:
            try:
                messages = consumer.poll(0.5)
            except RuntimeError:
                raised += 1
                continue
            received += messages
            consumer.acknowledge(messages)
        assert raised == 1 and sorted(int(message.value) for message in received) == list(range(20))


@pytest_twisted.ensureDeferred
async def test_the_records_of_a_twisted_share_poll_whose_acknowledged_callback_raised_come_from_the_next_poll(
        shared_broker: BrokerProcess) -> None:
    _queue_of_twenty(shared_broker, "ack-callback-raises-twisted")
    calls: list = []
    consumer = _twisted_consumer(shared_broker, "ack-callback-raises-twisted", records_max=10,
                                 on_acknowledged=_raising_once(calls))
    try:
        received, raised = [], 0
        deadline = time.monotonic() + 15
        while len(received) < 20 and time.monotonic() < deadline:
            try:
                messages = await consumer.poll()
            except RuntimeError:
                raised += 1
                continue
            received += messages
            consumer.acknowledge(messages)
        assert raised == 1 and sorted(int(message.value) for message in received) == list(range(20))
    finally:
        await consumer.close()


def _settled(outcomes: list) -> list[int]:
    """The offsets the outcomes say the broker stored."""
    return sorted(offset for outcome in outcomes if outcome.error is None
                  for offset in range(outcome.first_offset, outcome.last_offset + 1))


def _interrupt_poll(consumer: ShareConsumer, monkeypatch: pytest.MonkeyPatch, timeout_s: float = 0.5) -> None:
    """A poll that KeyboardInterrupt stops while it waits for its fetch (sent)."""
    wait = BlockingConnection.wait_response

    def interrupted(connection: BlockingConnection, correlation_id: int, timeout_s: float) -> object:
        monkeypatch.setattr(BlockingConnection, "wait_response", wait)
        raise KeyboardInterrupt

    monkeypatch.setattr(BlockingConnection, "wait_response", interrupted)
    with pytest.raises(KeyboardInterrupt):
        consumer.poll(timeout_s)


def test_a_share_poll_interrupted_mid_fetch_leaves_its_answer_to_the_next_poll(
        shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt while the poll waits for the fetch that carries records 0-9's verdicts and leases 10-19:
    the next poll takes that fetch's answer, so ``on_acknowledged`` hears of 0-9 and 10-19 come at once (before:
    the answer was dropped, the verdicts' outcome never reported and 10-19 stayed leased, unread, for the lease)."""
    _queue_of_twenty(shared_broker, "share-interrupted")
    outcomes: list = []
    with _consumer(shared_broker, "share-interrupted", "share-interrupted", "reader", records_max=10,
                   on_acknowledged=outcomes.extend) as consumer:
        assert consumer.wait_joined(30)
        first = _poll_until(consumer, 10, 15)
        assert sorted(int(message.value) for message in first) == list(range(10))
        consumer.acknowledge(first)
        _interrupt_poll(consumer, monkeypatch)
        assert outcomes == []
        second = _poll_until(consumer, 10, 10)  # well within the 60 s lease
        assert sorted(int(message.value) for message in second) == list(range(10, 20))
        assert _settled(outcomes) == list(range(10))
        consumer.acknowledge(second)
        consumer.commit()
        assert _settled(outcomes) == list(range(20))


@pytest_twisted.ensureDeferred
async def test_a_twisted_share_poll_cancelled_mid_fetch_leaves_its_answer_to_the_next_poll(
        shared_broker: BrokerProcess) -> None:
    """As for the blocking consumer, with the poll's Deferred cancelled while it waits for the fetch."""
    _queue_of_twenty(shared_broker, "share-cancelled-twisted")
    outcomes: list = []
    consumer = _twisted_consumer(shared_broker, "share-cancelled-twisted", records_max=10,
                                 on_acknowledged=outcomes.extend)
    try:
        first = await _twisted_poll_until(consumer, 10, 15)
        assert sorted(int(message.value) for message in first) == list(range(10))
        consumer.acknowledge(first)
        polling = consumer.poll()  # its fetch is on the way
        polling.cancel()
        with pytest.raises(CancelledError):
            await polling
        assert outcomes == []
        second = await _twisted_poll_until(consumer, 10, 10)  # well within the 60 s lease
        assert sorted(int(message.value) for message in second) == list(range(10, 20))
        assert _settled(outcomes) == list(range(10))
        consumer.acknowledge(second)
        await consumer.commit()
        assert _settled(outcomes) == list(range(20))
    finally:
        await consumer.close()


def test_closing_after_an_interrupted_share_poll_reports_the_outcomes_of_its_verdicts(
        shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """``close`` takes the interrupted fetch's answer: ``on_acknowledged`` hears of the verdicts it carried, and the
    records it leased go back with the leave (another consumer reads them at once, not after the 60 s lease)."""
    _queue_of_twenty(shared_broker, "share-interrupted-close")
    outcomes: list = []
    consumer = _consumer(shared_broker, "share-interrupted-close", "share-interrupted-close", "reader",
                         records_max=10, on_acknowledged=outcomes.extend)
    try:
        assert consumer.wait_joined(30)
        first = _poll_until(consumer, 10, 15)
        consumer.acknowledge(first)
        _interrupt_poll(consumer, monkeypatch)
    finally:
        consumer.close()
    assert _settled(outcomes) == sorted(int(message.value) for message in first) == list(range(10))
    with _consumer(shared_broker, "share-interrupted-close", "share-interrupted-close", "next") as other:
        assert other.wait_joined(30)
        assert sorted(int(message.value) for message in _poll_until(other, 10, 10)) == list(range(10, 20))


@pytest_twisted.ensureDeferred
async def test_closing_after_a_cancelled_twisted_share_poll_reports_the_outcomes_of_its_verdicts(
        shared_broker: BrokerProcess) -> None:
    _queue_of_twenty(shared_broker, "share-cancelled-close-twisted")
    outcomes: list = []
    consumer = _twisted_consumer(shared_broker, "share-cancelled-close-twisted", records_max=10,
                                 on_acknowledged=outcomes.extend)
    try:
        first = await _twisted_poll_until(consumer, 10, 15)
        consumer.acknowledge(first)
        polling = consumer.poll()
        polling.cancel()
        with pytest.raises(CancelledError):
            await polling
    finally:
        await consumer.close()
    assert _settled(outcomes) == sorted(int(message.value) for message in first) == list(range(10))


def test_the_verdicts_of_an_interrupted_share_poll_whose_broker_died_are_reported_failed(
        broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker is killed while the interrupted poll's fetch waits there (nothing left to lease): the fetch gets
    no answer, and the verdicts it carried are reported failed (they may or may not have been stored), not
    forgotten."""
    _queue_of_twenty(broker, "share-interrupted-killed")
    outcomes: list = []
    consumer = ShareConsumer(broker.bootstrap, group_id="share-interrupted-killed", topics=["share-interrupted-killed"],
                             fetch_wait_ms=10_000, request_timeout_s=10.0, on_acknowledged=outcomes.extend)
    try:
        assert consumer.wait_joined(30)
        consumer.acknowledge(_poll_until(consumer, 20, 15))
        _interrupt_poll(consumer, monkeypatch, timeout_s=10.0)  # its fetch waits up to 10 s at the broker
        broker.kill()
        consumer.poll(0.5)
    finally:
        consumer.close(timeout=2)
    reported = sorted(offset for outcome in outcomes for offset in range(outcome.first_offset, outcome.last_offset + 1))
    assert reported == list(range(20)) and all(outcome.error is not None for outcome in outcomes)
