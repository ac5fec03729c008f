"""What an AMQP share queue learns from its share group and its log: ready messages, how many records a TTL ended,
and which records may have been delivered by a group host that died."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from mqbroker import errors
from mqbroker.interfaces import IBroker
from mqbroker.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, Principal
from mqbroker.shares.messages import SharePartitionDescription
from mqbroker.shares.partition_values import AcquiredRange

#: ``LostLeaseSuspects.below`` while the log's end is being found: every offset.
EVERY_OFFSET = 2**63


async def _partitions(broker: IBroker, principal: Principal, group_id: str) -> tuple[SharePartitionDescription, ...]:
    try:
        return (await broker.describe_share_group(principal, group_id)).partitions
    except errors.GroupIdNotFoundError:
        return ()


async def ready_messages(broker: IBroker, principal: Principal, group_id: str, topic: str) -> int:
    """Records available in the group's region plus the log it has not read yet (the whole log before it reads)."""
    partitions = await _partitions(broker, principal, group_id)
    log_end = (await broker.list_offset(principal, topic, 0, LATEST_TIMESTAMP)).offset
    if partitions:
        return sum(partition.stats.available + max(0, log_end - partition.stats.end_offset) for partition in partitions)
    log_start = (await broker.list_offset(principal, topic, 0, EARLIEST_TIMESTAMP)).offset
    return max(0, log_end - log_start)


async def records_past_ttl(broker: IBroker, principal: Principal, group_id: str, topic: str, cutoff_ms: int) -> int:
    """How many records from the group's region start on were stored before ``cutoff_ms`` (0 when there are none, or
    when all of them are read and held by consumers: those expire when they are delivered)."""
    found = (await broker.list_offset(principal, topic, 0, cutoff_ms)).offset
    if found < 0:  # every record is older than the cut
        found = (await broker.list_offset(principal, topic, 0, LATEST_TIMESTAMP)).offset
    partitions = await _partitions(broker, principal, group_id)
    start = min((partition.stats.start_offset for partition in partitions), default=0)
    if any(not partition.stats.available and partition.stats.end_offset >= found for partition in partitions):
        return 0
    return max(0, found - start)


class LostLeaseSuspects:
    """Records a share group's host may have leased before it died (leases are not stored, nor are delivery counts
    written at once): once a call to the group fails, every record below the log's end at that moment is delivered
    flagged redelivered on its first delivery here (AMQP's "may have been delivered before")."""

    def __init__(self, reactor: IReactorTime, find_log_end: Callable[[], Deferred[Any]]) -> None:
        """``find_log_end()`` fires with the log's end (an object with ``offset``)."""
        self._reactor = reactor
        self._find_log_end = find_log_end
        self.below = 0
        self._lost_calls = 0
        self._resolving = False
        self.stopped = False

    def redelivered(self, offset: int, delivery_count: int) -> bool:
        """Whether a record acquired for the ``delivery_count``-th time may have been delivered before."""
        return delivery_count > 1 or offset < self.below

    def redelivered_offsets(self, ranges: Iterable[AcquiredRange]) -> set[int]:
        """The offsets of ``ranges`` (acquired together) that ``redelivered`` flags, by range, not one by one."""
        flagged: set[int] = set()
        for acquired in ranges:
            if acquired.delivery_count > 1:
                flagged.update(range(acquired.first, acquired.last + 1))
            elif acquired.first < self.below:
                flagged.update(range(acquired.first, min(acquired.last + 1, self.below)))
        return flagged

    def call_lost(self) -> None:
        """A call to the group failed: every record is suspect until the log's end is known."""
        self.below = EVERY_OFFSET
        self._lost_calls += 1
        self._resolve()

    def _resolve(self) -> None:
        if self._resolving or self.stopped:
            return
        self._resolving = True
        generation = self._lost_calls

        def resolved(at: Any) -> None:
            self._resolving = False
            if generation == self._lost_calls:
                self.below = at.offset
            else:  # another call failed meanwhile: its suspects may lie past that end
                self._resolve()

        def failed(_: Any) -> None:
            self._resolving = False
            self._reactor.callLater(1.0, self._resolve)

        self._find_log_end().addCallbacks(resolved, failed)
