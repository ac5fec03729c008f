"""The mirror between two clusters on loopback, under load, with brokers killed (issue 21).

A one-broker cluster and a three-broker cluster: records keep arriving at the source while the
broker running the mirror task, or the source partitions' leaders, are killed with SIGKILL.
Every source record must appear in the target, in the same partition and order, once; a
consumer group switched to the target resumes at its translated offset.
"""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.client.group_admin import GroupAdmin
from mqbroker.connector_model import TaskState
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import retrying, start_cluster, wait_for
from tests.integration.connector_support import FAST_CONNECTORS, connector_broker, task_status

#: The target cluster: fast status, a dead follower leaves the ISR after 2 s (acks=all waits that long).
CLUSTER_ARGS = [*FAST_CONNECTORS, "--set", "replica_lag_time_max_ms=2000"]

Stored = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]


class SteadyProducer:
    """Produces keyed records at a steady rate from a thread until stopped (acks=all, idempotent)."""

    def __init__(self, bootstrap: str, topic: str, rate_per_second: int) -> None:
        self._bootstrap, self._topic, self._rate = bootstrap, topic, rate_per_second
        self._stop = threading.Event()
        self.acknowledged = 0
        self.failures: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with Producer(self._bootstrap, acks="all", linger_ms=5, request_timeout_ms=60_000) as producer:
                sequence = 0
                started = time.monotonic()
                while not self._stop.is_set():
                    due = int((time.monotonic() - started) * self._rate)
                    futures = [producer.send(self._topic, key=f"device-{n % 50}".encode(), value=f"reading-{n}".encode(),
                                             headers=[("n", str(n).encode())]) for n in range(sequence, due)]
                    sequence = max(sequence, due)
                    producer.flush()
                    for future in futures:
                        future.result(timeout=120)
                        self.acknowledged += 1
                    time.sleep(0.01)
        except BaseException as error:  # reported by stop()
            self.failures.append(error)

    def stop(self) -> int:
        """Stop producing; the count of acknowledged records."""
        self._stop.set()
        self._thread.join(timeout=180)
        assert not self.failures, f"the producer failed: {self.failures[0]!r}"
        return self.acknowledged


def read_partition(bootstrap: str | list[str], topic: str, partition: int, start: int = 0) -> list[Stored]:
    """A partition's records from ``start`` to its end as it is now: key, value, headers, timestamp."""
    with Admin(bootstrap) as admin:
        end = retrying(lambda: admin.list_offset(topic, partition, -1), timeout_s=60)
    records: list[Stored] = []
    with Consumer(bootstrap, group_id=None) as consumer:
        assigned = (topic, partition)
        consumer.assign([assigned])
        consumer.seek(assigned, start)
        position = start
        deadline = time.monotonic() + 120
        while position < end:
            assert time.monotonic() < deadline, f"{topic}-{partition} not read to {end} in time"
            for message in consumer.poll(timeout=1.0):
                if message.offset < end:
                    records.append((message.key, message.value, message.headers, message.timestamp))
                position = message.offset + 1
    return records


def wait_for_the_copy(source: str | list[str], target: str | list[str], topic: str, remote: str, partitions: int, start: int = 0) -> None:
    """Wait until each remote partition holds as many records past ``start`` as its source partition."""
    with Admin(source) as admin:
        ends = [retrying(lambda p=p: admin.list_offset(topic, p, -1), timeout_s=60) for p in range(partitions)]

    def copied() -> bool:
        with Admin(target) as admin:
            return all(retrying(lambda p=p: admin.list_offset(remote, p, -1), timeout_s=60) - start >= ends[p]
                       for p in range(partitions))

    wait_for(copied, timeout_s=180, what=f"{remote} holding every record of {topic}", interval_s=1.0)


def assert_same_records(source: str | list[str], target: str | list[str], topic: str, remote: str, partitions: int, start: int = 0) -> int:
    """Each remote partition past ``start`` equals its source partition record for record; the count."""
    total = 0
    for partition in range(partitions):
        originals = read_partition(source, topic, partition)
        copies = read_partition(target, remote, partition, start)
        assert len(copies) == len(originals), f"partition {partition}: {len(copies)} copies of {len(originals)} records"
        assert copies == originals, f"partition {partition}: the copies differ from the source records"
        total += len(originals)
    return total


@pytest.fixture
def clusters(tmp_path: pathlib.Path) -> Iterator[tuple[BrokerProcess, list[BrokerProcess]]]:
    """A one-broker source cluster and a three-broker target cluster."""
    source = connector_broker(tmp_path / "source")
    source.start()
    try:
        target = start_cluster(tmp_path / "target", 3, extra_args=CLUSTER_ARGS)
        try:
            yield source, target
        finally:
            for broker in target:
                broker.kill()
    finally:
        source.kill()


def test_mirror_survives_kill_9_of_its_owner_and_a_group_resumes_at_the_translated_offset(
        clusters: tuple[BrokerProcess, list[BrokerProcess]]) -> None:
    source, target = clusters
    bootstrap = [broker.bootstrap for broker in target]
    with Admin(source.bootstrap) as admin:
        admin.create_topics(["orders"], partitions=4, configs={"retention.ms": "604800001"})
    with Admin(target[0].bootstrap) as admin:  # the remote topic exists already: its records move every offset by 100
        retrying(lambda: admin.create_topics(["east.orders"], partitions=4, replication_factor=3))
    with Producer(target[0].bootstrap, acks="all") as producer:
        for partition in range(4):
            for n in range(100):
                producer.send("east.orders", value=b"older", partition=partition)
        producer.flush()

    load = SteadyProducer(source.bootstrap, "orders", rate_per_second=1_000)
    with Admin(target[1].bootstrap) as admin:
        retrying(lambda: admin.create_connector("from-east", {
            "type": "mirror", "source.bootstrap": source.bootstrap, "source.alias": "east", "target.alias": "west",
            "topics": "orders", "groups": "billing", "checkpoint.interval.ms": "1000",
            "refresh.interval.ms": "2000", "target.replication.factor": "3"}))
    wait_for(lambda: task_status(target[1].bootstrap, "from-east").metrics.records_total > 2_000, timeout_s=60,
             what="the mirror copying")
    owner = task_status(target[1].bootstrap, "from-east").owner_id
    target[owner - 1].kill()
    survivor = next(broker for broker in target if broker.process and broker.process.poll() is None)
    moved = wait_for(lambda: (status := task_status(survivor.bootstrap, "from-east")).owner_id not in (owner, -1)
                     and status.state is TaskState.RUNNING and status, timeout_s=60, what="the task on another broker")
    assert moved.owner_id != owner
    # Records keep arriving while the task runs on its new owner: it copies a few thousand more.
    wait_for(lambda: task_status(survivor.bootstrap, "from-east").metrics.records_total
             > moved.metrics.records_total + 2_000, timeout_s=60, what="the task copying on its new owner")
    target[owner - 1].restart()
    produced = load.stop()

    wait_for_the_copy(source.bootstrap, bootstrap, "orders", "east.orders", 4, start=100)
    assert assert_same_records(source.bootstrap, bootstrap, "orders", "east.orders", 4, start=100) == produced
    with Admin(bootstrap) as admin:
        assert admin.describe_configs("east.orders")["retention.ms"] == "604800001"

    # A consumer group reads part of the source, then switches to the target.
    committed = {}
    with Consumer(source.bootstrap, group_id="billing", topics=["orders"], auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        read = 0
        while read < produced // 2:
            read += len(consumer.poll(timeout=1.0))
        consumer.commit()
        committed = {partition: consumer.position((topic, partition)) for topic, partition in consumer.assignment()}
    expected = {partition: offset + 100 for partition, offset in committed.items()}
    ends = {partition: _end(source.bootstrap, partition) for partition in committed}

    def translated() -> bool:
        with GroupAdmin(bootstrap) as groups:
            found = groups.committed_offsets("billing")
        return {partition: offset for (_, partition), offset in found.items()} == expected

    wait_for(translated, timeout_s=60, what="the group's translated offsets committed in the target")
    with Consumer(bootstrap, group_id="billing", topics=["east.orders"], enable_auto_commit=False) as consumer:
        first: dict[int, tuple[int, bytes | None]] = {}
        deadline = time.monotonic() + 60
        while len(first) < sum(1 for partition, offset in committed.items() if offset < ends[partition]):
            assert time.monotonic() < deadline, "the switched group did not read every partition"
            for message in consumer.poll(timeout=1.0):
                first.setdefault(message.partition, (message.offset, message.value))
    for partition, (offset, value) in first.items():
        assert offset == expected[partition], "the group resumed elsewhere than at its translated offset"
        assert value == read_partition(source.bootstrap, "orders", partition)[committed[partition]][1]


def _end(bootstrap: str, partition: int) -> int:
    with Admin(bootstrap) as admin:
        return admin.list_offset("orders", partition, -1)


def _clicks_partitions(bootstrap: str | list[str]) -> list[Any]:
    """The partitions of the source topic ``clicks``, by index."""
    with Admin(bootstrap) as admin:
        (described,) = [topic for topic in admin.metadata(["clicks"]).topics]
        return sorted(described.partitions, key=lambda partition: partition.partition_index)


def test_mirror_survives_kill_9_of_the_source_leaders(tmp_path: pathlib.Path) -> None:
    sources = start_cluster(tmp_path / "source", 3, extra_args=["--set", "replica_lag_time_max_ms=2000"])
    target = connector_broker(tmp_path / "target")
    try:
        target.start()
        bootstrap = [broker.bootstrap for broker in sources]
        with Admin(sources[0].bootstrap) as admin:
            retrying(lambda: admin.create_topics(["clicks"], partitions=3, replication_factor=3,
                                                 configs={"min.insync.replicas": "2"}))
        load = SteadyProducer(bootstrap, "clicks", rate_per_second=1_000)
        with Admin(target.bootstrap) as admin:
            admin.create_connector("from-central", {
                "type": "mirror", "source.bootstrap": ",".join(bootstrap), "source.alias": "central", "target.alias": "edge",
                "topics.pattern": "click.*", "checkpoint.interval.ms": "1000"})
        wait_for(lambda: task_status(target.bootstrap, "from-central").metrics.records_total > 1_000, timeout_s=60,
                 what="the mirror copying")
        for partition in (0, 1):
            leader = _clicks_partitions(bootstrap)[partition].leader_id
            victim = sources[leader - 1]
            survivors = [broker.bootstrap for broker in sources if broker is not victim]
            victim.kill()
            # A new leader is elected; the mirror and the producer follow it and copying goes on.
            wait_for(lambda: _clicks_partitions(survivors)[partition].leader_id not in (leader, -1),  # noqa: B023
                     timeout_s=60, what=f"a new leader of clicks-{partition}")
            copied = task_status(target.bootstrap, "from-central").metrics.records_total
            wait_for(lambda: task_status(target.bootstrap, "from-central").metrics.records_total > copied + 1_000,  # noqa: B023
                     timeout_s=60, what="the mirror copying after the election")
            victim.restart()
            wait_for(lambda: all(leader in p.isr_nodes for p in _clicks_partitions(bootstrap)),  # noqa: B023
                     timeout_s=60, what=f"broker {leader} back in every ISR")
        produced = load.stop()
        wait_for_the_copy(bootstrap, target.bootstrap, "clicks", "central.clicks", 3)
        assert assert_same_records(bootstrap, target.bootstrap, "clicks", "central.clicks", 3) == produced
        status = task_status(target.bootstrap, "from-central")
        assert status.state is TaskState.RUNNING and status.metrics.lag_records == 0
    finally:
        target.kill()
        for broker in sources:
            broker.kill()
