"""Fetch in-process: long-polls woken by durability or appends, expiring on the Clock; offset lookups."""

from __future__ import annotations

from pathlib import Path

import pytest

from mqbroker import errors
from mqbroker.cluster.metadata_records import CreateTopic, DeleteTopic
from mqbroker.model import ANONYMOUS, LATEST_TIMESTAMP, Acks, FetchPosition, FetchRequest, FetchResult, Principal
from mqbroker.records.header import iter_batches
from mqbroker.security.inter_broker import broker_principal
from tests.fakes import BrokerRig, FakeClusterView, build_broker, fired
from tests.unit.storage.logtools import make_batch

BATCH = make_batch([b"a", b"b", b"c"], timestamp_ms=5_000)


BROKER_2 = broker_principal(2)


def _secured(tmp_path: Path) -> dict[str, object]:
    """Brokers that prove who they are (an inter-broker password): anonymous is a client, not a broker."""
    password_file = tmp_path / "inter-broker-password"
    password_file.write_text("a-long-inter-broker-password\n")
    return {"security.inter_broker_password_file": str(password_file)}


def _broker(tmp_path: Path, configs: dict[str, str] | None = None, replicas: tuple[int, ...] = (1,),
            brokers: tuple[int, ...] = (), settings: dict[str, object] | None = None) -> BrokerRig:
    cluster = FakeClusterView(broker_ids=sorted({1, *replicas, *brokers}))
    rig = build_broker(tmp_path, cluster, settings=settings)
    cluster.apply(CreateTopic(name="t", assignment=(1,), configs=configs or {}, replicas=(replicas,)))
    return rig


def _position(offset: int = 0, epoch: int = -1, last_fetched_epoch: int = -1) -> FetchPosition:
    return FetchPosition(topic="t", partition=0, offset=offset, max_bytes=1 << 20, current_leader_epoch=epoch,
                         last_fetched_epoch=last_fetched_epoch)


def _offsets(result: FetchResult) -> list[int]:
    return [header.base_offset for _, header in iter_batches(result.records)]


def test_a_long_poll_is_answered_once_the_batch_is_durable(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    fetched = rig.broker.fetch(ANONYMOUS, FetchRequest(positions=(_position(),), wait_ms_max=5_000))
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    assert not fetched.called  # appended, but consumers see only what is durable (the high watermark)
    rig.engine.finish_round()
    [result] = fired(fetched)
    assert _offsets(result) == [0] and result.high_watermark == 3


def test_under_interval_flushing_the_append_itself_wakes_the_long_poll(tmp_path: Path) -> None:
    rig = _broker(tmp_path, {"flush.policy": "interval"})
    fetched = rig.broker.fetch(ANONYMOUS, FetchRequest(positions=(_position(),), wait_ms_max=5_000))
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.LEADER, 1_000))
    assert _offsets(fired(fetched)[0]) == [0]


def test_a_long_poll_expires_on_max_wait_with_what_there_is(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    fetched = rig.broker.fetch(ANONYMOUS, FetchRequest(positions=(_position(),), wait_ms_max=500))
    rig.clock.advance(0.499)
    assert not fetched.called
    rig.clock.advance(0.001)
    [result] = fired(fetched)
    assert (result.records, result.error, result.high_watermark) == (b"", None, 0)


def test_wait_for_records_fires_once_the_batch_is_durable_and_a_fetch_would_find_it(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    noticed = rig.broker.wait_for_records(ANONYMOUS, "t", 0, lambda: 0, 5_000)
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    assert not noticed.called  # appended, not durable: a fetch would find nothing yet
    rig.engine.finish_round()
    assert fired(noticed) is True
    assert fired(rig.broker.wait_for_records(ANONYMOUS, "t", 0, lambda: 0, 5_000)) is True  # already there: at once


def test_wait_for_records_asks_the_position_afresh_so_records_the_caller_has_do_not_wake_it(tmp_path: Path) -> None:
    """A front end that handed its own appends out from memory moves its position past them while it waits: the
    fsync that makes them visible does not wake it; a record past its position does."""
    rig = _broker(tmp_path)
    position = [0]
    noticed = rig.broker.wait_for_records(ANONYMOUS, "t", 0, lambda: position[0], 5_000)
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    position[0] = 3  # the caller has offsets 0..2 already
    rig.engine.finish_round()
    assert not noticed.called
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    rig.engine.finish_round()
    assert fired(noticed) is True


def test_wait_for_records_answers_false_at_max_wait_and_true_at_once_past_the_log_end(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    noticed = rig.broker.wait_for_records(ANONYMOUS, "t", 0, lambda: 0, 500)
    rig.clock.advance(0.499)
    assert not noticed.called
    rig.clock.advance(0.001)
    assert fired(noticed) is False
    # a position past the end is an error a fetch would report: no reason to wait
    assert fired(rig.broker.wait_for_records(ANONYMOUS, "t", 0, lambda: 7, 500)) is True
    with pytest.raises(errors.UnknownTopicOrPartitionError):  # errors as a fetch's
        fired(rig.broker.wait_for_records(ANONYMOUS, "t", 1, lambda: 0, 500))


def test_a_long_poll_waits_for_min_bytes(tmp_path: Path) -> None:
    rig = _broker(tmp_path, {"flush.policy": "interval"})
    fetched = rig.broker.fetch(ANONYMOUS, FetchRequest(positions=(_position(),), wait_ms_max=5_000,
                                                       response_bytes_min=2 * len(BATCH)))
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.LEADER, 1_000))
    assert not fetched.called
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.LEADER, 1_000))
    assert _offsets(fired(fetched)[0]) == [0, 3]


def test_a_followers_long_poll_is_woken_by_the_append_before_the_fsync(tmp_path: Path) -> None:
    rig = _broker(tmp_path, replicas=(1, 2))
    fetched = rig.broker.replica_fetch(BROKER_2, 2, FetchRequest(positions=(_position(0, epoch=0),),
                                                                 wait_ms_max=5_000))
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    [result] = fired(fetched)  # a follower copies up to the log end; the high watermark waits for it
    assert _offsets(result) == [0] and result.high_watermark == 0


def test_a_follower_whose_log_diverged_is_told_where(tmp_path: Path) -> None:
    rig = _broker(tmp_path, replicas=(1, 2))
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    request = FetchRequest(positions=(_position(5, epoch=0, last_fetched_epoch=0),), wait_ms_max=5_000)
    [result] = fired(rig.broker.replica_fetch(BROKER_2, 2, request))
    assert (result.diverging_epoch, result.diverging_end_offset) == (0, 3)  # it claims offsets we never had


def test_a_follower_at_a_stale_leader_epoch_is_fenced(tmp_path: Path) -> None:
    rig = _broker(tmp_path, replicas=(1, 2))
    [result] = fired(rig.broker.replica_fetch(BROKER_2, 2, FetchRequest(positions=(_position(0, epoch=-1),))))
    assert isinstance(result.error, errors.FencedLeaderEpochError)


def test_deleting_the_topic_answers_its_waiting_fetches(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    fetched = rig.broker.fetch(ANONYMOUS, FetchRequest(positions=(_position(),), wait_ms_max=5_000))
    rig.cluster.apply(DeleteTopic(name="t"))
    [result] = fired(fetched)
    assert isinstance(result.error, errors.UnknownTopicOrPartitionError)
    assert rig.logs.partitions() == []


def test_an_offset_outside_the_log_is_an_error_of_that_partition_only(tmp_path: Path) -> None:
    rig = _broker(tmp_path, {"flush.policy": "interval"})
    rig.cluster.apply(CreateTopic(name="u", assignment=(1,), replicas=((1,),)))
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.LEADER, 1_000))
    wrong, right = fired(rig.broker.fetch(ANONYMOUS, FetchRequest(positions=(_position(7), _position(0)))))
    assert isinstance(wrong.error, errors.OffsetOutOfRangeError) and _offsets(right) == [0]


def test_list_offset_finds_the_start_the_high_watermark_and_a_time(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    assert fired(rig.broker.list_offset(ANONYMOUS, "t", 0, -1)).offset == 0  # nothing durable yet
    rig.engine.finish_round()
    assert fired(rig.broker.list_offset(ANONYMOUS, "t", 0, -2)).offset == 0
    assert fired(rig.broker.list_offset(ANONYMOUS, "t", 0, -1)).offset == 3
    assert fired(rig.broker.list_offset(ANONYMOUS, "t", 0, 5_000)).offset == 0
    assert fired(rig.broker.list_offset(ANONYMOUS, "t", 0, 9_000)).offset == -1
    with pytest.raises(errors.InvalidTimestampError):
        fired(rig.broker.list_offset(ANONYMOUS, "t", 0, -5))


def test_stopping_answers_every_waiting_fetch(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    fetched = rig.broker.fetch(ANONYMOUS, FetchRequest(positions=(_position(),), wait_ms_max=5_000))
    rig.broker.stop()
    [result] = fired(fetched)
    assert result.records == b""


def test_a_replica_fetch_is_served_only_to_the_broker_it_names(tmp_path: Path) -> None:
    rig = _broker(tmp_path, replicas=(1, 2), settings=_secured(tmp_path))
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))
    rig.engine.finish_round()  # durable here; the high watermark waits for follower 2
    for principal in (ANONYMOUS, Principal("User", "alice"), broker_principal(3)):
        with pytest.raises(errors.ClusterAuthorizationError, match="only from Broker:2"):  # "I hold all 3 records"
            fired(rig.broker.replica_fetch(principal, 2, FetchRequest(positions=(_position(3, epoch=0),))))
    assert fired(rig.broker.list_offset(ANONYMOUS, "t", 0, LATEST_TIMESTAMP)).offset == 0  # nothing moved
    [result] = fired(rig.broker.replica_fetch(BROKER_2, 2, FetchRequest(positions=(_position(0, epoch=0),))))
    assert _offsets(result) == [0] and result.high_watermark == 0


def test_a_broker_that_is_no_replica_of_the_partition_cannot_read_past_the_high_watermark(tmp_path: Path) -> None:
    rig = _broker(tmp_path, replicas=(1, 2), brokers=(3,), settings=_secured(tmp_path))
    fired(rig.broker.produce(ANONYMOUS, "t", 0, BATCH, Acks.NONE, 1_000))  # appended, not yet below the high watermark
    [result] = fired(rig.broker.replica_fetch(broker_principal(3), 3, FetchRequest(positions=(_position(0, epoch=0),))))
    assert isinstance(result.error, errors.NotLeaderError) and "not one of its followers" in result.error.message
    assert result.records == b""


def test_in_an_unauthenticated_cluster_the_anonymous_principal_is_taken_for_a_broker(tmp_path: Path) -> None:
    """No inter-broker credentials, two brokers: a follower reaches the leader anonymously (firewall the ports)."""
    rig = _broker(tmp_path, replicas=(1, 2))
    [result] = fired(rig.broker.replica_fetch(ANONYMOUS, 2, FetchRequest(positions=(_position(0, epoch=0),))))
    assert result.error is None


def test_a_single_broker_serves_no_anonymous_replica_fetch(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    with pytest.raises(errors.ClusterAuthorizationError):
        fired(rig.broker.replica_fetch(ANONYMOUS, 2, FetchRequest(positions=(_position(0, epoch=0),))))


def test_a_wake_skips_a_fetch_answered_by_an_earlier_answer_of_the_same_wake() -> None:
    """Answering one waiting fetch runs its callbacks at once; they may wake the same log again (a replica
    fetch's progress moves the high watermark) and answer a second fetch that the first wake still holds in
    its list: the first wake must not answer it twice (it raised AlreadyCalledError into a follower's fetch)."""
    from twisted.internet.task import Clock

    from mqbroker.core.fetch import WaitingFetches

    waiting = WaitingFetches(Clock())
    partition_log = object()
    answer = [FetchResult(topic="t", partition=0, records=b"x")]
    first = waiting.wait([partition_log], lambda: answer, 1, 500, follower=False)  # type: ignore[list-item]
    second = waiting.wait([partition_log], lambda: answer, 1, 500, follower=False)  # type: ignore[list-item]
    answered: list[list[FetchResult]] = []

    def wake_again(results: list[FetchResult]) -> None:
        answered.append(results)
        waiting.wake(partition_log)  # type: ignore[arg-type]

    first.addCallback(wake_again)
    second.addCallback(wake_again)
    waiting.wake(partition_log)  # type: ignore[arg-type]
    assert answered == [answer, answer]


def test_waiting_fetches_share_one_timer_and_each_is_answered_at_its_own_deadline() -> None:
    """A parked fetch arms no timer of its own (arming and cancelling one per fetch cost every paced fetch its
    share of the reactor's timer heap): one timer, for the earliest deadline; each fetch still ends at its
    ``max_wait_ms`` with what there is, and one answered early is not answered again."""
    from twisted.internet.task import Clock

    from mqbroker.core.fetch import WaitingFetches

    clock = Clock()
    waiting = WaitingFetches(clock)
    partition_log = object()
    answered: list[int] = []

    def park(wait_ms: int, records: list[bytes]) -> None:
        fetched = waiting.wait([partition_log], lambda: [FetchResult(topic="t", partition=0, records=records[0])],
                               1, wait_ms, follower=False)  # type: ignore[list-item]
        fetched.addCallback(lambda _: answered.append(wait_ms))

    early = [b""]
    for wait_ms, records in ((500, [b""]), (100, [b""]), (300, [b""]), (200, early)):
        park(wait_ms, records)
    assert len(clock.getDelayedCalls()) == 1
    early[0] = b"x"
    waiting.wake(partition_log)  # type: ignore[arg-type]
    assert answered == [200]
    for step_s, expected in ((0.1, [200, 100]), (0.2, [200, 100, 300]), (0.2, [200, 100, 300, 500])):
        clock.advance(step_s)
        assert answered == expected
        assert len(clock.getDelayedCalls()) <= 1
    clock.advance(1.0)
    assert answered == [200, 100, 300, 500] and not clock.getDelayedCalls()
