"""How share groups reach the logs they read and the dead-letter topics they write: through ``IBroker``.

The host of a share group is the leader of its ``__share_group_state`` partition, which need not
lead the partitions the group reads: reads and dead-letter appends go through the broker the
front ends use (``RoutingBroker``), which serves what this broker leads locally and forwards the
rest to the leaders. The calls run as ``Principal("Service", "shares")``, which the authorizer
treats as the broker's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.internet.defer import Deferred

from mqbroker import limits
from mqbroker.interfaces import IBroker
from mqbroker.model import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    Acks,
    FetchPosition,
    FetchRequest,
    FetchResult,
    Principal,
    ProduceResult,
)

SHARES_PRINCIPAL = Principal("Service", "shares")


class ShareData(Protocol):
    """What share groups need of the data plane."""

    def read(self, topic: str, partition: int, offset: int, bytes_max: int, wait_ms: int) -> Deferred[FetchResult]:
        """Whole batches from ``offset`` (long-poll up to ``wait_ms`` for data); errors come in the result."""

    def append(self, topic: str, partition: int, records: bytes) -> Deferred[ProduceResult]:
        """Append one batch with acks=all (creating the topic when the broker auto-creates topics)."""

    def log_offset(self, topic: str, partition: int, earliest: bool) -> Deferred[int]:
        """The partition's log start (``earliest``) or end offset."""

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (0: it does not exist)."""


class BrokerShareData:
    """``ShareData`` over an ``IBroker`` and the cluster's metadata."""

    def __init__(self, broker: IBroker, partition_count: Callable[[str], int]) -> None:
        self._broker = broker
        self._partition_count = partition_count

    def read(self, topic: str, partition: int, offset: int, bytes_max: int, wait_ms: int) -> Deferred[FetchResult]:
        """See ``ShareData.read``."""
        position = FetchPosition(topic=topic, partition=partition, offset=offset, max_bytes=bytes_max)
        request = FetchRequest(positions=(position,), wait_ms_max=wait_ms, response_bytes_max=bytes_max)
        fetched = self._broker.fetch(SHARES_PRINCIPAL, request)
        return fetched.addCallback(lambda results: results[0])

    def append(self, topic: str, partition: int, records: bytes) -> Deferred[ProduceResult]:
        """See ``ShareData.append`` (acks=all: a dead letter is done only once its copy is on every in-sync
        replica)."""
        return self._broker.produce(SHARES_PRINCIPAL, topic, partition, records, Acks.ALL,
                                    limits.produce_timeout_ms_default)

    def log_offset(self, topic: str, partition: int, earliest: bool) -> Deferred[int]:
        """See ``ShareData.log_offset``."""
        found = self._broker.list_offset(SHARES_PRINCIPAL, topic, partition,
                                         EARLIEST_TIMESTAMP if earliest else LATEST_TIMESTAMP)
        return found.addCallback(lambda offset_and_time: offset_and_time.offset)

    def partition_count(self, topic: str) -> int:
        """See ``ShareData.partition_count``."""
        return self._partition_count(topic)
