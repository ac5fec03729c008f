"""AMQP on a 3-broker cluster: definitions declared through one broker are in force on the others,
publishes through any broker reach the queue, and a consumer whose broker dies continues elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pika
import pytest

from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import start_cluster
from tests.integration.mqtt_support import unique
from tests.integration.test_cluster_frontends import _amqp, _node


@pytest.fixture
def cluster(tmp_path: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """Three brokers with every default (each test may kill one)."""
    brokers = start_cluster(tmp_path)
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()


def _publish_confirmed(broker: BrokerProcess, exchange: str, routing_key: str, bodies: list[bytes]) -> None:
    connection = _amqp(broker)
    channel = connection.channel()
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish(exchange, routing_key, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
    connection.close()


def _take(channel: Any, queue: str, count: int, *, ack: bool, timeout_s: float = 30.0) -> list[bytes]:
    bodies: list[bytes] = []
    for method, _properties, body in channel.consume(queue, inactivity_timeout=timeout_s):
        assert method is not None, f"only {len(bodies)} of {count} messages arrived"
        bodies.append(body)
        if ack:
            channel.basic_ack(method.delivery_tag)
        if len(bodies) == count:
            break
    return bodies


def test_declare_on_one_broker_publish_on_a_second_consume_on_the_third(cluster: list[BrokerProcess]) -> None:
    exchange, queue = unique("orders"), unique("billing")
    connection = _amqp(_node(cluster, 1))
    channel = connection.channel()
    channel.exchange_declare(exchange, exchange_type="topic", durable=True)
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, routing_key="eu.#")
    connection.close()
    direct = [b"direct %d" % index for index in range(100)]
    routed = [b"routed %d" % index for index in range(100)]
    _publish_confirmed(_node(cluster, 2), "", queue, direct)  # the default exchange, by the queue's name
    _publish_confirmed(_node(cluster, 2), exchange, "eu.paris", routed)
    consumer = _amqp(_node(cluster, 3))
    channel = consumer.channel()
    channel.queue_declare(queue, durable=True, passive=True)
    assert _take(channel, queue, 200, ack=True) == direct + routed
    consumer.close()


def test_unacked_deliveries_come_again_through_another_broker_after_a_kill9(cluster: list[BrokerProcess]) -> None:
    queue = unique("jobs")
    bodies = [b"job %d" % index for index in range(50)]
    connection = _amqp(_node(cluster, 1))
    connection.channel().queue_declare(queue, durable=True)
    connection.close()
    _publish_confirmed(_node(cluster, 2), "", queue, bodies)
    first = _amqp(_node(cluster, 1))
    channel = first.channel()
    channel.basic_qos(prefetch_count=50)
    assert _take(channel, queue, 20, ack=True) == bodies[:20]
    assert _take(channel, queue, 10, ack=False) == bodies[20:30]  # delivered, never acknowledged
    first.sleep(1.0)  # the acknowledgements are stored a moment after they happen
    _node(cluster, 1).kill()
    second = _amqp(_node(cluster, 3))
    channel = second.channel()
    received = _take(channel, queue, 30, ack=True)
    assert sorted(received) == sorted(bodies[20:]), received
    second.close()
