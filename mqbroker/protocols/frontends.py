"""Front-end plugins: how a wire protocol announces itself to the composition root, and what it is given.

A front end is an ``IFrontEnd`` provider found through ``twisted.plugin`` in
``twisted/plugins/``; its factory is imported by dotted name only when its listener starts,
so ``twistd --help`` and front ends that are switched off import nothing. Its builder gets an
``IBroker`` and a ``FrontEndContext``: the reactor, the configuration, the metrics and, as
interfaces, what authenticating, authorizing and throttling its connections needs. Everything
else (users, ACLs, topics, groups) goes through the ``IBroker``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from twisted.internet.interfaces import IProtocolFactory, IReactorTime
from twisted.plugin import IPlugin
from twisted.python.reflect import namedAny
from zope.interface import implementer

from mqbroker.config import BrokerConfig
from mqbroker.interfaces import (
    IAclView,
    IAuthenticationAudit,
    IAuthenticator,
    IAuthorizer,
    IBroker,
    IByteRateQuotas,
    IConnectorAdmin,
    IFrontEnd,
    IGenericRecords,
)

if TYPE_CHECKING:
    from mqbroker.records.readable import UnreadableTally
    from prometheus_client import Counter, Gauge


class LatencyObserver(Protocol):
    """One protocol and API's request latencies."""

    def observe(self, seconds: float) -> None: ...


class RequestLatencyMetric(Protocol):
    """``mqbroker_request_latency_seconds``: a histogram by protocol and API."""

    def labels(self, protocol: str, api: str) -> LatencyObserver: ...


class FrontEndMetrics(Protocol):
    """The metrics a front end reports: connections per listener, request latency per API, skipped batches,
    unroutable messages."""

    connections: Gauge
    request_latency: RequestLatencyMetric
    #: Published messages that reached no queue (``mqbroker_unroutable_messages_total{protocol, outcome}``).
    unroutable: Counter
    #: Batches its readers could not decode and skipped (``mqbroker_unreadable_batches_total``).
    unreadable: UnreadableTally


@dataclass(frozen=True, slots=True, kw_only=True)
class FrontEndSecurity:
    """What a front end needs to know who a client is, what it may subscribe to, and how fast it may go."""

    authenticator: IAuthenticator
    #: Checks a front end makes itself (an MQTT subscription's topics, an AMQP queue); the broker checks its calls.
    authorizer: IAuthorizer
    quotas: IByteRateQuotas
    audit: IAuthenticationAudit
    #: The ACLs themselves when the ACL authorizer is in force (MQTT topic ACLs); None otherwise.
    acls: IAclView | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FrontEndContext:
    """What every front end gets besides the broker: the reactor, configuration, metrics and security."""

    reactor: IReactorTime
    config: BrokerConfig
    metrics: FrontEndMetrics | None = None
    #: None in tests of a bare front end: every client is let in under the name it gives.
    security: FrontEndSecurity | None = None
    #: The connector admin service; None when connectors are disabled (or in tests of a bare front end).
    connectors: IConnectorAdmin | None = None
    #: The cluster metadata's generic records (the MQTT mapping rules set at run time); None in tests of a bare front end.
    cluster_records: IGenericRecords | None = None

    @property
    def frame_timeout_s(self) -> float | None:
        """How long a begun frame may take to arrive completely (slow-loris protection)."""
        timeout_ms = self.config.quotas_frame_timeout_ms
        return timeout_ms / 1000.0 if timeout_ms else None


@implementer(IPlugin, IFrontEnd)
@dataclass(frozen=True, slots=True, kw_only=True)
class LazyFrontEnd:
    """An ``IFrontEnd`` whose factory builder is named, not imported, until it is needed."""

    name: str
    config_key: str
    builder: str
    #: Its clients route themselves to partition leaders (the native protocol); see ``IFrontEnd.clients_route``.
    clients_route: bool = False

    def build_factory(self, broker: IBroker, context: FrontEndContext) -> IProtocolFactory:
        """Import the builder and call it with the broker and context."""
        builder: Any = namedAny(self.builder)
        return builder(broker, context)
