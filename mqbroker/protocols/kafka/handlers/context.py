"""What every Kafka request handler gets besides its request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mqbroker.protocols.kafka.broker_calls import BrokerCalls
from mqbroker.protocols.kafka.config_catalog import BrokerConfigEntry


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestContext:
    """The broker calls (bound to the connection's principal), the request's version and listener facts."""

    calls: BrokerCalls
    #: The request's API version: some answers change shape between versions.
    version: int
    #: This broker's node id (advertised as the controller: any broker takes admin requests).
    node_id: int
    #: The listener's port key in broker registrations: brokers are advertised at this listener's ports.
    listener: str
    #: This broker's own static settings under Kafka's names (DescribeConfigs of a broker resource).
    broker_configs: Mapping[str, BrokerConfigEntry] = field(default_factory=dict)


#: A handler answers one request: a coroutine, or a Deferred on the produce and fetch paths.
Handler = Callable[[RequestContext, Any], Awaitable[Any]]


def by_topic(answers: Iterable[tuple[str, Any]]) -> dict[str, list[Any]]:
    """(topic, partition result) pairs grouped per topic, topics in first-seen order."""
    grouped: dict[str, list[Any]] = {}
    for topic, result in answers:
        grouped.setdefault(topic, []).append(result)
    return grouped
