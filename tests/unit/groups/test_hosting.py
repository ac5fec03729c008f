"""Group hosting in-process: the broker coordinates the groups of the offsets partitions it leads."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mqbroker import errors
from mqbroker.cluster.metadata_records import ElectLeader
from mqbroker.groups.coordinator import MemberIdGenerator
from mqbroker.groups.messages import JoinRequest, OffsetCommitRequest, PartitionCommit
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.service import OFFSETS_TOPIC, offsets_partition
from mqbroker.model import ANONYMOUS, TopicSpec
from tests.fakes import BrokerRig, FakeClusterView, build_broker, fired

SETTINGS = {"offsets_topic_partitions": 2, "group_initial_rebalance_delay_ms": 0}


def _started(tmp_path: Path, broker_ids: tuple[int, ...] = (1,)) -> BrokerRig:
    rig = build_broker(tmp_path, FakeClusterView(broker_ids=broker_ids), settings=SETTINGS)
    fired(rig.broker.start_groups(MemberIdGenerator(random.Random(7))))
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="t", partitions=2), False))
    return rig


def _join(rig: BrokerRig, group_id: str = "g") -> str:
    joined = rig.broker.join_group(ANONYMOUS, JoinRequest(group_id=group_id, client_id="c", session_timeout_ms=10_000,
                                                         rebalance_timeout_ms=10_000, topics=frozenset({"t"})))
    rig.clock.advance(0.1)
    return fired(joined).member_id


def test_group_calls_before_the_offsets_topic_exists_say_coordinator_not_available(tmp_path: Path) -> None:
    rig = build_broker(tmp_path, FakeClusterView(), settings=SETTINGS)
    with pytest.raises(errors.CoordinatorNotAvailableError, match="created once 1 brokers are live"):
        fired(rig.broker.find_coordinator(ANONYMOUS, "g"))
    with pytest.raises(errors.CoordinatorNotAvailableError):
        fired(rig.broker.describe_group(ANONYMOUS, "g"))


def test_starting_groups_creates_the_compacted_offsets_topic_and_coordinates_it(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    assert rig.cluster.topic(OFFSETS_TOPIC).configs["cleanup.policy"] == "compact"
    assert fired(rig.broker.find_coordinator(ANONYMOUS, "g")).node_id == 1
    member = _join(rig)
    assert member.startswith("c-")
    assert [g.group_id for g in fired(rig.broker.list_groups(ANONYMOUS))] == ["g"]


def test_a_commit_is_acknowledged_once_its_offsets_record_is_durable(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    rig.engine.finish_all()
    partition = TopicPartition("t", 0)
    committed = rig.broker.commit_offsets(ANONYMOUS, OffsetCommitRequest(
        group_id="g", offsets=(PartitionCommit(topic_partition=partition, offset=5),)))
    assert not committed.called  # the offsets record waits for the high watermark (acks=all)
    rig.engine.finish_round()
    fired(committed)
    assert fired(rig.broker.fetch_offsets(ANONYMOUS, "g", [partition]))[partition].offset == 5
    offsets_log = rig.log(OFFSETS_TOPIC, offsets_partition("g", 2))
    assert offsets_log.log_end_offset == 1


def test_when_the_offsets_partition_moves_away_the_group_is_no_longer_coordinated_here(tmp_path: Path) -> None:
    rig = _started(tmp_path, broker_ids=(1, 2))
    led_here = [name for name in ("g0", "g1", "g2", "g3", "g4", "g5")
                if rig.cluster.partition(OFFSETS_TOPIC, offsets_partition(name, 2)).leader_id == 1]
    group_id = led_here[0]  # each broker leads one of the two offsets partitions
    partition = offsets_partition(group_id, 2)
    fired(rig.broker.describe_group(ANONYMOUS, group_id))
    epoch = rig.cluster.partition(OFFSETS_TOPIC, partition).leader_epoch
    rig.cluster.apply(ElectLeader(topic=OFFSETS_TOPIC, partition=partition, leader_id=2, leader_epoch=epoch))
    assert fired(rig.broker.find_coordinator(ANONYMOUS, group_id)).node_id == 2
    with pytest.raises(errors.NotCoordinatorError):
        fired(rig.broker.describe_group(ANONYMOUS, group_id))
