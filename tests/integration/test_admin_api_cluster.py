"""The admin API of one broker of three: the whole cluster's brokers and Raft state, partitions led elsewhere,
share groups hosted elsewhere and connectors whose tasks run elsewhere."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from mqbroker.client import Producer, ShareConsumer
from mqbroker.connectors.state import CONNECTORS_TOPIC, task_partition
from mqbroker.shares.state_records import STATE_TOPIC, state_partition
from tests.integration.admin_api_support import AdminApi
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import start_cluster, wait_for
from tests.integration.connector_support import FAST_CONNECTORS
from tests.integration.redisprocess import RedisProcess, running_redis


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Three brokers, each a controller voter."""
    brokers = start_cluster(tmp_path_factory.mktemp("admin-api-cluster"), extra_args=FAST_CONNECTORS)
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()


def test_one_broker_describes_the_cluster_and_reads_partitions_led_by_the_others(cluster: list[BrokerProcess]) -> None:
    first = cluster[0]
    api = AdminApi(f"http://127.0.0.1:{first.ports['http']}")
    described = wait_for(lambda: (found := api.json("describeCluster"))["raft"]["leader"] > 0 and found, 20)
    assert described["raft"]["voters"] == [1, 2, 3] and described["node_id"] == 1
    assert {(b["node_id"], b["state"], b["this_broker"]) for b in described["brokers"]} == {
        (1, "active", True), (2, "active", False), (3, "active", False)}
    assert sum(b["controller"] for b in api.json("listBrokers")) == 1

    api.json("createTopic", json={"name": "spread", "partitions": 3, "replication_factor": 3})
    topic = wait_for(lambda: (found := api.json("describeTopic", topic="spread"))
                     and all(len(p["isr"]) == 3 and p["leader"] > 0 for p in found["partitions"]) and found, 20)
    assert {p["leader"] for p in topic["partitions"]} == {1, 2, 3}  # spread: two are led by other brokers
    with Producer(first.bootstrap, acks="all") as producer:
        for partition in range(3):
            for n in range(4):
                producer.send("spread", value=b"p%d-%d" % (partition, n), partition=partition)
    def all_written() -> list | None:
        found = api.json("listPartitions", topic="spread")
        return found if all(p["latest_offset"] == 4 for p in found) else None

    partitions = wait_for(all_written, 20)
    assert all(p["size_bytes"] > 0 and p["error"] is None for p in partitions)  # every replica is here too
    records = api.json("browseRecords", topic="spread", params={"limit": 12})["records"]
    assert sorted((r["partition"], r["offset"]) for r in records) == [(p, o) for p in range(3) for o in range(4)]
    remote = next(p["partition"] for p in partitions if p["leader"] != 1)
    start = api.json("deleteRecords", topic="spread", partition=remote, params={"before_offset": 3})
    assert start["log_start_offset"] == 3  # at the leader, through the routing broker
    second = AdminApi(f"http://127.0.0.1:{cluster[1].ports['http']}")
    assert wait_for(lambda: second.json("describePartition", topic="spread", partition=remote)
                    ["earliest_offset"] == 3, 20)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    yield from running_redis(tmp_path_factory.mktemp("admin-api-cluster-redis"))


def _led_elsewhere(api: AdminApi, topic: str, node_id: int, partition_of: Callable[[str, int], int],
                   prefix: str) -> str:
    """A name whose partition of ``topic`` another broker than ``node_id`` leads (once every partition has one)."""
    partitions = wait_for(lambda: (found := api.json("listPartitions", topic=topic))
                          and all(p["leader"] > 0 for p in found) and found, timeout_s=60)
    leaders = {p["partition"]: p["leader"] for p in partitions}
    return next(name for name in (f"{prefix}-{n}" for n in range(1000))
                if leaders[partition_of(name, len(leaders))] != node_id)


def test_share_groups_hosted_elsewhere_are_listed_described_and_deleted_through_any_broker(
        cluster: list[BrokerProcess]) -> None:
    api = AdminApi(f"http://127.0.0.1:{cluster[0].ports['http']}")
    api.json("createTopic", json={"name": "work", "partitions": 2, "replication_factor": 3})
    group = _led_elsewhere(api, STATE_TOPIC, 1, state_partition, "remote")
    created = api.json("createShareGroup", json={"group_id": group, "topics": ["work"],
                                                 "configs": {"auto.offset.reset": "earliest"}})
    assert created["group_id"] == group  # created at its host, broker 2 or 3, through broker 1
    with Producer(cluster[1].bootstrap, acks="all") as producer:
        for n in range(6):
            producer.send("work", value=b"w%d" % n, partition=n % 2)
    consumer = ShareConsumer(cluster[2].bootstrap, group_id=group, topics=["work"], client_id="far-worker",
                             records_max=6, fetch_wait_ms=200)
    try:
        held = wait_for(lambda: consumer.poll(1.0), timeout_s=30)
        described = wait_for(lambda: (found := api.json("describeShareGroup", group=group))
                             ["in_flight"] == len(held) and found, 20)
        assert [m["client_id"] for m in described["members"]] == ["far-worker"]
        assert {g["group_id"]: g["members"] for g in api.json("listShareGroups")}[group] == 1
        api.call("deleteShareGroup", group=group, expect=409)
    finally:
        consumer.close()
    hook = _led_elsewhere(api, STATE_TOPIC, 1, state_partition, "hook")
    api.json("createSubscription", json={"name": hook, "topic": "work", "endpoint": "http://127.0.0.1:9/"})
    assert [s["name"] for s in api.json("listSubscriptions")] == [hook]
    assert api.json("describeSubscription", name=hook)["push_endpoint"] == "http://127.0.0.1:9/"
    api.call("deleteSubscription", name=hook, expect=204)
    wait_for(lambda: api.call("deleteShareGroup", group=group).status_code == 204, timeout_s=60)
    assert api.json("listShareGroups") == []


def test_a_connector_whose_task_runs_elsewhere_is_managed_through_any_broker(
        cluster: list[BrokerProcess], redis_server: RedisProcess) -> None:
    api = AdminApi(f"http://127.0.0.1:{cluster[0].ports['http']}")
    api.json("createTopic", json={"name": "feed", "partitions": 1, "replication_factor": 3})
    name = _led_elsewhere(api, CONNECTORS_TOPIC, 1, lambda n, count: task_partition(n, 0, count), "sink")
    api.json("createConnector", json={"name": name, "config": {
        "type": "redis-sink", "topics": "feed", "redis.url": redis_server.url(0), "redis.stream": "feed"}})
    with Producer(cluster[0].bootstrap, acks="all") as producer:
        for n in range(5):
            producer.send("feed", value=b"f%d" % n)
    wait_for(lambda: redis_server.client(0).xlen("feed") == 5, timeout_s=60)
    task = wait_for(lambda: (found := api.json("describeConnector", name=name)["tasks"][0])
                    ["records_total"] == 5 and found, timeout_s=30)
    assert task["state"] == "running" and task["owner"] != 1  # its status stored by its owner, read here
    third = AdminApi(f"http://127.0.0.1:{cluster[2].ports['http']}")
    assert third.json("setConnectorState", name=name, json={"state": "paused"})["state"] == "paused"
    wait_for(lambda: api.json("describeConnector", name=name)["tasks"][0]["state"] == "paused", timeout_s=30)
    api.call("deleteConnector", name=name, expect=204)
    assert wait_for(lambda: third.json("listConnectors") == [], 20)
