"""acks=all waiters of a led partition: completion by the high watermark, and timeouts on one shared timer."""

from twisted.internet.task import Clock

from mqbroker import errors
from mqbroker.cluster.metadata import PartitionState
from mqbroker.replication.leadership import LeaderPartition


def _leader(clock: Clock) -> LeaderPartition:
    state = PartitionState(broker_id=1, leader_id=1, replicas=[1], isr=[1])
    return LeaderPartition(name="t-0", node_id=1, state=state, high_watermark=0, epoch_start_offset=0,
                           clock=clock, now_ms=0)


def _outcome(deferred: object) -> list[object]:
    seen: list[object] = []
    deferred.addBoth(seen.append)  # type: ignore[attr-defined]
    return seen


def test_a_waiter_completes_when_the_high_watermark_passes_its_offset() -> None:
    clock = Clock()
    leader = _leader(clock)
    first, second = _outcome(leader.wait_for_high_watermark(0, 1, 1000)), _outcome(leader.wait_for_high_watermark(4, 1, 1000))
    readers: list[str] = []
    leader.advance(3, lambda: readers.append("fetches answered"))
    assert readers == ["fetches answered"] and first == [None] and second == []
    leader.advance(5, lambda: readers.append("again"))
    assert second == [None]


def test_each_waiter_times_out_at_its_own_deadline_even_when_a_shorter_one_comes_later() -> None:
    clock = Clock()
    leader = _leader(clock)
    long_wait = _outcome(leader.wait_for_high_watermark(0, 1, 5000))
    short_wait = _outcome(leader.wait_for_high_watermark(1, 1, 1000))
    clock.advance(0.999)
    assert long_wait == [] and short_wait == []
    clock.advance(0.001)
    assert long_wait == [] and len(short_wait) == 1
    assert isinstance(short_wait[0].value, errors.RequestTimedOutError)  # type: ignore[attr-defined]
    assert "did not confirm offset 1" in str(short_wait[0].value)  # type: ignore[attr-defined]
    clock.advance(4.0)
    assert len(long_wait) == 1 and isinstance(long_wait[0].value, errors.RequestTimedOutError)  # type: ignore[attr-defined]
    assert not clock.getDelayedCalls()


def test_acknowledged_waiters_never_time_out_and_leave_at_most_one_timer() -> None:
    clock = Clock()
    leader = _leader(clock)
    outcomes = [_outcome(leader.wait_for_high_watermark(offset, 1, 1000)) for offset in range(100)]
    assert len(clock.getDelayedCalls()) == 1
    leader.advance(100, lambda: None)
    clock.advance(2.0)
    assert all(outcome == [None] for outcome in outcomes)
    assert not clock.getDelayedCalls()


def test_resigning_fails_every_waiter_and_stops_the_timer() -> None:
    clock = Clock()
    leader = _leader(clock)
    waiting = _outcome(leader.wait_for_high_watermark(0, 1, 1000))
    leader.resign(errors.NotLeaderError("moved"))
    assert isinstance(waiting[0].value, errors.NotLeaderError)  # type: ignore[attr-defined]
    assert not clock.getDelayedCalls()
