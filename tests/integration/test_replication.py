"""Replication on a real three-broker cluster: RF 3, acks=all, ISR shrink and rejoin, leader failover."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin, Consumer, Producer
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import retrying, start_cluster

LAG_MS = 1500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    brokers = start_cluster(tmp_path_factory.mktemp("replication"),
                            extra_args=["--set", f"replica_lag_time_max_ms={LAG_MS}"])
    yield brokers
    for broker in brokers:
        if broker.process is not None and broker.process.poll() is None:
            os.kill(broker.process.pid, signal.SIGCONT)
            broker.stop()


def _partition(bootstrap: str, topic: str, number: int = 0):  # type: ignore[no-untyped-def]
    with Admin(bootstrap) as admin:
        [described] = [t for t in admin.metadata([topic]).topics if t.name == topic]
        return next(p for p in described.partitions if p.partition_index == number)


def _wait_for(condition, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def _read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            values += [message.value for message in consumer.poll(timeout=0.5)]
        return values


def _live(cluster: list[BrokerProcess]) -> BrokerProcess:
    return next(b for b in cluster if b.process is not None and b.process.poll() is None)


def test_replicated_topic_has_three_in_sync_replicas_and_acks_all_works(cluster: list[BrokerProcess]) -> None:
    with Admin(cluster[0].bootstrap) as admin:
        retrying(lambda: admin.create_topics(["replicated"], partitions=3, replication_factor=3,
                                             configs={"min.insync.replicas": "2"}))
    _wait_for(lambda: sorted(_partition(cluster[0].bootstrap, "replicated").isr_nodes) == [1, 2, 3])
    with Producer(cluster[0].bootstrap, acks="all") as producer:
        futures = [producer.send("replicated", value=b"v%d" % n, partition=0) for n in range(200)]
        producer.flush()
        assert [f.result(20).offset for f in futures] == list(range(200))
    assert _read_all(cluster[1].bootstrap, "replicated", 200) == [b"v%d" % n for n in range(200)]


def test_follower_down_leaves_the_isr_then_catches_up_and_rejoins(cluster: list[BrokerProcess]) -> None:
    state = _partition(cluster[0].bootstrap, "replicated")
    follower_id = next(r for r in state.replica_nodes if r != state.leader_id)
    follower = cluster[follower_id - 1]
    follower.kill()
    _wait_for(lambda: follower_id not in _partition(_live(cluster).bootstrap, "replicated").isr_nodes)
    with Producer(_live(cluster).bootstrap, acks="all") as producer:
        futures = [producer.send("replicated", value=b"w%d" % n, partition=0) for n in range(100)]
        producer.flush()
        assert all(f.result(30).offset >= 200 for f in futures)
    follower.start(timeout_s=60)
    _wait_for(lambda: follower_id in _partition(cluster[0].bootstrap, "replicated").isr_nodes, timeout_s=60)


def test_leader_killed_fails_over_to_an_in_sync_replica_without_losing_acknowledged_records(
    cluster: list[BrokerProcess],
) -> None:
    before = _partition(cluster[0].bootstrap, "replicated")
    leader = cluster[before.leader_id - 1]
    leader.kill()
    survivor = next(b for b in cluster if b is not leader)
    _wait_for(lambda: _partition(survivor.bootstrap, "replicated").leader_id not in (-1, before.leader_id))
    after = _partition(survivor.bootstrap, "replicated")
    assert after.leader_epoch > before.leader_epoch
    with Producer(survivor.bootstrap, acks="all") as producer:
        assert producer.send("replicated", value=b"after", partition=0).result(30).offset == 300
    values = _read_all(survivor.bootstrap, "replicated", 301)
    assert values == [b"v%d" % n for n in range(200)] + [b"w%d" % n for n in range(100)] + [b"after"]
    leader.start(timeout_s=60)
    _wait_for(lambda: before.leader_id in _partition(survivor.bootstrap, "replicated").isr_nodes, timeout_s=60)
