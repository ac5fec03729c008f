"""Kafka clients against real brokers: a broker with its Kafka listener, unique topics, Kafka's CLI tools."""

from __future__ import annotations

import itertools
import os
import pathlib
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mqbroker.protocols.kafka import codec
from mqbroker.protocols.kafka.messages.apis import ApiKey
from tests.integration.brokerprocess import BrokerProcess

#: Groups form in 0.2 s instead of Kafka's 3 s (the same on the reference broker).
FAST_GROUPS = ("--set", "group_initial_rebalance_delay_ms=200")
REFERENCE = pathlib.Path(__file__).resolve().parents[1] / "kafka_reference"
REFERENCE_SCRIPT = REFERENCE / "kafka_reference.sh"
_names = itertools.count()


def kafka_bootstrap(process: BrokerProcess) -> str:
    """``host:port`` of a broker's Kafka listener."""
    return f"127.0.0.1:{process.ports['kafka']}"


def start_kafka_broker(directory: pathlib.Path, *extra_args: str) -> Iterator[BrokerProcess]:
    """A running broker (Kafka listener on a free port) for a module of tests; killed afterwards."""
    process = BrokerProcess(data_dir=directory / "data", extra_args=[*FAST_GROUPS, *extra_args])
    process.start()
    try:
        yield process
    finally:
        process.kill()


def kafka_broker_fixture(name: str, *extra_args: str) -> Any:
    """A module-scoped ``kafka_broker`` fixture: one broker (``start_kafka_broker``, ``extra_args``) in a temporary
    directory named ``name``, for a test module's tests. Use: ``kafka_broker = kafka_broker_fixture("kafka-admin")``."""

    @pytest.fixture(scope="module")
    def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
        yield from start_kafka_broker(tmp_path_factory.mktemp(name), *extra_args)

    return kafka_broker


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{os.getpid()}-{next(_names)}"


class ApacheKafka:
    """The reference: one Apache Kafka broker (KRaft) on loopback, started and stopped by kafka_reference.sh."""

    def __init__(self, directory: pathlib.Path, port: int, *settings: str) -> None:
        self.directory = directory
        self.port = port
        self.settings = settings

    @property
    def bootstrap(self) -> str:
        """``host:port`` of its listener."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Format (the first time) and start it; returns once it serves."""
        subprocess.run([str(REFERENCE_SCRIPT), "start", str(self.directory), str(self.port), *self.settings],
                       check=True, timeout=120)

    def stop(self) -> None:
        """SIGTERM (SIGKILL if it lingers)."""
        subprocess.run([str(REFERENCE_SCRIPT), "stop", str(self.directory)], check=True, timeout=60)

    def pid(self) -> int:
        """The broker's process id (for CPU accounting)."""
        return int((self.directory / "kafka.pid").read_text())


def running_apache_kafka(directory: pathlib.Path, *settings: str) -> Iterator[ApacheKafka]:
    """A started reference broker on a free port pair, stopped afterwards."""
    from tests.integration.brokerprocess import free_port_pair

    port = free_port_pair(1)  # the controller listens on the next port
    kafka = ApacheKafka(directory, port, *settings)
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


def send_kafka_request(sock: socket.socket, key: ApiKey, version: int, correlation_id: int, request: object) -> None:
    """Write one Kafka request frame (client id ``raw``) with mqbroker's own codec."""
    sock.sendall(codec.encode_request(key, version, correlation_id, "raw", request))


def read_kafka_response(sock: socket.socket, key: ApiKey, version: int) -> tuple[int, Any]:
    """Read one response frame: (correlation id, decoded body)."""
    def read(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data

    (length,) = struct.unpack(">i", read(4))
    return codec.decode_response(key, version, read(length))


def kafka_call(port: int, key: ApiKey, version: int, request: object) -> Any:
    """One request on a fresh connection to 127.0.0.1:``port``; the decoded response."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        send_kafka_request(sock, key, version, 1, request)
        return read_kafka_response(sock, key, version)[1]


def produce_one(port: int, topic: str, acks: int, value: bytes) -> int:
    """One Produce v9 of one record to partition 0 of ``topic`` at 127.0.0.1:``port``; the partition's error code."""
    from mqbroker.protocols.kafka.messages.produce_fetch import PartitionProduceData, ProduceRequest, TopicProduceData
    from mqbroker.records.builder import BatchBuilder

    builder = BatchBuilder()
    builder.append(1_700_000_000_000, None, value)
    request = ProduceRequest(acks=acks, timeout_ms=5_000, topic_data=(
        TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=builder.build()),)),))
    answer = kafka_call(port, ApiKey.PRODUCE, 9, request)
    return int(answer.responses[0].partition_responses[0].error_code)


def kafka_tool(name: str, *args: str, timeout_s: float = 90.0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run one of Apache Kafka's command-line tools (installed by ``kafka_reference.sh install``)."""
    return subprocess.run([str(REFERENCE_SCRIPT), name, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout_s, check=False)


def consume_with_confluent(bootstrap: str, topic: str, count: int, timeout_s: float = 30.0,
                           **settings: Any) -> list[Any]:
    """``count`` messages of ``topic`` read from the beginning by a confluent-kafka consumer without a group."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", **settings})
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(metadata.topics[topic].partitions)])
        found: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
        return found
    finally:
        consumer.close()
