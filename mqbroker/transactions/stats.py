# -*- test-case-name: tests.unit.transactions.test_stats -*-
"""What one broker's transaction coordinators did (metrics): decisions carried out, commit latency, kept across failovers."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

#: Upper bounds of the commit latency buckets (EndTxn commit received -> answered), Prometheus-style.
COMMIT_LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 250, 500, 1_000, 5_000, 30_000)


@dataclass(slots=True)
class TransactionStats:
    """Counters the services of one broker share; read when ``/metrics`` is scraped."""

    #: Transactions whose COMMIT / ABORT markers every partition took (a timeout's abort counts too).
    committed: int = 0
    aborted: int = 0
    #: Commits answered, per bucket of ``COMMIT_LATENCY_BUCKETS_MS`` (the last: slower than every bound).
    commit_latency_counts: list[int] = field(default_factory=lambda: [0] * (len(COMMIT_LATENCY_BUCKETS_MS) + 1))
    commit_latency_sum_ms: float = 0.0

    def decided(self, committed: bool) -> None:
        """A decision's markers are all written."""
        if committed:
            self.committed += 1
        else:
            self.aborted += 1

    def commit_answered(self, latency_ms: float) -> None:
        """An EndTxn commit was answered ``latency_ms`` after it arrived (its decision durable)."""
        self.commit_latency_counts[bisect.bisect_left(COMMIT_LATENCY_BUCKETS_MS, latency_ms)] += 1
        self.commit_latency_sum_ms += latency_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionMetrics:
    """A snapshot for ``/metrics``: the stats, transactions open now, and the LSO lag of partitions led here."""

    stats: TransactionStats
    #: Transactions Ongoing or deciding at the coordinators on this broker.
    open_transactions: int
    #: (topic, partition) -> high watermark minus last stable offset, for led partitions where it is not 0.
    stable_lag: dict[tuple[str, int], int]
