"""Consumer groups on a real three-broker cluster: the coordinator is the leader of the group's offsets partition."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.client.connection import BlockingConnection
from mqbroker.client.group_admin import GroupAdmin
from mqbroker.errors import (
    BrokerError,
    IllegalGenerationError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from mqbroker.groups.service import OFFSETS_TOPIC, offsets_partition
from mqbroker.protocols.native import messages as m
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import controller_leader, retrying, start_cluster, wait_for
from tests.integration.test_consumer_offset_reset import committed_or_sought

#: The end-to-end test reads TOPIC, the failover test FAILOVER_TOPIC (each from the start).
TOPIC = "cluster-groups"
FAILOVER_TOPIC = "cluster-groups-failover"
PARTITIONS = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    brokers = start_cluster(tmp_path_factory.mktemp("cluster-groups"),
                            extra_args=["--set", "group_initial_rebalance_delay_ms=0",
                                        "--set", "replica_lag_time_max_ms=2000"])
    with Admin(brokers[0].bootstrap) as admin:
        retrying(lambda: admin.create_topics([TOPIC, FAILOVER_TOPIC], partitions=PARTITIONS, replication_factor=3,
                                             configs={"min.insync.replicas": "2"}))
    yield brokers
    for broker in brokers:
        if broker.process is not None and broker.process.poll() is None:
            broker.stop()


def _running(cluster: list[BrokerProcess]) -> list[BrokerProcess]:
    return [b for b in cluster if b.process is not None and b.process.poll() is None]


def _offsets_partitions(bootstrap: str) -> list[m.MetadataPartition]:
    with Admin(bootstrap) as admin:
        topics = [t for t in admin.metadata([OFFSETS_TOPIC]).topics if t.name == OFFSETS_TOPIC and not t.error_code]
    return sorted(topics[0].partitions, key=lambda p: p.partition_index) if topics else []


def _coordinator_of(bootstrap: str, group_id: str) -> int:
    """The node id FindCoordinator names (-1 while there is none)."""
    host, port = bootstrap.split(":")
    connection = BlockingConnection(host, int(port), "test", 10)
    try:
        return connection.request(m.FindCoordinatorRequest(key=group_id), 10).node_id  # type: ignore[attr-defined]
    except BrokerError:  # COORDINATOR_NOT_AVAILABLE while the partition has no leader
        return -1
    finally:
        connection.close()


def _group_led_away_from(bootstrap: str, avoid: int, prefix: str) -> tuple[str, int]:
    """A group id whose offsets partition is led by a broker other than ``avoid``, and that broker."""
    partitions = _offsets_partitions(bootstrap)
    for n in range(1000):
        group_id = f"{prefix}-{n}"
        leader = partitions[offsets_partition(group_id, len(partitions))].leader_id
        if leader not in (avoid, -1):
            return group_id, leader
    raise AssertionError("no group id maps to another broker")


def _produce(bootstraps: list[str], topic: str, start: int, count: int) -> None:
    with Producer(bootstraps, acks="all") as producer:
        futures = [producer.send(topic, value=b"%d" % n, key=b"%d" % n) for n in range(start, start + count)]
        producer.flush()
        for future in futures:
            future.result(30)


def test_offsets_topic_is_replicated_on_three_brokers(cluster: list[BrokerProcess]) -> None:
    wait_for(lambda: len(_offsets_partitions(cluster[0].bootstrap)) == 8)
    partitions = _offsets_partitions(cluster[0].bootstrap)
    assert all(sorted(p.replica_nodes) == [1, 2, 3] for p in partitions), partitions
    wait_for(lambda: all(len(p.isr_nodes) == 3 for p in _offsets_partitions(cluster[0].bootstrap)))


def test_group_coordinated_by_a_non_controller_broker_works_end_to_end(cluster: list[BrokerProcess]) -> None:
    controller = controller_leader(cluster)
    bootstrap = cluster[controller - 1].bootstrap  # FindCoordinator must send the client elsewhere
    group_id, coordinator = _group_led_away_from(bootstrap, controller, "away")
    assert _coordinator_of(bootstrap, group_id) == coordinator != controller
    _produce([bootstrap], TOPIC, 0, 200)
    seen: set[bytes] = set()
    with Consumer(bootstrap, group_id=group_id, topics=[TOPIC], auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        deadline = time.monotonic() + 30
        while len(seen) < 200 and time.monotonic() < deadline:
            seen.update(message.value for message in consumer.poll(0.5))
            consumer.commit()
        assert seen == {b"%d" % n for n in range(200)}
        with GroupAdmin(bootstrap) as admin:
            assert sum(admin.committed_offsets(group_id).values()) == 200
            assert len(admin.describe_group(group_id).members) == 1
            assert group_id in dict(admin.list_groups())
    # A broker that does not lead the group's offsets partition refuses its requests.
    other = next(broker for node_id, broker in enumerate(cluster, start=1) if node_id != coordinator)
    host, port = other.bootstrap.split(":")
    connection = BlockingConnection(host, int(port), "test", 10)
    try:
        with pytest.raises(NotCoordinatorError):
            connection.request(m.OffsetFetchRequest(group_id=group_id, topics=None), 10)
    finally:
        connection.close()


def test_a_none_reset_member_starts_at_the_commits_and_raises_for_a_partition_without_one(
        cluster: list[BrokerProcess]) -> None:
    """``auto_offset_reset="none"`` with the group coordinated by a broker other than the bootstrap one."""
    controller = controller_leader(cluster)
    bootstrap = cluster[controller - 1].bootstrap
    group_id, _ = _group_led_away_from(bootstrap, controller, "none")
    committed_or_sought(bootstrap, "cluster-groups-none", group_id, replication_factor=3)


def test_killing_the_coordinator_moves_the_group_and_keeps_its_commits(cluster: list[BrokerProcess]) -> None:
    bootstraps = [broker.bootstrap for broker in cluster]
    group_id, coordinator = _group_led_away_from(cluster[0].bootstrap, -1, "failover")
    _produce(bootstraps, FAILOVER_TOPIC, 1000, 400)
    seen: set[bytes] = set()
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            with Consumer(bootstraps, group_id=group_id, topics=[FAILOVER_TOPIC], auto_offset_reset="earliest",
                          enable_auto_commit=False, session_timeout_ms=10_000,
                          heartbeat_interval_ms=500) as consumer:
                uncommitted = False
                while not stop.is_set():
                    values = [message.value for message in consumer.poll(0.3)]
                    with lock:
                        seen.update(values)
                    uncommitted = uncommitted or bool(values)
                    if uncommitted:
                        try:
                            consumer.commit()
                            uncommitted = False
                        except (IllegalGenerationError, UnknownMemberIdError, RebalanceInProgressError):
                            # A rebalance ended our generation. A partition that moved is read again by its new
                            # owner from the last commit; one this member kept keeps its position, so its
                            # records are not delivered again and the commit is retried on the next poll.
                            pass
        except BaseException as error:  # reported by the test below
            errors.append(error)

    members = [threading.Thread(target=consume) for _ in range(2)]
    for member in members:
        member.start()
    try:
        wait_for(lambda: len(seen) >= 400, timeout_s=60)
        with GroupAdmin(bootstraps) as admin:
            wait_for(lambda: sum(admin.committed_offsets(group_id).values()) == 400, timeout_s=30)
            before = admin.committed_offsets(group_id)
        victim = cluster[coordinator - 1]
        os.kill(victim.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
        victim.process.wait()  # type: ignore[union-attr]
        survivors = [b.bootstrap for b in _running(cluster)]
        wait_for(lambda: _coordinator_of(survivors[0], group_id) not in (-1, coordinator), timeout_s=30)
        _produce(survivors, FAILOVER_TOPIC, 2000, 300)
        wait_for(lambda: len(seen) >= 700 or bool(errors), timeout_s=60)
        assert not errors, errors
        with GroupAdmin(survivors) as admin:
            wait_for(lambda: sum(admin.committed_offsets(group_id).values()) == 700, timeout_s=30)
            after = admin.committed_offsets(group_id)
            assert all(after[partition] >= offset for partition, offset in before.items()), (before, after)
            wait_for(lambda: len(admin.describe_group(group_id).members) == 2, timeout_s=30)
        assert seen == {b"%d" % n for n in range(1000, 1400)} | {b"%d" % n for n in range(2000, 2300)}
    finally:
        stop.set()
        for member in members:
            member.join(30)
    cluster[coordinator - 1].start(timeout_s=60)
