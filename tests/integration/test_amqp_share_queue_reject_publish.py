"""``x-overflow`` reject-publish and reject-publish-dlx on AMQP share queues, with pika against real brokers: a full
queue keeps its oldest messages and refuses new ones (nacked with confirms, dropped without), a message routed to a
full and a free queue is nacked but kept by the free one, reject-publish-dlx dead-letters what it refuses, and a
publisher through a broker that is not the share group's host is judged alike."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pika
import pytest

from mqbroker.protocols.amqp.stored import queue_topic
from tests.integration.amqp_support import AmqpBroker, amqp_broker, running_broker  # noqa: F401 (fixture)
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster, wait_for
from tests.integration.share_support import share_host
from tests.integration.test_amqp_share_queue_max_length import _declared, ready_count, take_all
from tests.integration.test_amqp_share_queues import SHARE, declare_dead_lettering, drain_dead, unique
from tests.integration.test_cluster_frontends import _amqp

REJECT = {"x-overflow": "reject-publish"}


def publish_each_confirmed(channel: pika.adapters.blocking_connection.BlockingChannel, exchange: str,
                           routing_key: str, bodies: list[bytes]) -> list[bool]:
    """Publish ``bodies`` one by one on a confirming channel: whether each was acked (False: nacked)."""
    acked = []
    for body in bodies:
        try:
            channel.basic_publish(exchange, routing_key, body, pika.BasicProperties(delivery_mode=2))
            acked.append(True)
        except pika.exceptions.NackError:
            acked.append(False)
    return acked


def test_a_full_queue_nacks_new_publishes_and_keeps_its_oldest(amqp_broker: AmqpBroker) -> None:
    """Ten confirmed publishes to a queue of at most four: four acks then six nacks; the consumer gets the first four;
    once it took them, the queue takes messages again."""
    connection = amqp_broker.connect()
    queue = unique("reject")
    channel = connection.channel()
    channel.queue_declare(queue, durable=True, arguments={**REJECT, "x-max-length": 4})
    channel.confirm_delivery()
    bodies = [str(index).encode() for index in range(10)]
    assert publish_each_confirmed(channel, "", queue, bodies) == [True] * 4 + [False] * 6
    assert ready_count(connection, queue) == 4
    assert take_all(connection, queue) == bodies[:4]
    assert publish_each_confirmed(channel, "", queue, [b"again"]) == [True]
    assert take_all(connection, queue) == [b"again"]
    connection.close()


def publish_pipelined(port: int, queue: str, bodies: list[bytes], timeout_s: float = 30.0) -> dict[int, bool]:
    """Publish ``bodies`` without waiting between them on a confirming channel (pika's SelectConnection): each
    publish's sequence number -> acked (False: nacked)."""
    outcomes: dict[int, bool] = {}

    def confirmed(frame: pika.frame.Method) -> None:
        method = frame.method
        acked = isinstance(method, pika.spec.Basic.Ack)
        for sequence in range(1, len(bodies) + 1):
            if sequence == method.delivery_tag or (method.multiple and sequence < method.delivery_tag):
                outcomes.setdefault(sequence, acked)
        if len(outcomes) == len(bodies):
            connection.close()

    def opened_channel(channel: pika.channel.Channel) -> None:
        channel.confirm_delivery(confirmed)
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))

    connection = pika.SelectConnection(
        pika.ConnectionParameters("127.0.0.1", port),
        on_open_callback=lambda opened: opened.channel(on_open_callback=opened_channel),
        on_close_callback=lambda closed, reason: closed.ioloop.stop())
    connection.ioloop.call_later(timeout_s, lambda: connection.close() if connection.is_open else None)
    connection.ioloop.start()
    return outcomes


def test_pipelined_confirmed_publishes_are_acked_up_to_the_length_and_nacked_after(amqp_broker: AmqpBroker) -> None:
    """Fifty publishes sent without waiting for confirms to a queue of at most twenty: 1..20 acked, 21..50 nacked."""
    connection = amqp_broker.connect()
    queue = unique("reject-pipelined")
    connection.channel().queue_declare(queue, durable=True, arguments={**REJECT, "x-max-length": 20})
    bodies = [str(index).encode() for index in range(50)]
    outcomes = publish_pipelined(amqp_broker.ports["amqp"], queue, bodies)
    assert outcomes == {sequence: sequence <= 20 for sequence in range(1, 51)}
    assert take_all(connection, queue) == bodies[:20]
    connection.close()


def test_without_confirms_a_full_queue_drops_new_publishes(amqp_broker: AmqpBroker) -> None:
    """Ten publishes without confirms, sent at once: the queue holds the first three, the others are gone."""
    connection = amqp_broker.connect()
    queue = unique("reject-unconfirmed")
    channel = connection.channel()
    channel.queue_declare(queue, durable=True, arguments={**REJECT, "x-max-length": 3})
    bodies = [str(index).encode() for index in range(10)]
    for body in bodies:
        channel.basic_publish("", queue, body)
    assert ready_count(connection, queue) == 3  # asked after the publishes on the same connection: they are judged
    assert take_all(connection, queue) == bodies[:3]
    connection.close()


def test_a_message_routed_to_a_full_and_a_free_queue_is_nacked_and_kept_by_the_free_one(
        amqp_broker: AmqpBroker) -> None:
    """A fanout to two queues, one full: the confirm is a nack (not every queue took it), the free queue has it."""
    connection = amqp_broker.connect()
    channel = connection.channel()
    fanout, full, free = unique("both"), unique("full"), unique("free")
    channel.exchange_declare(fanout, "fanout", durable=True)
    channel.queue_declare(full, durable=True, arguments={**REJECT, "x-max-length": 1})
    channel.queue_declare(free, durable=True, arguments=SHARE)
    channel.queue_bind(full, fanout)
    channel.queue_bind(free, fanout)
    channel.confirm_delivery()
    assert publish_each_confirmed(channel, fanout, "", [b"first", b"second"]) == [True, False]
    assert take_all(connection, full) == [b"first"]
    assert take_all(connection, free) == [b"first", b"second"]
    connection.close()


def test_reject_publish_dlx_dead_letters_what_it_refuses_with_reason_maxlen(amqp_broker: AmqpBroker) -> None:
    """reject-publish-dlx: the refused publishes are nacked and go through the dead-letter exchange, x-death maxlen."""
    connection = amqp_broker.connect()
    queue = unique("reject-dlx")
    dead_queue = declare_dead_lettering(connection.channel(), queue,
                                        {"x-overflow": "reject-publish-dlx", "x-max-length": 2})
    channel = connection.channel()
    channel.confirm_delivery()
    assert publish_each_confirmed(channel, "", queue, [b"1", b"2", b"3", b"4"]) == [True, True, False, False]
    deaths = {body: properties.headers["x-death"][0] for body, (properties, _) in
              drain_dead(connection.channel(), dead_queue, 2).items()}
    assert sorted(deaths) == [b"3", b"4"]
    assert all(death["reason"] == "maxlen" and death["queue"] == queue for death in deaths.values())
    assert take_all(connection, queue) == [b"1", b"2"]
    connection.close()


def test_reject_publish_is_refused_on_a_classic_queue(amqp_broker: AmqpBroker) -> None:
    """A classic queue's state lives in one broker's front end: reject-publish is refused there (406)."""
    connection = amqp_broker.connect()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        connection.channel().queue_declare(unique("classic"), durable=True,
                                           arguments={"x-queue-type": "classic", **REJECT, "x-max-length": 1})
    assert refused.value.reply_code == 406 and "share queue" in refused.value.reply_text
    connection.close()


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[list[BrokerProcess]]:
    yield from running_cluster(tmp_path, extra_args=["--kafka-tls-port", "0"])


def test_publishers_through_brokers_that_do_not_host_the_queue_are_judged_against_its_max_length(
        cluster: list[BrokerProcess]) -> None:
    """The queue's share group lives on one broker; confirmed publishes alternate between the two others, each
    confirmed before the next: the first five are acked, the rest nacked; a consumer on the host gets the five."""
    queue = unique("cluster-reject")
    declaring = _amqp(cluster[0])
    declaring.channel().queue_declare(queue, durable=True, arguments={**REJECT, "x-max-length": 5})
    host = []
    wait_for(lambda: host.append(share_host(cluster[0].bootstrap, queue_topic(queue))) or host[-1] > 0, 30,
             "the queue's share group")
    host_index = host[-1] - 1  # node ids are 1..3 in cluster order
    others = [_amqp(broker) for index, broker in enumerate(cluster) if index != host_index]
    hosting = _amqp(cluster[host_index])
    for connection in (*others, hosting):
        wait_for(lambda connection=connection: _declared(connection.channel(), queue), 30, "the queue everywhere")
    channels = []
    for connection in others:
        channel = connection.channel()
        channel.confirm_delivery()
        channels.append(channel)
    bodies = [f"m{index}".encode() for index in range(9)]
    acked = [publish_each_confirmed(channels[index % 2], "", queue, [body])[0] for index, body in enumerate(bodies)]
    assert acked == [True] * 5 + [False] * 4
    assert ready_count(others[0], queue) == 5
    assert take_all(hosting, queue) == bodies[:5]
    for connection in (declaring, *others, hosting):
        connection.close()
