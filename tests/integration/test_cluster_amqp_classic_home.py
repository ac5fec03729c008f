"""Classic AMQP queues on a 3-broker cluster, with pika: a classic queue is served by the broker it was declared
through (its home); publishes reach it through any broker; consume, get and purge through another broker are refused
with 405 naming the home, so no two brokers hand out its messages at once. An exclusive queue (an RPC reply queue)
is reached by publishes through every broker, refused to every other connection, and gone with its connection.
Transient definitions (a non-durable fanout exchange, auto-delete queues bound to it: a Celery broadcast, with kombu)
route through every broker and go cluster-wide with their consumers; a restarted broker deletes its own."""

from __future__ import annotations

import time
from collections.abc import Iterator

import kombu
import pika
import pytest

from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster, wait_for
from tests.integration.test_amqp_share_queue_max_length import _declared, take_all
from tests.integration.test_amqp_share_queues import unique
from tests.integration.test_cluster_frontends import _amqp


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    yield from running_cluster(tmp_path_factory.mktemp("cluster"), extra_args=["--kafka-tls-port", "0"])


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


def test_an_exclusive_reply_queue_gets_publishes_through_other_brokers_and_goes_with_its_connection(
        cluster: list[BrokerProcess]) -> None:
    home, other = _amqp(cluster[0]), _amqp(cluster[1])
    consumer = home.channel()
    reply_queue = consumer.queue_declare("", exclusive=True).method.queue
    fanout = unique("notices")
    consumer.exchange_declare(fanout, "fanout", durable=True)
    consumer.queue_bind(reply_queue, fanout)
    wait_for(lambda: _refused(lambda: other.channel().queue_declare(reply_queue, passive=True)).reply_code == 405,
             30, "the exclusive queue known (and locked) on broker 2")
    publisher = other.channel()
    publisher.confirm_delivery()
    publisher.basic_publish("", reply_queue, b"reply", mandatory=True)  # routed: no UnroutableError
    wait_for(lambda: _bound_through(other, fanout), 30, "the binding on broker 2")  # routed once: b"probe"
    received = []
    for method, _, body in consumer.consume(reply_queue, auto_ack=True, inactivity_timeout=10):
        assert method is not None, f"only {received} arrived"
        received.append(body)
        if len(received) == 2:
            break
    assert received == [b"reply", b"probe"]
    assert _refused(lambda: other.channel().basic_get(reply_queue)).reply_code == 405
    home.close()
    wait_for(lambda: _refused(lambda: other.channel().queue_declare(reply_queue, passive=True)).reply_code == 404,
             30, "the queue gone from broker 2 with its connection")
    other.close()


def _bound_through(connection: pika.BlockingConnection, exchange: str) -> bool:
    """Whether a mandatory publish to ``exchange`` through ``connection``'s broker is routed (a spare channel)."""
    channel = connection.channel()
    channel.confirm_delivery()
    try:
        channel.basic_publish(exchange, "", b"probe", mandatory=True)
        return True
    except pika.exceptions.UnroutableError:
        return False
    finally:
        channel.close()


def test_a_celery_style_broadcast_published_through_a_third_broker_reaches_consumers_on_the_other_two(
        cluster: list[BrokerProcess]) -> None:
    """kombu/Celery's pidbox: a non-durable, auto-delete fanout exchange and an auto-delete, non-durable queue per
    worker, consumed through brokers 1 and 2; the broadcast is published through broker 3. When the workers go,
    their queues and then the exchange go cluster-wide."""
    exchange = kombu.Exchange(unique("celery.pidbox"), type="fanout", durable=False, auto_delete=True)
    workers = [kombu.Connection(_url(broker)) for broker in cluster[:2]]
    received: list[list[str]] = [[], []]
    consumers = []
    for index, worker in enumerate(workers):
        queue = kombu.Queue(unique(f"worker{index}.celery.pidbox"), exchange, durable=False, auto_delete=True)
        consumer = worker.Consumer(queue, accept=["json"], callbacks=[
            lambda body, message, index=index: (received[index].append(body["method"]), message.ack())])
        consumer.consume()  # declares the exchange and the queue and binds them through the worker's broker
        consumers.append(consumer)
    third = _amqp(cluster[2])
    # A passive declare of an unknown queue reads __amqp_metadata to its end first: every bind-ok above is in force.
    assert not _declared(third.channel(), unique("never-declared"))
    with kombu.Connection(_url(cluster[2]), transport_options={"confirm_publish": True}) as control:
        control.Producer().publish({"method": "ping"}, exchange=exchange, declare=[exchange], serializer="json")
    for index, worker in enumerate(workers):
        deadline = time.monotonic() + 10
        while not received[index] and time.monotonic() < deadline:
            try:
                worker.drain_events(timeout=0.5)
            except TimeoutError:
                pass
    assert received == [["ping"], ["ping"]]
    for consumer, worker in zip(consumers, workers):
        consumer.cancel()  # the auto-delete queue goes with its last consumer, the exchange with its last binding
        worker.close()
    wait_for(lambda: not _exchange_known(third, exchange.name), 30, "the exchange gone from broker 3")
    third.close()


def _url(broker: BrokerProcess) -> str:
    return f"amqp://guest:guest@127.0.0.1:{broker.ports['amqp']}//"


def _exchange_known(connection: pika.BlockingConnection, exchange: str) -> bool:
    """Whether ``exchange`` is known through ``connection``'s broker (asked on a spare channel)."""
    try:
        connection.channel().exchange_declare(exchange, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker:
        return False


@pytest.mark.slow
def test_an_exclusive_queue_whose_broker_was_killed_is_deleted_when_that_broker_starts_again(
        cluster: list[BrokerProcess]) -> None:
    """kill -9 leaves the exclusive queue's record behind (its connection could not say goodbye); the broker deletes
    it after its replay on restart, cluster-wide, with its non-durable queues (and their bindings: as RabbitMQ deletes
    a restarted node's non-durable queues) and exchanges; a non-durable exchange of its that another broker's
    non-durable queue is bound to stays for it. (Last in the module: it restarts broker 3.)"""
    survivor, doomed = _amqp(cluster[0]), _amqp(cluster[2])
    channel = doomed.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    transient, durable, lonely = unique("transient"), unique("durable"), unique("lonely")
    channel.exchange_declare(transient, "fanout", durable=False)
    channel.exchange_declare(durable, "fanout", durable=True)
    channel.queue_declare(lonely, durable=False)
    channel.queue_bind(lonely, durable)
    broadcast, worker = unique("broadcast"), unique("worker")
    channel.exchange_declare(broadcast, "fanout", durable=False)
    wait_for(lambda: _exchange_known(survivor, broadcast), 30, "the broadcast exchange known on broker 1")
    survivor.channel().queue_declare(worker, durable=False)
    survivor.channel().queue_bind(worker, broadcast)
    wait_for(lambda: _refused(lambda: survivor.channel().queue_declare(queue, passive=True)).reply_code == 405,
             30, "the exclusive queue known on broker 1")
    wait_for(lambda: _exchange_known(survivor, transient) and _bound_through(survivor, durable), 30,
             "the transient exchange and the binding known on broker 1")
    cluster[2].kill()
    cluster[2].restart()
    wait_for(lambda: _refused(lambda: survivor.channel().queue_declare(queue, passive=True)).reply_code == 404,
             60, "the dead connection's queue deleted after its broker's restart")
    wait_for(lambda: not _exchange_known(survivor, transient) and not _bound_through(survivor, durable), 30,
             "the transient exchange and the binding to the non-durable queue deleted")
    wait_for(lambda: not _declared(survivor.channel(), lonely), 30, "the non-durable queue deleted")
    restarted = _amqp(cluster[2])
    assert not _declared(restarted.channel(), lonely), "gone on its home broker before it served a client"
    restarted.close()
    assert _exchange_known(survivor, broadcast) and _bound_through(survivor, broadcast)
    survivor.close()
