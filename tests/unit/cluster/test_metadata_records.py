"""Metadata records: they round-trip through their JSON form, and garbage is refused with a typed error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqbroker import errors
from mqbroker.cluster.metadata import MetadataStateMachine
from mqbroker.cluster.metadata_records import (
    AlterBrokerConfigs,
    CreateTopic,
    RegisterBroker,
    decode_record,
    decode_result,
    encode_record,
)


def _three_brokers() -> MetadataStateMachine:
    machine = MetadataStateMachine()
    for node_id in (1, 2, 3):
        machine.apply(node_id, encode_record(RegisterBroker(node_id=node_id, host="127.0.0.1", port=9000 + node_id)))
    return machine


def test_records_round_trip() -> None:
    record = CreateTopic(name="t", assignment=(1, 2), configs={"k": "v"})
    assert decode_record(encode_record(record)) == record
    for dynamic in (AlterBrokerConfigs(entity="", configs={"min.insync.replicas": "2"}, activation=True),
                    AlterBrokerConfigs(entity="3", configs={})):
        assert decode_record(encode_record(dynamic)) == dynamic


@settings(max_examples=300)
@given(st.builds(
    lambda entity, configs, activation: b'{"type":"AlterBrokerConfigs","entity":%s,"configs":%s%s}' % (
        entity.encode(), configs.encode(), activation.encode()),
    st.sampled_from(['""', '"1"', '"0"', '"-1"', '"x"', '"\u00b2"', "1", "null", "[]"]),
    st.sampled_from(['{}', '{"min.insync.replicas":"2"}', '{"k":1}', '[]', '"x"', "null", '{"k":null}']),
    st.sampled_from(["", ',"activation":true', ',"activation":1', ',"activation":"yes"', ',"other":1'])))
def test_garbage_broker_config_records_are_refused_with_a_typed_error(data: bytes) -> None:
    """Fields of the wrong type fail decoding; an entity that is neither "" nor a broker id fails applying."""
    machine = _three_brokers()
    try:
        decode_record(data)
    except errors.CorruptMessageError:
        pass
    try:
        decode_result(machine.apply(100, data))
    except errors.BrokerError:
        pass
    for entity, configs in machine.image.broker_configs.items():
        assert entity == "" or int(entity) >= 1
        assert all(isinstance(value, str) for value in configs.values())


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
    machine.apply(1, encode_record(RegisterBroker(node_id=1, host="h", port=9393,
                                                  listeners={"kafka_port": 9092, "mqtt_port": 1883})))
    assert machine.image.brokers[1].listeners == {"kafka_port": 9092, "mqtt_port": 1883}
    restored = MetadataStateMachine()
    restored.restore(machine.snapshot())
    assert restored.image.brokers[1].listeners == {"kafka_port": 9092, "mqtt_port": 1883}


def test_a_registration_written_before_listeners_existed_still_decodes() -> None:
    older = b'{"host":"h","node_id":2,"port":9393,"type":"RegisterBroker","unclean_election_default":"false"}'
    assert decode_record(older) == RegisterBroker(node_id=2, host="h", port=9393)
    with pytest.raises(errors.CorruptMessageError):
        decode_record(older.replace(b'"port":9393', b'"port":9393,"listeners":{"kafka_port":"x"}'))
