"""Plain AMQP queues on a 3-broker cluster with ``amqp_default_queue_type = share``: a durable queue declared
without a type (as pika and kombu users do) is a share queue, so its per-message state has one owner in the
cluster. Declared through one broker, published to with confirms through a second, consumed through the third
and the first at once: every message arrives, none goes to two consumers at once; a consumer whose broker is
killed -9 reconnects elsewhere and gets its unacknowledged deliveries again."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest

from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.errors import BrokerError
from mqbroker.protocols.amqp.stored import queue_topic
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import retrying, start_cluster, wait_for
from tests.integration.mqtt_support import unique
from tests.integration.test_amqp_share_queues_cluster import AmqpWorker, _overlapping
from tests.integration.test_cluster_amqp_failover import _publish_confirmed, _take
from tests.integration.test_cluster_frontends import _amqp, _node


@pytest.fixture
def cluster(tmp_path: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    brokers = start_cluster(tmp_path, extra_args=["--set", "amqp_default_queue_type=share", "--kafka-tls-port", "0"])
    try:
        yield brokers
    finally:
        for broker in brokers:
            broker.kill()


def _declare(broker: BrokerProcess, queue: str) -> None:
    connection = _amqp(broker)
    connection.channel().queue_declare(queue, durable=True)  # no x-queue-type: the broker's default decides
    connection.close()


def _group_topics(admin: ShareGroupAdmin, queue: str) -> tuple[str, ...] | None:
    """The topics of the queue's share group (None while it does not exist yet)."""
    try:
        return tuple(admin.describe(queue_topic(queue)).topics)
    except BrokerError:
        return None


def test_consumers_on_two_brokers_share_a_plain_queue_and_each_message_goes_to_one(cluster: list[BrokerProcess]) -> None:
    queue = unique("orders")
    _declare(_node(cluster, 1), queue)
    with ShareGroupAdmin(_node(cluster, 2).bootstrap) as admin:  # the queue created its share group
        wait_for(lambda: _group_topics(admin, queue) == (queue_topic(queue),), 30, "the queue's share group")
    bodies = [b"order %d" % index for index in range(300)]
    _publish_confirmed(_node(cluster, 2), "", queue, bodies)
    workers = [AmqpWorker(f"amqp-{node}", [_node(cluster, node)], queue) for node in (3, 1)]
    for worker in workers:
        worker.start()
    try:
        wait_for(lambda: sum(len(worker.snapshot()) for worker in workers) >= len(bodies), 60, "every message")
        time.sleep(0.5)  # anything delivered twice would show up now
    finally:
        for worker in workers:
            worker.stop.set()
            worker.join(30)
    given = Counter(body for worker in workers for body, *_ in worker.snapshot())
    assert sorted(given) == sorted(bodies), "every confirmed message arrived"
    assert max(given.values()) == 1, [body for body, count in given.items() if count > 1][:10]
    assert all(worker.snapshot() for worker in workers), "both brokers' consumers got messages"
    assert not _overlapping(workers, time.monotonic())


def test_a_consumer_whose_broker_is_killed_gets_its_unacked_deliveries_again_elsewhere(
    cluster: list[BrokerProcess],
) -> None:
    queue = unique("jobs")
    bodies = [b"job %d" % index for index in range(50)]
    _declare(_node(cluster, 1), queue)
    with ShareGroupAdmin(_node(cluster, 1).bootstrap) as admin:  # redelivered within 5 s of the consumer's loss
        wait_for(lambda: _group_topics(admin, queue) is not None, 30, "the queue's share group")
        retrying(lambda: admin.alter(queue_topic(queue), set_configs={"lease.ms": "5000"}))
    _publish_confirmed(_node(cluster, 2), "", queue, bodies)
    first = _amqp(_node(cluster, 3))
    channel = first.channel()
    channel.basic_qos(prefetch_count=50)
    acked = _take(channel, queue, 20, ack=True)
    unacked = _take(channel, queue, 10, ack=False)  # delivered, never acknowledged
    assert len(set(acked + unacked)) == 30
    first.sleep(1.0)  # the acknowledgements reach the share group's host
    _node(cluster, 3).kill()
    second = _amqp(_node(cluster, 1))
    channel = second.channel()
    received = _take(channel, queue, 30, ack=True, timeout_s=60)
    second.close()
    assert sorted(received) == sorted(set(bodies) - set(acked)), received
    assert set(unacked) <= set(received)
