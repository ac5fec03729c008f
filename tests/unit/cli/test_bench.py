"""``mqbroker bench`` counts only acknowledged sends, and a lost message is a failure, not a missing sample."""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import Future
from typing import Any

from mqbroker.cli.bench import SendOutcomes, outcomes_between, percentiles_ms, produce_acknowledged
from mqbroker.client.producer_batch import DeliveryCounts
from mqbroker.errors import MessageTooLargeError


def _settled() -> Future[Any]:
    future: Future[Any] = Future()
    future.set_result("metadata")
    return future


class RefusingEveryThirdProducer:
    """Its third, sixth, ... record fails; ``flush`` settles every send, counted as the real producer does."""

    def __init__(self) -> None:
        self.sends = 0
        self.flushed = False
        self.counts = DeliveryCounts()

    def delivery_counts(self) -> DeliveryCounts:
        return dataclasses.replace(self.counts)

    def _settle(self, records: int) -> None:
        for _ in range(records):
            self.sends += 1
            if self.sends % 3:
                self.counts.acknowledged += 1
            else:
                self.counts.failed += 1
                self.counts.first_error = self.counts.first_error or MessageTooLargeError("too large")

    def send(self, topic: str, value: bytes) -> Future[Any]:
        self._settle(1)
        return _settled()

    def send_many(self, topic: str, values: list[bytes]) -> Future[Any]:
        self._settle(len(values))
        return _settled()

    def flush(self) -> None:
        self.flushed = True


def test_only_acknowledged_sends_are_counted_and_failures_are_named() -> None:
    producer = RefusingEveryThirdProducer()
    producer.counts.acknowledged, producer.counts.failed = 5, 0  # an earlier run of the same producer
    outcomes = produce_acknowledged(producer, "t", b"v", 10)
    assert producer.flushed and producer.sends == 10
    assert (outcomes.acknowledged, outcomes.failed) == (7, 3)
    assert outcomes.first_error == "MessageTooLargeError: too large"


def test_send_many_runs_count_every_record_of_every_call() -> None:
    producer = RefusingEveryThirdProducer()
    samples: list[int] = []
    outcomes = produce_acknowledged(producer, "t", b"v", 25, lambda index, future: samples.append(index),
                                    values_per_call=10)
    assert producer.sends == 25 and samples == [0]
    assert (outcomes.acknowledged, outcomes.failed) == (17, 8)


def test_percentiles_count_lost_messages_as_infinitely_late() -> None:
    samples = [0.001] * 98
    assert percentiles_ms(samples)["p99"] == 1.0  # over survivors only this would look fine
    lost = percentiles_ms(samples, total=100)
    assert lost["p50"] == 1.0 and lost["p99"] is None and lost["max"] is None
    assert percentiles_ms(samples + [0.002, 0.003], total=100)["max"] == 3.0


def test_outcomes_between_two_counts_name_the_error_only_when_a_record_failed() -> None:
    error = MessageTooLargeError("too large")
    earlier = DeliveryCounts(acknowledged=4, failed=1, first_error=error)
    assert outcomes_between(earlier, DeliveryCounts(9, 1, error), 2.0) == SendOutcomes(2.0, 5, 0, None)
    assert outcomes_between(earlier, DeliveryCounts(9, 3, error), 2.0).first_error == "MessageTooLargeError: too large"


def test_the_process_cpu_of_the_sends_and_the_flush_is_counted() -> None:
    producer = RefusingEveryThirdProducer()
    settle = producer.flush

    def flush_with_work() -> None:  # the I/O a real flush waits for costs CPU too: 20 ms of it here
        started = time.process_time()
        while time.process_time() - started < 0.02:
            pass
        settle()

    producer.flush = flush_with_work  # type: ignore[method-assign]
    outcomes = produce_acknowledged(producer, "t", b"v", 10)
    assert 0.02 <= outcomes.cpu_seconds <= outcomes.seconds + 0.01
