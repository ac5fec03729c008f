"""The metadata image: records applied in order, fencing, assignment, snapshots, garbage."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from zope.interface.verify import verifyObject

from mqbroker import errors
from mqbroker.cluster.controller import BrokerSessions, assign_partitions, create_partitions_record, create_topic_record
from mqbroker.cluster.metadata import (
    NO_LEADER,
    AllocateProducerIds,
    AlterTopicConfigs,
    BrokerHeartbeat,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    MetadataStateMachine,
    PutGenericRecord,
    Record,
    RegisterBroker,
    decode_record,
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


def test_records_round_trip() -> None:
    record = CreateTopic(name="t", assignment=(1, 2), configs={"k": "v"})
    assert decode_record(encode_record(record)) == record


@settings(max_examples=300)
@given(st.one_of(st.binary(max_size=64), st.builds(
    lambda kind, field, value: b'{"type":"%s","%s":%s}' % (kind.encode(), field.encode(), value.encode()),
    st.sampled_from(["FenceBroker", "DeleteTopic", "CreateTopic", "RegisterBroker", "Nope"]),
    st.sampled_from(["node_id", "name", "assignment"]),
    st.sampled_from(["1", "[1]", "\"x\"", "{}", "null", "true"]),
)))
def test_garbage_records_are_refused_with_a_typed_error(data: bytes) -> None:
    machine = _three_brokers()
    try:
        decode_record(data)
    except errors.CorruptMessageError:
        pass
    try:
        decode_result(machine.apply(100, data))
    except errors.BrokerError:
        pass


def test_a_registration_carries_every_listener_port_through_the_log_and_snapshots() -> None:
    machine = MetadataStateMachine()
    _apply(machine, RegisterBroker(node_id=1, host="h", port=9393, listeners={"kafka_port": 9092, "mqtt_port": 1883}))
    assert machine.image.brokers[1].listeners == {"kafka_port": 9092, "mqtt_port": 1883}
    restored = MetadataStateMachine()
    restored.restore(machine.snapshot())
    assert restored.image.brokers[1].listeners == {"kafka_port": 9092, "mqtt_port": 1883}


def test_a_registration_written_before_listeners_existed_still_decodes() -> None:
    older = b'{"host":"h","node_id":2,"port":9393,"type":"RegisterBroker","unclean_election_default":"false"}'
    assert decode_record(older) == RegisterBroker(node_id=2, host="h", port=9393)
    with pytest.raises(errors.CorruptMessageError):
        decode_record(older.replace(b'"port":9393', b'"port":9393,"listeners":{"kafka_port":"x"}'))
