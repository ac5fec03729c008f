"""The dead-letter helper: retries with backoff, then parks the message with its origin."""

from __future__ import annotations

import random

from mqbroker.client.consumer import Message
from mqbroker.client.dead_letter import DeadLetterHandler


class _Sent:
    def result(self, timeout: float | None = None) -> object:
        return None


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, list[tuple[str, bytes | None]]]] = []

    def send(self, topic: str, value: bytes | None = None, key: bytes | None = None,
             headers: list[tuple[str, bytes | None]] | None = None) -> _Sent:
        self.sent.append((topic, value, headers or []))
        return _Sent()


MESSAGE = Message("orders", 3, 17, b"k", b"poison", (), 0)


def test_poison_message_is_dead_lettered_after_n_attempts_with_headers() -> None:
    calls: list[Message] = []
    sleeps: list[float] = []

    def handler(message: Message) -> None:
        calls.append(message)
        raise ValueError("cannot parse")

    producer = _Producer()
    wrapped = DeadLetterHandler(handler, producer=producer, dead_letter_topic="orders.dlq", attempts_max=3,
                                sleep=sleeps.append, rng=random.Random(1))
    wrapped(MESSAGE)
    assert len(calls) == 3 and len(sleeps) == 2 and sleeps[1] > sleeps[0]
    topic, value, headers = producer.sent[0]
    assert (topic, value) == ("orders.dlq", b"poison")
    assert dict(headers) == {"dlq.error": b"ValueError: cannot parse", "dlq.attempts": b"3",
                             "dlq.origin.topic": b"orders", "dlq.origin.partition": b"3",
                             "dlq.origin.offset": b"17"}


def test_handler_that_recovers_is_not_dead_lettered() -> None:
    failures = [ValueError("transient")]

    def handler(message: Message) -> None:
        if failures:
            raise failures.pop()

    producer = _Producer()
    DeadLetterHandler(handler, producer=producer, dead_letter_topic="dlq", sleep=lambda s: None)(MESSAGE)
    assert producer.sent == []
