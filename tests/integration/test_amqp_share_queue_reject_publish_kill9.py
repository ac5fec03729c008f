"""``x-overflow: reject-publish`` through a kill -9: on 3 brokers, publishers with confirms through the two brokers
that do not host the queue's share group, the host killed -9 mid-stream. Every acked message is consumable after;
the queue never holds more than ``x-max-length`` plus what the other broker admits in one round (one message: each
publisher waits for its confirm before the next)."""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Iterator

import pika
import pika.exceptions
import pytest

from mqbroker.protocols.amqp.stored import queue_topic
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster, wait_for
from tests.integration.share_support import share_host
from tests.integration.test_amqp_share_queue_max_length import take_all
from tests.integration.test_amqp_share_queues import unique
from tests.integration.test_cluster_frontends import _amqp

#: The queue's x-max-length, each publisher's message count, and the acks seen before the host is killed.
LIMIT = 300
PER_PUBLISHER = 400
ACKED_BEFORE_KILL = 100
#: Each publisher has one publish unconfirmed at a time: one round at the other broker admits at most one message.
OVERSHOOT_MAX = 1


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[list[BrokerProcess]]:
    yield from running_cluster(tmp_path, extra_args=["--kafka-tls-port", "0"])


class ConfirmingPublisher(threading.Thread):
    """Publishes ``count`` persistent messages through one broker, each confirmed before the next: keeps the acked
    and the nacked bodies (a publish whose connection failed before its confirm is in neither)."""

    def __init__(self, broker: BrokerProcess, queue: str, prefix: str, count: int) -> None:
        super().__init__(daemon=True)
        self.broker, self.queue, self.prefix, self.count = broker, queue, prefix, count
        self.acked: list[bytes] = []
        self.nacked: list[bytes] = []
        self.failures = 0

    def run(self) -> None:
        number = 0
        while number < self.count and self.failures < 20:
            try:
                connection = _amqp(self.broker)
                channel = connection.channel()
                channel.confirm_delivery()
                while number < self.count:
                    body = f"{self.prefix}{number}".encode()
                    number += 1
                    try:
                        channel.basic_publish("", self.queue, body, pika.BasicProperties(delivery_mode=2))
                        self.acked.append(body)
                    except pika.exceptions.NackError:
                        self.nacked.append(body)
                connection.close()
            except (pika.exceptions.AMQPError, OSError):
                self.failures += 1
                time.sleep(0.5)


@pytest.mark.slow
def test_every_acked_publish_survives_a_kill9_of_the_queue_host_and_the_queue_stays_bounded(
        cluster: list[BrokerProcess]) -> None:
    queue = unique("reject-kill9")
    declaring = _amqp(cluster[0])
    declaring.channel().queue_declare(queue, durable=True,
                                      arguments={"x-overflow": "reject-publish", "x-max-length": LIMIT})
    declaring.close()
    host_id = wait_for(lambda: max(share_host(cluster[0].bootstrap, queue_topic(queue)), 0), 30,
                       "the queue's share group")
    survivors = [broker for index, broker in enumerate(cluster) if index != host_id - 1]
    publishers = [ConfirmingPublisher(broker, queue, f"p{index}-", PER_PUBLISHER)
                  for index, broker in enumerate(survivors)]
    for publisher in publishers:
        publisher.start()
    wait_for(lambda: sum(len(publisher.acked) for publisher in publishers) >= ACKED_BEFORE_KILL, 60,
             f"{ACKED_BEFORE_KILL} acks")
    acked_at_kill = sum(len(publisher.acked) for publisher in publishers)
    cluster[host_id - 1].kill()
    for publisher in publishers:
        publisher.join(180)
        assert not publisher.is_alive() and publisher.failures < 20, publisher.failures
    acked = {body for publisher in publishers for body in publisher.acked}
    nacked = {body for publisher in publishers for body in publisher.nacked}
    assert len(acked) > acked_at_kill, "publishes were acked after the kill"
    assert nacked, f"the queue filled up: {len(acked)} acked, none nacked"
    consumer = _amqp(survivors[0])
    received: set[bytes] = set()
    wait_for(lambda: received.update(take_all(consumer, queue)) or acked <= received, 90,
             "every acked message consumed")
    consumer.close()
    assert len(received) <= LIMIT + OVERSHOOT_MAX, (len(received), len(acked), len(nacked))
    print(f"acked {len(acked)} ({acked_at_kill} before the kill), nacked {len(nacked)}, consumed {len(received)}")
