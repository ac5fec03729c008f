"""``mqbroker bench`` counts only acknowledged sends, and a lost message is a failure, not a missing sample."""

from __future__ import annotations

import gc
from concurrent.futures import Future
from typing import Any

from mqbroker.cli.bench import count_outcomes, percentiles_ms, produce_acknowledged
from mqbroker.errors import MessageTooLargeError


def _future(error: Exception | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is None:
        future.set_result("metadata")
    else:
        future.set_exception(error)
    return future


class RefusingEveryThirdProducer:
    """Its third, sixth, ... send fails; ``flush`` finds every future settled."""

    def __init__(self) -> None:
        self.sends = 0
        self.flushed = False
        self.collected_while_sending = False

    def send(self, topic: str, value: bytes) -> Future[Any]:
        self.sends += 1
        self.collected_while_sending |= gc.isenabled()
        return _future(MessageTooLargeError("too large") if self.sends % 3 == 0 else None)

    def flush(self) -> None:
        self.flushed = True


def test_only_acknowledged_sends_are_counted_and_failures_are_named() -> None:
    producer = RefusingEveryThirdProducer()
    outcomes = produce_acknowledged(producer, "t", b"v", 10)
    assert producer.flushed and producer.sends == 10
    assert (outcomes.acknowledged, outcomes.failed) == (7, 3)
    assert outcomes.first_error == "MessageTooLargeError: too large"
    assert not producer.collected_while_sending and gc.isenabled()


def test_outcomes_of_no_sends_are_zero() -> None:
    assert count_outcomes([]) == (0, 0, None)


def test_percentiles_count_lost_messages_as_infinitely_late() -> None:
    samples = [0.001] * 98
    assert percentiles_ms(samples)["p99"] == 1.0  # over survivors only this would look fine
    lost = percentiles_ms(samples, total=100)
    assert lost["p50"] == 1.0 and lost["p99"] is None and lost["max"] is None
    assert percentiles_ms(samples + [0.002, 0.003], total=100)["max"] == 3.0


class BulkProducer:
    """``send_many`` futures whose records of every second call fail."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def send_many(self, topic: str, values: list[bytes]) -> Any:
        self.calls.append(len(values))
        failing = len(self.calls) % 2 == 0
        return BulkFuture(len(values), MessageTooLargeError("too large") if failing else None)

    def flush(self) -> None:
        pass


class BulkFuture:
    def __init__(self, count: int, error: Exception | None) -> None:
        self.count, self.error = count, error

    def counts(self, timeout: float) -> tuple[int, int]:
        return (0, self.count) if self.error else (self.count, 0)

    def exception(self, timeout: float) -> Exception | None:
        return self.error


def test_send_many_runs_count_every_record_of_every_call() -> None:
    producer = BulkProducer()
    outcomes = produce_acknowledged(producer, "t", b"v", 25, values_per_call=10)
    assert producer.calls == [10, 10, 5]
    assert (outcomes.acknowledged, outcomes.failed) == (15, 10)
    assert outcomes.first_error == "MessageTooLargeError: too large"
