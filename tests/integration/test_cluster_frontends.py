"""MQTT and AMQP front ends on a 3-broker cluster: partitions and internal topics led by another broker
are served through the routing broker (forwarded to their leaders) as if they were local."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pika
import pytest

from mqbroker.client import Admin, Consumer
from mqbroker.protocols.mqtt.stored import StoredSession
from tests.integration.amqp_support import wait_for_acks_stored
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import retrying, start_cluster
from tests.integration.mqtt_support import Client, unique


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Three brokers; MQTT's log topic gets three partitions, so each broker leads about one of them."""
    brokers = start_cluster(tmp_path_factory.mktemp("cluster-frontends"), extra_args=["--set", "default_partitions=3"])
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()


def _leaders(broker: BrokerProcess, topic: str) -> list[int]:
    """The leader of each partition of ``topic`` (waits until the topic exists and every partition has one)."""
    def described() -> list[int]:
        with Admin(broker.bootstrap) as admin:
            [found] = [t for t in admin.metadata([topic]).topics if t.name == topic]
            leaders = [p.leader_id for p in sorted(found.partitions, key=lambda p: p.partition_index)]
        assert leaders and min(leaders) >= 0, f"{topic} has no leader yet"
        return leaders

    return _eventually(described)


def _eventually(check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return retrying(check)
        except (AssertionError, ValueError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _node(brokers: list[BrokerProcess], node_id: int) -> BrokerProcess:
    return brokers[node_id - 1]  # start_cluster numbers the brokers 1..size in order


def _mqtt(broker: BrokerProcess, client_id: str = "", **options: Any) -> Client:
    """A connected client (a CONNACK refusing it, e.g. while the front end still starts, is retried)."""
    def connected() -> Client:
        client = Client(SimpleNamespace(mqtt_port=broker.ports["mqtt"]), client_id, **options)
        if client.connack_result[1] != 0:
            client.disconnect()
            raise AssertionError(f"CONNACK refused: {client.connack_result[1]}")
        return client

    return _eventually(connected)


def test_qos1_publishes_on_one_broker_reach_a_subscriber_on_another(cluster: list[BrokerProcess]) -> None:
    leaders = _leaders(cluster[0], "mqtt.messages")
    publisher_node = 1
    assert any(leader != publisher_node for leader in leaders), leaders
    subscriber = _mqtt(_node(cluster, 2))
    publisher = _mqtt(_node(cluster, publisher_node))
    prefix = unique("devices")
    subscriber.subscribe(f"{prefix}/#", qos=1)
    _until_delivered(publisher, subscriber, f"{prefix}/probe")  # the subscriber's hub reads the log from its end
    payloads = {f"{prefix}/sensor-{index}": f"reading {index}".encode() for index in range(30)}
    for topic, payload in payloads.items():
        publisher.publish(topic, payload, qos=1)
    received = subscriber.receive(len(payloads), timeout_s=20)
    assert {message.topic: message.payload for message in received} == payloads
    publisher.disconnect()
    subscriber.disconnect()


def test_retained_messages_and_persistent_sessions_work_where_their_topics_are_led_elsewhere(
    cluster: list[BrokerProcess],
) -> None:
    internal_leaders = {_leaders(cluster[0], "__mqtt_retained")[0], _leaders(cluster[0], "__mqtt_sessions")[0]}
    node = min({1, 2, 3} - internal_leaders)
    broker = _node(cluster, node)
    other = _node(cluster, 1 if node != 1 else 2)
    prefix = unique("state")

    writer = _mqtt(broker)
    writer.publish(f"{prefix}/config", b"retained-value", qos=1, retain=True)
    reader = _mqtt(broker)
    reader.subscribe(f"{prefix}/#", qos=1)
    [retained] = reader.receive(1)
    assert (retained.payload, retained.retain) == (b"retained-value", True)
    reader.disconnect()

    client_id = unique("persistent")
    session = _mqtt(broker, client_id, clean=False)
    session.subscribe(f"{prefix}/queued/#", qos=1)
    session.disconnect()
    _eventually(lambda: _stored_offline(broker, client_id))
    remote_writer = _mqtt(other)
    for index in range(5):
        remote_writer.publish(f"{prefix}/queued/{index}", b"offline %d" % index, qos=1)
    resumed = _mqtt(broker, client_id, clean=False)
    flags, _code, _properties = resumed.connack_result
    assert flags.session_present
    assert sorted(message.payload for message in resumed.receive(5, timeout_s=20)) == [b"offline %d" % i for i in range(5)]
    for client in (writer, remote_writer, resumed):
        client.disconnect()


def _until_delivered(publisher: Client, subscriber: Client, topic: str, timeout_s: float = 30.0) -> None:
    """Publish probes to ``topic`` until one reaches ``subscriber`` (its subscription is live end to end)."""
    deadline = time.monotonic() + timeout_s
    while True:
        publisher.publish(topic, b"probe", qos=1)
        if subscriber.receive(1, timeout_s=0.5):
            break
        assert time.monotonic() < deadline, f"no probe sent to {topic} arrived within {timeout_s} s"
    while subscriber.receive(1, timeout_s=0.5):
        pass  # later probes of the loop above


def _stored_offline(broker: BrokerProcess, client_id: str) -> None:
    """Assert the newest record of ``client_id`` in ``__mqtt_sessions`` is its session as stored at disconnect."""
    sessions = ("__mqtt_sessions", 0)
    with Admin(broker.bootstrap) as admin:
        end = admin.list_offset(*sessions, -1)
    newest = None
    with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([sessions])
        deadline = time.monotonic() + 10
        while consumer.position(sessions) < end:
            assert time.monotonic() < deadline, "the sessions topic was not read to its end"
            newest = next((m.value for m in reversed(consumer.poll(timeout=0.5)) if m.key == client_id.encode()), newest)
    assert newest is not None and StoredSession.from_bytes(newest).ended_at_ms is not None, "not stored offline yet"


def _amqp(broker: BrokerProcess) -> pika.BlockingConnection:
    return _eventually(lambda: pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"])))


def test_amqp_on_a_broker_not_leading_its_metadata_declares_publishes_consumes_and_keeps_declarations(
    cluster: list[BrokerProcess],
) -> None:
    metadata_leader = _leaders(cluster[0], "__amqp_metadata")[0]
    node = 1 if metadata_leader != 1 else 2
    broker = _node(cluster, node)
    exchange, queue = unique("orders"), unique("billing")

    connection = _amqp(broker)
    channel = connection.channel()
    channel.exchange_declare(exchange, exchange_type="direct", durable=True)
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, routing_key="eu")
    channel.confirm_delivery()
    for index in range(20):
        channel.basic_publish(exchange, "eu", b"order %d" % index, mandatory=True)
    bodies = _consume(channel, queue, 20)
    assert bodies == [b"order %d" % index for index in range(20)]
    connection.close()
    wait_for_acks_stored(broker.bootstrap, queue, 20)  # queue states (the acks) are written a moment after they change

    broker.stop()
    broker.restart()
    connection = _amqp(broker)
    channel = connection.channel()
    channel.exchange_declare(exchange, exchange_type="direct", durable=True, passive=True)
    channel.queue_declare(queue, durable=True, passive=True)
    channel.confirm_delivery()
    channel.basic_publish(exchange, "eu", b"after restart", mandatory=True)
    assert _consume(channel, queue, 1) == [b"after restart"]
    connection.close()


def _consume(channel: Any, queue: str, count: int, timeout_s: float = 20.0) -> list[bytes]:
    """``count`` bodies from ``queue``, each acknowledged."""
    bodies: list[bytes] = []
    for method, _properties, body in channel.consume(queue, inactivity_timeout=timeout_s):
        assert method is not None, f"only {len(bodies)} of {count} messages arrived"
        bodies.append(body)
        channel.basic_ack(method.delivery_tag)
        if len(bodies) == count:
            break
    channel.cancel()
    return bodies
