"""Fetch pipelining against a real broker: the fetch a consumer sends before ``poll`` returns records waits at the
broker, and whatever overtakes it (a seek, a reset, a pause, an assignment change, a rebalance, close) drops it:
no record is returned twice or skipped, and nothing waits for the dropped fetch's long poll.

The tests share one broker; each writes its own topics. The consumers long-poll for 5 s (``fetch_max_wait_ms``),
so a poll that waited for an overtaken fetch would take seconds, not the fraction of one the bounds allow.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import CancelledError
from twisted.internet.task import deferLater

from mqbroker.client import Admin, Consumer, Message, Producer
from mqbroker.client.blocking.cluster import BlockingCluster
from mqbroker.client.connection import BlockingConnection
from mqbroker.client.twisted import TwistedConsumer
from mqbroker.errors import CorruptMessageError, RequestTimedOutError
from mqbroker.protocols.native.messages import FetchRequest, FetchResponse
from mqbroker.records.readable import UnreadableBatch
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.nativewire import produce_batch
from tests.poison import poison_batch

LONG_POLL_MS = 5_000
#: A poll that is answered from the log, not from a dropped fetch's long poll: well under LONG_POLL_MS.
PROMPT_S = 2.0


def _create(broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=partitions)


def _produce(broker: BrokerProcess, topic: str, numbers: range, partition: int = 0) -> None:
    with Producer(broker.bootstrap, acks="all") as producer:
        for number in numbers:
            producer.send(topic, b"%d" % number, partition=partition)


def _poll_until(consumer: Consumer, count: int, timeout_s: float = 20.0) -> list[Message]:
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < count and time.monotonic() < deadline:
        messages += consumer.poll(timeout=0.2)
    return messages


def _values(messages: list[Message]) -> list[int]:
    return [int(message.value or b"") for message in messages]


def _offsets_by_partition(messages: list[Message]) -> dict[int, list[int]]:
    """Each partition's offsets in the order they were returned."""
    offsets: dict[int, list[int]] = {}
    for message in messages:
        offsets.setdefault(message.partition, []).append(message.offset)
    return offsets


@pytest.fixture
def reading(shared_broker: BrokerProcess, request: pytest.FixtureRequest) -> Iterator[tuple[Consumer, str]]:
    """A consumer that read offsets 0-9 of a new topic's partition 0 and so has a fetch parked from offset 10."""
    topic = f"pipelining-{request.node.name}".replace("[", "-").replace("]", "")
    _create(shared_broker, topic, partitions=2)
    _produce(shared_broker, topic, range(10))
    consumer = Consumer(shared_broker.bootstrap, topics=[topic], auto_offset_reset="earliest",
                        fetch_max_wait_ms=LONG_POLL_MS)
    try:
        assert _values(_poll_until(consumer, 10)) == list(range(10))
        yield consumer, topic
    finally:
        consumer.close()


def test_poll_sends_the_next_fetch_before_it_returns_records(shared_broker: BrokerProcess,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    topic = "pipelining-next-fetch"
    _create(shared_broker, topic)
    _produce(shared_broker, topic, range(10))
    fetched_from: list[int] = []
    send = BlockingConnection.send

    def recording_send(connection: BlockingConnection, request: object) -> int:
        if isinstance(request, FetchRequest):
            fetched_from.append(request.topics[0].partitions[0].fetch_offset)
        return send(connection, request)

    monkeypatch.setattr(BlockingConnection, "send", recording_send)
    with Consumer(shared_broker.bootstrap, topics=[topic], auto_offset_reset="earliest",
                  fetch_max_wait_ms=LONG_POLL_MS) as consumer:
        assert _values(_poll_until(consumer, 10)) == list(range(10))
        assert fetched_from[-1] == 10  # sent before poll returned: it waits at the broker for offset 10


def test_records_produced_after_a_poll_come_in_order_once_each(reading: tuple[Consumer, str],
                                                                shared_broker: BrokerProcess) -> None:
    consumer, topic = reading
    for start in range(10, 60, 10):
        _produce(shared_broker, topic, range(start, start + 10))
        assert _values(_poll_until(consumer, 10)) == list(range(start, start + 10))
    assert consumer.poll(timeout=0.3) == []


def test_a_seek_drops_the_parked_fetch_and_reads_from_the_new_offset_at_once(reading: tuple[Consumer, str]) -> None:
    consumer, topic = reading
    consumer.seek((topic, 0), 3)
    started = time.monotonic()
    messages = consumer.poll(timeout=PROMPT_S * 2)
    assert time.monotonic() - started < PROMPT_S
    assert _values(messages) == list(range(3, 10))


def test_a_reset_to_the_beginning_drops_the_parked_fetch(reading: tuple[Consumer, str]) -> None:
    consumer, topic = reading
    consumer.seek_to_beginning((topic, 0))
    started = time.monotonic()
    messages = consumer.poll(timeout=PROMPT_S * 2)
    assert time.monotonic() - started < PROMPT_S
    assert _values(messages) == list(range(10))


def test_a_paused_partitions_parked_fetch_returns_nothing_until_resumed(reading: tuple[Consumer, str],
                                                                        shared_broker: BrokerProcess) -> None:
    consumer, topic = reading
    consumer.pause((topic, 0))
    _produce(shared_broker, topic, range(10, 15))
    _produce(shared_broker, topic, range(100, 103), partition=1)
    assert _values(_poll_until(consumer, 3, timeout_s=3)) == [100, 101, 102]  # partition 1 only
    assert consumer.poll(timeout=0.5) == []
    consumer.resume((topic, 0))
    assert _values(_poll_until(consumer, 5)) == list(range(10, 15))


def test_an_unassigned_partitions_parked_fetch_returns_nothing(reading: tuple[Consumer, str],
                                                               shared_broker: BrokerProcess) -> None:
    consumer, topic = reading
    consumer.assign([(topic, 1)])
    _produce(shared_broker, topic, range(10, 15))
    assert consumer.poll(timeout=1.0) == []
    consumer.assign([(topic, 0), (topic, 1)])  # kept partitions keep their positions; partition 0 starts anew
    assert _values(_poll_until(consumer, 15)) == list(range(15))


def test_close_with_a_fetch_parked_returns_at_once(reading: tuple[Consumer, str]) -> None:
    consumer, _ = reading
    started = time.monotonic()
    consumer.close()
    assert time.monotonic() - started < PROMPT_S


def test_a_rebalance_drops_the_parked_fetch_of_a_revoked_partition(shared_broker: BrokerProcess) -> None:
    """The first member reads both partitions with fetches parked; a second joins and takes one. Commits on
    revocation hand the positions over: every record is read once across both."""
    topic = "pipelining-rebalance"
    _create(shared_broker, topic, partitions=2)
    settings = dict(group_id="pipelining", topics=[topic], auto_offset_reset="earliest", fetch_max_wait_ms=LONG_POLL_MS,
                    session_timeout_ms=6_000, heartbeat_interval_ms=300)
    seen: list[tuple[int, int]] = []
    with Consumer(shared_broker.bootstrap, **settings) as first:  # type: ignore[arg-type]
        for partition in (0, 1):
            _produce(shared_broker, topic, range(partition * 1000, partition * 1000 + 10), partition=partition)
        seen += [(m.partition, m.offset) for m in _poll_until(first, 20, timeout_s=30)]
        with Consumer(shared_broker.bootstrap, **settings) as second:  # type: ignore[arg-type]
            deadline = time.monotonic() + 30
            while (not second.assignment() or len(first.assignment()) != 1) and time.monotonic() < deadline:
                seen += [(m.partition, m.offset) for m in first.poll(timeout=0.1) + second.poll(timeout=0.1)]
            assert len(first.assignment()) == 1 and len(second.assignment()) == 1
            for partition in (0, 1):
                _produce(shared_broker, topic, range(partition * 1000 + 10, partition * 1000 + 20), partition=partition)
            deadline = time.monotonic() + 30
            while len(seen) < 40 and time.monotonic() < deadline:
                seen += [(m.partition, m.offset) for m in first.poll(timeout=0.1) + second.poll(timeout=0.1)]
    assert sorted(seen) == [(partition, offset) for partition in (0, 1) for offset in range(20)]


def test_a_poll_interrupted_while_it_waits_for_a_fetch_leaves_its_partitions_to_the_next_poll(
        reading: tuple[Consumer, str], shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt (a socket error, a callback raising) while the poll waits for the parked fetch: the fetch is
    abandoned, so its partitions are fetched again, and every record comes back once, in order."""
    consumer, topic = reading
    wait = BlockingConnection.wait_response

    def interrupted(connection: BlockingConnection, correlation_id: int, timeout_s: float) -> object:
        monkeypatch.setattr(BlockingConnection, "wait_response", wait)
        raise KeyboardInterrupt

    monkeypatch.setattr(BlockingConnection, "wait_response", interrupted)
    with pytest.raises(KeyboardInterrupt):
        consumer.poll(timeout=0.5)
    _produce(shared_broker, topic, range(10, 20))
    assert _values(_poll_until(consumer, 10)) == list(range(10, 20))
    assert consumer.poll(timeout=0.3) == []


def test_a_poll_whose_fetch_cannot_be_sent_leaves_its_partitions_to_the_next_poll(
        reading: tuple[Consumer, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Connecting to the leader fails with an error other than a lost broker (its ApiVersions unanswered, a login
    refused): the poll raises it, and the partitions it planned to fetch are fetched by the next poll."""
    consumer, topic = reading
    consumer.seek((topic, 0), 3)  # drops the parked fetch: the next poll plans a fresh one
    connection = BlockingCluster.connection

    def unanswered(cluster: BlockingCluster, node_id: int) -> BlockingConnection:
        monkeypatch.setattr(BlockingCluster, "connection", connection)
        raise RequestTimedOutError("no ApiVersions answer")

    monkeypatch.setattr(BlockingCluster, "connection", unanswered)
    with pytest.raises(RequestTimedOutError):
        consumer.poll(timeout=0.5)
    assert _values(_poll_until(consumer, 7)) == list(range(3, 10))


def test_the_records_a_poll_took_before_it_was_interrupted_come_from_the_next_poll(
        shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parked fetch of partition 0 brings records 5-9, then the wait for partition 1's fresh fetch is
    interrupted: partition 0's position had moved past 5-9, so without reading them again they were lost."""
    topic = "pipelining-interrupted-after-records"
    _create(shared_broker, topic, partitions=2)
    _produce(shared_broker, topic, range(5))
    consumer = Consumer(shared_broker.bootstrap, topics=[topic], auto_offset_reset="earliest",
                        fetch_max_wait_ms=LONG_POLL_MS)
    try:
        consumer.pause((topic, 1))
        assert _values(_poll_until(consumer, 5)) == list(range(5))  # a fetch of partition 0 alone is parked
        consumer.resume((topic, 1))
        _produce(shared_broker, topic, range(5, 10))  # the parked fetch is answered
        wait = BlockingConnection.wait_response
        brought_records = False

        def interrupted_after_records(connection: BlockingConnection, correlation_id: int, timeout_s: float) -> object:
            nonlocal brought_records
            if brought_records:
                monkeypatch.setattr(BlockingConnection, "wait_response", wait)
                raise KeyboardInterrupt
            response = wait(connection, correlation_id, timeout_s)
            brought_records = isinstance(response, FetchResponse) and any(
                partition.records for topic in response.topics for partition in topic.partitions)
            return response

        monkeypatch.setattr(BlockingConnection, "wait_response", interrupted_after_records)
        with pytest.raises(KeyboardInterrupt):
            consumer.poll(timeout=LONG_POLL_MS / 1000)
        assert _values(_poll_until(consumer, 5)) == list(range(5, 10))
        assert consumer.poll(timeout=0.3) == []
    finally:
        consumer.close()


def _half_poisoned(broker: BrokerProcess, topic: str) -> str:
    """``topic`` with records 0-4 in partition 0, and in partition 1 a batch that does not decode then one record."""
    _create(broker, topic, partitions=2)
    _produce(broker, topic, range(5), partition=0)
    assert produce_batch(broker.ports["native"], topic, 1, poison_batch()) == 0
    _produce(broker, topic, [7], partition=1)
    return topic


def test_a_poll_returns_the_other_partitions_records_and_the_next_raises_for_a_poison_batch(
        shared_broker: BrokerProcess) -> None:
    """One fetch brings partition 0's records and partition 1's batch that does not decode: the poll returns the
    records (raising past them would lose them: their position has moved), the next raises ``CorruptMessageError``,
    and after a seek past the batch partition 1 is read on."""
    topic = _half_poisoned(shared_broker, "pipelining-poison")
    consumer = Consumer(shared_broker.bootstrap, topics=[topic], auto_offset_reset="earliest")
    try:
        messages: list[Message] = []
        deadline = time.monotonic() + 20
        with pytest.raises(CorruptMessageError):
            while time.monotonic() < deadline:
                messages += consumer.poll(timeout=0.5)
        assert [(message.partition, int(message.value or b"")) for message in messages] == [(0, n) for n in range(5)]
        assert consumer.position((topic, 1)) == 0
        consumer.seek((topic, 1), 1)
        assert [(message.partition, message.offset) for message in _poll_until(consumer, 1)] == [(1, 1)]
    finally:
        consumer.close()


def test_an_on_unreadable_callback_that_raises_loses_no_record_of_its_fetch(shared_broker: BrokerProcess) -> None:
    """The callback raises for partition 1's batch after partition 0's records of the same fetch were decoded (and
    its position moved): the poll raises, and the next one returns partition 0's records all the same."""
    topic = _half_poisoned(shared_broker, "pipelining-unreadable-raises")
    skipped: list[UnreadableBatch] = []

    def report(batch: UnreadableBatch) -> None:
        skipped.append(batch)
        if len(skipped) == 1:
            raise RuntimeError("the application's callback failed")

    consumer = Consumer(shared_broker.bootstrap, topics=[topic], auto_offset_reset="earliest", on_unreadable=report)
    try:
        messages: list[Message] = []
        deadline = time.monotonic() + 20
        with pytest.raises(RuntimeError):
            while time.monotonic() < deadline:
                messages += consumer.poll(timeout=0.5)
        messages += _poll_until(consumer, 6 - len(messages))
        # each partition's records once and in order (the two partitions' records may interleave either way)
        assert _offsets_by_partition(messages) == {0: list(range(5)), 1: [1]}
        assert [(batch.partition, batch.first_offset) for batch in skipped] == [(1, 0), (1, 0)]
    finally:
        consumer.close()


@pytest_twisted.ensureDeferred
async def test_the_twisted_consumer_drops_a_parked_fetch_on_seek_and_reads_once(shared_broker: BrokerProcess) -> None:
    topic = "pipelining-twisted"
    _create(shared_broker, topic)
    _produce(shared_broker, topic, range(10))
    consumer = TwistedConsumer(reactor, shared_broker.bootstrap, auto_offset_reset="earliest",
                               fetch_max_wait_ms=LONG_POLL_MS)
    try:
        await consumer.assign_topics([topic])
        messages: list[Message] = []
        while len(messages) < 10:
            messages += await consumer.poll()
        assert _values(messages) == list(range(10))
        consumer.seek((topic, 0), 4)  # a fetch from offset 10 waits at the broker
        started = time.monotonic()
        assert _values(await consumer.poll()) == list(range(4, 10))
        assert time.monotonic() - started < PROMPT_S
    finally:
        started = time.monotonic()
        await consumer.close()
        assert time.monotonic() - started < PROMPT_S


@pytest_twisted.ensureDeferred
async def test_a_cancelled_twisted_poll_leaves_its_partition_to_the_next_poll(shared_broker: BrokerProcess) -> None:
    topic = "pipelining-twisted-cancel"
    _create(shared_broker, topic)
    consumer = TwistedConsumer(reactor, shared_broker.bootstrap, auto_offset_reset="earliest",
                               fetch_max_wait_ms=LONG_POLL_MS)
    try:
        await consumer.assign_topics([topic])
        polling = consumer.poll()  # nothing to read: its fetch waits at the broker
        await deferLater(reactor, 0.3, lambda: None)
        polling.cancel()  # as ``poll().addTimeout(...)`` does
        with pytest.raises(CancelledError):
            await polling
        _produce(shared_broker, topic, range(5))
        messages: list[Message] = []
        for _ in range(5):  # each poll sends a fetch for the partition and is answered from the log at once
            messages += await consumer.poll()
            if len(messages) >= 5:
                break
        assert _values(messages) == list(range(5))
    finally:
        await consumer.close()


@pytest_twisted.ensureDeferred
async def test_a_twisted_poll_returns_the_other_partitions_records_before_the_poison_batchs_error(
        shared_broker: BrokerProcess) -> None:
    topic = _half_poisoned(shared_broker, "pipelining-poison-twisted")
    consumer = TwistedConsumer(reactor, shared_broker.bootstrap, auto_offset_reset="earliest")
    try:
        await consumer.assign_topics([topic])
        messages: list[Message] = []
        with pytest.raises(CorruptMessageError):
            for _ in range(20):
                messages += await consumer.poll()
        assert [(message.partition, int(message.value or b"")) for message in messages] == [(0, n) for n in range(5)]
        consumer.seek((topic, 1), 1)
        after: list[Message] = []
        for _ in range(20):
            after += await consumer.poll()
            if after:
                break
        assert [(message.partition, message.offset) for message in after] == [(1, 1)]
    finally:
        await consumer.close()


@pytest_twisted.ensureDeferred
async def test_a_twisted_poll_cancelled_after_a_fetch_brought_records_leaves_them_to_the_next_poll(
        shared_broker: BrokerProcess) -> None:
    """The parked fetch of partition 0 brings records 5-9; the poll is cancelled while partition 1's fresh fetch
    waits at the broker. Partition 0's position had moved past 5-9: the next poll returns them."""
    topic = "pipelining-twisted-cancel-after-records"
    _create(shared_broker, topic, partitions=2)
    _produce(shared_broker, topic, range(5))
    consumer = TwistedConsumer(reactor, shared_broker.bootstrap, auto_offset_reset="earliest",
                               fetch_max_wait_ms=LONG_POLL_MS)
    try:
        await consumer.assign_topics([topic])
        consumer.pause((topic, 1))
        messages: list[Message] = []
        while len(messages) < 5:
            messages += await consumer.poll()
        assert _values(messages) == list(range(5))  # a fetch of partition 0 alone is parked
        consumer.resume((topic, 1))
        _produce(shared_broker, topic, range(5, 10))  # the parked fetch is answered
        polling = consumer.poll()
        await deferLater(reactor, 0.5, lambda: None)  # partition 1's fetch waits at the broker
        polling.cancel()
        with pytest.raises(CancelledError):
            await polling
        messages = []
        for _ in range(5):
            messages += await consumer.poll()
            if len(messages) >= 5:
                break
        assert _values(messages) == list(range(5, 10))
    finally:
        await consumer.close()
