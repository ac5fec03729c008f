"""pika against a real broker: routing, confirms, prefetch, acks, redelivery, dead-lettering, TTL, streams."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from collections.abc import Callable

import pika
import pytest

from tests.integration.amqp_support import AmqpBroker, amqp_broker  # noqa: F401 (fixture)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def drain(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str, count: int, *, ack: bool = True,
          timeout_s: float = 5.0) -> list[tuple[pika.spec.Basic.Deliver, pika.BasicProperties, bytes]]:
    """Consume ``count`` messages (acking them if asked)."""
    received = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=timeout_s):
        if method is None:
            break
        received.append((method, properties, body))
        if ack:
            channel.basic_ack(method.delivery_tag)
        if len(received) == count:
            break
    channel.cancel()
    return received


@pytest.mark.parametrize(("exchange_type", "bindings", "routing_key", "reached"), [
    ("direct", {"a": "red", "b": "blue"}, "red", {"a"}),
    ("fanout", {"a": "", "b": ""}, "anything", {"a", "b"}),
    ("topic", {"a": "stock.#", "b": "*.eur", "c": "bond.*"}, "stock.eur", {"a", "b"}),
])
def test_exchanges_route_to_bound_queues(amqp_broker: AmqpBroker, exchange_type: str, bindings: dict[str, str],
                                         routing_key: str, reached: set[str]) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    exchange = unique(exchange_type)
    channel.exchange_declare(exchange, exchange_type, durable=True)
    queues = {suffix: unique(f"{exchange}-{suffix}") for suffix in bindings}
    for suffix, key in bindings.items():
        channel.queue_declare(queues[suffix], durable=True)
        channel.queue_bind(queues[suffix], exchange, key)
    channel.confirm_delivery()
    channel.basic_publish(exchange, routing_key, b"payload", pika.BasicProperties(message_id="m1", delivery_mode=2))
    for suffix, name in queues.items():
        method, properties, body = channel.basic_get(name, auto_ack=True)
        assert (body == b"payload") == (suffix in reached)
        if body is not None:
            assert properties.message_id == "m1" and properties.delivery_mode == 2
            assert method.exchange == exchange and method.routing_key == routing_key
    connection.close()


def test_confirmed_messages_keep_every_property(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    queue = unique("props")
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    properties = pika.BasicProperties(
        content_type="application/json", content_encoding="utf-8", headers={"k": "v", "n": 5}, delivery_mode=2,
        priority=3, correlation_id="c", reply_to="r", expiration="60000", message_id="id", timestamp=1700000000,
        type="t", app_id="app",
    )
    body = bytes(range(256)) * 1000  # larger than frame_max: split across body frames
    channel.basic_publish("", queue, body, properties)
    [(method, received, received_body)] = drain(channel, queue, 1)
    assert received_body == body and not method.redelivered
    for name in ("content_type", "content_encoding", "headers", "delivery_mode", "priority", "correlation_id",
                 "reply_to", "expiration", "message_id", "timestamp", "type", "app_id"):
        assert getattr(received, name) == getattr(properties, name), name
    connection.close()


def test_prefetch_limits_unacked_deliveries(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    queue = unique("prefetch")
    channel.queue_declare(queue, durable=True)
    for index in range(10):
        channel.basic_publish("", queue, str(index).encode())
    channel.basic_qos(prefetch_count=3)
    received: list[int] = []
    channel.basic_consume(queue, lambda ch, method, properties, body: received.append(method.delivery_tag))
    settle(connection, lambda: len(received) >= 3)
    assert len(received) == 3
    channel.basic_ack(received[-1], multiple=True)
    settle(connection, lambda: len(received) >= 6)
    assert len(received) == 6
    connection.close()


def settle(connection: pika.BlockingConnection, reached: Callable[[], bool], timeout_s: float = 5.0,
           quiet_s: float = 1.0) -> None:
    """Process events until ``reached`` holds (or ``timeout_s``), then ``quiet_s`` more: anything past the bound
    would arrive then (``process_data_events`` returns as soon as it dispatched something)."""
    deadline = time.monotonic() + timeout_s
    while not reached() and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    quiet_until = time.monotonic() + quiet_s
    while time.monotonic() < quiet_until:
        connection.process_data_events(time_limit=0.1)


def test_nack_and_reject_requeue_with_the_redelivered_flag(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    queue = unique("requeue")
    channel.queue_declare(queue, durable=True)
    channel.basic_publish("", queue, b"one")
    channel.basic_publish("", queue, b"two")
    first, _, body = channel.basic_get(queue)
    assert body == b"one" and not first.redelivered
    channel.basic_nack(first.delivery_tag, requeue=True)
    again, _, body = channel.basic_get(queue)
    assert body == b"one" and again.redelivered
    channel.basic_reject(again.delivery_tag, requeue=True)
    [(method, _, body), (second, _, other)] = drain(channel, queue, 2)
    assert (body, method.redelivered, other, second.redelivered) == (b"one", True, b"two", False)
    connection.close()


def test_unacked_messages_are_redelivered_after_the_consumer_connection_dies(amqp_broker: AmqpBroker) -> None:
    setup = amqp_broker.connect()
    channel = setup.channel()
    queue = unique("orphan")
    channel.queue_declare(queue, durable=True)
    for index in range(3):
        channel.basic_publish("", queue, str(index).encode())
    consumer = amqp_broker.connect()
    held = drain(consumer.channel(), queue, 3, ack=False)
    assert [body for _, _, body in held] == [b"0", b"1", b"2"]
    consumer._impl._transport._sock.close()  # the consumer dies without closing its connection
    redelivered = drain(channel, queue, 3)
    assert [(body, method.redelivered) for method, _, body in redelivered] == [(b"0", True), (b"1", True), (b"2", True)]
    setup.close()


def test_rejected_and_expired_messages_are_dead_lettered_with_x_death(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    dlx, dead_queue, queue = unique("dlx"), unique("dead"), unique("work")
    channel.exchange_declare(dlx, "fanout", durable=True)
    channel.queue_declare(dead_queue, durable=True)
    channel.queue_bind(dead_queue, dlx)
    channel.queue_declare(queue, durable=True, arguments={"x-dead-letter-exchange": dlx, "x-message-ttl": 300})
    channel.basic_publish("", queue, b"rejected")
    method, _, _ = channel.basic_get(queue)
    channel.basic_reject(method.delivery_tag, requeue=False)
    channel.basic_publish("", queue, b"expired")
    time.sleep(0.5)
    assert channel.basic_get(queue) == (None, None, None)
    received = drain(channel, dead_queue, 2)
    deaths = {body: properties.headers["x-death"][0] for _, properties, body in received}
    assert deaths[b"rejected"]["reason"] == "rejected" and deaths[b"expired"]["reason"] == "expired"
    for death in deaths.values():
        assert death["queue"] == queue and death["count"] == 1 and death["exchange"] == ""
        assert death["routing-keys"] == [queue]
    connection.close()


def test_max_length_drops_the_oldest_message(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    queue = unique("bounded")
    channel.queue_declare(queue, durable=True, arguments={"x-max-length": 2})
    channel.confirm_delivery()
    for body in (b"1", b"2", b"3"):
        channel.basic_publish("", queue, body)
    assert [body for _, _, body in drain(channel, queue, 3, timeout_s=1.5)] == [b"2", b"3"]
    connection.close()


def test_stream_queue_replays_from_an_offset(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    queue = unique("stream")
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "stream"})
    channel.confirm_delivery()
    for index in range(5):
        channel.basic_publish("", queue, str(index).encode())
    channel.basic_qos(prefetch_count=10)
    for start, expected in (("first", [b"0", b"1", b"2", b"3", b"4"]), (3, [b"3", b"4"]), ("last", [b"4"])):
        received = []
        for method, _, body in channel.consume(queue, arguments={"x-stream-offset": start}, inactivity_timeout=1.5):
            if method is None:
                break
            received.append(body)
            channel.basic_ack(method.delivery_tag)
        channel.cancel()
        assert received == expected, start
    connection.close()


def _unroutable_counts(broker: AmqpBroker) -> dict[str, float]:
    """``mqbroker_unroutable_messages_total`` of the AMQP front end by outcome, scraped from /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.ports['http']}/metrics") as reply:
        text = reply.read().decode()
    pattern = r'^mqbroker_unroutable_messages_total\{outcome="(\w+)",protocol="amqp"\} (\S+)$'
    return {outcome: float(value) for outcome, value in re.findall(pattern, text, re.M)}


def test_unroutable_messages_are_returned_if_mandatory_and_counted(amqp_broker: AmqpBroker) -> None:
    before = _unroutable_counts(amqp_broker)
    connection = amqp_broker.connect()
    channel = connection.channel()
    exchange = unique("nowhere")
    channel.exchange_declare(exchange, "direct")
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish(exchange, "no-binding", b"lost", mandatory=True)
    channel.basic_publish(exchange, "no-binding", b"dropped")  # confirmed, as RabbitMQ does, and counted
    channel.basic_publish(exchange, "no-binding", b"dropped too")
    connection.close()
    after = _unroutable_counts(amqp_broker)
    assert after.get("returned", 0) - before.get("returned", 0) == 1
    assert after.get("dropped", 0) - before.get("dropped", 0) == 2


def test_missing_queue_closes_only_the_channel_with_404(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_declare(unique("absent"), passive=True)
    assert closed.value.reply_code == 404
    assert connection.channel().is_open
    connection.close()


def test_transactions_hold_publishes_and_acks_until_commit(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    queue = unique("tx")
    channel.queue_declare(queue, durable=True)
    channel.tx_select()
    for index in range(3):
        channel.basic_publish("", queue, b"rolled back %d" % index)
    channel.tx_rollback()
    channel.basic_publish("", queue, b"committed 0")
    channel.basic_publish("", queue, b"committed 1")
    assert channel.queue_declare(queue, passive=True).method.message_count == 0  # nothing before the commit
    channel.tx_commit()  # returns once both are durable
    assert channel.queue_declare(queue, passive=True).method.message_count == 2
    method, _, body = channel.basic_get(queue)
    assert body == b"committed 0"
    channel.basic_ack(method.delivery_tag)
    channel.tx_rollback()  # the ack is dropped: the message stays unacked on this channel
    channel.basic_ack(method.delivery_tag)
    channel.tx_commit()
    method, _, body = channel.basic_get(queue)
    assert body == b"committed 1"
    channel.close()  # closing with committed-nothing requeues the second message
    channel = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.confirm_delivery()
        channel.tx_select()
    assert refused.value.reply_code == 406
    checker = connection.channel()
    assert [body for _, _, body in drain(checker, queue, 1)] == [b"committed 1"]
    assert checker.queue_declare(queue, passive=True).method.message_count == 0
    connection.close()


def test_publishing_to_an_internal_exchange_is_refused_with_403(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    internal, front = unique("internal"), unique("front")
    queue = unique("behind-internal")
    channel.exchange_declare(internal, "fanout", internal=True)
    channel.exchange_declare(front, "fanout")
    channel.exchange_bind(internal, front)
    channel.queue_declare(queue)
    channel.queue_bind(queue, internal)
    channel.confirm_delivery()
    channel.basic_publish(front, "", b"through the front")  # exchange-to-exchange routing may reach it
    assert channel.basic_get(queue, auto_ack=True)[2] == b"through the front"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.basic_publish(internal, "", b"direct")
    assert refused.value.reply_code == 403
    connection.close()


def test_an_exclusive_consumer_keeps_other_consumers_out(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    queue = unique("exclusive-consumer")
    channel.queue_declare(queue)
    channel.basic_consume(queue, lambda *_: None, exclusive=True)
    other = connection.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        other.basic_consume(queue, lambda *_: None)
    assert refused.value.reply_code == 403
    connection.close()
