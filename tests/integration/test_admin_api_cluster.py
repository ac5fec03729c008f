"""The admin API of one broker of three: the whole cluster's brokers and Raft state, partitions led elsewhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqbroker.client import Producer
from tests.integration.admin_api_support import AdminApi, eventually
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Three brokers, each a controller voter."""
    brokers = start_cluster(tmp_path_factory.mktemp("admin-api-cluster"))
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()


def test_one_broker_describes_the_cluster_and_reads_partitions_led_by_the_others(cluster: list[BrokerProcess]) -> None:
    first = cluster[0]
    api = AdminApi(f"http://127.0.0.1:{first.ports['http']}")
    described = eventually(lambda: (found := api.json("describeCluster"))["raft"]["leader"] > 0 and found)
    assert described["raft"]["voters"] == [1, 2, 3] and described["node_id"] == 1
    assert {(b["node_id"], b["state"], b["this_broker"]) for b in described["brokers"]} == {
        (1, "active", True), (2, "active", False), (3, "active", False)}
    assert sum(b["controller"] for b in api.json("listBrokers")) == 1

    api.json("createTopic", json={"name": "spread", "partitions": 3, "replication_factor": 3})
    topic = eventually(lambda: (found := api.json("describeTopic", topic="spread"))
                       and all(len(p["isr"]) == 3 and p["leader"] > 0 for p in found["partitions"]) and found)
    assert {p["leader"] for p in topic["partitions"]} == {1, 2, 3}  # spread: two are led by other brokers
    with Producer(first.bootstrap, acks="all") as producer:
        for partition in range(3):
            for n in range(4):
                producer.send("spread", value=b"p%d-%d" % (partition, n), partition=partition)
    def all_written() -> list | None:
        found = api.json("listPartitions", topic="spread")
        return found if all(p["latest_offset"] == 4 for p in found) else None

    partitions = eventually(all_written)
    assert all(p["size_bytes"] > 0 and p["error"] is None for p in partitions)  # every replica is here too
    records = api.json("browseRecords", topic="spread", params={"limit": 12})["records"]
    assert sorted((r["partition"], r["offset"]) for r in records) == [(p, o) for p in range(3) for o in range(4)]
    remote = next(p["partition"] for p in partitions if p["leader"] != 1)
    start = api.json("deleteRecords", topic="spread", partition=remote, params={"before_offset": 3})
    assert start["log_start_offset"] == 3  # at the leader, through the routing broker
    second = AdminApi(f"http://127.0.0.1:{cluster[1].ports['http']}")
    assert eventually(lambda: second.json("describePartition", topic="spread", partition=remote)
                      ["earliest_offset"] == 3)
