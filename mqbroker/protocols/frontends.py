"""Front-end plugins: how a wire protocol announces itself to the composition root.

A front end is an ``IFrontEnd`` provider found through ``twisted.plugin`` in
``twisted/plugins/``; its factory is imported by dotted name only when its listener starts,
so ``twistd --help`` and front ends that are switched off import nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twisted.plugin import IPlugin
from twisted.python.reflect import namedAny
from zope.interface import implementer

from mqbroker.config import BrokerConfig
from mqbroker.interfaces import IFrontEnd


@dataclass(frozen=True, slots=True, kw_only=True)
class FrontEndContext:
    """What every front end gets besides the broker: the reactor, configuration, metrics and security."""

    reactor: Any
    config: BrokerConfig
    metrics: Any
    #: A ``SecurityServices`` (authenticator, authorizer, quotas); None in tests of a bare front end.
    security: Any = None
    #: The connector admin service (an ``IConnectorAdmin``); None when connectors are disabled.
    connectors: Any = None

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

    def build_factory(self, broker: Any, context: FrontEndContext) -> Any:
        """Import the builder and call it with the broker and context."""
        return namedAny(self.builder)(broker, context)
