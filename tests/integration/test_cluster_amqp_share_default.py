"""Plain AMQP queues on a 3-broker cluster (``amqp_default_queue_type = share``, the default): a durable queue
declared without a type (as pika and kombu users do) is a share queue, so its per-message state has one owner in
the cluster. Declared through one broker, published to through a second, consumed through the third and the
first at once: every message arrives, none goes to two consumers; the same with the queue's owner killed -9
mid-stream (no committed publish lost, a message comes again only flagged redelivered); a consumer whose broker
is killed -9 reconnects elsewhere and gets its unacknowledged deliveries again."""

from __future__ import annotations

import pathlib
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.errors import BrokerError
from mqbroker.protocols.amqp.stored import queue_topic
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import controller_leader, retrying, running_cluster, wait_for
from tests.integration.mqtt_support import unique
from tests.integration.test_amqp_share_queues_cluster import AmqpWorker, _overlapping, _queue_hosted_away_from
from tests.integration.test_cluster_amqp_failover import _publish_confirmed, _take
from tests.integration.test_cluster_frontends import _amqp, _node


#: Every cluster of this module: a follower 2 s behind leaves the ISR; the Kafka TLS port chosen free.
SETTINGS = ["--set", "replica_lag_time_max_ms=2000", "--kafka-tls-port", "0"]


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[list[BrokerProcess]]:
    """A cluster of the test's own (one it kills a broker of)."""
    yield from running_cluster(tmp_path, extra_args=SETTINGS)


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    """One cluster for the tests that kill no broker (each uses its own queues)."""
    yield from running_cluster(tmp_path_factory.mktemp("share-default"), extra_args=SETTINGS)


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


def test_consumers_on_two_brokers_share_a_plain_queue_and_each_message_goes_to_one(
    shared_cluster: list[BrokerProcess],
) -> None:
    queue = unique("orders")
    _declare(_node(shared_cluster, 1), queue)
    with ShareGroupAdmin(_node(shared_cluster, 2).bootstrap) as admin:  # the queue created its share group
        wait_for(lambda: _group_topics(admin, queue) == (queue_topic(queue),), 30, "the queue's share group")
    bodies = [b"order %d" % index for index in range(300)]
    _publish_confirmed(_node(shared_cluster, 2), "", queue, bodies)
    workers = [AmqpWorker(f"amqp-{node}", [_node(shared_cluster, node)], queue) for node in (3, 1)]
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


#: Messages of the exactly-once-delivery tests, and how many each publish transaction commits.
MESSAGES = 5_000
COMMIT_EVERY = 100


class CommittingPublisher(threading.Thread):
    """Publishes ``count`` persistent messages through its brokers in transactions (tx.commit-ok: every message of
    the transaction is stored); keeps the committed bodies. A commit that fails is not counted; it goes on through
    the next broker."""

    def __init__(self, brokers: list[BrokerProcess], queue: str, count: int) -> None:
        super().__init__(daemon=True)
        self.brokers, self.queue, self.count = brokers, queue, count
        self.committed: list[bytes] = []
        self.failures = 0

    def run(self) -> None:
        number, turn = 0, 0
        while len(self.committed) < self.count and self.failures < 20:
            try:
                connection = _amqp(self.brokers[turn % len(self.brokers)])
                channel = connection.channel()
                channel.tx_select()
                while len(self.committed) < self.count:
                    bodies = [b"msg %d" % (number + index) for index in range(COMMIT_EVERY)]
                    number += COMMIT_EVERY
                    for body in bodies:
                        channel.basic_publish("", self.queue, body, pika.BasicProperties(delivery_mode=2))
                    channel.tx_commit()
                    self.committed += bodies
                connection.close()
            except (pika.exceptions.AMQPError, OSError, AssertionError):
                self.failures += 1
                turn += 1
                time.sleep(0.5)


def _run_until_delivered(workers: list[AmqpWorker], publisher: CommittingPublisher, timeout_s: float) -> None:
    """Wait until the publisher is done and every committed message was given to a worker; stop the workers."""
    try:
        publisher.join(timeout_s)
        assert not publisher.is_alive() and len(publisher.committed) >= MESSAGES, publisher.failures
        committed = set(publisher.committed)
        wait_for(lambda: committed <= {body for worker in workers for body, *_ in worker.snapshot()}, timeout_s,
                 "every committed message delivered")
        time.sleep(1.0)  # anything delivered twice would show up now
    finally:
        for worker in workers:
            worker.stop.set()
            worker.join(30)


def test_a_plain_queue_consumed_through_two_brokers_gives_each_of_5000_messages_to_one_consumer(
    shared_cluster: list[BrokerProcess],
) -> None:
    queue = unique("tasks")
    _declare(_node(shared_cluster, 1), queue)
    workers = [AmqpWorker(f"amqp-{node}", [_node(shared_cluster, node)], queue) for node in (2, 3)]
    for worker in workers:
        worker.start()
    publisher = CommittingPublisher([_node(shared_cluster, 1)], queue, MESSAGES)
    publisher.start()
    _run_until_delivered(workers, publisher, 180)
    given = Counter(body for worker in workers for body, *_ in worker.snapshot())
    assert sorted(given) == sorted(publisher.committed), "every committed message, nothing else"
    assert max(given.values()) == 1, [body for body, count in given.items() if count > 1][:10]
    assert all(len(worker.snapshot()) > MESSAGES // 10 for worker in workers), "both brokers' consumers worked"
    assert not any(redelivered for worker in workers for _, redelivered, *_ in worker.snapshot())


def test_a_plain_queue_keeps_each_message_to_one_consumer_through_a_kill9_of_its_owner(
    cluster: list[BrokerProcess],
) -> None:
    """Consumers on two brokers, the queue's owner (its share group's host) killed -9 mid-stream: every committed
    message delivered; before the kill none twice; a message delivered again is flagged redelivered."""
    queue, owner = _queue_hosted_away_from(cluster[0].bootstrap, controller_leader(cluster))
    victim = _node(cluster, owner)
    others = [broker for broker in cluster if broker is not victim]
    _declare(others[0], queue)
    workers = [AmqpWorker("amqp-owner", [victim, *others], queue), AmqpWorker("amqp-other", others, queue)]
    for worker in workers:
        worker.start()
    publisher = CommittingPublisher(others[::-1], queue, MESSAGES)
    publisher.start()
    wait_for(lambda: sum(len(worker.snapshot()) for worker in workers) >= MESSAGES // 3, 120, "a third delivered")
    kill_time = time.monotonic()
    victim.kill()
    _run_until_delivered(workers, publisher, 240)
    deliveries = sorted((given, body, redelivered) for worker in workers
                        for body, redelivered, given, _ in worker.snapshot())
    seen: set[bytes] = set()
    unflagged = []
    for _, body, redelivered in deliveries:
        if body in seen and not redelivered:
            unflagged.append(body)
        seen.add(body)
    assert set(publisher.committed) <= seen, "no committed publish lost"
    assert not unflagged, f"delivered again without the redelivered flag: {unflagged[:10]}"
    before_kill = Counter(body for given, body, _ in deliveries if given < kill_time)
    assert max(before_kill.values()) == 1, "delivered twice while the owner lived"
    assert not _overlapping(workers, kill_time)


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
