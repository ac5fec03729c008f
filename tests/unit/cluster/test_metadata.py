"""The metadata image: records applied in order, fencing, assignment, snapshots."""

from __future__ import annotations

import pytest
from zope.interface.verify import verifyObject

from mqbroker import errors
from mqbroker.cluster.controller import BrokerSessions, assign_partitions, create_partitions_record, create_topic_record
from mqbroker.cluster.metadata import NO_LEADER, MetadataImage, MetadataStateMachine, topic_id_for
from mqbroker.cluster.metadata_records import (
    AllocateProducerIds,
    AlterBrokerConfigs,
    AlterTopicConfigs,
    BrokerHeartbeat,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    PutGenericRecord,
    Record,
    RegisterBroker,
    decode_result,
    encode_record,
)
from mqbroker.raft.state_machine import IRaftStateMachine


def _apply(machine: MetadataStateMachine, *records: Record) -> list[int | None]:
    values = []
    for record in records:
        values.append(decode_result(machine.apply(machine.image.applied_index + 1, encode_record(record))).value)
    return values


def _three_brokers() -> MetadataStateMachine:
    machine = MetadataStateMachine()
    _apply(machine, *(RegisterBroker(node_id=n, host="127.0.0.1", port=9000 + n) for n in (1, 2, 3)))
    return machine


def test_state_machine_implements_the_raft_seam() -> None:
    assert verifyObject(IRaftStateMachine, MetadataStateMachine())


def test_partitions_spread_evenly_over_live_brokers() -> None:
    machine = _three_brokers()
    _apply(machine, create_topic_record(machine.image, "a", 4, {}))
    _apply(machine, create_topic_record(machine.image, "b", 2, {}))
    hosted = [len(machine.image.partitions_hosted(node_id)) for node_id in (1, 2, 3)]
    assert hosted == [2, 2, 2]


def test_fenced_broker_gets_no_new_partitions_and_loses_leadership() -> None:
    machine = _three_brokers()
    _apply(machine, create_topic_record(machine.image, "t", 3, {}), FenceBroker(node_id=2))
    partition = machine.image.topics["t"].partitions[1]
    assert (partition.broker_id, partition.leader_id, partition.leader_epoch) == (2, NO_LEADER, 1)
    assert 2 not in assign_partitions(machine.image, 6)
    _apply(machine, BrokerHeartbeat(node_id=2))
    assert (partition.leader_id, partition.leader_epoch) == (2, 2)


def test_a_record_from_a_stale_image_is_refused_when_applied() -> None:
    machine = _three_brokers()
    record = create_topic_record(machine.image, "t", 1, {})
    _apply(machine, record)
    with pytest.raises(errors.TopicAlreadyExistsError):
        _apply(machine, record)


def test_topic_life_cycle_and_producer_ids() -> None:
    machine = _three_brokers()
    _apply(machine, CreateTopic(name="t", assignment=(1,), configs={"retention.ms": "5"}))
    _apply(machine, create_partitions_record(machine.image, "t", 3))
    _apply(machine, AlterTopicConfigs(name="t", configs={}))
    assert len(machine.image.topics["t"].partitions) == 3 and machine.image.topics["t"].configs == {}
    assert _apply(machine, AllocateProducerIds(count=1000), AllocateProducerIds(count=1000, minimum=5000)) == [0, 5000]
    _apply(machine, DeleteTopic(name="t"))
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        _apply(machine, DeleteTopic(name="t"))


def test_snapshot_restores_an_identical_image() -> None:
    machine = _three_brokers()
    _apply(machine, create_topic_record(machine.image, "t", 5, {"cleanup.policy": "compact"}), FenceBroker(node_id=3))
    _apply(machine, PutGenericRecord(kind="acl", key="User:alice", value={"topic": "t", "operation": "read"}))
    restored = MetadataStateMachine()
    restored.restore(machine.snapshot())
    assert restored.image.to_document() == machine.image.to_document()


def test_topic_ids_are_the_same_on_every_broker_and_new_for_each_incarnation() -> None:
    first, second = _three_brokers(), _three_brokers()
    record = create_topic_record(first.image, "t", 1, {})
    _apply(first, record)
    _apply(second, record)
    topic_id = first.image.topics["t"].topic_id
    assert len(topic_id) == 16 and topic_id == second.image.topics["t"].topic_id
    _apply(first, DeleteTopic(name="t"))
    _apply(first, create_topic_record(first.image, "t", 1, {}))
    assert first.image.topics["t"].topic_id not in (topic_id, bytes(16))
    restored = MetadataStateMachine()
    restored.restore(first.snapshot())
    assert restored.image.topics["t"].topic_id == first.image.topics["t"].topic_id


def test_a_snapshot_from_before_topic_ids_gives_each_topic_the_id_of_index_zero() -> None:
    machine = _three_brokers()
    _apply(machine, create_topic_record(machine.image, "t", 1, {}))
    document = machine.image.to_document()
    del document["topics"][0]["topic_id"]
    assert MetadataImage.from_document(document).topics["t"].topic_id == topic_id_for("t", 0)


def test_sessions_expire_without_heartbeats_and_a_new_leader_grants_a_fresh_session() -> None:
    machine = _three_brokers()
    sessions = BrokerSessions(session_timeout_ms=1000)
    sessions.leadership_gained(machine.image, now_ms=0, grace_ms=1000)
    sessions.heard_from(1, 900)
    sessions.heard_from(2, 900)
    assert sessions.expired(machine.image, now_ms=1500) == [FenceBroker(node_id=3)]
    sessions.leadership_gained(machine.image, now_ms=1500, grace_ms=1000)
    assert sessions.expired(machine.image, now_ms=2000) == []


def test_a_new_leader_counts_sessions_from_the_heartbeats_it_applied_plus_a_grace() -> None:
    machine = _three_brokers()
    sessions = BrokerSessions(session_timeout_ms=1000)
    for node_id in (1, 2, 3):
        sessions.heard_from(node_id, 0)  # applied as a follower
    sessions.heard_from(1, 800)
    sessions.heard_from(2, 800)
    sessions.leadership_gained(machine.image, now_ms=900, grace_ms=300)
    assert sessions.expired(machine.image, now_ms=1150) == []  # broker 3's session lapsed, its grace not yet
    assert sessions.expired(machine.image, now_ms=1250) == [FenceBroker(node_id=3)]
    assert sessions.expired(machine.image, now_ms=1801) == [FenceBroker(node_id=node_id) for node_id in (1, 2, 3)]


def test_dynamic_broker_configs_are_set_replaced_and_resolved_per_broker() -> None:
    machine = _three_brokers()
    _apply(machine, AlterBrokerConfigs(entity="", configs={"min.insync.replicas": "2", "retention.ms": "100"}),
           AlterBrokerConfigs(entity="2", configs={"retention.ms": "50"}))
    in_force = {node_id: {key: machine.image.dynamic_topic_default(node_id, key)
                          for key in ("min.insync.replicas", "retention.ms", "segment.bytes")} for node_id in (1, 2)}
    assert in_force[1] == {"min.insync.replicas": "2", "retention.ms": "100", "segment.bytes": None}
    assert in_force[2] == {"min.insync.replicas": "2", "retention.ms": "50", "segment.bytes": None}
    _apply(machine, AlterBrokerConfigs(entity="2", configs={}), AlterBrokerConfigs(entity="", configs={}))
    assert machine.image.broker_configs == {"": {}}  # the cluster's entry stays: its activation write is done


def test_a_broker_config_entity_must_be_the_cluster_or_a_broker_id() -> None:
    machine = _three_brokers()
    for entity in ("x", "0", "-1", "\u00b2"):
        with pytest.raises(errors.InvalidRequestError):
            _apply(machine, AlterBrokerConfigs(entity=entity, configs={"retention.ms": "1"}))
    assert machine.image.broker_configs == {}


def test_the_activation_write_applies_only_to_a_cluster_without_dynamic_defaults() -> None:
    """Two controllers may both propose it (one from an image not yet caught up): the second changes nothing, and
    neither undoes an operator's change."""
    activation = AlterBrokerConfigs(entity="", configs={"min.insync.replicas": "1"}, activation=True)
    machine = _three_brokers()
    _apply(machine, activation, AlterBrokerConfigs(entity="", configs={"min.insync.replicas": "2"}), activation)
    assert machine.image.broker_configs == {"": {"min.insync.replicas": "2"}}
    _apply(machine, AlterBrokerConfigs(entity="", configs={}), activation)
    assert machine.image.broker_configs == {"": {}}


def test_dynamic_broker_configs_survive_a_snapshot_and_older_snapshots_have_none() -> None:
    machine = _three_brokers()
    _apply(machine, AlterBrokerConfigs(entity="", configs={"retention.ms": "100"}),
           AlterBrokerConfigs(entity="3", configs={"segment.bytes": "2000000"}))
    restored = MetadataStateMachine()
    restored.restore(machine.snapshot())
    assert restored.image.broker_configs == {"": {"retention.ms": "100"}, "3": {"segment.bytes": "2000000"}}
    document = machine.image.to_document()
    del document["broker_configs"]
    assert MetadataImage.from_document(document).broker_configs == {}
