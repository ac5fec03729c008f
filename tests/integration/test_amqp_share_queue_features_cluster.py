"""RabbitMQ's queue vocabulary on AMQP share queues in a real 3-broker cluster, with the consumer on a broker other
than the one hosting the queue's share group: message counts, purge, dead-lettering on reject and on expiry (at
basic.get, and with nobody consuming), as the single-broker tests in ``test_amqp_share_queues.py`` check them."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pika
import pytest

from mqbroker.protocols.amqp.stored import queue_topic
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import running_cluster, wait_for
from tests.integration.test_amqp_share_queues import (
    check_counts_and_purge,
    check_dead_lettering,
    check_expiry_without_consumers,
    unique,
)
from tests.integration.test_cluster_frontends import _amqp, _node
from tests.integration.share_support import share_host


class Via:
    """One cluster broker as the single-broker checks use it (``connect()``)."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker

    def connect(self) -> pika.BlockingConnection:
        return _amqp(self.broker)


@pytest.fixture
def cluster(tmp_path: pathlib.Path) -> Iterator[list[BrokerProcess]]:
    yield from running_cluster(tmp_path, extra_args=["--kafka-tls-port", "0"])


def _owner_and_other(cluster: list[BrokerProcess], queue: str) -> tuple[Via, Via]:
    """The broker hosting ``queue``'s share group and another one."""
    bootstrap = cluster[0].bootstrap
    wait_for(lambda: share_host(bootstrap, queue_topic(queue)) > 0, 60, "a host for the queue's share group")
    owner = share_host(bootstrap, queue_topic(queue))
    other = next(node for node in (1, 2, 3) if node != owner)
    return Via(_node(cluster, owner)), Via(_node(cluster, other))


def test_counts_purge_and_dead_letters_of_a_share_queue_consumed_away_from_its_owner(
        cluster: list[BrokerProcess]) -> None:
    counted = unique("counted")
    owner, other = _owner_and_other(cluster, counted)
    check_counts_and_purge(owner, other, counted)  # type: ignore[arg-type]
    work = unique("work")
    owner, other = _owner_and_other(cluster, work)
    check_dead_lettering(other, owner, work)  # type: ignore[arg-type]
    parked = unique("parked")
    owner, other = _owner_and_other(cluster, parked)
    check_expiry_without_consumers(owner, other, parked)  # type: ignore[arg-type]
