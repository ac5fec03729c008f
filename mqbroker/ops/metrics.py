"""Broker metrics for Prometheus: counters read from the broker at scrape time, latency histograms.

Nothing here runs per record: byte and record counters are kept by the broker per batch and
collected when ``/metrics`` is scraped; request latencies are observed once per request.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from mqbroker.records.readable import UnreadableTally
from mqbroker.transactions.stats import COMMIT_LATENCY_BUCKETS_MS, TransactionMetrics

LATENCY_BUCKETS_SECONDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _BrokerCollector(Collector):
    """Reads the broker's counters when Prometheus scrapes."""

    def __init__(self, unreadable: UnreadableTally) -> None:
        self.stats: Any = None
        self.unreadable = unreadable

    def collect(self) -> Iterator[Any]:
        skipped = CounterMetricFamily("mqbroker_unreadable_batches",
                                      "Batches (and stored records) that readers inside the broker could not decode "
                                      "and skipped, by reader and topic (each is logged with its offsets).",
                                      labels=["reader", "topic"])
        for (reader, topic), count in sorted(self.unreadable.counts().items()):
            skipped.add_metric([reader, topic], count)
        yield skipped
        stats = self.stats
        if stats is None:
            return
        yield CounterMetricFamily("mqbroker_produced_bytes", "Bytes of record batches appended.", value=stats.produced_bytes)
        yield CounterMetricFamily("mqbroker_produced_records", "Records appended.", value=stats.produced_records)
        yield CounterMetricFamily("mqbroker_fetched_bytes", "Bytes of record batches served by fetches.", value=stats.fetched_bytes)
        yield GaugeMetricFamily("mqbroker_partitions", "Partitions hosted by this broker.", value=stats.partition_count())
        yield GaugeMetricFamily("mqbroker_log_size_bytes", "Bytes of partition logs on disk.", value=stats.log_size_bytes())
        lag = GaugeMetricFamily("mqbroker_group_lag_records",
                                "Records between a group's committed offset and the high watermark, per partition.",
                                labels=["group", "topic", "partition"])
        for (group_id, topic, partition), records in sorted(stats.group_lags().items()):
            lag.add_metric([group_id, topic, str(partition)], records)
        yield lag
        yield from _share_group_metrics(stats.share_group_metrics())
        yield from _transaction_metrics(stats.transaction_metrics())


def _transaction_metrics(metrics: TransactionMetrics) -> Iterator[Any]:
    """Transactions at the coordinators here (open, carried out, commit latency); LSO lag of led partitions."""
    stats = metrics.stats
    yield GaugeMetricFamily("mqbroker_transactions_open",
                            "Transactions Ongoing or deciding at the transaction coordinators on this broker.",
                            value=metrics.open_transactions)
    yield CounterMetricFamily("mqbroker_transactions_committed",
                              "Transactions whose COMMIT markers every partition took (coordinators here).",
                              value=stats.committed)
    yield CounterMetricFamily("mqbroker_transactions_aborted",
                              "Transactions whose ABORT markers every partition took, timeouts and fencing "
                              "included (coordinators here).", value=stats.aborted)
    buckets, cumulative = [], 0
    for bound_ms, count in zip((*COMMIT_LATENCY_BUCKETS_MS, float("inf")), stats.commit_latency_counts):
        cumulative += count
        buckets.append(("+Inf" if bound_ms == float("inf") else str(bound_ms / 1000), cumulative))
    yield HistogramMetricFamily("mqbroker_transaction_commit_latency_seconds",
                                "From an EndTxn commit's arrival at its coordinator to its answer (decision durable).",
                                buckets=buckets, sum_value=stats.commit_latency_sum_ms / 1000)
    lag = GaugeMetricFamily("mqbroker_partition_stable_lag_records",
                            "High watermark minus last stable offset, per partition led here where an open "
                            "transaction holds read_committed readers back (0 elsewhere, not listed).",
                            labels=["topic", "partition"])
    for (topic, partition), records in sorted(metrics.stable_lag.items()):
        lag.add_metric([topic, str(partition)], records)
    yield lag


def _share_group_metrics(metrics: Any) -> Iterator[Any]:
    """Share groups hosted by this broker: lag and records in flight per partition, dead letters per group."""
    labels = ["group", "topic", "partition"]
    lag = GaugeMetricFamily("mqbroker_share_group_lag_records",
                            "Records of a share partition not yet done (unread, available, leased), scheduled aside.",
                            labels=labels)
    in_flight = GaugeMetricFamily("mqbroker_share_group_in_flight_records",
                                  "Records of a share partition leased to consumers right now.", labels=labels)
    for (group_id, topic, partition), (records, leased) in sorted(metrics.partitions.items()):
        lag.add_metric([group_id, topic, str(partition)], records)
        in_flight.add_metric([group_id, topic, str(partition)], leased)
    dead = CounterMetricFamily("mqbroker_share_group_dead_lettered_records",
                               "Records a share group sent to its dead-letter topic (or dropped), since its host "
                               "took it over.", labels=["group"])
    for group_id, records in sorted(metrics.dead_lettered.items()):
        dead.add_metric([group_id], records)
    yield from (lag, in_flight, dead)


class LatencySeries:
    """One protocol and API of ``RequestLatency``: a count per bucket (not cumulative) and the sum."""

    __slots__ = ("counts", "sum_seconds")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_SECONDS) + 1)  # the last: above every bound (+Inf)
        self.sum_seconds = 0.0

    def observe(self, seconds: float) -> None:
        """Count one request that took ``seconds``."""
        self.counts[bisect_left(LATENCY_BUCKETS_SECONDS, seconds)] += 1  # the first bound >= seconds ("le")
        self.sum_seconds += seconds


class RequestLatency(Collector):
    """``mqbroker_request_latency_seconds`` by protocol and API, observed on the reactor thread once per request.

    Exported as a histogram, as a prometheus_client ``Histogram`` would be (without its ``_created`` samples), but
    an observation is a bisect and two additions: the ``Histogram``'s took eight calls and two lock round trips.
    """

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], LatencySeries] = {}

    def labels(self, protocol: str, api: str) -> LatencySeries:
        """The series of one protocol and API (kept: look it up once per API, not per request)."""
        series = self._series.get((protocol, api))
        if series is None:
            series = self._series[protocol, api] = LatencySeries()
        return series

    def collect(self) -> Iterator[Any]:
        family = HistogramMetricFamily("mqbroker_request_latency_seconds",
                                       "Time from a request's arrival to its reply being queued, by protocol and API.",
                                       labels=["protocol", "api"])
        bounds = [*map(floatToGoString, LATENCY_BUCKETS_SECONDS), "+Inf"]
        for (protocol, api), series in self._series.items():  # first observed first, as prometheus_client lists them
            buckets, cumulative = [], 0
            for bound, count in zip(bounds, series.counts):
                cumulative += count
                buckets.append((bound, cumulative))
            family.add_metric([protocol, api], buckets, series.sum_seconds)
        yield family


class BrokerMetrics:
    """The broker's metric registry and the instruments front ends update."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        #: Batches the broker's own readers skipped (front ends, group coordinator), shared by all of them.
        self.unreadable = UnreadableTally()
        self._collector = _BrokerCollector(self.unreadable)
        self.registry.register(self._collector)
        self.request_latency = RequestLatency()
        self.registry.register(self.request_latency)
        self.connections = Gauge(
            "mqbroker_connections", "Open client connections, by protocol.", ["protocol"], registry=self.registry
        )
        self.unroutable = Counter(
            "mqbroker_unroutable_messages",
            "Messages clients published that reached no queue, by protocol and outcome "
            "(returned: an AMQP mandatory publish sent back with NO_ROUTE; dropped: discarded, as RabbitMQ does).",
            ["protocol", "outcome"], registry=self.registry,
        )

    def attach(self, stats: Any) -> None:
        """Start collecting the broker's counters (its ``BrokerStats``)."""
        self._collector.stats = stats
