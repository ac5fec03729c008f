"""Dead-letter handling for poison messages: retry a failing handler, then park the message.

Opt-in: wrap the application's handler in ``DeadLetterHandler`` and call the wrapper for each
message. A failing handler is retried with exponential backoff; after ``attempts_max`` failed
attempts the message goes to the dead-letter topic with its error, attempt count and origin in
headers, and the wrapper returns so the partition keeps flowing. The dead-letter write is
acknowledged before the wrapper returns, so committing afterwards never loses the message.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Protocol

from mqbroker.client.backoff import Backoff
from mqbroker.client.consumer import Message
from mqbroker.records.dead_letters import (  # noqa: F401  (the header names, re-exported for applications)
    HEADER_ATTEMPTS,
    HEADER_ERROR,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_TOPIC,
    dead_letter_headers,
)


class _Delivery(Protocol):
    def result(self, timeout: float | None = None) -> object: ...


class DeadLetterProducer(Protocol):
    """The part of ``Producer`` the helper needs."""

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> _Delivery: ...


class DeadLetterHandler:
    """Calls ``handler(message)``; retries failures, then sends the message to ``dead_letter_topic``."""

    def __init__(
        self,
        handler: Callable[[Message], None],
        *,
        producer: DeadLetterProducer,
        dead_letter_topic: str,
        attempts_max: int = 3,
        backoff: Backoff = Backoff(initial_ms=100, max_ms=5_000),
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if attempts_max < 1:
            raise ValueError(f"attempts_max must be at least 1, got {attempts_max}")
        self.handler = handler
        self.producer = producer
        self.dead_letter_topic = dead_letter_topic
        self.attempts_max = attempts_max
        self.backoff = backoff
        self.sleep = sleep
        self.rng = rng if rng is not None else random.Random()
        self.dead_lettered = 0

    def __call__(self, message: Message) -> None:
        """Handle ``message``: succeed within ``attempts_max`` attempts, or dead-letter it."""
        for attempt in range(1, self.attempts_max + 1):
            try:
                self.handler(message)
                return
            except Exception as error:  # any handler failure is the poison we are here to contain
                if attempt == self.attempts_max:
                    self._dead_letter(message, error, attempt)
                    return
                self.sleep(self.backoff.delay_ms(attempt, self.rng) / 1000)

    def _dead_letter(self, message: Message, error: Exception, attempts: int) -> None:
        headers = list(message.headers) + dead_letter_headers(
            topic=message.topic, partition=message.partition, offset=message.offset, attempts=attempts,
            error=f"{type(error).__name__}: {error}",
        )
        self.producer.send(self.dead_letter_topic, message.value, key=message.key, headers=headers).result()
        self.dead_lettered += 1
