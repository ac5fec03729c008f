"""Interop with native clients: records produced onto a topic an exchange reads (``x-source-topic``)
reach the AMQP queues bound to that exchange, and the reader's position survives a restart."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pika
import pytest

from mqbroker.client import Admin, Producer
from tests.integration.amqp_support import AmqpBroker, amqp_broker, running_broker  # noqa: F401 (fixture)
from tests.integration.amqp_support import wait_for_acks_stored


@pytest.fixture
def fresh_broker(tmp_path: pathlib.Path) -> Iterator[AmqpBroker]:
    """A broker of the test's own (one it restarts)."""
    yield from running_broker(tmp_path / "data")


def _produce(broker: AmqpBroker, topic: str, records: list[tuple[bytes, bytes]], **send: object) -> None:
    with Producer(broker.bootstrap, acks="all") as producer:
        for key, value in records:
            producer.send(topic, key=key, value=value, **send)
        producer.flush()


def _take(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str, count: int,
          timeout_s: float = 15.0) -> list[tuple[pika.spec.Basic.Deliver, pika.BasicProperties, bytes]]:
    taken = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=timeout_s):
        if method is None:
            break
        channel.basic_ack(method.delivery_tag)
        taken.append((method, properties, body))
        if len(taken) == count:
            break
    channel.cancel()
    return taken


def test_records_produced_natively_reach_queues_bound_to_the_source_exchange(amqp_broker: AmqpBroker) -> None:
    with Admin(amqp_broker.bootstrap) as admin:
        admin.create_topics(["orders"], partitions=2)
    _produce(amqp_broker, "orders", [(b"order.eu.old", b"before the declaration")])
    connection = amqp_broker.connect()
    channel = connection.channel()
    channel.exchange_declare("orders-x", "topic", durable=True, arguments={"x-source-topic": "orders"})
    channel.queue_declare("eu-orders", durable=True)
    channel.queue_bind("eu-orders", "orders-x", "order.eu.*")
    _produce(amqp_broker, "orders", [(b"order.eu.new", b"eu 1"), (b"order.us.new", b"us 1"),
                                      (b"order.eu.paid", b"eu 2")], headers=[("origin", b"native")])
    taken = _take(channel, "eu-orders", 2)
    assert sorted(body for _, _, body in taken) == [b"eu 1", b"eu 2"]
    method, properties, _ = taken[0]
    assert method.exchange == "orders-x" and method.routing_key.startswith("order.eu.")
    assert properties.headers == {"origin": "native"}
    connection.close()


def test_a_source_exchange_needs_an_existing_non_amqp_topic(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        channel.exchange_declare("nowhere-x", "direct", arguments={"x-source-topic": "no-such-topic"})
    assert missing.value.reply_code == 404
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as loop:
        channel.exchange_declare("loop-x", "direct", arguments={"x-source-topic": "amqp.queue.work"})
    assert loop.value.reply_code == 406
    connection.close()


def test_the_source_position_survives_a_restart_without_replaying_routed_records(fresh_broker: AmqpBroker) -> None:
    with Admin(fresh_broker.bootstrap) as admin:
        admin.create_topics(["events"], partitions=1)
    connection = fresh_broker.connect()
    channel = connection.channel()
    channel.exchange_declare("events-x", "fanout", durable=True, arguments={"x-source-topic": "events"})
    channel.queue_declare("all-events", durable=True)
    channel.queue_bind("all-events", "events-x")
    _produce(fresh_broker, "events", [(b"", b"first %d" % index) for index in range(5)])
    assert [body for _, _, body in _take(channel, "all-events", 5)] == [b"first %d" % index for index in range(5)]
    connection.close()
    wait_for_acks_stored(fresh_broker.bootstrap, "all-events", 5)  # written within 200 ms of the acks
    fresh_broker.kill()
    fresh_broker.start()
    _produce(fresh_broker, "events", [(b"", b"second %d" % index) for index in range(3)])
    connection = fresh_broker.connect()
    channel = connection.channel()
    assert [body for _, _, body in _take(channel, "all-events", 3)] == [b"second %d" % index for index in range(3)]
    assert channel.queue_declare("all-events", passive=True).method.message_count == 0
    connection.close()
