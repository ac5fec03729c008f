"""Exponential backoff with jitter, shared by retries, reconnects and metadata refreshes."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

#: Jitter spreads retries of many clients apart (+/- this fraction of the delay).
_JITTER_FRACTION = 0.2


@dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """Delay before attempt ``n``: ``initial_ms * 2**(n-1)``, capped at ``max_ms``, jittered."""

    initial_ms: int = 100
    max_ms: int = 1000

    def delay_ms(self, attempt: int, rng: random.Random) -> int:
        """Milliseconds to wait before retry number ``attempt`` (1 for the first retry)."""
        assert attempt >= 1, attempt
        base = min(self.max_ms, self.initial_ms * (1 << min(attempt - 1, 30)))
        jitter = base * _JITTER_FRACTION
        return max(0, round(base + rng.uniform(-jitter, jitter)))

    def retry_policy(self, rng: random.Random) -> Callable[[int], float]:
        """This backoff as a Twisted ``ClientService`` retry policy: seconds before reconnect attempt ``n``."""
        return lambda attempt: self.delay_ms(attempt, rng) / 1000


#: How the broker redials its peers (Raft voters, forwarding peers, partition leaders): the first retry soon, so a
#: restarted peer is found within a fraction of a second, and never more than a second apart. (Twisted's default
#: jitter adds up to a whole second more to every wait.)
PEER_RECONNECT = Backoff(initial_ms=50, max_ms=1000)
