"""AMQP bindings on a 3-broker cluster are in force on every broker when bind-ok is sent: a publisher told of a
binding through one broker publishes through another at once, and every confirmed message is in the queue. Two other
clients declare and delete exchanges with large argument tables through the third broker meanwhile: every broker's
definitions follower is then often busy applying one when a binding is written, which makes the race this tests
(a publish handled before the follower's next fetch brings the binding) happen within a few binds."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster
from tests.integration.mqtt_support import unique
from tests.integration.test_cluster_amqp_failover import _take
from tests.integration.test_cluster_frontends import _amqp, _node

#: Binds raced against a publish through another broker: each is a chance for the race to show.
BINDS = 20
#: Messages published through broker 2 right after each bind-ok.
PER_BIND = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    yield from running_cluster(pathlib.Path(tmp_path_factory.mktemp("causal")))


#: Entries of the argument table of each exchange the other client declares (decoded by every broker's follower).
CHURN_ARGUMENTS = 5000


class Churn(threading.Thread):
    """Declares and deletes a durable exchange with a large argument table through one broker until stopped (each
    writes ``__amqp_metadata``)."""

    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(daemon=True)
        self.broker = broker
        self.stop = threading.Event()
        self.changes = 0
        self.arguments = {f"x-padding-{index}": index for index in range(CHURN_ARGUMENTS)}

    def run(self) -> None:
        connection = _amqp(self.broker)
        channel = connection.channel()
        name = unique("churn")
        while not self.stop.is_set():
            channel.exchange_declare(name, "fanout", durable=True, arguments=self.arguments)
            channel.exchange_delete(name)
            self.changes += 2
        connection.close()


def test_a_publish_through_another_broker_right_after_bind_ok_is_routed_by_the_binding(
        cluster: list[BrokerProcess]) -> None:
    """Bind through broker 1 and, the moment bind-ok arrives, publish with confirms (mandatory) through broker 2,
    which knew the exchange before: no publish comes back unroutable, and every one is in its queue (consumed
    through broker 3)."""
    exchange = unique("causal")
    binder = _amqp(_node(cluster, 1))
    bind_channel = binder.channel()
    bind_channel.exchange_declare(exchange, "direct", durable=True)
    publisher = _amqp(_node(cluster, 2))
    publish_channel = publisher.channel()
    publish_channel.exchange_declare(exchange, "direct", passive=True)  # broker 2 knows the exchange already
    publish_channel.confirm_delivery()
    queues = [unique(f"causal-{index}") for index in range(BINDS)]
    unroutable = []
    churns = [Churn(_node(cluster, 3)) for _ in range(2)]
    for churn in churns:
        churn.start()
    for queue in queues:
        bind_channel.queue_declare(queue, durable=True)
        bind_channel.queue_bind(queue, exchange, routing_key=queue)
        for number in range(PER_BIND):  # at once: no round trip to anyone between bind-ok and these
            try:
                publish_channel.basic_publish(exchange, queue, b"%s %d" % (queue.encode(), number),
                                              pika.BasicProperties(delivery_mode=2), mandatory=True)
            except pika.exceptions.UnroutableError:
                unroutable.append((queue, number))
    for churn in churns:
        churn.stop.set()
        churn.join(30)
        assert churn.changes, "the other clients changed definitions meanwhile"
    publisher.close()
    binder.close()
    assert not unroutable, f"{len(unroutable)} of {BINDS * PER_BIND} publishes found no binding: {unroutable[:6]}"
    consumer = _amqp(_node(cluster, 3))
    for queue in queues:
        channel = consumer.channel()  # pika's consume generator serves one queue per channel
        expected = [b"%s %d" % (queue.encode(), number) for number in range(PER_BIND)]
        assert _take(channel, queue, PER_BIND, ack=True) == expected
        channel.close()
    consumer.close()
