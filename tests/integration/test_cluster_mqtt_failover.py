"""MQTT on a 3-broker cluster when brokers die or clients move: the front ends' topics are replicated
three ways, readers follow a partition's new leader, and persistent sessions resume on any broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import paho.mqtt.client as mqtt
import pytest
import requests

from mqbroker.client import Admin, Consumer
from mqbroker.protocols.mqtt.packets import PubAck, Publish, PubRec, PubRel, SubAck, Subscribe, SubscriptionRequest
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster, start_cluster, wait_for
from tests.integration.mqtt_support import Client, stored_state, unique
from tests.integration.test_mqtt_sessions import _raw_session
from tests.integration.test_cluster_frontends import _eventually, _mqtt, _node, _stored_offline, _until_delivered


@pytest.fixture
def cluster(tmp_path: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Three brokers with every default, for a test that kills one."""
    yield from running_cluster(tmp_path)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Three brokers with every default, shared by the tests that kill none (each uses its own client ids and
    topic prefixes)."""
    yield from running_cluster(tmp_path_factory.mktemp("mqtt-cluster"))


def _partition(broker: BrokerProcess, topic: str) -> tuple[int, tuple[int, ...]]:
    """Leader and replicas of partition 0 of ``topic`` (waits until it exists and has a leader)."""
    def described() -> tuple[int, tuple[int, ...]]:
        with Admin(broker.bootstrap) as admin:
            [found] = [t for t in admin.metadata([topic]).topics if t.name == topic]
            [partition] = [p for p in found.partitions if p.partition_index == 0]
        assert partition.leader_id >= 0, f"{topic} has no leader yet"
        return partition.leader_id, tuple(sorted(partition.replica_nodes))

    return _eventually(described)


def _publish_all(publisher: Client, topic: str, count: int) -> list[bytes]:
    """Publish ``count`` QoS 1 messages, each waiting for its PUBACK; return the payloads acknowledged."""
    payloads = [b"reading %d" % index for index in range(count)]
    for payload in payloads:
        publisher.publish(topic, payload, qos=1)
    return payloads


def test_front_end_topics_get_three_replicas_and_min_insync_two(shared_cluster: list[BrokerProcess]) -> None:
    for topic in ("mqtt.messages", "__mqtt_sessions", "__mqtt_retained", "__mqtt_wills"):
        assert _partition(shared_cluster[0], topic)[1] == (1, 2, 3), topic
    with Admin(shared_cluster[0].bootstrap) as admin:
        assert admin.describe_configs("mqtt.messages")["min.insync.replicas"] == "2"
        admin.create_topics(["user-topic"])
    assert _partition(shared_cluster[0], "user-topic")[1] == (1, 2, 3)


def test_kill9_of_the_mqtt_messages_leader_loses_no_acknowledged_message(cluster: list[BrokerProcess]) -> None:
    leader, _replicas = _partition(cluster[0], "mqtt.messages")
    publisher_node, subscriber_node = sorted({1, 2, 3} - {leader})
    prefix = unique("fleet")
    subscriber = _mqtt(_node(cluster, subscriber_node), unique("sub"), clean=False)
    subscriber.subscribe(f"{prefix}/#", qos=1)
    publisher = _mqtt(_node(cluster, publisher_node))
    _until_delivered(publisher, subscriber, f"{prefix}/probe")
    before = _publish_all(publisher, f"{prefix}/before", 20)
    _node(cluster, leader).kill()
    killed_at = time.monotonic()
    publisher.publish(f"{prefix}/after", b"first after the kill", qos=1)
    recovered_s = time.monotonic() - killed_at
    after = _publish_all(publisher, f"{prefix}/after", 20)
    received = [m.payload for m in subscriber.receive(len(before) + 1 + len(after), timeout_s=30)]
    assert received == before + [b"first after the kill"] + after, f"recovered in {recovered_s:.1f} s"
    publisher.disconnect()
    subscriber.disconnect()


@pytest.mark.parametrize("version", [mqtt.MQTTv311, mqtt.MQTTv5])
def test_a_persistent_session_resumes_on_another_broker_with_every_offline_message(
    shared_cluster: list[BrokerProcess], version: int,
) -> None:
    client_id, prefix = unique("device"), unique("fleet")
    options = {"version": version, "clean": False}
    if version == mqtt.MQTTv5:
        options["session_expiry_s"] = 3600
    session = _mqtt(_node(shared_cluster, 1), client_id, **options)
    session.subscribe(f"{prefix}/#", qos=2 if version == mqtt.MQTTv5 else 1)
    session.disconnect()
    _eventually(lambda: _stored_offline(shared_cluster[0], client_id))
    publisher = _mqtt(_node(shared_cluster, 2))
    payloads = _publish_all(publisher, f"{prefix}/temperature", 100)
    resumed = _mqtt(_node(shared_cluster, 3), client_id, **options)
    flags, _code, _properties = resumed.connack_result
    assert flags.session_present
    received = [m.payload for m in resumed.receive(len(payloads), timeout_s=30)]
    assert received == payloads
    assert resumed.quiet(1.0) == []  # none twice
    publisher.disconnect()
    resumed.disconnect()


def test_the_same_client_id_on_a_second_broker_takes_the_session_over(shared_cluster: list[BrokerProcess]) -> None:
    client_id = unique("device")
    first = _mqtt(_node(shared_cluster, 1), client_id, clean=False)
    second = _mqtt(_node(shared_cluster, 2), client_id, clean=False)
    assert second.connack_result[1] == 0
    first.disconnects.get(timeout=15)  # broker 1 closed the first connection
    second.disconnect()


def _retained_on(broker: BrokerProcess, topic_filter: str) -> list[tuple[str, bytes]]:
    """The retained messages a new subscriber on ``broker`` gets for ``topic_filter`` (waits 1 s for them)."""
    subscriber = _mqtt(broker)
    subscriber.subscribe(topic_filter, qos=1)
    found = [(m.topic, m.payload) for m in subscriber.receive(1, timeout_s=1.0) if m.retain]
    subscriber.disconnect()
    return found


def test_retained_messages_reach_every_broker_survive_kill9_and_clear_everywhere(cluster: list[BrokerProcess]) -> None:
    topic = f"{unique('site')}/config"
    writer = _mqtt(_node(cluster, 1))
    writer.publish(topic, b"setpoint 21", qos=1, retain=True)
    writer.drop()
    _node(cluster, 1).kill()  # right after the PUBACK
    for node in (2, 3):
        assert _eventually(lambda: _retained_on(_node(cluster, node), topic) or None, timeout_s=10) == [
            (topic, b"setpoint 21")], node
    _node(cluster, 1).restart()
    assert _retained_on(_node(cluster, 1), topic) == [(topic, b"setpoint 21")]
    clearer = _mqtt(_node(cluster, 2))
    clearer.publish(topic, b"", qos=1, retain=True)
    clearer.disconnect()
    for node in (1, 3):
        _eventually(lambda: _retained_on(_node(cluster, node), topic) == [] or None, timeout_s=10)


def test_kill9_of_the_broker_holding_a_session_loses_no_acknowledged_message(cluster: list[BrokerProcess]) -> None:
    sessions_leader, _replicas = _partition(cluster[0], "__mqtt_sessions")
    holder = next(node for node in (1, 2, 3) if node != sessions_leader)
    survivor, publisher_node = sorted({1, 2, 3} - {holder})
    client_id, prefix = unique("device"), unique("fleet")
    session = _mqtt(_node(cluster, holder), client_id, clean=False)
    session.subscribe(f"{prefix}/#", qos=1)
    publisher = _mqtt(_node(cluster, publisher_node))
    _until_delivered(publisher, session, f"{prefix}/probe")
    session.drop()
    _node(cluster, holder).kill()
    payloads = _publish_all(publisher, f"{prefix}/temperature", 50)
    killed_at = time.monotonic()
    resumed = _mqtt(_node(cluster, survivor), client_id, clean=False)
    assert resumed.connack_result[0].session_present
    received = [m.payload for m in resumed.receive(len(payloads), timeout_s=30)]
    resumed_s = time.monotonic() - killed_at
    assert [p for p in received if p != b"probe"] == payloads, f"resumed after {resumed_s:.1f} s"
    publisher.disconnect()
    resumed.disconnect()


def test_the_wills_of_a_killed_brokers_clients_are_published_by_a_survivor(cluster: list[BrokerProcess]) -> None:
    prefix = unique("fleet")
    watcher = _mqtt(cluster[1], unique("watcher"))
    watcher.subscribe(f"{prefix}/+/status", qos=1)
    publisher = _mqtt(cluster[2])
    _until_delivered(publisher, watcher, f"{prefix}/probe/status")
    devices = [_mqtt(cluster[0], unique("device"), will=(f"{prefix}/{index}/status", b"offline %d" % index, 1))
               for index in range(2)]
    polite = _mqtt(cluster[0], unique("device"), will=(f"{prefix}/polite/status", b"offline polite", 1))
    polite.disconnect()  # a normal DISCONNECT drops the will, in a cluster as on one broker
    for device in devices:
        device.paho.loop_stop()  # connected when their broker dies: it cannot publish their wills itself
    cluster[0].kill()
    killed_at = time.monotonic()
    expected, received = [b"offline 0", b"offline 1"], []
    while not set(expected) <= set(received) and time.monotonic() < killed_at + 30:
        received += [m.payload for m in watcher.receive(1, timeout_s=1) if m.payload != b"probe"]
    assert sorted(received) == expected, f"after {time.monotonic() - killed_at:.1f} s"
    assert not [m for m in watcher.receive(1, timeout_s=3) if m.payload != b"probe"], "each will goes out once"
    watcher.disconnect()
    publisher.disconnect()


def test_log_topics_get_a_partition_per_broker_and_mapping_rules_from_the_configuration(
    tmp_path: pytest.TempPathFactory,
) -> None:
    brokers = start_cluster(tmp_path, extra_args=["--set", "mqtt_mapping_rules=alarms/#=mqtt.alarms"])
    try:
        subscriber = _mqtt(_node(brokers, 3))
        subscriber.subscribe("#", qos=1)
        publisher = _mqtt(_node(brokers, 1))
        _until_delivered(publisher, subscriber, "probe")
        sent = [(f"{kind}/{device}", b"%d" % index) for index in range(20) for kind, device in
                (("alarms", "pump"), ("telemetry", "pump"), ("telemetry", "fan"))]
        for topic, payload in sent:
            publisher.publish(topic, payload, qos=1)
        received = [(m.topic, m.payload) for m in subscriber.receive(len(sent), timeout_s=30)]
        for topic in {topic for topic, _payload in sent}:  # each MQTT topic in order
            assert [p for t, p in received if t == topic] == [p for t, p in sent if t == topic], topic
        with Admin(brokers[0].bootstrap) as admin:
            described = {t.name: t for t in admin.metadata(["mqtt.messages", "mqtt.alarms"]).topics}
            alarms_end = sum(admin.list_offset("mqtt.alarms", p.partition_index, -1)
                             for p in described["mqtt.alarms"].partitions)
        assert len(described["mqtt.messages"].partitions) == 3
        assert alarms_end == 20  # only the alarms went there
        publisher.disconnect()
        subscriber.disconnect()
    finally:
        for broker in brokers:
            broker.kill()


def _mapping_rules_url(broker: BrokerProcess) -> str:
    return f"http://127.0.0.1:{broker.ports['http']}/api/v1/mqtt/mapping-rules"


def test_mapping_rules_changed_through_one_brokers_admin_api_hold_on_every_broker(shared_cluster: list[BrokerProcess]) -> None:
    prefix = unique("plant")
    subscriber = _mqtt(_node(shared_cluster, 3), unique("operator"))
    subscriber.subscribe(f"{prefix}/#", qos=1)
    publisher = _mqtt(_node(shared_cluster, 2))
    _until_delivered(publisher, subscriber, f"{prefix}/probe")
    rules = [{"filter": f"{prefix}/+/alarms", "log_topic": "mqtt.plant-alarms"}]
    answer = requests.put(_mapping_rules_url(_node(shared_cluster, 1)), json={"rules": rules}, timeout=30)
    assert answer.status_code == 200, answer.text
    for node in (2, 3):  # each broker's API shows the rules it applies
        _eventually(lambda: requests.get(_mapping_rules_url(_node(shared_cluster, node)), timeout=10).json()["rules"] == rules
                    or None)
    sent = [(f"{prefix}/{index}/alarms", b"alarm %d" % index) for index in range(20)]
    for topic, payload in sent:
        publisher.publish(topic, payload, qos=1)
    received = [(m.topic, m.payload) for m in subscriber.receive(len(sent), timeout_s=30)]
    assert sorted(received) == sorted(sent)
    with Consumer(shared_cluster[0].bootstrap, group_id=None, topics=["mqtt.plant-alarms"], auto_offset_reset="earliest") as consumer:
        stored: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + 30
        while len(stored) < len(sent) and time.monotonic() < deadline:
            stored += [(message.key, message.value) for message in consumer.poll(timeout=1.0)]
    assert sorted(stored) == sorted((topic.encode(), payload) for topic, payload in sent), "in the new log topic"
    publisher.disconnect()
    subscriber.disconnect()


@pytest.mark.alone  # bounds a time or rate: no other test's load meanwhile
def test_a_will_whose_delay_began_is_published_on_time_by_a_survivor_after_kill9(cluster: list[BrokerProcess]) -> None:
    prefix, will_delay_s = unique("fleet"), 8
    watcher = _mqtt(cluster[1], unique("watcher"), version=mqtt.MQTTv5)
    watcher.subscribe(f"{prefix}/+/status", qos=1)
    publisher = _mqtt(cluster[2])
    _until_delivered(publisher, watcher, f"{prefix}/probe/status")
    device = _mqtt(cluster[0], unique("device"), version=mqtt.MQTTv5, clean=False, session_expiry_s=3600,
                   will=(f"{prefix}/device/status", b"offline", 1), will_delay_s=will_delay_s)
    device.drop()  # broker 1 begins the will delay
    dropped_at = time.monotonic()
    time.sleep(1.5)
    cluster[0].kill()  # it dies holding the delayed will
    received: list[tuple[bytes, float]] = []
    while not received and time.monotonic() < dropped_at + will_delay_s + 20:
        received += [(m.payload, time.monotonic() - dropped_at) for m in watcher.receive(1, timeout_s=1)
                     if m.payload != b"probe"]
    assert [payload for payload, _ in received] == [b"offline"], "the delayed will is not lost with its broker"
    [(_, after_s)] = received
    assert will_delay_s - 0.5 <= after_s <= will_delay_s + 5, f"published {after_s:.1f} s after the connection ended"
    assert not [m for m in watcher.receive(1, timeout_s=3) if m.payload != b"probe"], "it goes out once"
    watcher.disconnect()
    publisher.disconnect()


def test_messages_in_flight_on_a_killed_broker_are_resent_by_another_with_their_packet_ids(
    cluster: list[BrokerProcess],
) -> None:
    """The stored session names where its in-flight messages are in the log; the broker the client moves to reads
    them from there and resends them under the same packet ids with DUP=1."""
    sessions_leader, _replicas = _partition(cluster[0], "__mqtt_sessions")
    holder = next(node for node in (1, 2, 3) if node != sessions_leader)
    survivor, publisher_node = sorted({1, 2, 3} - {holder})
    client_id, prefix = unique("device"), unique("fleet")
    raw, _ = _eventually(lambda: _raw_session(_mqtt_port(_node(cluster, holder)), client_id, clean=True))
    raw.send(Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter=f"{prefix}/#", qos=2),)))
    assert isinstance(raw.receive(), SubAck)
    publisher = _mqtt(_node(cluster, publisher_node))
    qos_levels = (1, 2, 1, 2)
    for number, qos in enumerate(qos_levels):
        publisher.publish(f"{prefix}/{number}", b"reading %d" % number, qos=qos)
    sent = [raw.receive(timeout_s=30) for _ in qos_levels]  # never acknowledged
    # each topic is its own partition, and MQTT orders per topic only (docs/mqtt.md): compare them in payload order
    assert sorted((p.payload, p.qos) for p in sent) == [(b"reading %d" % n, qos) for n, qos in enumerate(qos_levels)]
    wait_for(lambda: len(getattr(stored_state(_node(cluster, survivor).bootstrap, client_id), "inflight", ())) == 4,
             what="the in-flight messages stored")
    _node(cluster, holder).kill()
    raw.close()
    moved, connack = _eventually(lambda: _raw_session(_mqtt_port(_node(cluster, survivor)), client_id, clean=False))
    assert connack.session_present
    resent = [moved.receive(timeout_s=30) for _ in qos_levels]
    assert resent == [Publish(topic=p.topic, payload=p.payload, qos=p.qos, dup=True, packet_id=p.packet_id)
                      for p in sent]
    for packet in resent:
        moved.send(PubAck(packet_id=packet.packet_id) if packet.qos == 1 else PubRec(packet_id=packet.packet_id))
    assert [moved.receive() for _ in range(2)] == [PubRel(packet_id=p.packet_id) for p in sent if p.qos == 2]
    publisher.publish(f"{prefix}/marker", b"marker", qos=1)
    following = moved.receive(timeout_s=30)
    assert isinstance(following, Publish) and following.payload == b"marker", following  # nothing delivered twice
    moved.close()
    publisher.disconnect()


def _mqtt_port(broker: BrokerProcess) -> SimpleNamespace:
    """What ``RawClient`` needs of a cluster broker."""
    return SimpleNamespace(mqtt_port=broker.ports["mqtt"])
