"""The mirror to and from a real Apache Kafka 4.x cluster over the Kafka protocol (issue 21).

Apache Kafka (tests/kafka_reference) beside one mqbroker broker. Into mqbroker: a ``mirror`` with
``source.protocol = kafka`` copies a Kafka topic written by plain and transactional producers
(one transaction committed, one aborted). Out of mqbroker: a ``mirror`` with ``target.bootstrap``
copies an mqbroker topic (again with an aborted transaction) into Kafka. Either way every
committed record is there, in its partition and in order, with its key, headers and timestamp,
and no record of the aborted transaction is.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.client.group_admin import GroupAdmin
from mqbroker.connector_model import TaskState
from tests.integration.brokerprocess import BrokerProcess, free_port
from tests.integration.clusterprocess import wait_for
from tests.integration.connector_support import connector_broker, task_status
from tests.integration.kafka_support import ApacheKafka, consume_with_confluent, running_apache_kafka, unique

pytestmark = pytest.mark.kafka_ref

PARTITIONS = 2
#: Records per partition and per kind (plain, committed transaction, aborted transaction).
COUNT = 150

#: A record as both ends compare it: key, value, headers (name, value) and timestamp.
Seen = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ApacheKafka, BrokerProcess]]:
    """An Apache Kafka broker and an mqbroker broker with fast connector status."""
    for kafka in running_apache_kafka(tmp_path_factory.mktemp("apache-kafka")):
        broker = connector_broker(pathlib.Path(tmp_path_factory.mktemp("mqbroker")))
        broker.start()
        try:
            yield kafka, broker
        finally:
            broker.kill()


def _record(kind: str, partition: int, n: int) -> tuple[bytes, bytes, list[tuple[str, bytes]], int]:
    """The ``n``th record of ``kind`` for ``partition``: key, value, headers and a distinct timestamp."""
    return (f"{kind}-key-{partition}-{n % 7}".encode(), f"{kind}-{partition}-{n}".encode(),
            [("kind", kind.encode()), ("n", str(n).encode())], 1_700_000_000_000 + n)


def _expected(partition: int) -> list[Seen]:
    """What a partition must hold at the other end: the plain records, then the committed transaction's."""
    found = []
    for kind in ("plain", "committed"):
        for n in range(COUNT):
            key, value, headers, timestamp_ms = _record(kind, partition, n)
            found.append((key, value, tuple(headers), timestamp_ms))
    return found


def _fill_kafka(bootstrap: str, topic: str) -> None:
    """Plain records, a committed and an aborted transaction, into each partition of a new Kafka topic."""
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept while its future is awaited
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    plain = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for partition in range(PARTITIONS):
        for n in range(COUNT):
            key, value, headers, timestamp_ms = _record("plain", partition, n)
            plain.produce(topic, value=value, key=key, partition=partition, headers=headers, timestamp=timestamp_ms)
    assert plain.flush(30) == 0
    transactional = KafkaProducer({"bootstrap.servers": bootstrap, "transactional.id": unique("mirror-txn"),
                                   "linger.ms": 5})
    transactional.init_transactions(30)
    for kind in ("committed", "aborted"):
        transactional.begin_transaction()
        for partition in range(PARTITIONS):
            for n in range(COUNT):
                key, value, headers, timestamp_ms = _record(kind, partition, n)
                transactional.produce(topic, value=value, key=key, partition=partition, headers=headers,
                                      timestamp=timestamp_ms)
        if kind == "committed":
            transactional.commit_transaction(30)
        else:
            transactional.flush(30)
            transactional.abort_transaction(30)


def _fill_mqbroker(bootstrap: str, topic: str) -> None:
    """The same records into each partition of a new mqbroker topic (native client, transactions included)."""
    with Admin(bootstrap) as admin:
        admin.create_topics([topic], partitions=PARTITIONS)
    with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        futures = [producer.send(topic, key=key, value=value, headers=headers, partition=partition,
                                 timestamp_ms=timestamp_ms)
                   for partition in range(PARTITIONS) for key, value, headers, timestamp_ms in
                   (_record("plain", partition, n) for n in range(COUNT))]
        producer.flush()
        for future in futures:
            future.result(timeout=30)
    with Producer(bootstrap, acks="all", linger_ms=5, transactional_id=unique("mirror-txn")) as producer:
        producer.init_transactions()
        for kind in ("committed", "aborted"):
            producer.begin_transaction()
            for partition in range(PARTITIONS):
                for n in range(COUNT):
                    key, value, headers, timestamp_ms = _record(kind, partition, n)
                    producer.send(topic, key=key, value=value, headers=headers, partition=partition,
                                  timestamp_ms=timestamp_ms)
            if kind == "committed":
                producer.commit_transaction()
            else:
                producer.flush()
                producer.abort_transaction()


def _read_mqbroker(bootstrap: str, topic: str, partition: int) -> list[Seen]:
    """Every record of an mqbroker partition, from its start to its end (read_uncommitted: all it holds)."""
    with Admin(bootstrap) as admin:
        end = admin.list_offset(topic, partition, -1)
    found: list[Seen] = []
    with Consumer(bootstrap, group_id=None) as consumer:
        consumer.assign([(topic, partition)])
        consumer.seek((topic, partition), 0)
        position = 0
        deadline = time.monotonic() + 60
        while position < end and time.monotonic() < deadline:
            for message in consumer.poll(timeout=0.5):
                found.append((message.key, message.value, tuple(message.headers), message.timestamp))
                position = message.offset + 1
    return found


def _end_offsets(bootstrap: str, topic: str) -> int:
    with Admin(bootstrap) as admin:
        try:
            return sum(admin.list_offset(topic, partition, -1) for partition in range(PARTITIONS))
        except Exception:  # the mirror has not created the topic yet
            return 0


def test_a_kafka_topic_is_mirrored_into_mqbroker_committed_records_only_in_order(
        clusters: tuple[ApacheKafka, BrokerProcess]) -> None:
    kafka, broker = clusters
    topic = unique("from-kafka")
    _fill_kafka(kafka.bootstrap, topic)
    name = unique("kafka-in")
    with Admin(broker.bootstrap) as admin:
        admin.create_connector(name, {"type": "mirror", "source.bootstrap": kafka.bootstrap, "source.protocol": "kafka",
                                      "source.alias": "kafka", "target.alias": "here", "topics": topic,
                                      "sync.group.offsets": "false", "fetch.wait.ms": "100"})
    remote = f"kafka.{topic}"
    wait_for(lambda: _end_offsets(broker.bootstrap, remote) >= 2 * COUNT * PARTITIONS, 90,
             f"{remote} holding every committed record")
    for partition in range(PARTITIONS):
        seen = _read_mqbroker(broker.bootstrap, remote, partition)
        assert seen == _expected(partition), f"{remote}-{partition} differs from the source's committed records"
    status = task_status(broker.bootstrap, name)
    assert status.state is TaskState.RUNNING and status.metrics.records_total == 2 * COUNT * PARTITIONS
    wait_for(lambda: task_status(broker.bootstrap, name).metrics.lag_records == 0, 30, "the mirror's lag reaching 0")


def test_an_mqbroker_topic_is_mirrored_into_kafka_committed_records_only_in_order(
        clusters: tuple[ApacheKafka, BrokerProcess]) -> None:
    kafka, broker = clusters
    topic = unique("to-kafka")
    _fill_mqbroker(broker.bootstrap, topic)
    name = unique("kafka-out")
    with Admin(broker.bootstrap) as admin:
        admin.create_connector(name, {"type": "mirror", "target.bootstrap": kafka.bootstrap, "source.alias": "here",
                                      "target.alias": "kafka", "topics": topic, "fetch.wait.ms": "100"})
    remote = f"here.{topic}"
    messages = wait_for(lambda: _kafka_records(kafka.bootstrap, remote, 2 * COUNT * PARTITIONS), 90,
                        f"{remote} in Kafka holding every committed record")
    by_partition: dict[int, list[Seen]] = {}
    for message in messages:
        headers = tuple((name, value) for name, value in message.headers() or ())
        by_partition.setdefault(message.partition(), []).append((message.key(), message.value(), headers,
                                                                 message.timestamp()[1]))
    for partition in range(PARTITIONS):
        assert by_partition.get(partition) == _expected(partition), f"{remote}-{partition} in Kafka differs"
    wait_for(lambda: task_status(broker.bootstrap, name).metrics.records_total == 2 * COUNT * PARTITIONS, 30,
             "the outbound mirror counting every record")


def _kafka_records(bootstrap: str, topic: str, count: int) -> list[Any] | None:
    """Every record of ``topic`` in Kafka once it holds ``count`` (read_committed), or None."""
    from confluent_kafka.admin import AdminClient

    if topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics:
        return None
    found = consume_with_confluent(bootstrap, topic, count + 1, timeout_s=5, **{"isolation.level": "read_committed"})
    return found if len(found) == count else None


def test_a_kafka_groups_offsets_are_translated_into_mqbroker(clusters: tuple[ApacheKafka, BrokerProcess]) -> None:
    """A group's offsets committed in Kafka (inside the committed transaction's records, past the
    markers' gaps) are committed in mqbroker at the same records."""
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition

    kafka, broker = clusters
    topic, group = unique("groups-from-kafka"), unique("kgroup")
    _fill_kafka(kafka.bootstrap, topic)
    # plain records at offsets 0..COUNT-1, the committed transaction's at COUNT..2*COUNT-1 in each partition
    committed_at = COUNT + COUNT // 2
    committer = KafkaConsumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committer.commit(offsets=[TopicPartition(topic, partition, committed_at) for partition in range(PARTITIONS)],
                         asynchronous=False)
    finally:
        committer.close()
    name = unique("kafka-groups")
    with Admin(broker.bootstrap) as admin:
        admin.create_connector(name, {"type": "mirror", "source.bootstrap": kafka.bootstrap, "source.protocol": "kafka",
                                      "source.alias": "kafka", "target.alias": "here", "topics": topic,
                                      "groups": group, "checkpoint.interval.ms": "500", "fetch.wait.ms": "100"})
    remote = f"kafka.{topic}"

    def translated() -> dict[int, int]:
        with GroupAdmin(broker.bootstrap) as groups:
            found = groups.committed_offsets(group)
        return {partition: offset for (found_topic, partition), offset in found.items() if found_topic == remote}

    wait_for(lambda: translated() == dict.fromkeys(range(PARTITIONS), committed_at), 90,
             "the group's offsets translated into mqbroker")
    for partition in range(PARTITIONS):
        records = _read_mqbroker(broker.bootstrap, remote, partition)
        assert records[committed_at][1] == f"committed-{partition}-{COUNT // 2}".encode()


@pytest.mark.parametrize("direction", ["source", pytest.param("target", marks=pytest.mark.slow)])
def test_an_unreachable_kafka_cluster_is_reported_as_an_outage(clusters: tuple[ApacheKafka, BrokerProcess],
                                                                direction: str) -> None:
    _, broker = clusters
    nobody = f"127.0.0.1:{free_port()}"
    name = unique(f"kafka-gone-{direction}")
    config = {"type": "mirror", "source.alias": "kafka", "target.alias": "here", "topics": "anything"}
    if direction == "source":
        config.update({"source.bootstrap": nobody, "source.protocol": "kafka"})
    else:
        config.update({"target.bootstrap": nobody, "source.alias": "here", "target.alias": "kafka"})
    with Admin(broker.bootstrap) as admin:
        admin.create_connector(name, config)
    status = wait_for(lambda: (found := task_status(broker.bootstrap, name)).metrics.in_outage and found, 60,
                      "the unreachable Kafka cluster reported as an outage")
    assert status.state is TaskState.BACKOFF and "Kafka" in (status.metrics.last_error or "")
    with Admin(broker.bootstrap) as admin:
        admin.alter_connector(name, "delete")
