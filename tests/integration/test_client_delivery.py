"""Delivery callbacks, flush(timeout) and close(timeout) of the producers, and close(timeout) of the
consumers, against real brokers (one that answers, one that was killed)."""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import pytest_twisted
from twisted.internet import reactor

from mqbroker.client import Admin, Consumer, Producer, RecordFuture, RecordMetadata
from mqbroker.client.twisted import TwistedConsumer, TwistedProducer
from mqbroker.errors import BrokerError, MessageTooLargeError, RequestTimedOutError
from tests.integration.brokerprocess import BrokerProcess, running

#: Larger than the broker's default max.message.bytes (1 MiB): refused, and not retried.
TOO_LARGE = b"x" * (2 * 1024 * 1024)


@dataclass(frozen=True)
class Report:
    """One delivery callback call: the thread it ran on and what it was told."""

    thread: str
    error: BrokerError | None
    metadata: RecordMetadata | None


class Reports:
    """Collects delivery reports from whatever thread calls them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reports: list[Report] = []

    def __call__(self, error: BrokerError | None, metadata: RecordMetadata | None) -> None:
        with self._lock:
            self.reports.append(Report(threading.current_thread().name, error, metadata))

    def wait_for(self, count: int, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.reports) < count and time.monotonic() < deadline:
            time.sleep(0.01)


@pytest.fixture
def killed_broker(tmp_path: pathlib.Path) -> Iterator[BrokerProcess]:
    """A broker the test kills (after its clients learned the cluster)."""
    yield from running(BrokerProcess(data_dir=tmp_path / "data"))


def test_on_delivery_reports_every_written_record_once_on_the_io_thread(shared_broker: BrokerProcess) -> None:
    reports = Reports()
    with Producer(shared_broker.bootstrap, acks="all") as producer:
        for number in range(500):
            producer.send("delivered", value=b"%d" % number, partition=0, on_delivery=reports)
        assert producer.flush() == 0
        assert producer.poll(1.0) == 0  # immediate mode: nothing ever waits for poll()
    assert len(reports.reports) == 500
    assert {report.thread for report in reports.reports} == {"mqbroker-producer-io"}
    assert all(report.error is None for report in reports.reports)
    assert sorted(report.metadata.offset for report in reports.reports if report.metadata) == list(range(500))


def test_on_delivery_reports_a_refused_record_once_with_its_typed_error(shared_broker: BrokerProcess) -> None:
    reports = Reports()
    with Producer(shared_broker.bootstrap, acks=1) as producer:
        refused = producer.send("refused", value=TOO_LARGE, on_delivery=reports)
        producer.send("refused", value=b"small", on_delivery=reports)
        assert producer.flush(30) == 0
    assert sorted(type(report.error).__name__ for report in reports.reports) == ["MessageTooLargeError", "NoneType"]
    [failed] = [report for report in reports.reports if report.error is not None]
    assert failed.metadata is None and failed.thread == "mqbroker-producer-io"
    assert isinstance(refused.exception(0), MessageTooLargeError)
    counts = producer.delivery_counts()
    assert (counts.acknowledged, counts.failed) == (1, 1) and isinstance(counts.first_error, MessageTooLargeError)


def test_a_done_callback_added_after_delivery_runs_at_once_in_the_callers_thread(shared_broker: BrokerProcess) -> None:
    seen: list[tuple[str, RecordFuture]] = []
    with Producer(shared_broker.bootstrap) as producer:
        future = producer.send("late-callback", value=b"v")
        future.result(10)
        future.add_done_callback(lambda done: seen.append((threading.current_thread().name, done)))
    assert seen == [(threading.current_thread().name, future)]


def test_poll_mode_runs_callbacks_only_when_the_application_polls_in_its_own_thread(
    shared_broker: BrokerProcess,
) -> None:
    reports = Reports()
    with Producer(shared_broker.bootstrap, acks=1, delivery_callbacks="poll") as producer:
        futures = [producer.send("polled", value=b"%d" % number, on_delivery=reports) for number in range(50)]
        refused = producer.send("polled", value=TOO_LARGE, on_delivery=reports)
        for future in futures:
            future.result(10)
        refused.exception(10)
        assert reports.reports == []  # written and refused, but nobody polled yet
        assert producer.poll(5.0) == 51
        assert producer.poll(0.05) == 0
    assert {report.thread for report in reports.reports} == {threading.current_thread().name}
    assert [report.error for report in reports.reports].count(None) == 50
    assert sum(isinstance(report.error, MessageTooLargeError) for report in reports.reports) == 1


def test_flush_in_poll_mode_returns_zero_only_once_every_callback_has_run(shared_broker: BrokerProcess) -> None:
    reports = Reports()
    with Producer(shared_broker.bootstrap, acks="all", delivery_callbacks="poll") as producer:
        for number in range(2000):
            producer.send("flushed", value=b"%d" % number, on_delivery=reports)
        assert producer.flush() == 0
        assert len(reports.reports) == 2000
        assert {report.thread for report in reports.reports} == {threading.current_thread().name}


def test_flush_and_close_from_a_callback_on_the_io_thread_are_refused(shared_broker: BrokerProcess) -> None:
    refusals: list[str] = []

    def flush_inside(error: BrokerError | None, metadata: RecordMetadata | None) -> None:
        for call in (producer.flush, producer.close):
            try:
                call()
            except RuntimeError as refusal:
                refusals.append(str(refusal))

    with Producer(shared_broker.bootstrap) as producer:
        producer.send("reentrant", value=b"v", on_delivery=flush_inside)
        assert producer.flush(10) == 0
    assert len(refusals) == 2 and all("delivery_callbacks='poll'" in refusal for refusal in refusals)


def test_flush_timeout_counts_unfinished_records_and_close_fails_them_with_one_report_each(
    killed_broker: BrokerProcess,
) -> None:
    with Admin(killed_broker.bootstrap) as admin:
        admin.create_topics(["stranded"], partitions=1)
    reports = Reports()
    producer = Producer(killed_broker.bootstrap, acks=1)
    producer.send("stranded", value=b"before").result(10)  # the producer knows the topic's leader
    killed_broker.kill()
    futures = [producer.send("stranded", value=b"%d" % number, on_delivery=reports) for number in range(10)]
    started = time.monotonic()
    assert producer.flush(timeout=0.5) == 10
    assert time.monotonic() - started < 5
    producer.close(timeout=0.5)
    reports.wait_for(10)
    assert len(reports.reports) == 10
    assert all(isinstance(report.error, RequestTimedOutError) for report in reports.reports)
    assert all(isinstance(future.exception(0), RequestTimedOutError) for future in futures)


def test_blocking_consumer_close_gives_up_on_a_dead_coordinator_at_its_timeout(killed_broker: BrokerProcess) -> None:
    with Admin(killed_broker.bootstrap) as admin:
        admin.create_topics(["abandoned"], partitions=1)
    with Producer(killed_broker.bootstrap) as producer:
        producer.send("abandoned", value=b"v").result(10)
    consumer = Consumer(killed_broker.bootstrap, group_id="abandoning", topics=["abandoned"],
                        auto_offset_reset="earliest", enable_auto_commit=True)
    deadline = time.monotonic() + 30
    while not consumer.poll(0.5) and time.monotonic() < deadline:
        pass
    killed_broker.kill()
    started = time.monotonic()
    consumer.close(timeout=1.0)
    assert time.monotonic() - started < 5


@pytest_twisted.ensureDeferred
async def test_twisted_flush_timeout_counts_unfinished_records_and_close_fails_them(
    killed_broker: BrokerProcess,
) -> None:
    producer = TwistedProducer(reactor, killed_broker.bootstrap, acks=1)
    await producer.send("twisted-stranded", value=b"before")
    killed_broker.kill()
    sends = [producer.send("twisted-stranded", value=b"%d" % number) for number in range(10)]
    outcomes = [send.addErrback(lambda failure: failure.value) for send in sends]
    assert await producer.flush(timeout=0.5) == 10
    await producer.close(timeout=0.5)
    assert all(isinstance(outcome.result, RequestTimedOutError) for outcome in outcomes)


@pytest_twisted.ensureDeferred
async def test_twisted_consumer_close_gives_up_on_a_dead_coordinator_at_its_timeout(
    killed_broker: BrokerProcess,
) -> None:
    producer = TwistedProducer(reactor, killed_broker.bootstrap)
    await producer.send("twisted-abandoned", value=b"v")
    await producer.close()
    consumer = TwistedConsumer(reactor, killed_broker.bootstrap, group_id="twisted-abandoning",
                               topics=["twisted-abandoned"], auto_offset_reset="earliest")
    deadline = time.monotonic() + 30
    while not await consumer.poll() and time.monotonic() < deadline:
        pass
    killed_broker.kill()
    started = time.monotonic()
    await consumer.close(timeout=1.0)
    assert time.monotonic() - started < 5


@pytest_twisted.ensureDeferred
async def test_twisted_send_many_fires_with_every_record_in_order(shared_broker: BrokerProcess) -> None:
    producer = TwistedProducer(reactor, shared_broker.bootstrap, acks="all", batch_size=16_384)
    values = [b"twisted-%05d" % number for number in range(5_000)]
    written = await producer.send_many("twisted-bulk", values, partition=0)
    assert [metadata.offset for metadata in written] == list(range(5_000))
    with pytest.raises(MessageTooLargeError):
        await producer.send_many("twisted-bulk", [TOO_LARGE], partition=0)
    assert (producer.delivery_counts().acknowledged, producer.delivery_counts().failed) == (5_000, 1)
    await producer.close()
    with pytest.raises(ValueError, match="assign_topics"):
        TwistedConsumer(reactor, shared_broker.bootstrap, topics=["twisted-bulk"])  # silently read nothing before
    consumer = TwistedConsumer(reactor, shared_broker.bootstrap, auto_offset_reset="earliest")
    await consumer.assign_topics(["twisted-bulk"])
    received: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(received) < 5_000 and time.monotonic() < deadline:
        received += [message.value for message in await consumer.poll()]
    await consumer.close()
    assert received == values
