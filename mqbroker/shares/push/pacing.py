"""How fast a push subscription may go: retry backoff and a rate limit, pure (time comes in, randomness is injected)."""

from __future__ import annotations

import random


def retry_delay_ms(attempt: int, *, initial_ms: int, max_ms: int, rng: random.Random) -> int:
    """Exponential backoff with full jitter: uniform in ``[0, min(max, initial * 2^(attempt - 1))]``."""
    ceiling = min(max_ms, initial_ms * (1 << min(max(attempt - 1, 0), 40)))
    return rng.randint(0, ceiling)


class TokenBucket:
    """At most ``rate_per_second`` takes per second on average, bursting up to one second's worth."""

    def __init__(self, rate_per_second: int, now_ms: int) -> None:
        assert rate_per_second > 0
        self._rate_per_ms = rate_per_second / 1000
        self._capacity = float(rate_per_second)
        self._tokens = self._capacity
        self._updated_ms = now_ms

    def _refill(self, now_ms: int) -> None:
        elapsed = max(0, now_ms - self._updated_ms)
        self._tokens = min(self._capacity, self._tokens + elapsed * self._rate_per_ms)
        self._updated_ms = now_ms

    def available(self, now_ms: int) -> int:
        """Whole tokens that may be taken now."""
        self._refill(now_ms)
        return int(self._tokens)

    def take(self, count: int, now_ms: int) -> None:
        """Spend ``count`` tokens (at most ``available``)."""
        self._refill(now_ms)
        assert count <= self._tokens + 1e-9, (count, self._tokens)
        self._tokens -= count

    def next_token_ms(self, now_ms: int) -> int:
        """When the next whole token is there."""
        self._refill(now_ms)
        missing = max(0.0, 1 - self._tokens)
        return now_ms + int(missing / self._rate_per_ms) + 1
