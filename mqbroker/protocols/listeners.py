"""What every listener wraps around its protocol factory: connection limits, then (optionally) TLS.

A connection beyond the per-IP or total limit is closed as soon as it is accepted, before any
protocol or TLS work, so a flood costs the broker an ``accept`` and a ``close`` per attempt
and the connections already open are not disturbed.
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.protocols.tls import TLSMemoryBIOFactory

from mqbroker.security.quotas import Admission, ConnectionLimiter

log = Logger()


class _CountedConnection(ProtocolWrapper):
    """Releases its slot in the limiter when the connection closes."""

    def __init__(self, factory: ConnectionLimitingFactory, wrapped: Any, host: str) -> None:
        super().__init__(factory, wrapped)
        self.host = host

    def connectionLost(self, reason: Any) -> None:
        self.factory.limiter.release(self.host)
        super().connectionLost(reason)


class ConnectionLimitingFactory(WrappingFactory):
    """Admits a connection only within the ``ConnectionLimiter``'s per-IP and total limits."""

    protocol = _CountedConnection
    noisy = False

    def __init__(self, wrapped_factory: Any, limiter: ConnectionLimiter, listener: str) -> None:
        super().__init__(wrapped_factory)
        self.limiter = limiter
        self.listener = listener
        self.refused = 0

    def buildProtocol(self, addr: Any) -> Any:
        host = getattr(addr, "host", "")
        admission = self.limiter.admit(host)
        if admission is not Admission.ACCEPTED:
            self.refused += 1
            if self.refused & (self.refused - 1) == 0:  # 1st, 2nd, 4th, 8th... refusal: a flood logs little
                log.warn("{listener}: refused a connection from {host} ({why}); {count} refused so far",
                         listener=self.listener, host=host, why=admission.value, count=self.refused)
            return None
        wrapped = self.wrappedFactory.buildProtocol(addr)
        if wrapped is None:
            self.limiter.release(host)
            return None
        return self.protocol(self, wrapped, host)


def listener_factory(factory: Any, limiter: ConnectionLimiter, listener: str, tls: Any = None) -> Any:
    """``factory`` behind the connection limits and, with a TLS context factory, TLS."""
    if tls is not None:
        factory = TLSMemoryBIOFactory(tls, False, factory)
    return ConnectionLimitingFactory(factory, limiter, listener)
