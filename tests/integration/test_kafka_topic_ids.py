"""Produce 13 and Fetch 13+ name topics by id (KIP-516): raw requests against a real broker, unknown and stale ids
answered UNKNOWN_TOPIC_ID, and kafka-python recognising the broker as Kafka 4.1 from its ApiVersions."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from mqbroker.protocols.kafka.error_codes import UNKNOWN_TOPIC_ID
from mqbroker.protocols.kafka.messages.admin import (
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from mqbroker.protocols.kafka.messages.apis import ApiKey
from mqbroker.protocols.kafka.messages.cluster import (
    MetadataRequest,
    MetadataRequestTopic,
)
from mqbroker.protocols.kafka.messages.produce_fetch import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from mqbroker.records.builder import encode_batch
from mqbroker.records.decoder import decode_records
from mqbroker.records.record import Record
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.kafka_support import (
    kafka_bootstrap,
    read_kafka_response,
    send_kafka_request,
    kafka_broker_fixture,
    unique,
)

_correlation = iter(range(1, 1_000_000))


kafka_broker = kafka_broker_fixture("kafka-topic-ids")


@pytest.fixture
def connection(kafka_broker: BrokerProcess) -> Iterator[socket.socket]:
    with socket.create_connection(("127.0.0.1", kafka_broker.ports["kafka"]), timeout=10) as sock:
        yield sock


def call(sock: socket.socket, key: ApiKey, version: int, request: object) -> object:
    send_kafka_request(sock, key, version, next(_correlation), request)
    return read_kafka_response(sock, key, version)[1]


def create_topic(sock: socket.socket, name: str) -> bytes:
    """Create ``name`` (one partition) and return its id as Metadata reports it."""
    created = call(sock, ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(
        topics=(CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()),), timeout_ms=10_000))
    assert created.topics[0].error_code == 0
    described = call(sock, ApiKey.METADATA, 12, MetadataRequest(topics=(MetadataRequestTopic(name=name),)))
    [topic] = described.topics
    assert topic.error_code == 0 and topic.topic_id != bytes(16)
    return topic.topic_id


def produce(sock: socket.socket, topic_id: bytes, values: list[bytes]) -> object:
    batch = encode_batch([Record(offset=i, timestamp_ms=1_700_000_000_000 + i, key=None, value=value)
                          for i, value in enumerate(values)])
    request = ProduceRequest(acks=-1, timeout_ms=10_000, topic_data=(
        TopicProduceData(topic_id=topic_id, partition_data=(PartitionProduceData(index=0, records=batch),)),))
    return call(sock, ApiKey.PRODUCE, 13, request)


def fetch(sock: socket.socket, version: int, topic_id: bytes) -> object:
    request = FetchRequest(max_wait_ms=100, min_bytes=0, topics=(FetchTopic(topic_id=topic_id, partitions=(
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),))
    return call(sock, ApiKey.FETCH, version, request)


@pytest.mark.parametrize("fetch_version", [13, 15, 18])
def test_produce_13_and_fetch_by_topic_id_round_trip(connection: socket.socket, fetch_version: int) -> None:
    topic_id = create_topic(connection, unique("by-id"))
    produced = produce(connection, topic_id, [b"one", b"two"])
    [topic] = produced.responses
    assert topic.topic_id == topic_id
    assert [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses] == [(0, 0, 0)]
    fetched = fetch(connection, fetch_version, topic_id)
    [answer] = fetched.responses
    assert answer.topic_id == topic_id
    [partition] = answer.partitions
    assert (partition.error_code, partition.high_watermark) == (0, 2)
    assert [record.value for record in decode_records(bytes(partition.records))] == [b"one", b"two"]


def test_unknown_and_stale_topic_ids_answer_unknown_topic_id(connection: socket.socket) -> None:
    name = unique("recreated")
    old_id = create_topic(connection, name)
    assert produce(connection, old_id, [b"before"]).responses[0].partition_responses[0].error_code == 0
    assert call(connection, ApiKey.DELETE_TOPICS, 5, DeleteTopicsRequest(
        topic_names=(name,), timeout_ms=10_000)).responses[0].error_code == 0
    new_id = create_topic(connection, name)
    assert new_id != old_id
    # The same connection learnt the old id's name: the recreated topic must not answer to it.
    for topic_id in (old_id, bytes(16), b"\x42" * 16):
        [produced] = produce(connection, topic_id, [b"lost"]).responses
        assert (produced.topic_id, produced.partition_responses[0].error_code) == (topic_id, UNKNOWN_TOPIC_ID)
        [fetched] = fetch(connection, 13, topic_id).responses
        assert (fetched.topic_id, fetched.partitions[0].error_code) == (topic_id, UNKNOWN_TOPIC_ID)
    [fetched] = fetch(connection, 13, new_id).responses
    assert (fetched.partitions[0].error_code, fetched.partitions[0].high_watermark) == (0, 0)


def test_kafka_python_recognises_kafka_4_1(kafka_broker: BrokerProcess) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(kafka_broker))
    try:
        assert admin._client.check_version() == (4, 1)
    finally:
        admin.close()
