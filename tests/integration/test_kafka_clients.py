"""Kafka's own clients against mqbroker's Kafka listener: kafka-python, confluent-kafka, aiokafka and kcat
produce and consume at every acks level, idempotently, with every compression codec, over pipelined connections."""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess

import pytest

from mqbroker.protocols.kafka.messages.apis import ApiKey
from mqbroker.protocols.kafka.messages.cluster import MetadataRequest, MetadataRequestTopic
from mqbroker.protocols.kafka.messages.produce_fetch import FetchPartition, FetchRequest, FetchTopic
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.kafka_support import (
    consume_with_confluent,
    kafka_bootstrap,
    read_kafka_response,
    send_kafka_request,
    kafka_broker_fixture,
    unique,
)


kafka_broker = kafka_broker_fixture("kafka-clients")


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_kafka_python_produces_and_consumes_at_every_acks_level(kafka_broker: BrokerProcess, acks: object) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bootstrap, topic = kafka_bootstrap(kafka_broker), unique("acks")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=2)
    futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(200)]
    producer.flush(timeout=20)
    producer.close()
    if acks != 0:  # acks=0 gets no response, so no offsets
        assert [future.get(timeout=5).offset for future in futures] == list(range(200))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000,
                             enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, 0)])
    values = [(message.offset, message.key, message.value) for message in consumer]
    consumer.close()
    assert values == [(i, b"k%d" % i, b"v%d" % i) for i in range(200)]


@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_an_idempotent_producer_with_every_codec_keeps_keys_headers_and_timestamps(kafka_broker: BrokerProcess,
                                                                                  compression: str) -> None:
    from confluent_kafka import Producer

    bootstrap, topic = kafka_bootstrap(kafka_broker), unique(compression)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": compression,
                         "linger.ms": 5})
    delivered: list[tuple[object, int]] = []
    for i in range(300):
        producer.produce(topic, key=f"key-{i}", value=f"value-{i}" * 10, headers=[("index", str(i).encode())],
                         timestamp=1_700_000_000_000 + i, on_delivery=lambda error, m: delivered.append((error, m.offset())))
    assert producer.flush(20) == 0
    assert [error for error, _ in delivered if error] == [] and sorted(o for _, o in delivered) == list(range(300))
    del producer
    messages = consume_with_confluent(bootstrap, topic, 300)
    assert [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in messages] == [
        (f"key-{i}".encode(), f"value-{i}".encode() * 10, [("index", str(i).encode())], 1_700_000_000_000 + i)
        for i in range(300)]


def test_aiokafka_produces_idempotently_and_consumes_in_a_group(kafka_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    bootstrap, topic, group = kafka_bootstrap(kafka_broker), unique("aio"), unique("aio-group")

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, compression_type="gzip")
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait(topic, b"m%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            got = []
            async for message in consumer:
                got.append(message.value)
                if len(got) == 50:
                    break
            await consumer.commit()
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == [b"m%d" % i for i in range(50)]


def test_kcat_produces_and_consumes_keys_and_headers(kafka_broker: BrokerProcess) -> None:
    bootstrap, topic = kafka_bootstrap(kafka_broker), unique("kcat")
    lines = "".join(f"key{i}:value {i}\n" for i in range(20))
    subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-K:", "-H", "origin=kcat", "-z", "snappy"],
                   input=lines, text=True, check=True, timeout=30)
    read = subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q",
                           "-f", "%k|%s|%h|%o\n"], capture_output=True, text=True, check=True, timeout=30)
    assert read.stdout.splitlines() == [f"key{i}|value {i}|origin=kcat|{i}" for i in range(20)]


def test_pipelined_responses_come_back_in_request_order(kafka_broker: BrokerProcess) -> None:
    """A long-polling Fetch sent first is answered before the Metadata sent right after it."""
    topic = unique("order")
    with socket.create_connection(("127.0.0.1", kafka_broker.ports["kafka"]), timeout=10) as sock:
        send_kafka_request(sock, ApiKey.METADATA, 12, 1, MetadataRequest(topics=(MetadataRequestTopic(name=topic),)))
        read_kafka_response(sock, ApiKey.METADATA, 12)
        fetch = FetchRequest(max_wait_ms=600, min_bytes=1, topics=(
            FetchTopic(topic=topic, partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024),)),))
        send_kafka_request(sock, ApiKey.FETCH, 12, 2, fetch)
        send_kafka_request(sock, ApiKey.METADATA, 12, 3, MetadataRequest(topics=None))
        assert read_kafka_response(sock, ApiKey.FETCH, 12)[0] == 2
        assert read_kafka_response(sock, ApiKey.METADATA, 12)[0] == 3


def test_garbage_closes_that_connection_and_the_broker_keeps_serving(kafka_broker: BrokerProcess) -> None:
    with socket.create_connection(("127.0.0.1", kafka_broker.ports["kafka"]), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 12) + struct.pack(">hhi", 3, 12, 1) + b"\xff\xff\xff\xff")
        assert sock.recv(100) == b""  # closed, as Kafka closes a connection it cannot parse
    with socket.create_connection(("127.0.0.1", kafka_broker.ports["kafka"]), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 10) + struct.pack(">hhih", 18, 99, 4, -1))  # ApiVersions v99
        correlation_id, answer = read_kafka_response(sock, ApiKey.API_VERSIONS, 0)
        assert (correlation_id, answer.error_code) == (4, 35) and answer.api_keys
