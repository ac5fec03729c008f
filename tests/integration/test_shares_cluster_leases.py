"""Leases survive their host on a real three-broker cluster: the share group's host is killed -9 while a
consumer holds records; the new host keeps them leased to that consumer until the lease ends (nobody
else gets them), the holder still settles them, and delivery counts go on, so the delivery limit
dead-letters a record delivered once before the kill and once after it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin, ShareConsumer
from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.client.share_core import ShareMessage
from mqbroker.model import AcknowledgeType
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import controller_leader, retrying, start_cluster, wait_for
from tests.integration.share_support import create_group, group_hosted_away_from, produce, share_host

TOPIC = "leased-tasks"
DEAD = "leased-dead"
LEASE_S = 30
RECORDS = 20


@pytest.fixture()
def cluster(tmp_path: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    brokers = start_cluster(tmp_path, extra_args=["--set", "replica_lag_time_max_ms=2000", "--kafka-tls-port", "0"])
    with Admin(brokers[0].bootstrap) as admin:
        for topic in (TOPIC, DEAD):
            retrying(lambda topic=topic: admin.create_topics(  # type: ignore[misc]
                [topic], partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"}))
    yield brokers
    for broker in brokers:
        if broker.process is not None and broker.process.poll() is None:
            broker.kill()


def _settle(consumer: ShareConsumer, messages: list[ShareMessage], kind: AcknowledgeType, timeout_s: float) -> None:
    """Send one verdict on ``messages`` until the broker stores it (the first tries may meet the dead host)."""
    deadline = time.monotonic() + timeout_s
    while True:
        consumer.acknowledge(messages, kind)
        errors = [outcome.error for outcome in consumer.commit() if outcome.error is not None]
        if not errors:
            return
        assert all(error.retriable or type(error).__name__ == "UnknownMemberIdError" for error in errors), errors
        assert time.monotonic() < deadline, f"{kind.name} not stored in {timeout_s} s: {errors}"
        consumer.wait_joined(5)
        time.sleep(0.2)


def test_a_new_host_keeps_the_dead_hosts_leases_and_delivery_counts(cluster: list[BrokerProcess]) -> None:
    bootstraps = ",".join(broker.bootstrap for broker in cluster)
    group_id, host = group_hosted_away_from(cluster[0].bootstrap, controller_leader(cluster))
    retrying(lambda: create_group(bootstraps, group_id, [TOPIC], lease_ms=str(LEASE_S * 1000),
                                  max_delivery_attempts="2", dead_letter_topic=DEAD), 30)
    produce(bootstraps, TOPIC, [b"task-%d" % n for n in range(RECORDS)])
    holder = ShareConsumer(bootstraps, group_id=group_id, topics=[TOPIC], client_id="holder", records_max=RECORDS,
                           request_timeout_s=5)
    held: list[ShareMessage] = []
    deadline = time.monotonic() + 60
    while len(held) < RECORDS:
        assert time.monotonic() < deadline, f"the holder got {len(held)} of {RECORDS} records"
        held += holder.poll(1.0)
    leased_at = time.time()  # the fetch answered once the leases were replicated
    assert sorted(message.offset for message in held) == list(range(RECORDS))
    assert {message.delivery_count for message in held} == {1}

    victim = cluster[host - 1]
    os.kill(victim.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
    victim.process.wait()  # type: ignore[union-attr]
    survivors = [broker for broker in cluster if broker is not victim]
    survivor_bootstraps = ",".join(broker.bootstrap for broker in survivors)
    wait_for(lambda: share_host(survivors[0].bootstrap, group_id) not in (-1, host), 60, "a new host")

    newcomer = ShareConsumer(survivor_bootstraps, group_id=group_id, topics=[TOPIC], client_id="newcomer",
                             records_max=RECORDS, request_timeout_s=5)
    assert newcomer.wait_joined(30)
    assert newcomer.poll(2.0) == [], "a record leased before the kill went to another consumer"

    by_offset = {message.offset: message for message in held}
    _settle(holder, [by_offset[n] for n in range(0, 10)], AcknowledgeType.RELEASE, 30)  # the holder still holds them
    _settle(holder, [by_offset[n] for n in range(10, 15)], AcknowledgeType.ACCEPT, 30)
    assert time.time() < leased_at + LEASE_S, "the failover took longer than the lease: the test proves nothing"

    got: dict[int, tuple[int, float]] = {}
    deadline = time.monotonic() + LEASE_S + 30
    while len(got) < 15:
        assert time.monotonic() < deadline, f"the newcomer got only {sorted(got)}"
        for message in newcomer.poll(1.0):
            assert message.offset not in got and (message.offset < 10 or message.offset >= 15), message
            got[message.offset] = (message.delivery_count, time.time())
            # The released records are at their limit: a release dead-letters them. The expired ones are accepted.
            (newcomer.release if message.offset < 10 else newcomer.ack)(message)
        newcomer.commit()
    assert {offset: count for offset, (count, _) in got.items()} == {n: 2 for n in [*range(10), *range(15, 20)]}
    expired_at = min(at for offset, (_, at) in got.items() if offset >= 15)
    assert expired_at >= leased_at + LEASE_S - 1, "a kept lease ended before its time"

    with ShareGroupAdmin(survivor_bootstraps) as admin:
        def drained() -> bool:
            described = admin.describe(group_id)
            return described.dead_letter_depth == 10 and all(
                p.acquired == 0 and p.available == 0 and p.lag == 0 for p in described.partitions)

        wait_for(drained, 30, "10 dead letters and nothing left in the group")
    for consumer in (holder, newcomer):
        consumer.close(5)
