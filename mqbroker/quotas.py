"""Quotas: produce and fetch byte rates per principal and per client id, and connection limits.

Rates are measured Kafka-style over a few sliding windows. A request that takes the measured
rate over its quota is still served in full; it earns a throttle delay (ms) long enough that
the rate, measured again after the delay, is back at the quota. The adapter delays its reply
and stops reading from the connection for that long: data is never dropped. Pure: time comes
in as ``now_ms`` arguments.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

WINDOW_MS = 1000
WINDOWS = 11
#: A sensor nobody recorded into for this long is forgotten (Kafka's quota sensor expiry).
SENSOR_IDLE_MS_MAX = 3_600_000


class QuotaKind(enum.Enum):
    """Which byte flow a quota limits."""

    PRODUCE = "produce"
    FETCH = "fetch"


@dataclass(frozen=True, slots=True, kw_only=True)
class ByteRateQuota:
    """Byte-rate limits for one principal or client id; None means unlimited."""

    produce_bytes_per_second: float | None = None
    fetch_bytes_per_second: float | None = None

    def limit(self, kind: QuotaKind) -> float | None:
        """The limit for ``kind``."""
        return self.produce_bytes_per_second if kind is QuotaKind.PRODUCE else self.fetch_bytes_per_second


UNLIMITED = ByteRateQuota()


class WindowedRate:
    """A rate over the last ``windows`` windows of ``window_ms`` each (the newest one partial)."""

    def __init__(self, window_ms: int = WINDOW_MS, windows: int = WINDOWS) -> None:
        assert window_ms > 0 and windows >= 2, (window_ms, windows)
        self.window_ms = window_ms
        self.windows = windows
        self._samples: deque[list[int]] = deque()  # [window start ms, bytes]
        self.last_record_ms = 0

    def record(self, byte_count: int, now_ms: int) -> None:
        """Count ``byte_count`` bytes at ``now_ms``."""
        self._expire(now_ms)
        if not self._samples or now_ms >= self._samples[-1][0] + self.window_ms:
            self._samples.append([now_ms, 0])
        self._samples[-1][1] += byte_count
        self.last_record_ms = now_ms

    def per_second(self, now_ms: int) -> float:
        """The measured rate in bytes per second."""
        self._expire(now_ms)
        return sum(sample[1] for sample in self._samples) * 1000.0 / self.elapsed_ms(now_ms)

    def elapsed_ms(self, now_ms: int) -> int:
        """The span the rate is measured over: at least ``windows - 1`` whole windows (as Kafka),
        so that a burst at start-up is not measured over a few milliseconds."""
        oldest_ms = self._samples[0][0] if self._samples else now_ms
        elapsed_ms = now_ms - oldest_ms
        full_windows = elapsed_ms // self.window_ms
        if full_windows < self.windows - 1:
            elapsed_ms += (self.windows - 1 - full_windows) * self.window_ms
        return elapsed_ms

    def _expire(self, now_ms: int) -> None:
        while self._samples and now_ms - self._samples[0][0] >= self.windows * self.window_ms:
            self._samples.popleft()


def throttle_ms(rate: WindowedRate, limit_per_second: float, now_ms: int) -> int:
    """How long to hold the client so its measured rate falls back to ``limit_per_second``."""
    measured = rate.per_second(now_ms)
    if measured <= limit_per_second:
        return 0
    delay_ms = (measured - limit_per_second) / limit_per_second * rate.elapsed_ms(now_ms)
    return min(int(delay_ms), rate.windows * rate.window_ms)


class QuotaManager:
    """Tracks byte rates per principal and per client id and says how long to throttle."""

    def __init__(
        self,
        *,
        principal_quotas: Mapping[str, ByteRateQuota] | None = None,
        client_quotas: Mapping[str, ByteRateQuota] | None = None,
        default_principal_quota: ByteRateQuota = UNLIMITED,
        default_client_quota: ByteRateQuota = UNLIMITED,
        window_ms: int = WINDOW_MS,
        windows: int = WINDOWS,
    ) -> None:
        self._principal_quotas = dict(principal_quotas or {})
        self._client_quotas = dict(client_quotas or {})
        self._default_principal_quota = default_principal_quota
        self._default_client_quota = default_client_quota
        self._window_ms = window_ms
        self._windows = windows
        self._rates: dict[tuple[QuotaKind, str, str], WindowedRate] = {}

    def set_principal_quota(self, principal: str, quota: ByteRateQuota | None) -> None:
        """Set (or with None, reset to the default) the quota of ``principal`` (e.g. ``User:alice``)."""
        _set_or_reset(self._principal_quotas, principal, quota)

    def set_client_quota(self, client_id: str, quota: ByteRateQuota | None) -> None:
        """Set (or with None, reset to the default) the quota of ``client_id``."""
        _set_or_reset(self._client_quotas, client_id, quota)

    def record(self, kind: QuotaKind, principal: str, client_id: str, byte_count: int, now_ms: int) -> int:
        """Count a request's bytes; return the throttle delay in ms (0: not over any quota)."""
        delays = [0]
        for scope, key, quotas, default in (
            ("principal", principal, self._principal_quotas, self._default_principal_quota),
            ("client", client_id, self._client_quotas, self._default_client_quota),
        ):
            limit = quotas.get(key, default).limit(kind)
            if limit is None:
                continue
            rate = self._rates.get((kind, scope, key))
            if rate is None:
                rate = self._rates[(kind, scope, key)] = WindowedRate(self._window_ms, self._windows)
            rate.record(byte_count, now_ms)
            delays.append(throttle_ms(rate, limit, now_ms))
        return max(delays)

    def expire_idle(self, now_ms: int) -> int:
        """Forget rates nobody used for ``SENSOR_IDLE_MS_MAX``; returns how many were dropped."""
        idle = [key for key, rate in self._rates.items() if now_ms - rate.last_record_ms > SENSOR_IDLE_MS_MAX]
        for key in idle:
            del self._rates[key]
        return len(idle)


def _set_or_reset(quotas: dict[str, ByteRateQuota], key: str, quota: ByteRateQuota | None) -> None:
    if quota is None:
        quotas.pop(key, None)
    else:
        quotas[key] = quota


# -- connections -----------------------------------------------------------------------------


class Admission(enum.Enum):
    """The answer to a new connection."""

    ACCEPTED = "accepted"
    TOO_MANY_FROM_HOST = "too_many_from_host"
    TOO_MANY_TOTAL = "too_many_total"


@dataclass(slots=True, kw_only=True)
class ConnectionLimiter:
    """Counts open connections per IP and in total and refuses those beyond the limits."""

    total_max: int
    per_host_max: int
    per_host_overrides: Mapping[str, int] = field(default_factory=dict)
    _per_host: dict[str, int] = field(default_factory=dict)
    _total: int = 0

    def admit(self, host: str) -> Admission:
        """Decide about a new connection from ``host``; an accepted one must be ``release``d."""
        if self._total >= self.total_max:
            return Admission.TOO_MANY_TOTAL
        if self._per_host.get(host, 0) >= self.per_host_overrides.get(host, self.per_host_max):
            return Admission.TOO_MANY_FROM_HOST
        self._per_host[host] = self._per_host.get(host, 0) + 1
        self._total += 1
        return Admission.ACCEPTED

    def release(self, host: str) -> None:
        """An accepted connection from ``host`` closed."""
        count = self._per_host.get(host, 0)
        assert count > 0 and self._total > 0, f"release of a connection from {host} that was never admitted"
        self._total -= 1
        if count == 1:
            del self._per_host[host]
        else:
            self._per_host[host] = count - 1

    def open_connections(self, host: str | None = None) -> int:
        """Open connections from ``host``, or in total."""
        return self._total if host is None else self._per_host.get(host, 0)
