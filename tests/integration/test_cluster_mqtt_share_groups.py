"""Shared subscriptions on a 3-broker cluster when a member's broker dies and the member moves to a survivor."""

from __future__ import annotations

import time
from collections.abc import Iterator

import paho.mqtt.client as mqtt
import pytest

from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster
from tests.integration.mqtt_support import Client, unique
from tests.integration.test_cluster_frontends import _mqtt, _node, _until_delivered
from tests.integration.test_cluster_mqtt_failover import _partition, _publish_all


@pytest.fixture
def cluster(tmp_path: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Three brokers with every default, for a test that kills one."""
    yield from running_cluster(tmp_path)


def _payloads_until(clients: list[Client], wanted: set[bytes], timeout_s: float = 30.0) -> list[list[mqtt.MQTTMessage]]:
    """What each client receives until together they have every payload of ``wanted`` (or the time is up)."""
    received: list[list[mqtt.MQTTMessage]] = [[] for _ in clients]
    deadline = time.monotonic() + timeout_s
    while not wanted <= {m.payload for share in received for m in share} and time.monotonic() < deadline:
        for share, client in zip(received, clients, strict=True):
            share += client.receive(1, timeout_s=0.1)
    return received


def test_a_member_moved_off_a_killed_broker_gets_nothing_new_twice_and_its_group_misses_nothing(
    cluster: list[BrokerProcess],
) -> None:
    """Share groups are per broker (docs/mqtt.md): before the kill each member's broker gives it every message. The
    member whose broker is killed resumes its session on the survivor, where the other member is: from then on the
    survivor's group splits the messages between the two, each once; the moved member gets what it had before only
    as a resend (DUP)."""
    sessions_leader, _ = _partition(cluster[0], "__mqtt_sessions")
    holder = next(node for node in (1, 2, 3) if node != sessions_leader)
    survivor, publisher_node = sorted({1, 2, 3} - {holder})
    client_id, prefix = unique("member"), unique("shared")
    group_filter = f"$share/workers/{prefix}/#"
    moving = _mqtt(_node(cluster, holder), client_id, version=mqtt.MQTTv5, clean=False, session_expiry_s=600)
    moving.subscribe(group_filter, 1)
    staying = _mqtt(_node(cluster, survivor), unique("staying"), version=mqtt.MQTTv5)
    staying.subscribe(group_filter, 1)
    publisher = _mqtt(_node(cluster, publisher_node))
    _until_delivered(publisher, moving, f"{prefix}/probe")
    _until_delivered(publisher, staying, f"{prefix}/probe")
    before = set(_publish_all(publisher, f"{prefix}/before", 10))
    for member in (moving, staying):  # one member on each broker: each gets all (after probes, maybe)
        [got] = _payloads_until([member], before)
        assert before <= {m.payload for m in got}

    _node(cluster, holder).kill()
    moved = _mqtt(_node(cluster, survivor), client_id, version=mqtt.MQTTv5, clean=False, session_expiry_s=600)
    assert moved.connack_result[0].session_present
    after = [b"after %d" % index for index in range(20)]
    for payload in after:
        publisher.publish(f"{prefix}/after", payload, qos=1)
    to_moved, to_staying = _payloads_until([moved, staying], set(after))
    new = sorted((m.payload for m in to_moved + to_staying if m.payload in after), key=lambda p: int(p.split()[1]))
    assert new == after  # every one, once, across the two
    assert all(m.dup for m in to_moved if m.payload in before), "only resent: it had them on its old broker"
    for client in (moved, staying, publisher):
        client.disconnect()
