"""Builds a broker's connector runtime and admin service (composition, called by ``service.py``)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred

from mqbroker.config import BrokerConfig
from mqbroker.connectors.admin import ConnectorAdmin
from mqbroker.connectors.broker_calls import ConnectorBroker, Forward
from mqbroker.connectors.metrics import ConnectorCollector
from mqbroker.connectors.mirror import settings as mirror_settings
from mqbroker.connectors.mirror import task as mirror
from mqbroker.connectors.redis import settings as redis_settings
from mqbroker.connectors.redis import sink, source
from mqbroker.connectors.runtime import ConnectorRuntime, ConnectorType
from mqbroker.interfaces import IAuthorizer, IBroker
from mqbroker.records.readable import UnreadableTally


def connector_types() -> dict[str, ConnectorType]:
    """Every connector type, by the name its configuration's ``type`` gives."""
    kinds = [
        ConnectorType(name="redis-sink", parse_settings=redis_settings.parse_sink, build_task=sink.build_task),
        ConnectorType(name="redis-source", parse_settings=redis_settings.parse_source, build_task=source.build_task),
        ConnectorType(name="mirror", parse_settings=mirror_settings.parse_mirror, build_task=mirror.build_task),
    ]
    return {kind.name: kind for kind in kinds}


@dataclass(frozen=True, slots=True)
class Connectors:
    """The runtime (tasks on this broker) and the admin service of one broker."""

    runtime: ConnectorRuntime
    admin: ConnectorAdmin
    collector: ConnectorCollector

    def start(self) -> None:
        """Start reading ``__connectors`` and running the tasks this broker owns."""
        self.runtime.start()

    def stop(self) -> Deferred[Any]:
        """Stop the tasks here (with their last checkpoints) while this broker still leads their partitions."""
        return self.runtime.stop()


def build_connectors(*, config: BrokerConfig, reactor: Any, routing: IBroker, local: IBroker,
                     forward: Forward | None, authorizer: IAuthorizer,
                     unreadable: UnreadableTally | None = None) -> Connectors:
    """The connectors of the broker ``local`` (``routing``: its partition-routing front-end broker)."""
    broker = ConnectorBroker(broker=routing, local=local, node_id=config.node_id, forward=forward)
    runtime = ConnectorRuntime(
        broker=broker, clock=reactor, node_id=config.node_id, partition_count=config.connectors_topic_partitions,
        types=connector_types(), leadership_check_interval_ms=config.connectors_leadership_check_interval_ms,
        status_interval_ms=config.connectors_status_interval_ms, rng=random.Random(), unreadable=unreadable,
    )
    return Connectors(runtime=runtime, admin=ConnectorAdmin(runtime=runtime, authorizer=authorizer),
                      collector=ConnectorCollector(runtime))
