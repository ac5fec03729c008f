"""Classic AMQP queues on a 3-broker cluster, with pika: a classic queue is served by the broker it was declared
through (its home); publishes reach it through any broker; consume, get and purge through another broker are refused
with 405 naming the home, so no two brokers hand out its messages at once."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pika
import pytest

from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster, wait_for
from tests.integration.test_amqp_share_queue_max_length import _declared, take_all
from tests.integration.test_amqp_share_queues import unique
from tests.integration.test_cluster_frontends import _amqp


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[list[BrokerProcess]]:
    yield from running_cluster(tmp_path, extra_args=["--kafka-tls-port", "0"])


def _refused(attempt: object) -> pika.exceptions.ChannelClosedByBroker:
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        attempt()  # type: ignore[operator]
    return refused.value


def test_a_classic_queue_is_consumed_only_through_its_home_broker_and_published_to_through_any(
        cluster: list[BrokerProcess]) -> None:
    home, other, third = (_amqp(broker) for broker in cluster)
    queue = unique("classic-home")
    home.channel().queue_declare(queue, durable=True, arguments={"x-queue-type": "classic"})
    for connection in (other, third):
        wait_for(lambda connection=connection: _declared(connection.channel(), queue), 30, "the queue everywhere")
    publisher = other.channel()
    publisher.confirm_delivery()
    bodies = [f"m{index}".encode() for index in range(5)]
    for body in bodies:
        publisher.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
    amqp_port = cluster[0].ports["amqp"]
    for attempt in (lambda: other.channel().basic_consume(queue, lambda *_: None),
                    lambda: third.channel().basic_get(queue),
                    lambda: other.channel().queue_purge(queue)):
        refused = _refused(attempt)
        assert refused.reply_code == 405
        assert f"served by broker 1 (AMQP at 127.0.0.1:{amqp_port})" in refused.reply_text
    assert take_all(home, queue) == bodies  # nothing was taken or purged through the others
    for connection in (home, other, third):
        connection.close()
