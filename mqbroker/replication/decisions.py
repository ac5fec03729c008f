"""Replication decisions: high watermark, ISR membership, divergence and truncation, leader election.

Pure: no Twisted, no clock (``now_ms`` is passed in), no I/O. The broker feeds a
``LeaderReplicas`` with what followers report when they fetch and asks it for the high
watermark and for ISR changes to propose; followers use ``diverging_epoch`` (leader side) and
``truncation_offset`` (follower side) to agree on a common log prefix after a failover
(KIP-101 with KIP-279's iteration: the follower truncates and asks again until both agree).
The controller uses ``elect_leader`` when a leader dies, shuts down or hands leadership back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

#: No leader: every eligible replica is down.
NO_LEADER = -1
#: The epoch of batches no leader stamped (and "no epoch" in requests).
UNDEFINED_EPOCH = -1
#: The catch-up time of a follower taken out of the ISR: long past any lag bound.
_NEVER_MS = -(1 << 62)

#: A lookup (epoch) -> (largest known epoch <= it, where that epoch ends): ``LeaderEpochCache.end_offset_for``.
EpochEndLookup = Callable[[int], tuple[int, int]]


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower: its durable log end and when it last caught up."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = 0


class LeaderReplicas:
    """A leader's view of one partition's replicas; computes the high watermark and ISR changes.

    The high watermark is the smallest log end over the ISR (the leader's own durable end
    included), counting a replica whose ISR addition is still being committed (KIP-497's
    "maximal ISR"), and it never goes backwards.
    """

    def __init__(
        self, *, node_id: int, replicas: Sequence[int], isr: Collection[int], high_watermark: int, now_ms: int
    ) -> None:
        self.node_id = node_id
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.pending_isr: frozenset[int] | None = None
        self.high_watermark = high_watermark
        self.followers = {
            replica: FollowerProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
            for replica in self.replicas
            if replica != node_id
        }

    def update_assignment(self, replicas: Sequence[int], isr: Collection[int], now_ms: int) -> None:
        """The controller committed new replicas or a new ISR (a proposal of ours, or a reassignment)."""
        removed = self.isr - frozenset(isr)
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        if self.pending_isr is not None and self.pending_isr == self.isr:
            self.pending_isr = None
        for replica in removed & self.followers.keys():  # taken out (it lagged, or its broker was fenced): it
            self.followers[replica].last_caught_up_ms = _NEVER_MS  # rejoins on a fetch that catches up, not on its past
        for replica in self.replicas:
            if replica != self.node_id and replica not in self.followers:
                self.followers[replica] = FollowerProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
        for gone in set(self.followers) - set(self.replicas):
            del self.followers[gone]

    def follower_fetched(self, replica_id: int, fetch_offset: int, leader_end_offset: int, now_ms: int) -> None:
        """A follower fetched from ``fetch_offset``: it holds (durably) everything below it.

        It counts as caught up now if it reached the leader's end, or as of its previous fetch if
        it reached the end the leader had then (Kafka's rule: a steady stream of appends must not
        make a keeping-up follower look lagging).
        """
        progress = self.followers.get(replica_id)
        if progress is None:
            return
        progress.log_end_offset = fetch_offset
        if fetch_offset >= leader_end_offset:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.leader_end_at_last_fetch:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_ms = now_ms
        progress.leader_end_at_last_fetch = leader_end_offset

    def advance_high_watermark(self, leader_end_offset: int) -> bool:
        """Recompute the high watermark from ``leader_end_offset`` (durable end); True if it moved."""
        candidate = leader_end_offset
        for replica in self.isr | (self.pending_isr or frozenset()):
            if replica == self.node_id:
                continue
            progress = self.followers.get(replica)
            end = progress.log_end_offset if progress is not None and progress.log_end_offset >= 0 else self.high_watermark
            candidate = min(candidate, end)
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def isr_change(self, now_ms: int, lag_time_max_ms: int, leader_epoch_start_offset: int) -> frozenset[int] | None:
        """The ISR to propose (lagging followers out, caught-up ones in), or None when nothing changes.

        A follower rejoins once it holds everything below the high watermark and has reached the
        current leader epoch (it has truncated whatever an earlier leader left it).
        """
        if self.pending_isr is not None:
            return None
        lagging = {
            replica for replica in self.isr
            if replica in self.followers and now_ms - self.followers[replica].last_caught_up_ms > lag_time_max_ms
        }
        joining = {
            replica for replica, progress in self.followers.items()
            if replica not in self.isr
            and progress.log_end_offset >= max(self.high_watermark, leader_epoch_start_offset)
            and now_ms - progress.last_caught_up_ms <= lag_time_max_ms
        }
        if not lagging and not joining:
            return None
        return (self.isr - lagging) | joining

    def propose(self, isr: frozenset[int]) -> None:
        """An ISR change was sent to the controller; count joining replicas for the HW meanwhile."""
        self.pending_isr = isr

    def proposal_failed(self) -> None:
        """The controller refused or lost the proposal: propose again later from the committed ISR."""
        self.pending_isr = None


def diverging_epoch(end_offset_for: EpochEndLookup, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
    """Leader side: where the follower's log leaves the leader's, or None when it does not.

    The follower fetches at ``fetch_offset`` with its last batch from ``last_fetched_epoch``; the
    logs diverge when the leader knows no such epoch or that epoch ends earlier in its log.
    The answer is (the leader's largest epoch <= the follower's, where it ends in the leader's log).
    """
    if last_fetched_epoch == UNDEFINED_EPOCH:
        return None
    epoch, end_offset = end_offset_for(last_fetched_epoch)
    if epoch != last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None


def truncation_offset(own_end_offset_for: EpochEndLookup, own_log_end_offset: int, leader_epoch: int,
                      leader_end_offset: int) -> int:
    """Follower side: where to cut its log after the leader answered (``leader_epoch``, ``leader_end_offset``).

    Cut at the end of the follower's own largest epoch <= the leader's, or at the leader's end if
    that is lower. When the follower's epoch there differs, the cut may still be too high (KIP-279):
    it fetches again with its new last epoch and the leader checks once more.
    """
    _, own_end_offset = own_end_offset_for(leader_epoch)
    return min(own_end_offset, leader_end_offset, own_log_end_offset)


def elect_leader(
    replicas: Sequence[int], isr: Collection[int], live: Collection[int], *, unclean: bool,
    excluded: Collection[int] = (),
) -> tuple[int, bool]:
    """(new leader, whether it was outside the ISR): the first live ISR member in replica order.

    With ``unclean`` set and no live ISR member, a live out-of-sync replica may lead (it may lack
    acknowledged records: they are lost). Otherwise the partition stays without a leader.
    """
    for replica in replicas:
        if replica in isr and replica in live and replica not in excluded:
            return replica, False
    if unclean:
        for replica in replicas:
            if replica in live and replica not in excluded:
                return replica, True
    return NO_LEADER, False


def assign_replicas(
    live: Sequence[int], count: int, replication_factor: int, load: dict[int, int], own: dict[int, int]
) -> list[tuple[int, ...]]:
    """Replica lists for ``count`` new partitions: distinct brokers, leaders and replicas spread evenly.

    ``load``/``own`` count replicas per broker in all topics / this topic and are updated. The
    first replica (the preferred leader) is the least loaded broker; the others follow it in
    broker order, so leaders rotate and each broker follows the others about equally.
    """
    assert 1 <= replication_factor <= len(live), (replication_factor, live)
    ordered = sorted(live)
    assignments = []
    leaders = {broker: 0 for broker in ordered}
    for _ in range(count):
        first = min(ordered, key=lambda broker: (own.get(broker, 0), leaders[broker], load.get(broker, 0), broker))
        start = ordered.index(first)
        replicas = tuple(ordered[(start + step) % len(ordered)] for step in range(replication_factor))
        leaders[first] += 1
        for broker in replicas:
            load[broker] = load.get(broker, 0) + 1
            own[broker] = own.get(broker, 0) + 1
        assignments.append(replicas)
    return assignments


def ordered_union(first: Iterable[int], second: Iterable[int]) -> tuple[int, ...]:
    """The brokers of ``first`` then those of ``second`` not already there (reassignment's transient replicas)."""
    result = list(first)
    result += [broker for broker in second if broker not in result]
    return tuple(result)
