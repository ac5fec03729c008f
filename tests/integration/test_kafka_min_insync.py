"""``min.insync.replicas`` through the Kafka listener: an ``acks=all`` produce to a partition whose in-sync
replicas are fewer than the topic's ``min.insync.replicas`` is refused with NOT_ENOUGH_REPLICAS (19) and appends
nothing, while ``acks=1`` still succeeds; once a follower catches up again, ``acks=all`` succeeds. Checked on the
wire (the exact error code) and with kafka-python, whose producer raises ``NotEnoughReplicasError``."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from mqbroker.errors import ErrorCode
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import start_cluster, wait_for
from tests.integration.kafka_support import FAST_GROUPS, kafka_bootstrap, kafka_broker_fixture, produce_one, unique


kafka_broker = kafka_broker_fixture("kafka-min-insync")


def _create(bootstrap: str, topic: str, replicas: int, min_insync: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, replicas, config={"min.insync.replicas": str(min_insync)})])[
        topic].result(20)


def _end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("watermarks")})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def test_acks_all_is_refused_below_min_insync_replicas(kafka_broker: BrokerProcess) -> None:
    from kafka import KafkaProducer
    from kafka.errors import NotEnoughReplicasError

    bootstrap, port, topic = kafka_bootstrap(kafka_broker), kafka_broker.ports["kafka"], unique("min-isr")
    _create(bootstrap, topic, 1, 2)  # one broker: one in-sync replica, two required
    assert produce_one(port, topic, -1, b"refused") == ErrorCode.NOT_ENOUGH_REPLICAS
    assert _end_offset(bootstrap, topic) == 0  # refused before the append
    assert produce_one(port, topic, 1, b"leader-only") == 0
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0)
    try:
        with pytest.raises(NotEnoughReplicasError):
            producer.send(topic, b"kafka-python", partition=0).get(timeout=15)
    finally:
        producer.close()
    assert _end_offset(bootstrap, topic) == 1


@pytest.mark.slow
def test_acks_all_follows_the_in_sync_replicas_as_a_follower_dies_and_returns(tmp_path: pathlib.Path) -> None:
    """Two replicas, both required: killing the follower shrinks the ISR and refuses acks=all; restarted, the
    follower catches up, rejoins the ISR, and acks=all is accepted again."""
    brokers = start_cluster(tmp_path, 3, [*FAST_GROUPS, "--set", "broker_session_timeout_ms=2000",
                                          "--set", "replica_lag_time_max_ms=2000"])
    try:
        bootstrap, topic = ",".join(kafka_bootstrap(broker) for broker in brokers), unique("isr")
        _create(bootstrap, topic, 2, 2)
        leader, replicas = wait_for(lambda: _placement(bootstrap, topic), 20, "a leader")
        port = brokers[leader - 1].ports["kafka"]
        assert wait_for(lambda: produce_one(port, topic, -1, b"both") == 0 or None, 20, "acks=all accepted")
        follower = brokers[next(node for node in replicas if node != leader) - 1]
        follower.kill()
        wait_for(lambda: produce_one(port, topic, -1, b"alone") == ErrorCode.NOT_ENOUGH_REPLICAS or None, 30,
                 "NOT_ENOUGH_REPLICAS once the ISR shrank")
        assert produce_one(port, topic, 1, b"leader-only") == 0
        follower.restart()
        wait_for(lambda: produce_one(port, topic, -1, b"again") == 0 or None, 60, "acks=all accepted again")
    finally:
        for broker in brokers:
            broker.kill()


def _placement(bootstrap: str, topic: str) -> tuple[int, list[int]] | None:
    from confluent_kafka.admin import AdminClient

    partition: Any = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[
        topic].partitions.get(0)
    if partition is None or partition.leader < 0 or len(partition.isrs) < 2:
        return None
    return partition.leader, list(partition.replicas)


