"""High watermark, ISR membership, leader election and replica placement decisions."""

from __future__ import annotations

from mqbroker.replication.decisions import (
    NO_LEADER,
    LeaderReplicas,
    assign_replicas,
    diverging_epoch,
    elect_leader,
    ordered_union,
)

LAG_MS = 1_000


def _leader(isr: tuple[int, ...] = (1, 2, 3), high_watermark: int = 0) -> LeaderReplicas:
    return LeaderReplicas(node_id=1, replicas=(1, 2, 3), isr=isr, high_watermark=high_watermark, now_ms=0)


def test_high_watermark_is_the_smallest_end_over_the_isr() -> None:
    replicas = _leader()
    replicas.follower_fetched(2, 5, leader_end_offset=8, now_ms=10)
    replicas.follower_fetched(3, 7, leader_end_offset=8, now_ms=10)
    assert replicas.advance_high_watermark(8)
    assert replicas.high_watermark == 5


def test_a_follower_outside_the_isr_does_not_hold_the_high_watermark_back() -> None:
    replicas = _leader(isr=(1, 2))
    replicas.follower_fetched(2, 8, leader_end_offset=8, now_ms=10)
    replicas.advance_high_watermark(8)
    assert replicas.high_watermark == 8


def test_high_watermark_never_goes_backwards() -> None:
    replicas = _leader(high_watermark=6)
    replicas.follower_fetched(2, 3, leader_end_offset=8, now_ms=10)  # a truncated follower catching up
    replicas.follower_fetched(3, 8, leader_end_offset=8, now_ms=10)
    assert not replicas.advance_high_watermark(8)
    assert replicas.high_watermark == 6


def test_the_leaders_own_durable_end_bounds_the_high_watermark() -> None:
    replicas = _leader()
    for follower in (2, 3):
        replicas.follower_fetched(follower, 10, leader_end_offset=10, now_ms=1)
    replicas.advance_high_watermark(4)  # only 4 are fsynced on the leader
    assert replicas.high_watermark == 4


def test_single_replica_high_watermark_is_the_durable_end() -> None:
    replicas = LeaderReplicas(node_id=1, replicas=(1,), isr=(1,), high_watermark=0, now_ms=0)
    replicas.advance_high_watermark(17)
    assert replicas.high_watermark == 17


def test_a_follower_lagging_longer_than_the_limit_leaves_the_isr() -> None:
    replicas = _leader()
    replicas.follower_fetched(2, 10, leader_end_offset=10, now_ms=1_500)
    assert replicas.isr_change(now_ms=1_500, lag_time_max_ms=LAG_MS, leader_epoch_start_offset=0) == {1, 2}


def test_a_follower_fetching_steadily_behind_a_moving_end_stays_in_sync() -> None:
    replicas = _leader(isr=(1, 2))
    end = 0
    for now_ms in range(0, 5_000, 100):
        replicas.follower_fetched(2, end, leader_end_offset=end + 5, now_ms=now_ms)  # always reaches the previous end
        end += 5
    assert replicas.isr_change(now_ms=5_000, lag_time_max_ms=LAG_MS, leader_epoch_start_offset=0) is None


def test_a_caught_up_follower_rejoins_once_it_reaches_the_high_watermark_and_epoch() -> None:
    replicas = _leader(isr=(1, 2), high_watermark=10)
    replicas.follower_fetched(3, 9, leader_end_offset=12, now_ms=100)
    assert replicas.isr_change(now_ms=100, lag_time_max_ms=LAG_MS, leader_epoch_start_offset=0) is None
    replicas.follower_fetched(3, 12, leader_end_offset=12, now_ms=200)
    assert replicas.isr_change(now_ms=200, lag_time_max_ms=LAG_MS, leader_epoch_start_offset=14) is None
    assert replicas.isr_change(now_ms=200, lag_time_max_ms=LAG_MS, leader_epoch_start_offset=12) == {1, 2, 3}


def test_a_follower_the_controller_took_out_rejoins_only_after_fetching_again() -> None:
    """Fencing a dead broker takes it out of every ISR; its last fetch (caught up, just before it died) must
    not bring it back in: that ISR would make every acks=all produce wait for it until it lagged out again."""
    replicas = _leader(isr=(1, 2, 3), high_watermark=10)
    replicas.follower_fetched(2, 10, leader_end_offset=10, now_ms=100)
    replicas.follower_fetched(3, 10, leader_end_offset=10, now_ms=100)  # then broker 3 dies
    replicas.update_assignment((1, 2, 3), {1, 2}, now_ms=300)  # the controller fenced it
    assert replicas.isr_change(now_ms=400, lag_time_max_ms=LAG_MS, leader_epoch_start_offset=0) is None
    replicas.follower_fetched(2, 10, leader_end_offset=10, now_ms=2_000)
    replicas.follower_fetched(3, 10, leader_end_offset=10, now_ms=2_000)  # back, and caught up
    assert replicas.isr_change(now_ms=2_000, lag_time_max_ms=LAG_MS, leader_epoch_start_offset=0) == {1, 2, 3}


def test_a_joining_replica_counts_for_the_high_watermark_while_its_addition_commits() -> None:
    replicas = _leader(isr=(1, 2), high_watermark=10)
    replicas.follower_fetched(2, 20, leader_end_offset=20, now_ms=100)
    replicas.follower_fetched(3, 12, leader_end_offset=20, now_ms=100)
    replicas.propose(frozenset({1, 2, 3}))
    replicas.advance_high_watermark(20)
    assert replicas.high_watermark == 12
    assert replicas.isr_change(now_ms=100, lag_time_max_ms=LAG_MS, leader_epoch_start_offset=0) is None  # one at a time
    replicas.update_assignment((1, 2, 3), {1, 2, 3}, now_ms=110)
    assert replicas.pending_isr is None


def test_leader_reports_divergence_when_it_lacks_the_followers_epoch_or_it_ends_earlier() -> None:
    epochs = {0: (0, 5), 1: (0, 5), 2: (2, 9)}  # the leader had epochs 0 (offsets 0..4) and 2 (from 5)
    lookup = epochs.__getitem__
    assert diverging_epoch(lookup, last_fetched_epoch=2, fetch_offset=9) is None
    assert diverging_epoch(lookup, last_fetched_epoch=1, fetch_offset=6) == (0, 5)
    assert diverging_epoch(lookup, last_fetched_epoch=0, fetch_offset=7) == (0, 5)
    assert diverging_epoch(lookup, last_fetched_epoch=-1, fetch_offset=7) is None


def test_election_prefers_the_first_live_isr_member_in_replica_order() -> None:
    assert elect_leader((3, 1, 2), isr=(1, 2, 3), live=(1, 2), unclean=False) == (1, False)
    assert elect_leader((1, 2, 3), isr=(1, 2, 3), live=(1, 2, 3), unclean=False, excluded=(1,)) == (2, False)


def test_no_clean_candidate_leaves_the_partition_leaderless_unless_unclean_election_is_on() -> None:
    assert elect_leader((1, 2, 3), isr=(1,), live=(2, 3), unclean=False) == (NO_LEADER, False)
    assert elect_leader((1, 2, 3), isr=(1,), live=(2, 3), unclean=True) == (2, True)


def test_replicas_are_distinct_brokers_with_leaders_spread() -> None:
    load: dict[int, int] = {}
    assignment = assign_replicas([1, 2, 3], 6, 3, load, {})
    assert all(len(set(replicas)) == 3 for replicas in assignment)
    assert sorted(replicas[0] for replicas in assignment) == [1, 1, 2, 2, 3, 3]
    assert load == {1: 6, 2: 6, 3: 6}
    two = assign_replicas([1, 2, 3, 4], 4, 2, {}, {})
    assert sorted(replicas[0] for replicas in two) == [1, 2, 3, 4]


def test_transient_replicas_of_a_reassignment_keep_the_target_first() -> None:
    assert ordered_union((4, 5, 1), (1, 2, 3)) == (4, 5, 1, 2, 3)
