"""What the share group's host decides for an AMQP share queue, with pika against real brokers: ``x-max-length``
(drop-head) drops the oldest ready messages whichever broker they were published through; they, and messages past
``x-delivery-limit``, go through the dead-letter exchange; ``x-expires`` deletes a queue unused through every
broker."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pika
import pytest

from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.errors import GroupIdNotFoundError
from mqbroker.protocols.amqp.stored import queue_topic
from tests.integration.amqp_support import AmqpBroker, amqp_broker, running_broker  # noqa: F401 (fixture)
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster, wait_for
from tests.integration.share_support import share_host
from tests.integration.test_amqp_share_queues import SHARE, declare_dead_lettering, drain_dead, unique
from tests.integration.test_cluster_frontends import _amqp


def publish_confirmed(connection: pika.BlockingConnection, queue: str, bodies: list[bytes]) -> None:
    """Publish ``bodies`` to ``queue`` one by one, each confirmed before the next goes."""
    channel = connection.channel()
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
    channel.close()


def take_all(connection: pika.BlockingConnection, queue: str, idle_s: float = 1.5) -> list[bytes]:
    """Consume and ack until the queue stays quiet for ``idle_s``."""
    channel = connection.channel()
    channel.basic_qos(prefetch_count=50)
    received = []
    for method, _, body in channel.consume(queue, inactivity_timeout=idle_s):
        if method is None:
            break
        received.append(body)
        channel.basic_ack(method.delivery_tag)
    channel.cancel()
    channel.close()
    return received


def ready_count(connection: pika.BlockingConnection, queue: str) -> int:
    channel = connection.channel()
    count = channel.queue_declare(queue, passive=True).method.message_count
    channel.close()
    return int(count)


def test_a_share_queue_keeps_the_newest_messages_up_to_its_max_length(amqp_broker: AmqpBroker) -> None:
    """Ten confirmed publishes to a queue of at most three: its count is three, a consumer gets the last three."""
    connection = amqp_broker.connect()
    queue = unique("bounded")
    connection.channel().queue_declare(queue, durable=True, arguments={**SHARE, "x-max-length": 3})
    publish_confirmed(connection, queue, [str(index).encode() for index in range(10)])
    assert ready_count(connection, queue) == 3
    assert take_all(connection, queue) == [b"7", b"8", b"9"]
    publish_confirmed(connection, queue, [b"10"])
    channel = connection.channel()
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"10" and method.message_count == 0
    connection.close()


def test_leased_messages_are_not_ready_and_a_max_length_of_zero_keeps_none(amqp_broker: AmqpBroker) -> None:
    """Messages a consumer holds unacknowledged are not counted (as RabbitMQ counts ready ones); x-max-length 0
    drops every message nobody holds."""
    connection = amqp_broker.connect()
    queue = unique("held")
    connection.channel().queue_declare(queue, durable=True, arguments={**SHARE, "x-max-length": 2})
    publish_confirmed(connection, queue, [b"a", b"b"])
    holder = connection.channel()
    holder.basic_qos(prefetch_count=2)
    held = []
    tag = holder.basic_consume(queue, lambda channel, method, _, body: held.append((method.delivery_tag, body)))
    wait_for(lambda: (connection.process_data_events(time_limit=0.1), len(held) == 2)[1], 10, "two deliveries")
    holder.basic_cancel(tag)
    publish_confirmed(connection, queue, [b"c", b"d", b"e"])
    assert ready_count(connection, queue) == 2  # c, d, e published: c dropped
    for delivery_tag, _ in held:
        holder.basic_ack(delivery_tag)
    assert sorted(body for _, body in held) == [b"a", b"b"]
    assert take_all(connection, queue) == [b"d", b"e"]
    empty = unique("empty")
    connection.channel().queue_declare(empty, durable=True, arguments={**SHARE, "x-max-length": 0})
    publish_confirmed(connection, empty, [b"gone", b"too"])
    assert ready_count(connection, empty) == 0
    assert take_all(connection, empty, idle_s=1.0) == []
    connection.close()


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[list[BrokerProcess]]:
    yield from running_cluster(tmp_path, extra_args=["--kafka-tls-port", "0"])


def test_publishers_through_two_brokers_overflow_one_queue_and_a_third_consumes_exactly_the_survivors(
        cluster: list[BrokerProcess]) -> None:
    """Publishes alternate between brokers 1 and 2, each confirmed before the next (so the log's order is the
    publishing order); the share group's one host drops the heads: broker 3's consumer gets the last five."""
    first, second, third = (_amqp(broker) for broker in cluster)
    queue = unique("cluster-bounded")
    first.channel().queue_declare(queue, durable=True, arguments={"x-max-length": 5})
    wait_for(lambda: share_host(cluster[0].bootstrap, queue_topic(queue)) > 0, 30,
             "the share group of the plain queue (x-max-length no longer makes it a classic queue)")
    channels = []
    for connection in (first, second, third):
        wait_for(lambda connection=connection: _declared(connection.channel(), queue), 30, "the queue everywhere")
    for connection in (first, second):
        channel = connection.channel()
        channel.confirm_delivery()
        channels.append(channel)
    bodies = [f"m{index}".encode() for index in range(20)]
    for index, body in enumerate(bodies):
        channels[index % 2].basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
    assert ready_count(third, queue) == 5
    assert take_all(third, queue) == bodies[-5:]
    for connection in (first, second, third):
        connection.close()


def _declared(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> bool:
    """Whether ``queue`` is known through ``channel``'s broker (a 404 closes the channel: only ask a spare one)."""
    try:
        channel.queue_declare(queue, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False


def test_heads_dropped_at_max_length_go_through_the_dead_letter_exchange_with_reason_maxlen(
        amqp_broker: AmqpBroker) -> None:
    """RabbitMQ dead-letters the heads x-max-length drops: so does a share queue with a dead-letter exchange."""
    connection = amqp_broker.connect()
    queue = unique("bounded-dlx")
    dead_queue = declare_dead_lettering(connection.channel(), queue, {"x-max-length": 2})
    publish_confirmed(connection, queue, [b"1", b"2", b"3", b"4"])
    deaths = {body: properties.headers["x-death"][0] for body, (properties, _) in
              drain_dead(connection.channel(), dead_queue, 2).items()}
    assert sorted(deaths) == [b"1", b"2"]
    assert all(death["reason"] == "maxlen" and death["queue"] == queue for death in deaths.values())
    assert take_all(connection, queue) == [b"3", b"4"]
    connection.close()


def test_a_message_past_its_delivery_limit_goes_through_the_dead_letter_exchange(amqp_broker: AmqpBroker) -> None:
    """x-delivery-limit 2: requeued twice, the message is dead-lettered with reason delivery_limit (as a RabbitMQ
    quorum queue does), not delivered a third time."""
    connection = amqp_broker.connect()
    queue = unique("limited")
    dead_queue = declare_dead_lettering(connection.channel(), queue, {"x-delivery-limit": 2})
    publish_confirmed(connection, queue, [b"poison"])
    channel = connection.channel()
    for attempt in (1, 2):
        method = wait_for(lambda: channel.basic_get(queue)[0], 10, f"delivery {attempt}")
        channel.basic_nack(method.delivery_tag, requeue=True)
    [(properties, _)] = drain_dead(connection.channel(), dead_queue, 1).values()
    death = properties.headers["x-death"][0]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", queue, 1)
    assert channel.basic_get(queue) == (None, None, None)
    connection.close()


def test_an_unused_share_queue_with_x_expires_is_deleted(amqp_broker: AmqpBroker) -> None:
    """A consumer keeps the queue; after it left, redeclaring restarts the clock; unused for x-expires, it is gone
    (its share group, watched without touching the queue, and then the queue itself)."""
    connection = amqp_broker.connect()
    queue = unique("expiring")
    arguments = {**SHARE, "x-expires": 1500}
    connection.channel().queue_declare(queue, durable=True, arguments=arguments)
    publish_confirmed(connection, queue, [b"kept"])
    consumer = connection.channel()
    tag = consumer.basic_consume(queue, lambda channel, method, _, body: None, auto_ack=True)
    connection.sleep(2.5)  # longer than x-expires: the consumer keeps it
    assert group_exists(amqp_broker.bootstrap, queue)
    consumer.basic_cancel(tag)
    connection.sleep(1.0)
    connection.channel().queue_declare(queue, durable=True, arguments=arguments)
    connection.sleep(1.0)  # 2 s since the consumer left, 1 s since the redeclaration
    assert group_exists(amqp_broker.bootstrap, queue)
    wait_for(lambda: not group_exists(amqp_broker.bootstrap, queue), 10, "the unused queue's deletion")
    assert not _declared(connection.channel(), queue)
    connection.close()


def group_exists(bootstrap: str, queue: str) -> bool:
    """Whether ``queue``'s share group is there (asked of the group's host: the queue is not touched)."""
    with ShareGroupAdmin(bootstrap) as admin:
        try:
            admin.describe(queue_topic(queue))
            return True
        except GroupIdNotFoundError:
            return False


@pytest.mark.slow
def test_a_share_queue_consumed_through_another_broker_expires_only_once_unused_everywhere(
        cluster: list[BrokerProcess]) -> None:
    """Declared through broker 1, consumed through broker 2 for longer than x-expires: kept; once the consumer left,
    the group's host counts it unused and the queue is gone from every broker."""
    first, second, third = (_amqp(broker) for broker in cluster)
    queue = unique("cluster-expiring")
    first.channel().queue_declare(queue, durable=True, arguments={"x-expires": 2000})
    bootstrap = cluster[0].bootstrap
    wait_for(lambda: group_exists(bootstrap, queue), 30, "the queue's share group")
    wait_for(lambda: _declared(second.channel(), queue), 30, "the queue on broker 2")
    consumer = second.channel()
    tag = consumer.basic_consume(queue, lambda channel, method, _, body: None, auto_ack=True)
    second.sleep(3.5)
    assert group_exists(bootstrap, queue)
    consumer.basic_cancel(tag)
    wait_for(lambda: not group_exists(bootstrap, queue), 15, "the unused queue's deletion")
    wait_for(lambda: not _declared(third.channel(), queue), 10, "the queue gone from broker 3")
    for connection in (first, second, third):
        connection.close()
