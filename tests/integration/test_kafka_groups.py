"""Kafka consumer groups against mqbroker's coordinator: members join, rebalance, leave and commit, with
librdkafka, kafka-python and aiokafka in one group, eager and cooperative assignors alike."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import wait_for
from tests.integration.kafka_support import kafka_bootstrap, kafka_broker_fixture, unique

FAST = {"heartbeat.interval.ms": 300, "session.timeout.ms": 6000, "enable.auto.commit": False,
        "auto.offset.reset": "earliest"}


kafka_broker = kafka_broker_fixture("kafka-groups")


def _topic(bootstrap: str, partitions: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("grouped")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the future completes
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    return topic


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(count):
        producer.produce(topic, key=str(i), value=str(i))
    assert producer.flush(20) == 0


class _Member:
    """A confluent-kafka consumer polled by the test, remembering what it read."""

    def __init__(self, bootstrap: str, group: str, topic: str, **settings: Any) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **FAST, **settings})
        self.consumer.subscribe([topic])
        self.values: list[bytes] = []

    def poll(self) -> None:
        message = self.consumer.poll(0.1)
        if message is not None and message.error() is None:
            self.values.append(message.value())

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def _poll_until(members: list[_Member], condition: Any, what: str, timeout_s: float = 30.0) -> None:
    def step() -> bool:
        for member in members:
            member.poll()
        return bool(condition())

    wait_for(step, timeout_s, what)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_members_share_partitions_rebalance_when_one_leaves_and_commit(kafka_broker: BrokerProcess,
                                                                       strategy: str) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = kafka_bootstrap(kafka_broker)
    topic, group = _topic(bootstrap, 4), unique("group")
    first = _Member(bootstrap, group, topic, **{"partition.assignment.strategy": strategy})
    second = _Member(bootstrap, group, topic, **{"partition.assignment.strategy": strategy})
    _poll_until([first, second], lambda: first.partitions() and second.partitions()
                and first.partitions() | second.partitions() == {0, 1, 2, 3}
                and not first.partitions() & second.partitions(), "both members assigned")
    _produce(bootstrap, topic, 100)
    _poll_until([first, second], lambda: len(first.values) + len(second.values) == 100, "100 messages read")
    assert sorted(first.values + second.values, key=int) == [str(i).encode() for i in range(100)]
    first.consumer.commit(asynchronous=False)
    second.consumer.commit(asynchronous=False)
    first.consumer.close()  # leaves the group: the other member takes every partition
    _poll_until([second], lambda: second.partitions() == {0, 1, 2, 3}, "the remaining member owns all")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [offsets] = admin.list_consumer_group_offsets([_group_request(group)]).values()
    committed = {tp.partition: tp.offset for tp in offsets.result(10).topic_partitions}
    ends = {p: second.consumer.get_watermark_offsets(TopicPartition(topic, p), 5)[1] for p in range(4)}
    assert committed == ends and sum(ends.values()) == 100
    [described] = admin.describe_consumer_groups([group]).values()
    description = described.result(10)
    assert [member.assignment.topic_partitions and len(member.assignment.topic_partitions)
            for member in description.members] == [4]
    second.consumer.close()


def _group_request(group: str) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)


def test_kafka_python_and_librdkafka_members_share_one_group(kafka_broker: BrokerProcess) -> None:
    """Different clients offer different assignor lists; each is told the name it offered."""
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    bootstrap = kafka_bootstrap(kafka_broker)
    topic, group = _topic(bootstrap, 2), unique("mixed")
    librdkafka = _Member(bootstrap, group, topic, **{"partition.assignment.strategy": "range,roundrobin"})
    python = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, heartbeat_interval_ms=300,
                           partition_assignment_strategy=[RoundRobinPartitionAssignor], auto_offset_reset="earliest",
                           enable_auto_commit=False)
    python_values: list[bytes] = []

    def step() -> bool:
        librdkafka.poll()
        for records in python.poll(timeout_ms=100).values():
            python_values.extend(record.value for record in records)
        return len(librdkafka.partitions()) == 1 and len(python.assignment()) == 1

    wait_for(step, 30, "one partition each")
    _produce(bootstrap, topic, 40)
    wait_for(lambda: step() and len(librdkafka.values) + len(python_values) == 40, 30, "40 messages read")
    assert librdkafka.values and python_values
    python.close()
    librdkafka.consumer.close()


def test_a_static_member_that_restarts_in_time_keeps_its_partitions_without_a_rebalance(
        kafka_broker: BrokerProcess) -> None:
    bootstrap = kafka_bootstrap(kafka_broker)
    topic, group = _topic(bootstrap, 2), unique("static")
    settings = {"group.instance.id": "instance-a", "session.timeout.ms": 10000}
    first = _Member(bootstrap, group, topic, **settings)
    _poll_until([first], lambda: first.partitions() == {0, 1}, "assigned")
    first.consumer.close()  # a static member does not leave the group when it closes
    started = time.monotonic()
    again = _Member(bootstrap, group, topic, **settings)
    _poll_until([again], lambda: again.partitions() == {0, 1}, "assigned again", timeout_s=8)
    assert time.monotonic() - started < 8
    again.consumer.close()
