"""The broker's counters and gauges, read at scrape time by the metrics collector and the admin API's counters."""

from __future__ import annotations

from mqbroker.core.fetch import FetchService
from mqbroker.core.produce import ProduceService
from mqbroker.core.transactions import TransactionRequests
from mqbroker.groups.hosting import GroupHosting
from mqbroker.interfaces import IClusterView
from mqbroker.shares import messages as share_messages
from mqbroker.shares.hosting import ShareHosting
from mqbroker.storage.manager import LogManager
from mqbroker.transactions.stats import TransactionMetrics


class BrokerStats:
    """Produce and fetch counters, hosted partitions and log bytes, group lags, share-group and transaction figures."""

    def __init__(self, *, node_id: int, cluster: IClusterView, logs: LogManager, produce: ProduceService,
                 fetch: FetchService, groups: GroupHosting, shares: ShareHosting,
                 transactions: TransactionRequests) -> None:
        self._node_id = node_id
        self._cluster = cluster
        self._logs = logs
        self._produce = produce
        self._fetch = fetch
        self._groups = groups
        self._shares = shares
        self._transactions = transactions

    @property
    def produced_bytes(self) -> int:
        """Bytes of record batches appended for clients."""
        return self._produce.produced_bytes

    @property
    def produced_records(self) -> int:
        """Records appended for clients."""
        return self._produce.produced_records

    @property
    def fetched_bytes(self) -> int:
        """Bytes of record batches served to consumers."""
        return self._fetch.fetched_bytes

    def partition_count(self) -> int:
        """Partitions this broker hosts."""
        return len(self._cluster.image.partitions_hosted(self._node_id))

    def log_size_bytes(self) -> int:
        """Bytes of all partition logs on disk."""
        return sum(p.size_bytes for p in self._logs.logs())

    def group_lags(self) -> dict[tuple[str, str, int], int]:
        """Lag per (group, topic, partition) with a committed offset: high watermark minus committed."""
        return self._groups.group_lags()

    def share_group_metrics(self) -> share_messages.ShareMetrics:
        """Lag and leased records per share partition, dead letters per share group, of the groups hosted here."""
        return self._shares.metrics()

    def transaction_metrics(self) -> TransactionMetrics:
        """Transactions open, decided and their commit latency here; LSO lag per led partition (metrics)."""
        return self._transactions.metrics()
