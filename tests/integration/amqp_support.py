"""Fixtures for the AMQP integration tests: a broker process and pika connections to it."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator

import pika
import pytest

from mqbroker.client import Admin, Consumer
from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.errors import BrokerError
from mqbroker.protocols.amqp.queue_state import QueuePolicy, QueueState
from mqbroker.protocols.amqp.stored import QUEUE_STATE_TOPIC, queue_topic
from tests.integration.brokerprocess import BrokerProcess, running


class AmqpBroker(BrokerProcess):
    """A ``BrokerProcess`` with pika connection helpers for its AMQP listener."""

    def parameters(self, **options: object) -> pika.ConnectionParameters:
        """pika connection parameters for this broker's AMQP listener."""
        return pika.ConnectionParameters("127.0.0.1", self.ports["amqp"], **options)

    def connect(self, **options: object) -> pika.BlockingConnection:
        """A new pika BlockingConnection."""
        return pika.BlockingConnection(self.parameters(**options))


def running_broker(data_dir: pathlib.Path) -> Iterator[AmqpBroker]:
    """Start a broker in ``data_dir``; kill it afterwards."""
    yield from running(AmqpBroker(data_dir=data_dir))  # type: ignore[misc]


@pytest.fixture(scope="module")
def amqp_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpBroker]:
    """One broker shared by a module's tests (each test uses its own queue names)."""
    yield from running_broker(tmp_path_factory.mktemp("amqp") / "data")


def wait_for_acks_stored(bootstrap: str, queue: str, acknowledged_below: int, timeout_s: float = 30.0) -> None:
    """Wait until the stored state of ``queue`` holds every offset below ``acknowledged_below`` as done: the acks
    then survive a kill -9 (a share queue's in its share group, a classic queue's in ``__amqp_queue_state``)."""
    deadline = time.monotonic() + timeout_s
    with ShareGroupAdmin(bootstrap) as share_admin:
        try:
            configs = share_admin.describe(queue_topic(queue)).configs
        except BrokerError:
            configs = None  # no share group: a classic queue
        if configs is not None:
            while share_admin.describe(queue_topic(queue)).partitions[0].start_offset < acknowledged_below:
                assert time.monotonic() < deadline, f"the acks of {queue} were not applied within {timeout_s} s"
                time.sleep(0.05)
            # an alter returns once the group's state, with its partitions, is written
            share_admin.alter(queue_topic(queue), set_configs={"lease.ms": configs.get("lease.ms", "30000")})
            return
    while True:
        with Admin(bootstrap) as admin:
            end = admin.list_offset(QUEUE_STATE_TOPIC, 0, -1)
        newest = None
        with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([(QUEUE_STATE_TOPIC, 0)])
            while consumer.position((QUEUE_STATE_TOPIC, 0)) < end and time.monotonic() < deadline:
                for message in consumer.poll(timeout=0.5):
                    if message.key == queue.encode():
                        newest = message.value
        if newest and QueueState.restore(newest, policy=QueuePolicy()).low_watermark >= acknowledged_below:
            return
        assert time.monotonic() < deadline, f"the acks of {queue} were not stored within {timeout_s} s"
        time.sleep(0.1)
