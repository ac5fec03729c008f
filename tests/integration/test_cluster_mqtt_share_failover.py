"""A shared-subscription member whose broker is killed -9 with QoS 1 messages in flight and queued, none acknowledged:
on a 3-broker cluster every message the publisher had PUBACKed reaches a member of the group at least once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import paho.mqtt.client as mqtt
import pytest

from mqbroker.protocols.mqtt.packets import Connect, Properties, Publish, SubAck, Subscribe, SubscriptionRequest
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster
from tests.integration.mqtt_support import Client, RawClient, unique
from tests.integration.test_cluster_frontends import _mqtt, _node
from tests.integration.test_cluster_mqtt_failover import _partition, _publish_all

MESSAGES = 10
WINDOW = 2


@pytest.fixture
def cluster(tmp_path: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Three brokers with every default, for a test that kills one."""
    yield from running_cluster(tmp_path)


def _member_that_never_acknowledges(broker: BrokerProcess, client_id: str, group_filter: str) -> RawClient:
    """An MQTT 5.0 member with a persistent session and a window of ``WINDOW``, which acknowledges nothing."""
    raw = RawClient(SimpleNamespace(mqtt_port=broker.ports["mqtt"]))  # type: ignore[arg-type]
    raw.send(Connect(client_id=client_id, keep_alive_s=0,
                     properties=Properties(session_expiry_interval_s=600, receive_maximum=WINDOW)))
    assert raw.receive().reason_code == 0
    raw.send(Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter=group_filter, qos=1),)))
    assert isinstance(raw.receive(), SubAck)
    return raw


def _payloads_until(clients: list[Client], wanted: set[bytes], timeout_s: float = 30.0) -> list[bytes]:
    """Every payload the clients receive until together they have all of ``wanted`` (or the time is up)."""
    received: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while not wanted <= set(received) and time.monotonic() < deadline:
        for client in clients:
            received += [message.payload for message in client.receive(1, timeout_s=0.1)]
    return received


@pytest.mark.parametrize("other_member_joins_the_survivor", [False, True])
def test_messages_a_member_had_unacknowledged_on_a_killed_broker_reach_the_group(
    cluster: list[BrokerProcess], other_member_joins_the_survivor: bool,
) -> None:
    """The member (window 2) has two messages in flight and eight queued when its broker is killed -9; it resumes its
    session on a survivor, where another member of the group may have subscribed after the kill: all ten arrive."""
    sessions_leader, _ = _partition(cluster[0], "__mqtt_sessions")
    holder = next(node for node in (1, 2, 3) if node != sessions_leader)
    survivor, publisher_node = sorted({1, 2, 3} - {holder})
    client_id, prefix = unique("member"), unique("shared")
    group_filter = f"$share/workers/{prefix}/#"
    member = _member_that_never_acknowledges(_node(cluster, holder), client_id, group_filter)
    publisher = _mqtt(_node(cluster, publisher_node))
    published = set(_publish_all(publisher, f"{prefix}/readings", MESSAGES))
    in_flight = [member.receive(timeout_s=20) for _ in range(WINDOW)]
    assert all(isinstance(packet, Publish) for packet in in_flight)
    time.sleep(0.5)  # the holder stores the session with its two in flight (its queue is not stored)

    _node(cluster, holder).kill()
    member.close()
    members = []
    if other_member_joins_the_survivor:
        members.append(_mqtt(_node(cluster, survivor), unique("other"), version=mqtt.MQTTv5))
        members[0].subscribe(group_filter, 1)
    moved = _mqtt(_node(cluster, survivor), client_id, version=mqtt.MQTTv5, clean=False, session_expiry_s=600)
    assert moved.connack_result[0].session_present
    received = _payloads_until([moved, *members], published)
    assert published <= set(received), sorted(published - set(received))
    for client in (moved, *members, publisher):
        client.disconnect()
