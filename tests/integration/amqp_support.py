"""Fixtures for the AMQP integration tests: a broker process and pika connections to it."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pika
import pytest

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
