"""Byte-rate quotas on a streaming connection (MQTT, AMQP): hold a flow while it is over its quota.

The native protocol throttles per request (it delays the reply). MQTT and AMQP have no
request/reply to delay, so each connection has one ``Throttle`` per flow: the produce throttle
pauses reading from the socket, the fetch throttle holds back deliveries. A flow that goes over
its quota is held for the throttle time the ``QuotaManager`` computes, after which ``on_release``
is called so the connection resumes. Nothing is dropped: held publishes wait in the socket,
held deliveries in the log or queue.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from mqbroker.interfaces import IByteRateQuotas
from mqbroker.protocols.frontends import FrontEndSecurity
from mqbroker.security.quotas import QuotaKind


class Throttle:
    """One flow (produce or fetch) of one connection, held while its principal or client id is over quota."""

    def __init__(self, quotas: IByteRateQuotas, kind: QuotaKind, clock: IReactorTime,
                 on_release: Callable[[], None]) -> None:
        self._quotas = quotas
        self._kind = kind
        self._clock = clock
        self._on_release = on_release
        self._timer: IDelayedCall | None = None
        self._release_at_s = 0.0
        self.principal = ""
        self.client_id = ""

    @property
    def active(self) -> bool:
        """True while the flow is held."""
        return self._timer is not None

    def record(self, byte_count: int) -> None:
        """Count bytes that went through; past the quota, hold the flow for the throttle time."""
        now_s = self._clock.seconds()
        delay_ms = self._quotas.record(self._kind, self.principal, self.client_id, byte_count, int(now_s * 1000))
        if delay_ms <= 0:
            return
        release_at_s = now_s + delay_ms / 1000.0
        if self._timer is None:
            self._timer = self._clock.callLater(delay_ms / 1000.0, self._release)
            self._release_at_s = release_at_s
        elif release_at_s > self._release_at_s:
            self._timer.reset(delay_ms / 1000.0)
            self._release_at_s = release_at_s

    def cancel(self) -> None:
        """The connection closed: forget the timer (``on_release`` is not called)."""
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _release(self) -> None:
        self._timer = None
        self._on_release()


def throttles(security: FrontEndSecurity | None, clock: IReactorTime, on_produce_release: Callable[[], None],
              on_fetch_release: Callable[[], None]) -> tuple[Throttle, Throttle] | tuple[None, None]:
    """A connection's produce and fetch throttles, or (None, None) when no byte-rate quota is configured."""
    if security is None or not security.quotas.has_quotas:
        return None, None
    return (Throttle(security.quotas, QuotaKind.PRODUCE, clock, on_produce_release),
            Throttle(security.quotas, QuotaKind.FETCH, clock, on_fetch_release))
