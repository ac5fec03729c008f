"""A 3-broker cluster seen through the Kafka listener: every broker advertised at its Kafka port, and an
idempotent librdkafka producer whose partition leader is killed with SIGKILL loses nothing and duplicates nothing;
``kafka-reassign-partitions`` moves a partition between brokers."""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import pytest

from tests.integration.clusterprocess import start_cluster, wait_for
from tests.integration.kafka_support import FAST_GROUPS, consume_with_confluent, kafka_bootstrap, kafka_tool, unique

MESSAGES = 3000


def test_an_idempotent_producer_survives_a_leader_killed_mid_stream(tmp_path: pathlib.Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = start_cluster(tmp_path, 3, [*FAST_GROUPS, "--set", "broker_session_timeout_ms=2000"])
    try:
        bootstrap = ",".join(kafka_bootstrap(broker) for broker in brokers)
        topic = unique("failover")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(20)
        metadata = wait_for(lambda: _leader(admin, topic), 20, "a leader")
        assert {(b.id, b.port) for b in admin.list_topics(timeout=10).brokers.values()} == {
            (node_id, broker.ports["kafka"]) for node_id, broker in enumerate(brokers, start=1)}
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                             "linger.ms": 2, "message.timeout.ms": 60000, "retry.backoff.ms": 50})
        outcomes: dict[int, Any] = {}
        for i in range(MESSAGES):
            if i == MESSAGES // 3:
                brokers[metadata - 1].kill()  # the leader, mid-stream, without any shutdown work
            producer.produce(topic, value=b"%06d" % i, on_delivery=lambda error, m, i=i: outcomes.__setitem__(i, error))
            producer.poll(0)
            if i % 200 == 0:
                time.sleep(0.05)  # a steady stream, so the kill lands between acknowledged and pending batches
        assert producer.flush(90) == 0
        assert [i for i, error in outcomes.items() if error is not None] == []
        survivors = ",".join(kafka_bootstrap(b) for n, b in enumerate(brokers, start=1) if n != metadata)
        read = consume_with_confluent(survivors, topic, MESSAGES, timeout_s=30)
        assert [m.value() for m in read] == [b"%06d" % i for i in range(MESSAGES)]  # all, once, in order
        assert read[-1].offset() == MESSAGES - 1  # and nothing else in the log: no duplicate anywhere
    finally:
        for broker in brokers:
            broker.kill()


def _leader(admin: Any, topic: str) -> int | None:
    partition = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
    return partition.leader if partition is not None and partition.leader >= 0 else None


@pytest.mark.slow
def test_kafka_reassign_partitions_moves_a_partition_to_another_broker(tmp_path: pathlib.Path) -> None:
    """``kafka-reassign-partitions`` moves a replica between brokers; the records move with it. Replicas a client
    chooses at creation are where it chose."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = start_cluster(tmp_path, 3, list(FAST_GROUPS))
    try:
        bootstrap = ",".join(kafka_bootstrap(broker) for broker in brokers)
        topic = unique("moved")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(20)
        source = wait_for(lambda: _leader(admin, topic), 20, "a leader")
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for number in range(100):
            producer.produce(topic, value=b"%03d" % number)
        assert producer.flush(20) == 0
        target = next(node_id for node_id in (1, 2, 3) if node_id != source)
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0,
                                                                   "replicas": [target]}]}))
        arguments = ("--bootstrap-server", bootstrap, "--reassignment-json-file", str(plan))
        assert kafka_tool("kafka-reassign-partitions", *arguments, "--execute").returncode == 0
        wait_for(lambda: "is completed" in kafka_tool("kafka-reassign-partitions", *arguments, "--verify").stdout,
                 60, "the reassignment to complete")
        replicas = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].replicas
        assert (replicas, _leader(admin, topic)) == ([target], target)
        read = consume_with_confluent(kafka_bootstrap(brokers[target - 1]), topic, 100, timeout_s=20)
        assert [m.value() for m in read] == [b"%03d" % number for number in range(100)]
        placed = unique("placed")  # replicas chosen by the client at creation: placed, then moved there
        admin.create_topics([NewTopic(placed, 2, replica_assignment=[[3, 1], [2, 3]])])[placed].result(20)
        wait_for(lambda: [p.replicas for _, p in sorted(
            admin.list_topics(placed, timeout=10).topics[placed].partitions.items())] == [[3, 1], [2, 3]],
            30, "the chosen replicas")
    finally:
        for broker in brokers:
            broker.kill()
