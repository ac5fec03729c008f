"""Retry delays grow exponentially, are capped, and are jittered within bounds."""

import random

from mqbroker.client.backoff import PEER_RECONNECT, Backoff


def test_delays_double_until_the_cap() -> None:
    backoff = Backoff(initial_ms=100, max_ms=1000)
    rng = random.Random(0)
    delays = [backoff.delay_ms(attempt, rng) for attempt in range(1, 8)]
    for attempt, delay in enumerate(delays, start=1):
        base = min(1000, 100 * 2 ** (attempt - 1))
        assert 0.8 * base <= delay <= 1.2 * base


def test_huge_attempt_numbers_stay_capped() -> None:
    assert Backoff(initial_ms=10, max_ms=50).delay_ms(10_000, random.Random(0)) <= 60


def test_the_peer_reconnect_policy_redials_within_its_bounds_in_seconds() -> None:
    policy = PEER_RECONNECT.retry_policy(random.Random(7))
    first = [policy(1) for _ in range(1000)]
    assert 0.04 <= min(first) and max(first) <= 0.06  # Twisted's default jitter would add up to a whole second
    assert all(policy(attempt) <= 1.2 for attempt in range(1, 200))
