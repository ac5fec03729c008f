"""Replicated partitions in the metadata image: failover, ISR changes, preferred leaders, reassignment."""

from __future__ import annotations

import pytest

from mqbroker import errors
from mqbroker.cluster.controller import create_partitions_record, create_topic_record, preferred_leader_elections
from mqbroker.cluster.metadata import NO_LEADER, MetadataImage, MetadataStateMachine, PartitionState
from mqbroker.cluster.metadata_records import (
    AlterPartition,
    BrokerHeartbeat,
    ElectLeader,
    FenceBroker,
    ReassignPartition,
    Record,
    RegisterBroker,
    decode_record,
    decode_result,
    encode_record,
)


def _apply(machine: MetadataStateMachine, *records: Record) -> None:
    for record in records:
        decode_result(machine.apply(machine.image.applied_index + 1, encode_record(record)))


def _cluster(replication_factor: int = 3, configs: dict[str, str] | None = None) -> MetadataStateMachine:
    machine = MetadataStateMachine()
    _apply(machine, *(RegisterBroker(node_id=n, host="127.0.0.1", port=9000 + n) for n in (1, 2, 3)))
    _apply(machine, create_topic_record(machine.image, "t", 3, configs or {}, replication_factor))
    return machine


def _partition(machine: MetadataStateMachine, number: int = 0) -> PartitionState:
    return machine.image.topics["t"].partitions[number]


def _alter(machine: MetadataStateMachine, isr: tuple[int, ...], number: int = 0) -> AlterPartition:
    state = _partition(machine, number)
    return AlterPartition(topic="t", partition=number, leader_id=state.leader_id, leader_epoch=state.leader_epoch,
                          partition_epoch=state.partition_epoch, isr=isr)


def test_replicas_land_on_distinct_brokers_and_every_broker_leads_one() -> None:
    machine = _cluster()
    partitions = machine.image.topics["t"].partitions
    assert all(sorted(p.replicas) == [1, 2, 3] and p.isr == p.replicas for p in partitions)
    assert sorted(p.leader_id for p in partitions) == [1, 2, 3]


def test_replication_factor_above_the_live_brokers_is_refused() -> None:
    machine = _cluster()
    with pytest.raises(errors.InvalidReplicationFactorError):
        create_topic_record(machine.image, "u", 1, {}, replication_factor=4)


def test_dead_leaders_partitions_move_to_an_isr_member_with_a_new_epoch() -> None:
    machine = _cluster()
    leader = _partition(machine).leader_id
    _apply(machine, FenceBroker(node_id=leader))
    state = _partition(machine)
    assert state.leader_id not in (leader, NO_LEADER)
    assert state.leader_epoch == 1 and leader not in state.isr


def test_last_isr_member_stays_in_the_isr_and_leads_again_when_back() -> None:
    machine = _cluster()
    leader = _partition(machine).leader_id
    _apply(machine, _alter(machine, (leader,)))
    others = [n for n in (1, 2, 3) if n != leader]
    _apply(machine, FenceBroker(node_id=leader))
    state = _partition(machine)
    assert (state.leader_id, state.isr) == (NO_LEADER, [leader])  # no unclean election: out-of-sync replicas wait
    assert not any(n in state.isr for n in others)
    _apply(machine, BrokerHeartbeat(node_id=leader))
    assert _partition(machine).leader_id == leader and _partition(machine).leader_epoch == 2


def test_unclean_election_lets_an_out_of_sync_replica_lead() -> None:
    machine = _cluster(configs={"unclean.leader.election.enable": "true"})
    leader = _partition(machine).leader_id
    _apply(machine, _alter(machine, (leader,)), FenceBroker(node_id=leader))
    state = _partition(machine)
    assert state.leader_id not in (leader, NO_LEADER) and state.isr == [state.leader_id]


def test_isr_change_from_a_stale_leader_epoch_is_fenced() -> None:
    machine = _cluster()
    stale = _alter(machine, (_partition(machine).leader_id,))
    _apply(machine, FenceBroker(node_id=stale.leader_id))
    result = machine.apply(machine.image.applied_index + 1, encode_record(stale))
    with pytest.raises(errors.FencedLeaderEpochError):
        decode_result(result)


def test_preferred_leader_gets_leadership_back_once_in_sync() -> None:
    machine = _cluster()
    preferred = _partition(machine).replicas[0]
    _apply(machine, FenceBroker(node_id=preferred), BrokerHeartbeat(node_id=preferred))
    assert _partition(machine).leader_id != preferred
    assert not any(e.partition == 0 for e in preferred_leader_elections(machine.image))  # not in the ISR yet
    _apply(machine, _alter(machine, tuple(_partition(machine).replicas)))
    elections = [e for e in preferred_leader_elections(machine.image) if e.partition == 0]
    assert elections == [ElectLeader(topic="t", partition=0, leader_id=preferred, leader_epoch=1)]
    _apply(machine, *elections)
    assert _partition(machine).leader_id == preferred


def test_reassignment_adds_targets_then_drops_the_others_once_they_are_in_sync() -> None:
    machine = MetadataStateMachine()
    _apply(machine, *(RegisterBroker(node_id=n, host="h", port=n) for n in (1, 2, 3, 4)))
    _apply(machine, create_topic_record(machine.image, "t", 1, {}, 2))
    old = list(_partition(machine).replicas)
    target = tuple(n for n in (1, 2, 3, 4) if n not in old)
    _apply(machine, ReassignPartition(topic="t", partition=0, target_replicas=target))
    assert set(_partition(machine).replicas) == {1, 2, 3, 4} and _partition(machine).isr == old
    _apply(machine, _alter(machine, tuple(_partition(machine).replicas)))
    state = _partition(machine)
    assert (state.replicas, state.isr, state.target_replicas) == (list(target), list(target), [])
    assert state.leader_id == target[0] and state.leader_epoch == 1


def test_new_partitions_keep_the_topics_replication_factor() -> None:
    machine = _cluster(replication_factor=2)
    _apply(machine, create_partitions_record(machine.image, "t", 5))
    assert [len(p.replicas) for p in machine.image.topics["t"].partitions] == [2] * 5


def test_records_before_replication_still_read_as_one_replica() -> None:
    image = MetadataImage.from_document({
        "version": 1, "applied_index": 3, "brokers": [], "next_producer_id": 0, "generic": {},
        "topics": [{"name": "old", "configs": {}, "partitions": [{"broker_id": 2, "leader_id": -1, "leader_epoch": 4}]}],
    })
    assert (image.topics["old"].partitions[0].replicas, image.topics["old"].partitions[0].isr) == ([2], [2])
    record = decode_record(b'{"type":"CreateTopic","name":"x","assignment":[1,2],"configs":{}}')
    assert record.replicas == ()  # type: ignore[union-attr]


def test_broker_wide_unclean_default_applies_to_topics_without_their_own_setting() -> None:
    machine = _cluster()
    leader = _partition(machine).leader_id
    _apply(machine, _alter(machine, (leader,)), FenceBroker(node_id=leader, unclean_election_default="true"))
    state = _partition(machine)
    assert state.leader_id not in (leader, NO_LEADER) and state.isr == [state.leader_id]


def test_topic_setting_overrides_the_broker_wide_unclean_default() -> None:
    machine = _cluster(configs={"unclean.leader.election.enable": "false"})
    leader = _partition(machine).leader_id
    _apply(machine, _alter(machine, (leader,)), FenceBroker(node_id=leader, unclean_election_default="true"))
    assert (_partition(machine).leader_id, _partition(machine).isr) == (NO_LEADER, [leader])


def test_records_written_before_the_unclean_default_existed_still_decode() -> None:
    record = decode_record(b'{"type":"FenceBroker","node_id":2}')
    assert record == FenceBroker(node_id=2, unclean_election_default="false")


def test_an_isr_change_adding_a_fenced_broker_is_refused_and_one_keeping_it_out_is_not() -> None:
    """As Kafka's INELIGIBLE_REPLICA (KIP-841): a leader's stale view of a dead follower cannot put it back."""
    machine = _cluster()
    leader = _partition(machine).leader_id
    dead = next(n for n in (1, 2, 3) if n != leader)
    _apply(machine, FenceBroker(node_id=dead))
    assert dead not in _partition(machine).isr
    with pytest.raises(errors.InvalidRequestError, match="fenced"):
        _apply(machine, _alter(machine, (1, 2, 3)))
    assert dead not in _partition(machine).isr
    _apply(machine, _alter(machine, (leader,)))
    assert _partition(machine).isr == [leader]
