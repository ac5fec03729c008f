"""AMQP share queues (``x-queue-type: share``) against a real broker: pika consumers and native share consumers
compete for one queue through its share group; nack, reject, ``x-delay`` and what a share queue refuses."""

from __future__ import annotations

import pathlib
import threading
import time
import uuid
from collections.abc import Iterator

import kombu
import pika
import pytest

from mqbroker.client import ShareConsumer
from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.protocols.amqp.stored import queue_topic
from tests.integration.amqp_support import AmqpBroker, amqp_broker, running_broker  # noqa: F401 (fixture)

SHARE = {"x-queue-type": "share"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def declare_and_publish(broker: AmqpBroker, queue: str, bodies: list[bytes], arguments: dict | None = None,
                        headers: dict | None = None) -> None:
    connection = broker.connect()
    channel = connection.channel()
    channel.queue_declare(queue, durable=True, arguments={**SHARE, **(arguments or {})})
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2, headers=headers))
    connection.close()


def consume_all(broker: AmqpBroker, queue: str, expected: int, consumers: int, timeout_s: float = 30.0
                ) -> list[list[bytes]]:
    """``consumers`` channels on one connection consume and ack until ``expected`` messages arrived in all."""
    connection = broker.connect()
    received: list[list[bytes]] = [[] for _ in range(consumers)]
    for index in range(consumers):
        channel = connection.channel()
        channel.basic_qos(prefetch_count=5)

        def on_message(channel: object, method: pika.spec.Basic.Deliver, _: object, body: bytes,
                       index: int = index) -> None:
            received[index].append(body)
            channel.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

        channel.basic_consume(queue, on_message)
    deadline = time.monotonic() + timeout_s
    while sum(map(len, received)) < expected and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    connection.close()
    return received


def test_consumers_of_a_share_queue_compete_and_each_message_is_delivered_once(amqp_broker: AmqpBroker) -> None:
    """Three consumers with prefetch 5 split 300 messages: every one delivered once, to one consumer."""
    queue = unique("work")
    bodies = [b"m%d" % index for index in range(300)]
    declare_and_publish(amqp_broker, queue, bodies)
    received = consume_all(amqp_broker, queue, len(bodies), consumers=3)
    everything = [body for share in received for body in share]
    assert sorted(everything) == sorted(bodies), "each message exactly once"
    assert sum(1 for share in received if share) >= 2, "more than one consumer got work"


def test_a_native_share_consumer_and_an_amqp_consumer_share_one_queue(amqp_broker: AmqpBroker) -> None:
    """The queue's share group is open to native clients: both kinds of consumer get disjoint parts of it."""
    queue = unique("mixed")
    bodies = [b"n%d" % index for index in range(200)]
    declare_and_publish(amqp_broker, queue, bodies)
    native: list[bytes] = []
    stop = threading.Event()

    def run_native() -> None:
        with ShareConsumer(amqp_broker.bootstrap, group_id=queue_topic(queue), topics=[queue_topic(queue)],
                           records_max=10, fetch_wait_ms=100) as consumer:
            while not stop.is_set():
                messages = consumer.poll(0.2)
                native.extend(message.value for message in messages)
                consumer.acknowledge(messages)
                consumer.commit()

    thread = threading.Thread(target=run_native)
    thread.start()
    try:
        time.sleep(0.5)  # let the native consumer join first so both take part
        amqp = consume_all(amqp_broker, queue, len(bodies) - 0, consumers=1, timeout_s=5)[0]
        deadline = time.monotonic() + 30
        while len(native) + len(amqp) < len(bodies) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(30)
    assert sorted(native + amqp) == sorted(bodies), "each message once, to one kind of consumer or the other"
    assert native, "the native consumer took part"


def test_without_a_delivery_limit_a_requeued_message_keeps_coming_back(amqp_broker: AmqpBroker) -> None:
    """A share queue declared without x-delivery-limit redelivers as a RabbitMQ classic queue does: the share
    group's default of 5 attempts does not apply (the 8th delivery still arrives)."""
    queue = unique("requeued")
    declare_and_publish(amqp_broker, queue, [b"again"])
    connection = amqp_broker.connect()
    channel = connection.channel()
    deliveries = 0
    for method, _, body in channel.consume(queue, inactivity_timeout=10):
        if method is None:
            break
        deliveries += 1
        if deliveries == 8:
            channel.basic_ack(method.delivery_tag)
            break
        channel.basic_nack(method.delivery_tag, requeue=True)
    channel.cancel()
    connection.close()
    assert deliveries == 8


def test_a_requeued_message_comes_back_redelivered_and_a_rejected_one_does_not(amqp_broker: AmqpBroker) -> None:
    """basic.nack with requeue is a release (redelivered flag set); basic.reject without requeue dead-letters."""
    queue = unique("verdicts")
    declare_and_publish(amqp_broker, queue, [b"again", b"poison", b"fine"])
    connection = amqp_broker.connect()
    channel = connection.channel()
    seen: list[tuple[bytes, bool]] = []
    for method, _, body in channel.consume(queue, inactivity_timeout=5):
        if method is None:
            break
        seen.append((body, method.redelivered))
        if body == b"again" and not method.redelivered:
            channel.basic_nack(method.delivery_tag, requeue=True)
        elif body == b"poison":
            channel.basic_reject(method.delivery_tag, requeue=False)
        else:
            channel.basic_ack(method.delivery_tag)
        if len(seen) == 4:
            break
    channel.cancel()
    connection.close()
    assert sorted(seen) == [(b"again", False), (b"again", True), (b"fine", False), (b"poison", False)]


def test_x_delay_holds_a_message_back_until_its_time(amqp_broker: AmqpBroker) -> None:
    """With a consumer waiting, a message published with ``x-delay: 1500`` arrives no sooner than 1.5 s later,
    after one published behind it without a delay."""
    queue = unique("delayed")
    declare_and_publish(amqp_broker, queue, [b"ready"])
    connection = amqp_broker.connect()
    channel = connection.channel()
    publisher = amqp_broker.connect().channel()
    publisher.confirm_delivery()
    arrivals: dict[bytes, float] = {}
    published_s = 0.0
    for method, _, body in channel.consume(queue, inactivity_timeout=15):
        if method is None:
            break
        arrivals[body] = time.monotonic() - published_s
        channel.basic_ack(method.delivery_tag)
        if body == b"ready":  # the consumer is a member now: publish the two
            published_s = time.monotonic()
            publisher.basic_publish("", queue, b"later", pika.BasicProperties(headers={"x-delay": 1500}))
            publisher.basic_publish("", queue, b"now")
        if len(arrivals) == 3:
            break
    channel.cancel()
    connection.close()
    assert set(arrivals) == {b"ready", b"later", b"now"}
    assert arrivals[b"now"] < arrivals[b"later"]
    assert arrivals[b"later"] >= 1.5


def check_counts_and_purge(broker: AmqpBroker, other: AmqpBroker, queue: str) -> None:
    """Five confirmed messages through ``broker``; counts, a get, a purge and a delete through ``other``."""
    declare_and_publish(broker, queue, [b"p%d" % index for index in range(5)])
    connection = other.connect()
    channel = connection.channel()
    assert channel.queue_declare(queue, passive=True).method.message_count == 5, "declare-ok counts ready messages"
    method, _, body = channel.basic_get(queue)
    assert body == b"p0" and method.message_count == 4, "get-ok counts what is left"
    assert channel.queue_purge(queue).method.message_count == 4, "purge-ok counts what it dropped"
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    channel.basic_nack(method.delivery_tag, requeue=True)  # the unacked one survived the purge
    deadline = time.monotonic() + 10
    while channel.queue_declare(queue, passive=True).method.message_count != 1:
        assert time.monotonic() < deadline, "the requeued message is not counted again"
        time.sleep(0.05)
    assert channel.queue_delete(queue).method.message_count == 1, "delete-ok counts the ready message"
    connection.close()


def test_counts_and_purge_of_a_share_queue(amqp_broker: AmqpBroker) -> None:
    """queue.declare-ok, basic.get-ok, queue.purge-ok and queue.delete-ok carry the group's ready messages; a
    purge drops the ready ones and leaves an unacknowledged delivery, which a requeue brings back."""
    check_counts_and_purge(amqp_broker, amqp_broker, unique("counted"))


def declare_dead_lettering(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str,
                           arguments: dict) -> str:
    """A fanout dead-letter exchange with a queue bound to it, and ``queue`` dead-lettering to it; the dead queue."""
    dlx, dead_queue = unique("dlx"), unique("dead")
    channel.exchange_declare(dlx, "fanout", durable=True)
    channel.queue_declare(dead_queue, durable=True)
    channel.queue_bind(dead_queue, dlx)
    channel.queue_declare(queue, durable=True, arguments={**SHARE, "x-dead-letter-exchange": dlx, **arguments})
    return dead_queue


def drain_dead(channel: pika.adapters.blocking_connection.BlockingChannel, dead_queue: str, count: int,
               timeout_s: float = 15.0) -> dict[bytes, tuple[pika.BasicProperties, str]]:
    """Consume ``count`` dead letters: body -> (properties, routing key)."""
    received: dict[bytes, tuple[pika.BasicProperties, str]] = {}
    for method, properties, body in channel.consume(dead_queue, inactivity_timeout=timeout_s):
        assert method is not None, f"only {sorted(received)} were dead-lettered"
        received[body] = (properties, method.routing_key)
        channel.basic_ack(method.delivery_tag)
        if len(received) == count:
            break
    channel.cancel()
    return received


#: The queue TTL of the dead-lettering check.
TTL_MS = 2_000


def check_dead_lettering(broker: AmqpBroker, other: AmqpBroker, queue: str) -> None:
    """Through ``broker``: a reject, an expiry at basic.get and a per-message expiration; through ``other``: the
    dead letters, with RabbitMQ's x-death."""
    connection = broker.connect()
    channel = connection.channel()
    # The TTL leaves the first message time to reach the group and be taken on a loaded machine (the
    # group reads what is durable and replicated); the second outlives it on purpose.
    dead_queue = declare_dead_lettering(channel, queue, {"x-message-ttl": TTL_MS})
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"rejected")
    method, _, _ = channel.basic_get(queue)
    assert method is not None, f"a message published and confirmed was not there to get within {TTL_MS} ms"
    channel.basic_reject(method.delivery_tag, requeue=False)
    channel.basic_publish("", queue, b"expired")
    time.sleep(TTL_MS / 1000 + 0.2)
    assert channel.basic_get(queue) == (None, None, None), "an expired message is not delivered"
    connection.close()
    watcher = other.connect()
    deaths = {body: properties.headers["x-death"][0] for body, (properties, _) in
              drain_dead(watcher.channel(), dead_queue, 2).items()}
    assert deaths[b"rejected"]["reason"] == "rejected" and deaths[b"expired"]["reason"] == "expired"
    for death in deaths.values():
        assert death["queue"] == queue and death["count"] == 1 and death["exchange"] == ""
        assert death["routing-keys"] == [queue]
    watcher.close()


def test_rejected_and_expired_messages_of_a_share_queue_are_dead_lettered_with_x_death(
        amqp_broker: AmqpBroker) -> None:
    check_dead_lettering(amqp_broker, amqp_broker, unique("work"))


def check_expiry_without_consumers(broker: AmqpBroker, other: AmqpBroker, queue: str) -> None:
    """Published through ``broker``, nobody consuming: the messages expire to the dead-letter exchange (read
    through ``other``) under ``x-dead-letter-routing-key``, not before the TTL, ``expiration`` shortening it."""
    connection = broker.connect()
    channel = connection.channel()
    dead_queue = declare_dead_lettering(channel, queue, {"x-message-ttl": 1000, "x-dead-letter-routing-key": "retry"})
    channel.confirm_delivery()
    published_s = time.monotonic()
    channel.basic_publish("", queue, b"ttl")
    channel.basic_publish("", queue, b"short", pika.BasicProperties(expiration="200"))
    watcher = other.connect()
    dead = drain_dead(watcher.channel(), dead_queue, 2)
    assert time.monotonic() - published_s >= 1.0, "not before the queue's TTL"
    assert {body: key for body, (_, key) in dead.items()} == {b"ttl": "retry", b"short": "retry"}
    assert all(properties.headers["x-death"][0]["reason"] == "expired" for properties, _ in dead.values())
    assert watcher.channel().queue_declare(queue, passive=True).method.message_count == 0
    watcher.close()
    connection.close()


def test_a_share_queue_nobody_consumes_expires_its_messages_to_the_dead_letter_exchange(
        amqp_broker: AmqpBroker) -> None:
    """The TTL + dead-letter "retry later" pattern works on a share queue."""
    check_expiry_without_consumers(amqp_broker, amqp_broker, unique("parked"))


def test_kombu_sees_counts_and_purges_a_share_queue(amqp_broker: AmqpBroker) -> None:
    """kombu's ``queue_declare`` count and ``purge`` (what Celery's ``purge`` uses) on a share queue."""
    name = unique("kombu")
    url = f"amqp://guest:guest@127.0.0.1:{amqp_broker.ports['amqp']}//"
    with kombu.Connection(url, transport_options={"confirm_publish": True}) as connection:
        queue = kombu.Queue(name, durable=True, queue_arguments=SHARE)
        producer = connection.Producer()
        for index in range(7):
            producer.publish({"n": index}, routing_key=name, declare=[queue], serializer="json")
        bound = queue(connection.default_channel)
        assert bound.queue_declare(passive=True).message_count == 7
        assert bound.purge() == 7
        assert bound.queue_declare(passive=True).message_count == 0


def test_basic_get_takes_one_message_at_a_time_through_the_share_group(amqp_broker: AmqpBroker) -> None:
    """basic.get acquires one message; a nack with requeue brings it back redelivered, a no-ack get settles at
    once, an ack is final, and a drained queue answers get-empty; a consumer on another channel meanwhile
    never gets what a get holds."""
    queue = unique("polled")
    declare_and_publish(amqp_broker, queue, [b"first", b"second", b"third"])
    connection = amqp_broker.connect()
    channel = connection.channel()
    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"first", False)
    channel.basic_nack(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get(queue)
    assert (body, method.redelivered) == (b"first", True)
    held_tag = method.delivery_tag
    rival = connection.channel()
    rival.basic_qos(prefetch_count=5)
    got: list[bytes] = []
    for rival_method, _, rival_body in rival.consume(queue, inactivity_timeout=2):
        if rival_method is None:
            break
        got.append(rival_body)
        rival.basic_ack(rival_method.delivery_tag)
    rival.cancel()
    assert sorted(got) == [b"second", b"third"], "the rival consumer got all but the message the get holds"
    channel.basic_ack(held_tag)
    declare_and_publish(amqp_broker, queue, [b"fourth"])
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"fourth", "the rival left: its last long poll took nothing with it"
    assert channel.basic_get(queue) == (None, None, None), "the queue is drained: get-empty"
    connection.close()
    again = amqp_broker.connect()
    assert again.channel().basic_get(queue) == (None, None, None), "acked and no-ack gets stay done"
    again.close()


def test_a_share_queue_deleted_and_declared_again_starts_afresh(amqp_broker: AmqpBroker) -> None:
    """queue.delete removes the share group too: the queue declared again delivers its new messages."""
    queue = unique("again")
    declare_and_publish(amqp_broker, queue, [b"old-%d" % index for index in range(5)])
    assert len(consume_all(amqp_broker, queue, 2, consumers=1, timeout_s=10)[0]) >= 2
    connection = amqp_broker.connect()
    connection.channel().queue_delete(queue)
    connection.close()
    declare_and_publish(amqp_broker, queue, [b"new"])
    assert consume_all(amqp_broker, queue, 1, consumers=1, timeout_s=15) == [[b"new"]]


@pytest.fixture
def fresh_broker(tmp_path: pathlib.Path) -> Iterator[AmqpBroker]:
    yield from running_broker(tmp_path / "data")


def test_acknowledged_messages_stay_done_and_the_rest_come_back_after_kill_9(fresh_broker: AmqpBroker) -> None:
    """The queue's state is the share group's, durable: after kill -9 and a restart, acked messages are not
    delivered again and the unacked ones are, flagged redelivered."""
    queue = unique("durable")
    declare_and_publish(fresh_broker, queue, [b"d%d" % index for index in range(10)])
    connection = fresh_broker.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=6)
    taken = []
    for method, _, body in channel.consume(queue, inactivity_timeout=10):
        assert method is not None, "the queue's messages did not arrive"
        taken.append(body)
        if len(taken) <= 4:
            channel.basic_ack(method.delivery_tag)
        if len(taken) == 6:
            break
    # AMQP confirms no ack: wait until the group applied the four, then store the group's state (an alter
    # returns once the group's state, with its partitions, is written), so the kill cannot outrun them.
    with ShareGroupAdmin(fresh_broker.bootstrap) as admin:
        deadline = time.monotonic() + 15
        while admin.describe(queue_topic(queue)).partitions[0].start_offset < 4:
            assert time.monotonic() < deadline, "the four acks were not applied"
            time.sleep(0.05)
        admin.alter(queue_topic(queue), set_configs={"lease.ms": "30000"})
    fresh_broker.kill()
    fresh_broker.restart()
    connection = fresh_broker.connect()
    channel = connection.channel()
    after: list[tuple[bytes, bool]] = []
    for method, _, body in channel.consume(queue, inactivity_timeout=20):
        assert method is not None, f"only {after} came back"
        after.append((body, method.redelivered))
        channel.basic_ack(method.delivery_tag)
        if len(after) == 6:
            break
    connection.close()
    assert sorted(body for body, _ in after) == [b"d%d" % index for index in range(4, 10)], "acked ones stay done"
    assert {body for body, redelivered in after if redelivered} >= {b"d4", b"d5"}, "delivered before: redelivered"


def test_messages_acked_after_basic_cancel_are_not_delivered_again(amqp_broker: AmqpBroker) -> None:
    """AMQP lets a channel ack what it was given after cancelling its consumer: the member stays until then."""
    queue = unique("cancelled")
    declare_and_publish(amqp_broker, queue, [b"c%d" % index for index in range(6)])
    connection = amqp_broker.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=3)
    given: list[tuple[int, bytes]] = []
    tag = channel.basic_consume(queue, lambda _channel, method, _properties, body: given.append(
        (method.delivery_tag, body)))
    deadline = time.monotonic() + 15
    while len(given) < 3 and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    channel.basic_cancel(tag)
    for delivery_tag, _ in given:
        channel.basic_ack(delivery_tag)
    rest = consume_all(amqp_broker, queue, 3, consumers=1, timeout_s=15)[0]
    connection.close()
    assert len(given) == 3
    assert sorted(body for _, body in given) + sorted(rest) == [b"c%d" % index for index in range(6)]
