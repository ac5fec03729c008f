"""One partition this broker leads: its replicas' progress, high watermark and the acks=all producers waiting.

tx-light: Deferreds and a clock, no I/O. The decisions are ``replication.LeaderReplicas``'s; this
class adds the waiting: an acks=all produce completes once the high watermark passes its batch
(or fails when the ISR shrank below ``min.insync.replicas`` meanwhile, or its timeout passes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from mqbroker import errors
from mqbroker.cluster.metadata import PartitionState
from mqbroker.replication.decisions import LeaderReplicas


@dataclass(slots=True, kw_only=True)
class _AckWaiter:
    offset: int
    min_insync_replicas: int
    deferred: Deferred[Any]
    #: When it times out, in the clock's seconds.
    deadline: float
    #: What ``deferred`` fires with (a produce's result: no callback of its own to hand it on).
    value: Any


class LeaderPartition:
    """A led partition: leader epoch, replica progress, high watermark and acks=all waiters."""

    def __init__(
        self, *, name: str, node_id: int, state: PartitionState, high_watermark: int, epoch_start_offset: int,
        clock: IReactorTime, now_ms: int,
    ) -> None:
        self.name = name
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        #: The log end when this leader's epoch began: a follower must reach it to rejoin the ISR.
        self.epoch_start_offset = epoch_start_offset
        self.replicas = LeaderReplicas(node_id=node_id, replicas=state.replicas, isr=state.isr,
                                       high_watermark=high_watermark, now_ms=now_ms)
        self._clock = clock
        self._waiters: list[_AckWaiter] = []
        #: One timer for the earliest waiter deadline, not one per produce: nearly every waiter
        #: completes long before its timeout, and timers cost on every produce.
        self._timer: IDelayedCall | None = None

    @property
    def high_watermark(self) -> int:
        """The offset below which every ISR member holds every record."""
        return self.replicas.high_watermark

    def update(self, state: PartitionState, now_ms: int) -> None:
        """The image changed this partition without changing its leader epoch (ISR, replicas)."""
        self.partition_epoch = state.partition_epoch
        self.replicas.update_assignment(state.replicas, state.isr, now_ms)

    def wait_for_high_watermark(self, offset: int, min_insync_replicas: int, timeout_ms: int,
                                value: Any = None) -> Deferred[Any]:
        """Fire with ``value`` once the high watermark passes ``offset``; fail on a too small ISR or the timeout."""
        deadline = self._clock.seconds() + timeout_ms / 1000.0
        waiter = _AckWaiter(offset=offset, min_insync_replicas=min_insync_replicas, deferred=Deferred(),
                            deadline=deadline, value=value)
        self._waiters.append(waiter)
        if offset < self.replicas.high_watermark:  # already passed (a retried batch): no timer
            self._fire_waiters()
        else:
            self._arm_timer(deadline)
        return waiter.deferred

    def advance(self, leader_end_offset: int, readers_first: Callable[[], None]) -> None:
        """Recompute the high watermark. When it moved, ``readers_first`` runs before the produce
        waiters it passed complete: like Kafka, waiting fetches are answered before waiting
        produces, so a consumer's copy does not queue behind the producers' acks."""
        if self.replicas.advance_high_watermark(leader_end_offset):
            readers_first()
        self._fire_waiters()

    def resign(self, error: errors.BrokerError) -> None:
        """Leadership moved: every waiting produce fails with ``error`` (the client retries at the new leader)."""
        waiters, self._waiters = self._waiters, []
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
        for waiter in waiters:
            self._finish(waiter, error)

    def _fire_waiters(self) -> None:
        if not self._waiters:
            return
        high_watermark, isr_size = self.replicas.high_watermark, len(self.replicas.isr)
        passed = [waiter for waiter in self._waiters if waiter.offset < high_watermark]
        if not passed:
            return
        self._waiters = [waiter for waiter in self._waiters if waiter.offset >= high_watermark]
        for waiter in passed:
            if isr_size < waiter.min_insync_replicas:
                self._finish(waiter, errors.NotEnoughReplicasAfterAppendError(
                    f"{self.name}: the batch was written but the ISR shrank to {isr_size} replica(s), below "
                    f"min.insync.replicas={waiter.min_insync_replicas}; it may be lost if the leader fails"
                ))
            else:
                self._finish(waiter, None)

    def _arm_timer(self, deadline: float) -> None:
        """Make the timer fire by ``deadline`` (it may fire earlier, for an earlier waiter)."""
        if self._timer is not None and self._timer.active():
            if self._timer.getTime() <= deadline:
                return
            self._timer.cancel()
        self._timer = self._clock.callLater(max(0.0, deadline - self._clock.seconds()), self._expire)

    def _expire(self) -> None:
        """Fail the waiters whose deadline passed; wait for the next deadline."""
        self._timer = None
        now = self._clock.seconds()
        expired = [waiter for waiter in self._waiters if waiter.deadline <= now]
        if expired:
            self._waiters = [waiter for waiter in self._waiters if waiter.deadline > now]
        for waiter in expired:
            self._finish(waiter, errors.RequestTimedOutError(
                f"{self.name}: the in-sync replicas did not confirm offset {waiter.offset} in time "
                f"(high watermark {self.high_watermark}, ISR {sorted(self.replicas.isr)})"
            ))
        if self._waiters:
            self._arm_timer(min(waiter.deadline for waiter in self._waiters))

    @staticmethod
    def _finish(waiter: _AckWaiter, error: errors.BrokerError | None) -> None:
        if error is None:
            waiter.deferred.callback(waiter.value)
        else:
            waiter.deferred.errback(error)
