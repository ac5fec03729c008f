"""The transaction stats a broker's coordinators share: decisions counted, commit latencies bucketed."""

from __future__ import annotations

from mqbroker.transactions.stats import COMMIT_LATENCY_BUCKETS_MS, TransactionStats


def test_decisions_are_counted_by_outcome() -> None:
    stats = TransactionStats()
    for committed in (True, True, False):
        stats.decided(committed)
    assert (stats.committed, stats.aborted) == (2, 1)


def test_a_commit_latency_lands_in_the_first_bucket_at_or_above_it_and_the_slowest_past_every_bound() -> None:
    stats = TransactionStats()
    for latency_ms in (0.3, 1.0, 1.5, 20.0, 60_000.0):
        stats.commit_answered(latency_ms)
    counts = dict(zip((*COMMIT_LATENCY_BUCKETS_MS, "inf"), stats.commit_latency_counts))
    assert (counts[1], counts[2], counts[20], counts["inf"]) == (2, 1, 1, 1)
    assert sum(stats.commit_latency_counts) == 5
    assert stats.commit_latency_sum_ms == 0.3 + 1.0 + 1.5 + 20.0 + 60_000.0
