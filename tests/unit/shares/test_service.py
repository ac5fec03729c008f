"""Share groups in-process: a real broker on a Clock hosts them, reads its own logs and writes its state durably."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from mqbroker import errors, limits
from mqbroker.cluster.metadata_records import ElectLeader
from mqbroker.groups.coordinator import MemberIdGenerator
from mqbroker.groups.model import TopicPartition
from mqbroker.model import ANONYMOUS, AcknowledgeType, TopicSpec
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.dead_letters import (
    HEADER_ATTEMPTS,
    HEADER_ERROR,
    HEADER_OFFSET,
    HEADER_REASON,
)
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import iter_batches
from mqbroker.shares import messages as m
from mqbroker.shares.push.dispatcher import PUSH_MEMBER
from mqbroker.shares.state_records import STATE_TOPIC, state_partition
from tests.fakes import BrokerRig, FakeClusterView, build_broker, fired

SETTINGS = {"share_state_topic_partitions": 2}
EVENTS = TopicPartition("events", 0)


def _started(tmp_path: Path, broker_ids: tuple[int, ...] = (1,)) -> BrokerRig:
    rig = build_broker(tmp_path, FakeClusterView(broker_ids=broker_ids), settings=SETTINGS)
    fired(rig.broker.start_share_groups(rig.broker, MemberIdGenerator(random.Random(7)), None))
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="events", partitions=1), False))
    return rig


def _produce(rig: BrokerRig, count: int, headers: list[tuple[str, bytes | None]] | None = None,
             timestamp_ms: int = 0) -> None:
    builder = BatchBuilder()
    for index in range(count):
        builder.append(timestamp_ms, f"k{index}".encode(), f"v{index}".encode(), headers or [])
    produced = rig.broker.produce(ANONYMOUS, "events", 0, builder.build(), 1, 1000)
    _settle(rig)
    fired(produced)


def _settle(rig: BrokerRig, seconds: float = 0.0) -> None:
    """Let fsync rounds finish and due calls run (reads, timers, state writes)."""
    for _ in range(20):
        rig.engine.finish_all()
        rig.clock.advance(0)
    if seconds:
        rig.clock.advance(seconds)
        for _ in range(20):
            rig.engine.finish_all()
            rig.clock.advance(0)


def _create(rig: BrokerRig, group_id: str = "g", **configs: str) -> None:
    configs = {"auto.offset.reset": "earliest", **{key.replace("_", "."): value for key, value in configs.items()}}
    created = rig.broker.create_share_group(ANONYMOUS, group_id, ["events"], configs)
    _settle(rig)
    fired(created)


def _join(rig: BrokerRig, group_id: str = "g", client_id: str = "c") -> str:
    joined = rig.broker.share_group_heartbeat(ANONYMOUS, m.ShareHeartbeatRequest(group_id=group_id, client_id=client_id,
                                                                                  topics=("events",)))
    _settle(rig)
    return str(fired(joined).member_id)


def _fetch(rig: BrokerRig, member: str, records_max: int = 100, acks: tuple[m.Acknowledgement, ...] = (),
           wait_ms: int = 0, group_id: str = "g") -> Deferred[Any]:
    """A fetch, given the reactor turns that store its leases (a parked fetch stays parked)."""
    fetched = rig.broker.share_fetch(ANONYMOUS, m.ShareFetchRequest(
        group_id=group_id, member_id=member, records_max=records_max, wait_ms_max=wait_ms, acknowledgements=acks))
    _settle(rig)
    return fetched


def _offsets(answer: m.ShareFetchResponse) -> list[tuple[int, int]]:
    """(offset, delivery count) of every acquired record."""
    return [(offset, acquired.delivery_count) for partition in answer.partitions for acquired in partition.acquired
            for offset in range(acquired.first, acquired.last + 1)]


def _ack(first: int, last: int, kind: AcknowledgeType = AcknowledgeType.ACCEPT, error: str = "") -> m.Acknowledgement:
    return m.Acknowledgement(topic="events", partition=0, first_offset=first, last_offset=last, kind=kind, error=error)


def _acknowledge(rig: BrokerRig, member: str, *acks: m.Acknowledgement) -> tuple[m.AcknowledgeResult, ...]:
    answered = rig.broker.share_acknowledge(ANONYMOUS, m.ShareAcknowledgeRequest(
        group_id="g", member_id=member, acknowledgements=acks))
    _settle(rig)
    return fired(answered)  # type: ignore[no-any-return]


def test_records_are_shared_between_members_and_each_is_acknowledged_once(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig)
    _produce(rig, 10)
    a, b = _join(rig, client_id="a"), _join(rig, client_id="b")
    first = fired(_fetch(rig, a, records_max=4))
    second = fired(_fetch(rig, b, records_max=100))
    assert _offsets(first) == [(offset, 1) for offset in range(4)]
    assert _offsets(second) == [(offset, 1) for offset in range(4, 10)]
    records = [record.offset for _, header in iter_batches(first.partitions[0].records)
               for record in decode_records(first.partitions[0].records)]
    assert records == list(range(10))  # whole batches: the client keeps the acquired offsets
    results = _acknowledge(rig, a, _ack(0, 3), _ack(4, 5))
    assert [result.error is None for result in results] == [True, False]
    assert isinstance(results[1].error, errors.InvalidRecordStateError)
    described = fired(rig.broker.describe_share_group(ANONYMOUS, "g"))
    [partition] = described.partitions
    assert (partition.stats.start_offset, partition.stats.acquired, partition.lag) == (4, 6, 6)


def test_an_acknowledgement_is_answered_once_its_state_is_replicated(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig)
    _produce(rig, 3)
    member = _join(rig)
    fired(_fetch(rig, member))
    answered = rig.broker.share_acknowledge(ANONYMOUS, m.ShareAcknowledgeRequest(
        group_id="g", member_id=member, acknowledgements=(_ack(0, 2),)))
    outcome: list[Any] = []
    answered.addBoth(outcome.append)
    rig.clock.advance(0)
    assert outcome == []  # the state record waits for its fsync (the high watermark)
    _settle(rig)
    assert [result.error for result in outcome[0]] == [None]
    state_log = rig.log(STATE_TOPIC, state_partition("g", 2))
    assert state_log.log_end_offset >= 2  # the definition, the region


def test_an_expired_lease_makes_records_available_with_their_delivery_count(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig, lease_ms="1000")
    _produce(rig, 2)
    a, b = _join(rig, client_id="a"), _join(rig, client_id="b")
    assert _offsets(fired(_fetch(rig, a))) == [(0, 1), (1, 1)]
    assert _offsets(fired(_fetch(rig, b))) == []
    _settle(rig, 1.0)
    assert _offsets(fired(_fetch(rig, b))) == [(0, 2), (1, 2)]
    assert isinstance(_acknowledge(rig, a, _ack(0, 1))[0].error, errors.InvalidRecordStateError)
    assert _acknowledge(rig, b, _ack(0, 1))[0].error is None


def test_a_waiting_fetch_is_answered_when_records_arrive(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig)
    member = _join(rig)
    waiting = _fetch(rig, member, wait_ms=5000)
    outcome: list[Any] = []
    waiting.addBoth(outcome.append)
    _settle(rig)
    assert outcome == []
    _produce(rig, 2)
    assert _offsets(outcome[0]) == [(0, 1), (1, 1)]


def test_a_member_leaving_while_its_fetch_waits_gets_an_empty_answer_and_leases_nothing(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig)
    leaving, staying = _join(rig, client_id="leaving"), _join(rig, client_id="staying")
    waiting = _fetch(rig, leaving, wait_ms=5000)
    outcome: list[Any] = []
    waiting.addBoth(outcome.append)
    _settle(rig)
    left = rig.broker.share_group_heartbeat(ANONYMOUS, m.ShareHeartbeatRequest(group_id="g", member_id=leaving,
                                                                                member_epoch=-1))
    _settle(rig)
    fired(left)
    assert [_offsets(answer) for answer in outcome] == [[]]
    _produce(rig, 2)
    assert _offsets(fired(_fetch(rig, staying))) == [(0, 1), (1, 1)]


def test_a_rejected_record_goes_to_the_dead_letter_topic_with_its_origin(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig, dead_letter_topic="events.dlq")
    _produce(rig, 3)
    member = _join(rig)
    fired(_fetch(rig, member))
    results = _acknowledge(rig, member, _ack(1, 1, AcknowledgeType.REJECT, "bad json"), _ack(0, 0), _ack(2, 2))
    assert [result.error for result in results] == [None, None, None]
    [record] = [record for _, _ in [(0, 0)] for record in decode_records(rig.log("events.dlq").read(0, 1 << 20).records)]
    headers = dict(record.headers)
    assert (record.key, record.value) == (b"k1", b"v1")
    assert (headers[HEADER_OFFSET], headers[HEADER_ATTEMPTS], headers[HEADER_REASON]) == (b"1", b"1", b"rejected")
    assert headers[HEADER_ERROR] == b"bad json"
    described = fired(rig.broker.describe_share_group(ANONYMOUS, "g"))
    assert (described.dead_lettered, described.dead_letter_depth, described.partitions[0].stats.start_offset) == (1, 1, 3)


def test_past_the_delivery_limit_an_expiring_record_is_dead_lettered(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig, lease_ms="100", max_delivery_attempts="2", dead_letter_topic="events.dlq")
    _produce(rig, 1)
    member = _join(rig)
    for attempt in (1, 2):
        assert _offsets(fired(_fetch(rig, member))) == [(0, attempt)]
        _settle(rig, 0.1)
    [record] = decode_records(rig.log("events.dlq").read(0, 1 << 20).records)
    assert dict(record.headers)[HEADER_REASON] == b"delivery_limit"
    assert _offsets(fired(_fetch(rig, member))) == []


def test_a_group_with_a_maximum_of_ready_records_drops_the_oldest_without_any_member(tmp_path: Path) -> None:
    """The host reads a max-length group's log though nobody consumes, and dead-letters the oldest (reason maxlen)."""
    rig = _started(tmp_path)
    _create(rig, max_ready_records="3", dead_letter_topic="events.dlq")
    _produce(rig, 5)
    _produce(rig, 2)
    _settle(rig, 0.6)
    copies = rig.log("events.dlq").read(0, 1 << 20).records
    dead = [record for position, header in iter_batches(copies)
            for record in decode_records(copies[position : position + header.size_bytes])]
    assert [(record.value, dict(record.headers)[HEADER_REASON]) for record in dead] == [
        (f"v{index}".encode(), b"maxlen") for index in range(4)]  # offsets 0..3: the first batch's oldest four
    member = _join(rig)
    assert _offsets(fired(_fetch(rig, member))) == [(4, 1), (5, 1), (6, 1)]
    described = fired(rig.broker.describe_share_group(ANONYMOUS, "g"))
    assert described.dead_lettered == 4


def test_a_maximum_of_ready_records_counts_what_the_group_has_not_read_and_spares_leased_ones(
        tmp_path: Path) -> None:
    """Leased records are not ready: only available ones beyond the maximum go, without a topic dropped and counted."""
    rig = _started(tmp_path)
    _create(rig, max_ready_records="2")
    _produce(rig, 3)
    member = _join(rig)
    assert _offsets(fired(_fetch(rig, member, records_max=2))) == [(1, 1), (2, 1)]
    _produce(rig, 3)
    _settle(rig, 0.6)
    assert _offsets(fired(_fetch(rig, member))) == [(4, 1), (5, 1)]
    assert fired(rig.broker.describe_share_group(ANONYMOUS, "g")).dead_lettered == 2


def test_the_host_counts_how_long_a_group_has_been_without_members(tmp_path: Path) -> None:
    """``unused_ms`` (AMQP x-expires) runs from the hosting, stops while a member is in, and restarts as it leaves."""
    rig = _started(tmp_path)
    _create(rig)

    def unused_ms() -> int:
        return fired(rig.broker.describe_share_group(ANONYMOUS, "g")).unused_ms

    _settle(rig, 2.0)
    assert unused_ms() == 2_000
    member = _join(rig)
    _settle(rig, 3.0)
    assert unused_ms() == 0
    fired(rig.broker.share_group_heartbeat(ANONYMOUS, m.ShareHeartbeatRequest(
        group_id="g", member_id=member, member_epoch=-1)))
    _settle(rig, 0.5)
    assert unused_ms() == 500


def test_a_delayed_record_is_delivered_at_its_time_and_not_before(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig)
    member = _join(rig)
    now_ms = int(rig.clock.seconds() * 1000)
    _produce(rig, 1, headers=[("x-deliver-at", str(now_ms + 5000).encode())])
    _produce(rig, 1)
    assert _offsets(fired(_fetch(rig, member))) == [(1, 1)]
    waiting = _fetch(rig, member, wait_ms=10_000)
    outcome: list[Any] = []
    waiting.addBoth(outcome.append)
    _settle(rig, 4.9)
    assert outcome == []
    _settle(rig, 0.1)
    assert _offsets(outcome[0]) == [(0, 1)]
    assert fired(rig.broker.describe_share_group(ANONYMOUS, "g")).partitions[0].stats.due == 1


def test_a_group_default_delay_holds_records_until_they_are_old_enough(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig, delivery_delay_ms="3000")
    member = _join(rig)
    _produce(rig, 2, timestamp_ms=int(rig.clock.seconds() * 1000))
    assert _offsets(fired(_fetch(rig, member))) == []
    _settle(rig, 3.0)
    assert _offsets(fired(_fetch(rig, member))) == [(0, 1), (1, 1)]


def test_a_restarted_broker_replays_the_state_and_keeps_scheduled_records_and_leases(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig, lease_ms="60000", session_timeout_ms="120000")
    member = _join(rig)
    now_ms = int(rig.clock.seconds() * 1000)
    _produce(rig, 1, headers=[("x-delay", b"10000")], timestamp_ms=now_ms)
    _produce(rig, 3)
    assert _offsets(fired(_fetch(rig, member))) == [(1, 1), (2, 1), (3, 1)]
    assert _acknowledge(rig, member, _ack(1, 1))[0].error is None
    _settle(rig)
    stopped = rig.broker.stop()
    _settle(rig)
    fired(stopped)
    rig.logs.close()

    again = build_broker(tmp_path, rig.cluster, settings=SETTINGS, clock=rig.clock)
    fired(again.broker.start_share_groups(again.broker, MemberIdGenerator(random.Random(8)), None))
    _settle(again)
    newcomer = _join(again)
    assert _offsets(fired(_fetch(again, newcomer))) == []  # the leases are kept
    rejoined = again.broker.share_group_heartbeat(ANONYMOUS, m.ShareHeartbeatRequest(
        group_id="g", member_id=member, member_epoch=0, client_id="c", topics=("events",)))
    _settle(again)
    assert fired(rejoined).member_id == member
    _settle(again, 10.0)  # past the grace: the holder joined in time and keeps its leases
    assert _offsets(fired(_fetch(again, newcomer))) == [(0, 1)]
    assert _acknowledge(again, member, _ack(2, 2))[0].error is None  # the holder still settles its lease
    _settle(again, 50.0)
    assert _offsets(fired(_fetch(again, newcomer))) == [(3, 2)]  # the lease ended: delivered again, count kept


def test_stored_leases_of_a_holder_that_does_not_join_the_new_host_come_back_after_the_grace(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _create(rig, lease_ms="600000", session_timeout_ms="1200000")
    holder = _join(rig)
    _produce(rig, 3)
    assert _offsets(fired(_fetch(rig, holder))) == [(0, 1), (1, 1), (2, 1)]
    stopped = rig.broker.stop()
    _settle(rig)
    fired(stopped)
    rig.logs.close()

    again = build_broker(tmp_path, rig.cluster, settings=SETTINGS, clock=rig.clock)
    fired(again.broker.start_share_groups(again.broker, MemberIdGenerator(random.Random(8)), None))
    _settle(again)
    newcomer = _join(again)
    _settle(again, limits.share_restored_lease_grace_ms / 1000 - 1)
    assert _offsets(fired(_fetch(again, newcomer))) == []
    _settle(again, 1.0)
    assert _offsets(fired(_fetch(again, newcomer))) == [(0, 2), (1, 2), (2, 2)]


def test_when_the_state_partition_moves_away_the_group_is_no_longer_hosted_here(tmp_path: Path) -> None:
    rig = _started(tmp_path, broker_ids=(1, 2))
    group_id = next(name for name in (f"g{index}" for index in range(20))
                    if rig.cluster.partition(STATE_TOPIC, state_partition(name, 2)).leader_id == 1)
    member = _join(rig, group_id)  # created on first use (its state write waits for broker 2, which never fetches)
    waiting = _fetch(rig, member, wait_ms=5000, group_id=group_id)
    partition = state_partition(group_id, 2)
    epoch = rig.cluster.partition(STATE_TOPIC, partition).leader_epoch
    rig.cluster.apply(ElectLeader(topic=STATE_TOPIC, partition=partition, leader_id=2, leader_epoch=epoch))
    assert fired(rig.broker.find_share_coordinator(ANONYMOUS, group_id)).node_id == 2
    with pytest.raises(errors.NotCoordinatorError):
        fired(waiting)
    with pytest.raises(errors.NotCoordinatorError):
        fired(rig.broker.describe_share_group(ANONYMOUS, group_id))


def test_share_groups_cannot_read_internal_topics(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    with pytest.raises(errors.InvalidTopicError):
        fired(rig.broker.create_share_group(ANONYMOUS, "g", [STATE_TOPIC], {}))
    with pytest.raises(errors.InvalidTopicError):
        fired(rig.broker.share_group_heartbeat(ANONYMOUS, m.ShareHeartbeatRequest(group_id="g", topics=("__x",))))


def test_unknown_members_and_groups_get_typed_errors(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    with pytest.raises(errors.GroupIdNotFoundError):
        fired(_fetch(rig, "nobody"))
    _create(rig)
    with pytest.raises(errors.UnknownMemberIdError):
        fired(_fetch(rig, "nobody"))
    with pytest.raises(errors.InvalidConfigError, match="lease.ms"):
        fired(rig.broker.alter_share_group(ANONYMOUS, "g", None, {"lease.ms": "0"}, []))


def test_a_push_subscriptions_stored_leases_come_back_at_once_on_a_new_host(tmp_path: Path) -> None:
    """The push member's requests died with the old host: its leases are released when the new one starts."""
    rig = _started(tmp_path)
    _create(rig, lease_ms="600000", push_endpoint="http://127.0.0.1:9/push", push_secret="s")  # no dispatcher here
    joined = rig.broker.share_group_heartbeat(ANONYMOUS, m.ShareHeartbeatRequest(
        group_id="g", member_id=PUSH_MEMBER, client_id="c", topics=("events",)))
    _settle(rig)
    assert fired(joined).member_id == PUSH_MEMBER
    _produce(rig, 2)
    assert _offsets(fired(_fetch(rig, PUSH_MEMBER))) == [(0, 1), (1, 1)]
    stopped = rig.broker.stop()
    _settle(rig)
    fired(stopped)
    rig.logs.close()

    again = build_broker(tmp_path, rig.cluster, settings=SETTINGS, clock=rig.clock)
    fired(again.broker.start_share_groups(again.broker, MemberIdGenerator(random.Random(8)), None))
    _settle(again)
    assert _offsets(fired(_fetch(again, _join(again)))) == [(0, 2), (1, 2)]
