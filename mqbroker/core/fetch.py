"""Reads (tx-light): consumers' and followers' long-poll fetches, and offset lookups.

A fetch reads whole batches up to the high watermark (a follower's, up to the log end, or it
learns where its log diverged); a read_committed fetch up to the last stable offset, with the
aborted transactions its batches overlap (the reader drops their batches: the broker does no
per-record work; it walks the returned batches' headers only when an aborted transaction is near).
Only broker N itself (``Broker:N``) may fetch as replica N, and only from partitions it is a
replica of; every other fetch stops at the high watermark. One that finds less than ``min_bytes`` waits in
``WaitingFetches`` on the logs it reads: the replica manager wakes it when the high watermark
moves (a consumer) or a batch is appended (a follower), and the clock answers it at
``max_wait_ms`` with whatever is there (one timer for the earliest deadline, not one per fetch: nearly every
fetch of a paced consumer is answered long before it, and arming and cancelling a timer cost every fetch its
share of the reactor's timer heap). ``wait_for_records`` is the same wait without the read (a notice):
it fires once a read from the caller's position would find records, asking that position afresh at
every wake, so a front end that got records another way (its own appends, from memory) is not woken
for them, nor made to read them again.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from mqbroker import errors
from mqbroker.core.guards import broker_error, errors_as_failures, require_permission
from mqbroker.interfaces import IAuthorizer
from mqbroker.limits import fetch_response_bytes_max, fetch_wait_ms_max
from mqbroker.model import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AbortedTransaction,
    FetchPosition,
    FetchRequest,
    FetchResult,
    IsolationLevel,
    OffsetAndTimestamp,
    Operation,
    Principal,
    ResourceType,
)
from mqbroker.records.header import iter_batches
from mqbroker.replication.replica_manager import ReplicaManager, divergence
from mqbroker.security.cluster_principals import ClusterPrincipals
from mqbroker.storage.log import PartitionLog


#: Answered waiters the deadline heap may hold beyond twice the unanswered ones before it is compacted.
_ANSWERED_KEPT_MAX = 1024


class WaitingFetches:
    """Long-poll fetches waiting for data, by the partition logs they read."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._by_log: dict[PartitionLog, set[_Waiter]] = {}
        #: (deadline, arrival, waiter) of waiters, answered ones among them until they reach the top or a
        #: compaction; the timer fires at the earliest deadline of a waiter unanswered when it was armed.
        self._deadlines: list[tuple[float, int, _Waiter]] = []
        self._arrivals = itertools.count()
        self._unanswered = 0
        self._timer: IDelayedCall | None = None

    def wait(
        self, logs: Sequence[PartitionLog], read: Callable[[], list[FetchResult]], min_bytes: int, max_wait_ms: int,
        follower: bool,
    ) -> Deferred[list[FetchResult]]:
        """Fire with ``read()`` once it brings ``min_bytes`` or an error, or at ``max_wait_ms`` with what it brings."""
        wanted = max(min_bytes, 1)

        def answer(final: bool) -> list[FetchResult] | None:
            results = read()
            if final:
                return results
            available = 0
            for result in results:  # a loop, not sum() and any() over generators: every wake of a paced consumer
                if result.error:
                    return results
                available += len(result.records)
            return results if available >= wanted else None

        return self._enqueue(_Waiter(self, logs, answer, follower), max_wait_ms)

    def notice(self, partition_log: PartitionLog, ready: Callable[[], bool], max_wait_ms: int) -> Deferred[bool]:
        """Fire True once ``ready()`` (asked at every wake of ``partition_log``), False at ``max_wait_ms``."""
        def answer(final: bool) -> bool | None:
            return True if ready() else (False if final else None)

        return self._enqueue(_Waiter(self, (partition_log,), answer, follower=False), max_wait_ms)

    def _enqueue(self, pending: _Waiter, max_wait_ms: int) -> Deferred[Any]:
        for partition_log in pending.logs:
            self._by_log.setdefault(partition_log, set()).add(pending)
        deadline = self._clock.seconds() + min(max_wait_ms, fetch_wait_ms_max) / 1000.0
        if len(self._deadlines) > 2 * self._unanswered + _ANSWERED_KEPT_MAX:
            self._deadlines = [entry for entry in self._deadlines if not entry[2].deferred.called]
            heapq.heapify(self._deadlines)
        heapq.heappush(self._deadlines, (deadline, next(self._arrivals), pending))
        self._unanswered += 1
        self._arm(deadline)
        return pending.deferred

    def _arm(self, deadline: float) -> None:
        """Make the timer fire by ``deadline``."""
        timer = self._timer
        if timer is not None:
            if timer.getTime() <= deadline:
                return
            timer.cancel()
        self._timer = self._clock.callLater(max(0.0, deadline - self._clock.seconds()), self._expire)

    def _expire(self) -> None:
        """Answer the waiters whose deadline passed, after arming the timer for the next one (an answer's
        callbacks may park a new fetch)."""
        self._timer = None
        now = self._clock.seconds()
        deadlines = self._deadlines
        expired = []
        while deadlines and (deadlines[0][0] <= now or deadlines[0][2].deferred.called):
            pending = heapq.heappop(deadlines)[2]
            if not pending.deferred.called:
                expired.append(pending)
        if deadlines:
            self._arm(deadlines[0][0])
        for pending in expired:
            pending.complete()

    def wake(self, partition_log: PartitionLog, followers_only: bool = False) -> None:
        """Let the fetches of ``partition_log`` answer if they now can (only followers' after an append)."""
        waiters = self._by_log.get(partition_log)
        if waiters:
            for pending in list(waiters):
                if not followers_only or pending.follower:
                    pending.try_complete()

    def complete(self, partition_log: PartitionLog) -> None:
        """Answer the fetches of ``partition_log`` now with what they find (its log is about to be deleted)."""
        for pending in list(self._by_log.get(partition_log, ())):
            pending.complete()

    def complete_all(self) -> None:
        """Answer every waiting fetch now (shutdown)."""
        for waiters in list(self._by_log.values()):
            for pending in list(waiters):
                pending.complete()
        if self._timer is not None and not self._unanswered:
            self._timer.cancel()
            self._timer, self._deadlines = None, []

    def _forget(self, pending: _Waiter) -> None:
        self._unanswered -= 1
        for partition_log in pending.logs:
            waiters = self._by_log.get(partition_log)
            if waiters is not None:
                waiters.discard(pending)
                if not waiters:
                    del self._by_log[partition_log]


class _Waiter:
    """A long poll waiting on ``logs``: ``answer(final)`` is its answer, or None while it should wait on (never
    None when ``final``: its timer expired, or the broker is answering every waiter)."""

    __slots__ = ("owner", "logs", "answer", "follower", "deferred")

    def __init__(self, owner: WaitingFetches, logs: Sequence[PartitionLog], answer: Callable[[bool], Any],
                 follower: bool) -> None:
        self.owner = owner
        self.logs = logs
        self.answer = answer
        self.follower = follower
        self.deferred: Deferred[Any] = Deferred()

    def try_complete(self) -> None:
        """Answer now if it may (once: a wake may reach a waiter answered meanwhile)."""
        if not self.deferred.called:
            answer = self.answer(False)
            if answer is not None:
                self._finish(answer)

    def complete(self) -> None:
        """Answer with whatever is there (timer expiry or shutdown)."""
        if not self.deferred.called:
            self._finish(self.answer(True))

    def _finish(self, answer: Any) -> None:
        self.owner._forget(self)
        self.deferred.callback(answer)


class FetchService:
    """Serves consumers' and followers' fetches and offset lookups from the partitions this broker leads."""

    def __init__(
        self, *, clock: IReactorTime, authorizer: IAuthorizer, replicas: ReplicaManager, waiting: WaitingFetches,
        principals: ClusterPrincipals,
    ) -> None:
        self._clock = clock
        self._authorizer = authorizer
        self._principals = principals
        self._replicas = replicas
        self._waiting = waiting
        #: Bytes of record batches served to consumers (a metric).
        self.fetched_bytes = 0

    @errors_as_failures
    def fetch(self, principal: Principal, request: FetchRequest) -> Deferred[list[FetchResult]]:
        """Read batches for several partitions, long-polling; see ``IBroker.fetch``."""
        return self._fetch(principal, -1, request)

    @errors_as_failures
    def replica_fetch(self, principal: Principal, replica_id: int, request: FetchRequest) -> Deferred[list[FetchResult]]:
        """A follower's long-poll fetch, which also reports its progress; see ``IBroker.replica_fetch``."""
        self._principals.check_replica(principal, replica_id)
        now_ms = int(self._clock.seconds() * 1000)
        for position in request.positions:
            self._replicas.follower_fetched(replica_id, position, now_ms)
        return self._fetch(principal, replica_id, request)

    @errors_as_failures
    def wait_for_records(
        self, principal: Principal, topic: str, partition: int, position: Callable[[], int], wait_ms_max: int,
        isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
    ) -> Deferred[bool]:
        """True once a fetch from ``position()`` would find records or an error, False at ``wait_ms_max``; see
        ``IBroker.wait_for_records``."""
        require_permission(self._authorizer, principal, Operation.READ, ResourceType.TOPIC, topic)
        partition_log = self._replicas.partition_log(topic, partition)
        committed = isolation_level == IsolationLevel.READ_COMMITTED
        high_watermark = self._replicas.high_watermark

        def ready() -> bool:
            offset = position()
            end = high_watermark(partition_log)
            if committed:
                end = partition_log.last_stable_offset(end)
            return offset < end or offset > partition_log.log_end_offset

        if wait_ms_max <= 0 or ready():
            return succeed(True)
        return self._waiting.notice(partition_log, ready, wait_ms_max)

    @errors_as_failures
    def list_offset(
        self, principal: Principal, topic: str, partition: int, timestamp_ms: int,
        isolation_level: int = IsolationLevel.READ_UNCOMMITTED,
    ) -> Deferred[OffsetAndTimestamp]:
        """Find an offset by position or time; see ``IBroker.list_offset``."""
        require_permission(self._authorizer, principal, Operation.DESCRIBE, ResourceType.TOPIC, topic)
        partition_log = self._replicas.partition_log(topic, partition)
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return succeed(OffsetAndTimestamp(offset=partition_log.log_start_offset))
        high_watermark = self._replicas.high_watermark(partition_log)
        if isolation_level == IsolationLevel.READ_COMMITTED:
            high_watermark = partition_log.last_stable_offset(high_watermark)
        if timestamp_ms == LATEST_TIMESTAMP:
            return succeed(OffsetAndTimestamp(offset=high_watermark))
        if timestamp_ms == MAX_TIMESTAMP:
            largest = partition_log.largest_timestamp()
            if largest is None or largest[1] >= high_watermark:
                return succeed(OffsetAndTimestamp(offset=-1))
            return succeed(OffsetAndTimestamp(offset=largest[1], timestamp_ms=largest[0]))
        if timestamp_ms < 0:
            raise errors.InvalidTimestampError(f"timestamp {timestamp_ms} is neither -1, -2, -3 nor a time in ms")
        found = partition_log.offset_for_timestamp(timestamp_ms)
        if found is None or found >= high_watermark:
            return succeed(OffsetAndTimestamp(offset=-1))
        return succeed(OffsetAndTimestamp(offset=found, timestamp_ms=timestamp_ms))

    def _fetch(self, principal: Principal, replica_id: int, request: FetchRequest) -> Deferred[list[FetchResult]]:
        positions, min_bytes, max_bytes = request.positions, request.response_bytes_min, request.response_bytes_max
        committed = replica_id < 0 and request.isolation_level == IsolationLevel.READ_COMMITTED
        max_bytes = min(max_bytes, fetch_response_bytes_max) if max_bytes > 0 else fetch_response_bytes_max
        results = self._read_all(principal, positions, max_bytes, replica_id, committed)
        available, answered = 0, False
        for result in results:
            available += len(result.records)
            answered = answered or result.error is not None or result.diverging_end_offset >= 0
        if request.wait_ms_max <= 0 or available >= max(min_bytes, 1) or answered:
            return succeed(results)
        logs = [self._replicas.partition_log(p.topic, p.partition) for p in positions]
        return self._waiting.wait(logs, lambda: self._read_all(principal, positions, max_bytes, replica_id, committed),
                                  min_bytes, request.wait_ms_max, follower=replica_id >= 0)

    def _read_all(
        self, principal: Principal, positions: Sequence[FetchPosition], max_bytes: int, replica_id: int,
        committed: bool = False,
    ) -> list[FetchResult]:
        results = []
        remaining = max_bytes
        for position in positions:
            try:
                if replica_id >= 0:
                    result = self._read_for_follower(replica_id, position, remaining, first=not results)
                else:
                    result = self._read_one(principal, position, remaining, first=not results, committed=committed)
            except Exception as error:  # reported in this partition's result; other partitions go on
                result = FetchResult(topic=position.topic, partition=position.partition, error=broker_error(error))
            remaining = max(0, remaining - len(result.records))
            results.append(result)
        return results

    def _read_for_follower(self, replica_id: int, position: FetchPosition, remaining: int, first: bool) -> FetchResult:
        """Batches up to the log end for a follower, or where its log diverged from ours."""
        topic, partition = position.topic, position.partition
        partition_log, leader = self._replicas.leader(topic, partition)
        if replica_id not in leader.replicas.followers:
            raise errors.NotLeaderError(f"{topic}-{partition}: broker {replica_id} is not one of its followers "
                                        f"{sorted(leader.replicas.followers)}; it may not read past the high watermark")
        if position.current_leader_epoch != leader.leader_epoch:
            stale = position.current_leader_epoch < leader.leader_epoch
            raise (errors.FencedLeaderEpochError if stale else errors.NotLeaderError)(
                f"{topic}-{partition}: the follower is at leader epoch {position.current_leader_epoch}, "
                f"this leader at {leader.leader_epoch}"
            )
        if position.offset < partition_log.log_start_offset:  # retention or delete-records passed the follower
            return FetchResult(topic=topic, partition=partition, high_watermark=leader.high_watermark,
                               log_start_offset=partition_log.log_start_offset,
                               error=errors.OffsetOutOfRangeError(
                                   f"{topic}-{partition}: the follower's offset {position.offset} is below the "
                                   f"log start {partition_log.log_start_offset}; start again from there"))
        diverged = divergence(partition_log, position)
        if diverged is not None:
            return FetchResult(topic=topic, partition=partition, high_watermark=leader.high_watermark,
                               log_start_offset=partition_log.log_start_offset,
                               diverging_epoch=diverged[0], diverging_end_offset=diverged[1])
        limit = min(position.max_bytes, remaining) if not first else position.max_bytes
        records = b""
        if position.offset < partition_log.log_end_offset and limit > 0:
            records = partition_log.read(position.offset, limit).records
        return FetchResult(topic=topic, partition=partition, records=records, high_watermark=leader.high_watermark,
                           log_start_offset=partition_log.log_start_offset)

    def _read_one(
        self, principal: Principal, position: FetchPosition, remaining: int, first: bool, committed: bool = False
    ) -> FetchResult:
        """Batches below the high watermark for a consumer (read_committed: below the last stable offset)."""
        topic, partition = position.topic, position.partition
        require_permission(self._authorizer, principal, Operation.READ, ResourceType.TOPIC, topic)
        partition_log = self._replicas.partition_log(topic, partition)
        high_watermark = self._replicas.high_watermark(partition_log)
        stable = partition_log.last_stable_offset(high_watermark) if committed else high_watermark
        start = partition_log.log_start_offset
        if position.offset < start or position.offset > partition_log.log_end_offset:
            raise errors.OffsetOutOfRangeError(
                f"offset {position.offset} is outside {topic}-{partition}'s range "
                f"{start}..{partition_log.log_end_offset}; seek to the beginning or end"
            )
        records = b""
        limit = min(position.max_bytes, remaining) if not first else position.max_bytes
        if position.offset < stable and limit > 0:
            records = partition_log.read(position.offset, limit, max_offset=stable).records
        self.fetched_bytes += len(records)
        aborted = _aborted_transactions(partition_log, position.offset, stable, records) if committed else None
        return FetchResult(topic=topic, partition=partition, records=records, high_watermark=high_watermark,
                           log_start_offset=start, last_stable_offset=stable, aborted_transactions=aborted)


def _aborted_transactions(
    partition_log: PartitionLog, start_offset: int, stable_offset: int, records: bytes
) -> tuple[AbortedTransaction, ...]:
    """The aborted transactions overlapping the batches read: found up to the stable offset, then (only if
    any) narrowed to the batches' real end, which takes a walk over their headers."""
    if not records:
        return ()
    found = partition_log.aborted_transactions(start_offset, stable_offset)
    if not found:
        return ()
    *_, (_, last) = iter_batches(records, check=False)
    return tuple(AbortedTransaction(entry.producer_id, entry.first_offset) for entry in found
                 if entry.first_offset < last.next_offset)
