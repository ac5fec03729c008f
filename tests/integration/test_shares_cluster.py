"""Share groups on a real three-broker cluster: the group's host (the leader of its ``__share_group_state``
partition) is killed -9 mid-stream, the group moves to another broker with its replicated state, and
the consumers follow it: every record is acknowledged, none twice, nothing is left."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin, Producer
from mqbroker.client.share_admin import ShareGroupAdmin
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import (
    controller_leader,
    retrying,
    start_cluster,
    wait_for,
)
from tests.integration.share_support import (
    ShareChild,
    acknowledged,
    create_group,
    delivered,
    group_hosted_away_from,
    kill_children,
    share_host,
    unanswered,
)

TOPIC = "cluster-tasks"


@pytest.fixture(autouse=True)
def _children_killed() -> Iterator[None]:
    """Consumer processes end with their test, whatever its outcome."""
    yield
    kill_children()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    brokers = start_cluster(tmp_path_factory.mktemp("cluster-shares"),
                            extra_args=["--set", "replica_lag_time_max_ms=2000", "--kafka-tls-port", "0"])
    with Admin(brokers[0].bootstrap) as admin:
        retrying(lambda: admin.create_topics([TOPIC], partitions=2, replication_factor=3,
                                             configs={"min.insync.replicas": "2"}))
    yield brokers
    for broker in brokers:
        if broker.process is not None and broker.process.poll() is None:
            broker.kill()


def test_killing_the_share_groups_host_moves_it_and_its_consumers_lose_nothing(cluster: list[BrokerProcess]) -> None:
    bootstraps = ",".join(broker.bootstrap for broker in cluster)
    group_id, host = group_hosted_away_from(cluster[0].bootstrap, controller_leader(cluster))
    retrying(lambda: create_group(bootstraps, group_id, [TOPIC], lease_ms="3000"), 30)
    assert share_host(cluster[0].bootstrap, group_id) == host
    workers = [ShareChild(bootstraps, group_id, TOPIC, f"w{n}") for n in range(3)]
    for worker in workers:
        assert worker.joined.wait(60), worker.errors()
    produced: set[tuple[int, int]] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def produce_steadily() -> None:
        with Producer(bootstraps, acks="all", linger_ms=1, request_timeout_ms=10_000) as producer:
            number = 0
            while not stop.is_set():
                def landed(error: object, metadata: object) -> None:
                    if error is None:
                        with lock:
                            produced.add((metadata.partition, metadata.offset))  # type: ignore[attr-defined]
                producer.send(TOPIC, b"task-%d" % number, key=b"%d" % number, on_delivery=landed)
                number += 1
                stop.wait(0.003)
            producer.flush(60)

    producing = threading.Thread(target=produce_steadily)
    producing.start()
    victim = cluster[host - 1]
    try:
        wait_for(lambda: len(acknowledged(workers)) >= 300, 60, "acknowledgements before the kill")
        os.kill(victim.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
        victim.process.wait()  # type: ignore[union-attr]
        survivor = next(b for b in cluster if b is not victim)
        wait_for(lambda: share_host(survivor.bootstrap, group_id) not in (-1, host), 60, "a new host")
        before = len(acknowledged(workers))
        wait_for(lambda: len(acknowledged(workers)) >= before + 300, 90, "acknowledgements through the new host")
    finally:
        stop.set()
        producing.join(90)

    wait_for(lambda: set(acknowledged(workers)) | unanswered(workers) >= produced, 90,
             "every produced record acknowledged")
    survivors = ",".join(b.bootstrap for b in cluster if b is not victim)
    with ShareGroupAdmin(survivors) as admin:
        wait_for(lambda: all(p.lag == 0 and p.acquired == 0 and p.available == 0
                             for p in admin.describe(group_id).partitions), 60, "nothing left in the group")
    assert set(delivered(workers)) >= produced
    twice = sorted(record for record, count in acknowledged(workers).items() if count > 1)
    assert not twice, f"acknowledged twice: {twice[:10]}"
    for worker in workers:
        assert worker.process.poll() is None, worker.errors()
        worker.kill()
