"""Differential tests: the same Kafka client scenarios against Apache Kafka and against mqbroker, comparing
everything a client can observe (offsets, errors, assignments and rebalances, committed offsets, offsets by
time, configuration descriptions). Run with ``-m kafka_ref`` (see docs/kafka.md)."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mqbroker.protocols.kafka import codec
from mqbroker.protocols.kafka.messages import admin as admin_messages
from mqbroker.protocols.kafka.messages import produce_fetch
from mqbroker.protocols.kafka.messages.apis import ApiKey
from tests.integration.kafka_support import kafka_bootstrap, running_apache_kafka, start_kafka_broker, unique

pytestmark = pytest.mark.kafka_ref

Scenario = Callable[[str], Any]


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Both brokers, by name: their Kafka bootstrap addresses."""
    for reference in running_apache_kafka(tmp_path_factory.mktemp("apache-kafka")):
        for mqbroker in start_kafka_broker(tmp_path_factory.mktemp("mqbroker")):
            yield {"apache-kafka": reference.bootstrap, "mqbroker": kafka_bootstrap(mqbroker)}


def _same(brokers: dict[str, str], scenario: Scenario) -> Any:
    """Run ``scenario`` against both brokers; their observations must be equal."""
    observed = {name: scenario(bootstrap) for name, bootstrap in brokers.items()}
    assert observed["mqbroker"] == observed["apache-kafka"]
    return observed["mqbroker"]


def _producer(bootstrap: str, **settings: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **settings})


def _create(bootstrap: str, topic: str, partitions: int = 1, **configs: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(20)
    deadline = time.monotonic() + 10
    while topic not in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.05)


def test_produced_records_land_at_the_same_partitions_and_offsets(brokers: dict[str, str]) -> None:
    topic = unique("ref-offsets")

    def scenario(bootstrap: str) -> list[tuple[int, int]]:
        _create(bootstrap, topic, 3)
        producer = _producer(bootstrap, **{"enable.idempotence": True, "acks": "all"})
        landed: list[tuple[int, int]] = []
        for i in range(60):
            producer.produce(topic, key=f"user-{i % 7}", value=b"x" * i,
                             on_delivery=lambda error, m: landed.append((m.partition(), m.offset())))
        assert producer.flush(20) == 0
        return sorted(landed)

    assert len(_same(brokers, scenario)) == 60


def _raw(bootstrap: str, key: ApiKey, version: int, request: Any) -> Any:
    """One request on a fresh connection; the decoded response."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(codec.encode_request(key, version, 1, "differential", request))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(65536)
            assert chunk, "connection closed"
            data += chunk
    return codec.decode_response(key, version, data[4:])[1]


def test_bad_requests_get_the_same_errors(brokers: dict[str, str]) -> None:
    topic = unique("ref-errors")

    def scenario(bootstrap: str) -> dict[str, Any]:
        _create(bootstrap, topic, 1)
        creatable = admin_messages.CreatableTopic
        created = _raw(bootstrap, ApiKey.CREATE_TOPICS, 7, admin_messages.CreateTopicsRequest(topics=(
            creatable(name=topic, num_partitions=1, replication_factor=1, assignments=(), configs=()),
            creatable(name="bad/name", num_partitions=1, replication_factor=1, assignments=(), configs=()),
            creatable(name=unique("zero"), num_partitions=0, replication_factor=1, assignments=(), configs=()),
        ), timeout_ms=10000))
        deleted = _raw(bootstrap, ApiKey.DELETE_TOPICS, 6, admin_messages.DeleteTopicsRequest(
            topics=(admin_messages.DeleteTopicState(name=unique("missing"), topic_id=bytes(16)),), timeout_ms=10000))
        fetch = produce_fetch.FetchRequest(max_wait_ms=10, min_bytes=1, topics=(produce_fetch.FetchTopic(
            topic=topic, partitions=(produce_fetch.FetchPartition(partition=0, fetch_offset=50, partition_max_bytes=1024),
                                     produce_fetch.FetchPartition(partition=9, fetch_offset=0, partition_max_bytes=1024))),))
        fetched = _raw(bootstrap, ApiKey.FETCH, 12, fetch)
        return {
            "create": [result.error_code for result in created.topics],
            "delete": [result.error_code for result in deleted.responses],
            "fetch": sorted((p.partition_index, p.error_code) for t in fetched.responses for p in t.partitions),
        }

    assert _same(brokers, scenario) == {"create": [36, 17, 37], "delete": [3], "fetch": [(0, 1), (9, 3)]}


def test_group_members_see_the_same_assignments_through_rebalances_and_commits(brokers: dict[str, str]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic, group = unique("ref-group"), unique("ref-group")

    def scenario(bootstrap: str) -> dict[str, Any]:
        _create(bootstrap, topic, 4)
        settings = {"bootstrap.servers": bootstrap, "group.id": group, "heartbeat.interval.ms": 300,
                    "session.timeout.ms": 6000, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                    "partition.assignment.strategy": "range"}
        members = [Consumer(settings), Consumer(settings)]
        for member in members:
            member.subscribe([topic])

        def assignments() -> list[int]:
            for member in members:
                member.poll(0.1)
            return sorted(len(member.assignment()) for member in members)

        _wait(lambda: assignments() == [2, 2])
        shared = sorted(sorted(tp.partition for tp in member.assignment()) for member in members)
        members[0].commit(offsets=[TopicPartition(topic, p, 10 + p) for p in range(4)], asynchronous=False)
        members[0].close()
        _wait(lambda: members[1].poll(0.1) is None and len(members[1].assignment()) == 4)
        after_leave = sorted(tp.partition for tp in members[1].assignment())
        committed = members[1].committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
        members[1].close()
        return {"shared": shared, "after_leave": after_leave, "committed": [tp.offset for tp in committed]}

    assert _same(brokers, scenario) == {"shared": [[0, 1], [2, 3]], "after_leave": [0, 1, 2, 3],
                                        "committed": [10, 11, 12, 13]}


def _wait(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met"


def test_offsets_by_time_are_the_same(brokers: dict[str, str]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = unique("ref-times")

    base_ms = int(time.time() * 1000) - 600_000  # recent: no retention check may delete them

    def scenario(bootstrap: str) -> list[int]:
        _create(bootstrap, topic, 1)
        producer = _producer(bootstrap, **{"batch.num.messages": 7})
        for i in range(40):
            producer.produce(topic, value=b"%d" % i, timestamp=base_ms + 10 * i)
            if i % 7 == 0:
                producer.flush(10)
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("times")})
        found = [consumer.offsets_for_times([TopicPartition(topic, 0, base_ms + delta)], timeout=10)[0].offset
                 for delta in (0, 5, 10, 133, 390, 391, 10_000)]  # one lookup per request: a partition once
        consumer.close()
        return found

    assert _same(brokers, scenario) == [0, 1, 1, 14, 39, -1, -1]


def test_configuration_descriptions_agree_on_values_and_sources(brokers: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    topic = unique("ref-configs")
    # min.insync.replicas: both report the cluster-wide dynamic default the controller wrote at activation (source 3).
    keys = ("retention.ms", "cleanup.policy", "segment.bytes", "max.message.bytes", "retention.bytes",
            "delete.retention.ms", "segment.ms", "min.compaction.lag.ms", "min.insync.replicas")

    def scenario(bootstrap: str) -> dict[str, tuple[str, int]]:
        _create(bootstrap, topic, 1, **{"retention.ms": "3600000", "cleanup.policy": "compact"})
        admin = AdminClient({"bootstrap.servers": bootstrap})
        entries = next(iter(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values())).result(10)
        return {key: (entries[key].value, entries[key].source) for key in keys}

    observed = _same(brokers, scenario)
    assert observed["retention.ms"] == ("3600000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert observed["min.insync.replicas"] == ("1", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG


def _alter_broker(bootstrap: str, name: str, validate_only: bool = False, **changes: str | None) -> int:
    """IncrementalAlterConfigs v1 of broker resource ``name`` ("": the cluster-wide defaults); the error code."""
    configs = tuple(admin_messages.IncrementalAlterableConfig(name=key.replace("_", "."), value=value,
                                                              config_operation=0 if value is not None else 1)
                    for key, value in changes.items())
    request = admin_messages.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=(
        admin_messages.IncrementalAlterConfigsResource(resource_type=4, resource_name=name, configs=configs),))
    return int(_raw(bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request).responses[0].error_code)


def _describe(bootstrap: str, resource_type: int, name: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """DescribeConfigs v4 with synonyms of ``keys``: {key: (value, source, read-only, synonym sources)}."""
    request = admin_messages.DescribeConfigsRequest(include_synonyms=True, resources=(
        admin_messages.DescribeConfigsResource(resource_type=resource_type, resource_name=name,
                                               configuration_keys=keys),))
    result = _raw(bootstrap, ApiKey.DESCRIBE_CONFIGS, 4, request).results[0]
    assert result.error_code == 0, result.error_message
    return {entry.name: (entry.value, entry.config_source, entry.read_only,
                         [synonym.source for synonym in entry.synonyms if synonym.source in (1, 2, 3)])
            for entry in result.configs}


def test_dynamic_broker_configs_are_described_with_the_same_sources(brokers: dict[str, str]) -> None:
    """The same cluster-wide and per-broker changes on both: the same errors, values, sources and dynamic synonyms."""
    topic = unique("ref-dynamic")
    topic_keys = ("min.insync.replicas", "retention.ms", "compression.type", "max.message.bytes", "segment.bytes")
    broker_keys = ("min.insync.replicas", "log.retention.ms", "compression.type", "message.max.bytes")

    def scenario(bootstrap: str) -> dict[str, Any]:
        _create(bootstrap, topic, 1, **{"segment.bytes": "2000000"})
        errors = [_alter_broker(bootstrap, "", log_retention_ms="7200000", message_max_bytes="2000000"),
                  _alter_broker(bootstrap, "1", log_retention_ms="3600000", compression_type="gzip"),
                  _alter_broker(bootstrap, "1", validate_only=True, min_insync_replicas="2"),
                  _alter_broker(bootstrap, "1", num_partitions="3"),
                  _alter_broker(bootstrap, "", min_insync_replicas="0"),
                  _alter_broker(bootstrap, "", log_segment_bytes="many"),
                  _alter_broker(bootstrap, "1", compression_type="brotli"),
                  _alter_broker(bootstrap, "7", log_retention_ms="1")]
        time.sleep(1)  # Kafka applies the records asynchronously
        observed = {"errors": errors, "topic": _describe(bootstrap, 2, topic, topic_keys),
                    "cluster": _describe(bootstrap, 4, "", broker_keys),
                    "broker": _describe(bootstrap, 4, "1", broker_keys)}
        _alter_broker(bootstrap, "", log_retention_ms=None, message_max_bytes=None)
        _alter_broker(bootstrap, "1", log_retention_ms=None, compression_type=None)
        time.sleep(1)
        observed["reset"] = _describe(bootstrap, 2, topic, topic_keys)
        return observed

    observed = _same(brokers, scenario)
    assert observed["errors"] == [0, 0, 40, 42, 42, 42, 42, 42]
    assert observed["topic"]["retention.ms"][:2] == ("3600000", 2)  # DYNAMIC_BROKER_CONFIG
    assert observed["topic"]["max.message.bytes"][:2] == ("2000000", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG


def test_deleted_records_and_unknown_topics_look_the_same(brokers: dict[str, str]) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from mqbroker.protocols.kafka.messages import cluster

    topic = unique("ref-deleted")

    def scenario(bootstrap: str) -> dict[str, Any]:
        _create(bootstrap, topic, 1)
        producer = _producer(bootstrap)
        for i in range(20):
            producer.produce(topic, value=b"%d" % i)
        assert producer.flush(10) == 0
        admin = AdminClient({"bootstrap.servers": bootstrap})
        partition = TopicPartition(topic, 0, 12)
        low = admin.delete_records([partition])[TopicPartition(topic, 0)].result(10).low_watermark
        fetch = produce_fetch.FetchRequest(max_wait_ms=10, min_bytes=1, topics=(produce_fetch.FetchTopic(
            topic=topic, partitions=(produce_fetch.FetchPartition(partition=0, fetch_offset=3, partition_max_bytes=1024),)),))
        [[below]] = [[p for p in t.partitions] for t in _raw(bootstrap, ApiKey.FETCH, 12, fetch).responses]
        unknown = _raw(bootstrap, ApiKey.METADATA, 12, cluster.MetadataRequest(
            topics=(cluster.MetadataRequestTopic(name=unique("nowhere")),), allow_auto_topic_creation=False))
        return {"low": low, "below": (below.error_code, below.log_start_offset, below.high_watermark),
                "unknown": [t.error_code for t in unknown.topics]}

    assert _same(brokers, scenario) == {"low": 12, "below": (1, -1, -1), "unknown": [3]}
