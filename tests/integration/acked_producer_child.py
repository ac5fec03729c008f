"""Child process for the kill -9 test: produce numbered values with acks=all, record each ack.

Usage: python -m tests.integration.acked_producer_child BOOTSTRAP TOPIC COUNT RATE ACK_FILE

Values are the decimal numbers 0..COUNT-1, sent at about RATE per second. Every value whose send was acknowledged is written
to ACK_FILE (one per line, flushed at once), so the parent knows exactly what was promised.
The producer keeps retrying while the broker is down (idempotence removes duplicates).
"""

from __future__ import annotations

import sys
import time

from mqbroker.client import Producer


def main(bootstrap: str, topic: str, count: int, rate: int, ack_path: str) -> None:
    """Send ``count`` values, appending each acknowledged one to ``ack_path``."""
    with open(ack_path, "a", buffering=1) as acks, Producer(
        bootstrap, acks="all", linger_ms=2, batch_size=16 * 1024, delivery_timeout_ms=120_000
    ) as producer:
        window = []
        started = time.monotonic()
        for value in range(count):
            delay = started + value / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            window.append((value, producer.send(topic, str(value).encode(), partition=0)))
            if len(window) >= 200:
                _record(window, acks)
        producer.flush()
        _record(window, acks)


def _record(window: list, acks) -> None:  # type: ignore[no-untyped-def]
    for value, future in window:
        future.result(timeout=150)
        acks.write(f"{value}\n")
    window.clear()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
