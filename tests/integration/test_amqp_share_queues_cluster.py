"""An AMQP share queue on a real three-broker cluster, consumed through every broker at once by pika consumers
and by native share consumers of its group: the group's host (the leader of its ``__share_group_state``
partition) owns every lease, so no message goes to two consumers at once; the host is killed -9 mid-lease,
the group moves with its replicated state, and in the end every confirmed message was delivered, none
acknowledged twice, nothing is left in the group."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from mqbroker.client import Consumer
from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.protocols.amqp.stored import queue_topic
from mqbroker.shares.state_records import state_partition
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import controller_leader, start_cluster, wait_for
from tests.integration.share_support import (
    ShareChild,
    acknowledged,
    delivered,
    kill_children,
)
from tests.integration.share_support import share_host as _share_host
from tests.integration.share_support import state_leaders as _state_leaders
from tests.integration.test_cluster_frontends import _amqp

SHARE = {"x-queue-type": "share"}


@pytest.fixture
def cluster(tmp_path: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    brokers = start_cluster(tmp_path, extra_args=["--set", "replica_lag_time_max_ms=2000", "--kafka-tls-port", "0"])
    try:
        yield brokers
    finally:
        kill_children()
        for broker in brokers:
            broker.kill()


def _queue_hosted_away_from(bootstrap: str, avoid: int) -> tuple[str, int]:
    """A queue whose share group is hosted by a broker other than ``avoid`` (the controller), and that broker."""
    wait_for(lambda: bool(_state_leaders(bootstrap)) and -1 not in _state_leaders(bootstrap)
             and set(_state_leaders(bootstrap)) != {avoid}, 60, "the share-group state topic's leaders")
    leaders = _state_leaders(bootstrap)
    for n in range(1000):
        queue = f"jobs-{n}"
        host = leaders[state_partition(queue_topic(queue), len(leaders))]
        if host != avoid:
            return queue, host
    raise AssertionError("no queue is hosted away from the controller")


class AmqpWorker(threading.Thread):
    """A pika consumer (prefetch 10) acknowledging each message after a moment's work; when its broker dies it
    goes on through the next one. Records when each message was given to it and until when it held it."""

    def __init__(self, name: str, brokers: list[BrokerProcess], queue: str) -> None:
        super().__init__(name=name, daemon=True)
        self.brokers, self.queue = brokers, queue
        self.stop = threading.Event()
        self.lock = threading.Lock()
        #: (body, redelivered, given at, held until): held until its ack was sent or its connection died.
        self.deliveries: list[tuple[bytes, bool, float, float]] = []
        self.reconnects = 0

    def run(self) -> None:
        turn = 0
        while not self.stop.is_set():
            broker = self.brokers[turn % len(self.brokers)]
            holding: list[tuple[bytes, bool, float]] = []
            try:
                connection = _amqp(broker)
                channel = connection.channel()
                channel.basic_qos(prefetch_count=10)
                for method, properties, body in channel.consume(self.queue, inactivity_timeout=0.2):
                    if self.stop.is_set():
                        break
                    if method is None:
                        continue
                    holding.append((body, method.redelivered, time.monotonic()))
                    time.sleep(0.002)  # the work
                    channel.basic_ack(method.delivery_tag)
                    with self.lock:
                        self.deliveries.append((*holding.pop(), time.monotonic()))
                connection.close()
            except (pika.exceptions.AMQPError, OSError, AssertionError):
                with self.lock:
                    self.deliveries.extend((*held, time.monotonic()) for held in holding)
                    self.reconnects += 1
                turn += 1
                self.stop.wait(0.5)

    def snapshot(self) -> list[tuple[bytes, bool, float, float]]:
        with self.lock:
            return list(self.deliveries)


class ConfirmedPublisher(threading.Thread):
    """Publishes persistent messages with confirms through one broker until stopped; keeps the confirmed ones."""

    def __init__(self, broker: BrokerProcess, queue: str) -> None:
        super().__init__(daemon=True)
        self.broker, self.queue = broker, queue
        self.stop = threading.Event()
        self.confirmed: list[bytes] = []

    def run(self) -> None:
        connection = _amqp(self.broker)
        channel = connection.channel()
        channel.confirm_delivery()
        number = 0
        while not self.stop.is_set():
            body = b"job %d" % number
            channel.basic_publish("", self.queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
            self.confirmed.append(body)  # basic_publish returned: the broker confirmed it
            number += 1
            connection.sleep(0.004)
        connection.close()


def _bodies_by_offset(bootstrap: str, topic: str, count_min: int) -> dict[int, bytes]:
    """The queue topic's records by offset: at least ``count_min``, read until nothing more comes for a second."""
    found: dict[int, bytes] = {}
    with Consumer(bootstrap, auto_offset_reset="earliest") as reader:
        reader.assign([(topic, 0)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            messages = reader.poll(1.0)
            found.update((message.offset, message.value) for message in messages)
            if not messages and len(found) >= count_min:
                break
    return found


def _overlapping(workers: list[AmqpWorker], before: float) -> list[bytes]:
    """Bodies two workers held at the same time, among deliveries given and settled before ``before``."""
    held: dict[bytes, list[tuple[float, float, str]]] = {}
    for worker in workers:
        for body, _, given, until in worker.snapshot():
            if until < before:
                held.setdefault(body, []).append((given, until, worker.name))
    overlaps = []
    for body, spans in held.items():
        spans.sort()
        for (_, first_until, first), (second_given, _, second) in zip(spans, spans[1:]):
            if first != second and second_given < first_until:
                overlaps.append(body)
    return overlaps


@pytest.mark.slow  # share is the default type now: test_cluster_amqp_share_default.py runs the same through plain queues
def test_a_share_queue_consumed_through_every_broker_has_one_owner_and_survives_a_kill9_of_it(
    cluster: list[BrokerProcess],
) -> None:
    queue, host = _queue_hosted_away_from(cluster[0].bootstrap, controller_leader(cluster))
    group = topic = queue_topic(queue)
    others = [broker for broker in cluster if broker is not cluster[host - 1]]
    victim = cluster[host - 1]
    declaring = _amqp(others[0])
    declaring.channel().queue_declare(queue, durable=True, arguments=SHARE)
    declaring.close()
    assert _share_host(others[0].bootstrap, group) == host

    publisher = ConfirmedPublisher(others[1], queue)
    workers = [AmqpWorker(f"amqp-{node}", [broker, *others], queue) for node, broker in enumerate(cluster, start=1)]
    natives = [ShareChild(broker.bootstrap, group, topic, f"native-{n}") for n, broker in enumerate(others)]
    publisher.start()
    for worker in workers:
        worker.start()
    try:
        for native in natives:
            assert native.joined.wait(60), native.errors()
        wait_for(lambda: all(len(worker.snapshot()) >= 50 for worker in workers), 60,
                 "every broker's AMQP consumer served (the broker hosting the group owns their leases)")
        kill_time = time.monotonic()
        victim.kill()
        given_before = sum(len(worker.snapshot()) for worker in workers)
        wait_for(lambda: sum(len(worker.snapshot()) for worker in workers) >= given_before + 200, 90,
                 "AMQP deliveries through the surviving brokers after the kill")
    finally:
        publisher.stop.set()
        publisher.join(60)
    assert not publisher.is_alive()

    survivors = ",".join(broker.bootstrap for broker in others)
    with ShareGroupAdmin(survivors) as admin:
        wait_for(lambda: all(p.lag == 0 and p.acquired == 0 and p.available == 0
                             for p in admin.describe(group).partitions), 90, "every message settled")
        assert admin.describe(group).dead_lettered == 0
    for worker in workers:
        worker.stop.set()
        worker.join(30)

    bodies = _bodies_by_offset(survivors, topic, len(publisher.confirmed))
    native_bodies = {bodies.get(offset) for _, offset in delivered(natives)}
    amqp_bodies = Counter(body for worker in workers for body, *_ in worker.snapshot())
    missing = set(publisher.confirmed) - native_bodies - set(amqp_bodies)
    assert not missing, f"{len(missing)} confirmed messages never delivered, e.g. {sorted(missing)[:5]}"
    assert native_bodies, "the native share consumers took part"
    twice = [record for record, count in acknowledged(natives).items() if count > 1]
    assert not twice, f"acknowledged twice (confirmed by the broker): {twice[:10]}"
    overlaps = _overlapping(workers, kill_time)
    assert not overlaps, f"held by two AMQP consumers at once before the kill: {overlaps[:10]}"
    before_kill = Counter(body for worker in workers for body, _, given, _ in worker.snapshot() if given < kill_time)
    again = [body for body, count in before_kill.items() if count > 1]
    assert not again, f"delivered twice through AMQP while the host lived: {again[:10]}"
