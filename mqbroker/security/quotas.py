"""Quotas: produce and fetch byte rates per principal and per client id, and connection limits.

Each principal's and client id's flow is a token bucket: credit refills at the quota's rate, up
to one burst (``BURST_MS`` of the quota). A request is always served in full and spends its
bytes; when that leaves the balance negative, the request earns a throttle delay (ms) -- the
time the refill takes to pay the debt back -- and the adapter holds the client that long (delays
its reply, stops reading, or holds deliveries): data is never dropped. Unlike Kafka's sampled
windows, a bucket lets no more than one burst through after start-up or a window expiry, so a
client sending as fast as it may stays at its quota over a few seconds as well as over minutes.
Pure: time comes in as ``now_ms`` arguments.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from zope.interface import implementer

from mqbroker import limits
from mqbroker.interfaces import IByteRateQuotas

#: A bucket holds at most this much of its quota's rate: the burst a fresh or idle client may send at once.
BURST_MS = 1000


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


class TokenBucket:
    """Byte credit refilled at a rate, at most ``burst_ms`` of it; spending past zero is a debt."""

    def __init__(self, burst_ms: int = BURST_MS) -> None:
        assert burst_ms > 0, burst_ms
        self.burst_ms = burst_ms
        self._balance: float | None = None  # None: full (nothing recorded yet)
        self.last_record_ms = 0

    def record(self, byte_count: int, limit_per_second: float, now_ms: int) -> int:
        """Spend ``byte_count`` bytes at ``now_ms``; return how long (ms) to hold the client to repay any debt."""
        assert limit_per_second > 0, limit_per_second
        capacity = limit_per_second * self.burst_ms / 1000.0
        if self._balance is None:
            balance = capacity
        else:
            refill = max(0, now_ms - self.last_record_ms) * limit_per_second / 1000.0
            balance = min(capacity, self._balance + refill)
        balance -= byte_count
        self._balance = balance
        self.last_record_ms = max(self.last_record_ms, now_ms)
        if balance >= 0:
            return 0
        return min(math.ceil(-balance * 1000.0 / limit_per_second), limits.throttle_ms_max)


class QuotaScope(enum.Enum):
    """Whom a quota override names."""

    PRINCIPAL = "principal"
    CLIENT = "client"


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaOverride:
    """One principal's or client id's own byte rates (``quotas.overrides``); None keeps the default, 0 is unlimited."""

    scope: QuotaScope
    name: str
    produce_bytes_per_second: int | None = None
    fetch_bytes_per_second: int | None = None

    def applied_to(self, default: ByteRateQuota) -> ByteRateQuota:
        """The quota this override gives, flows it does not name taken from ``default``."""
        def rate(value: int | None, fallback: float | None) -> float | None:
            if value is None:
                return fallback
            return float(value) if value > 0 else None

        return ByteRateQuota(
            produce_bytes_per_second=rate(self.produce_bytes_per_second, default.produce_bytes_per_second),
            fetch_bytes_per_second=rate(self.fetch_bytes_per_second, default.fetch_bytes_per_second),
        )


def parse_quota_overrides(text: str) -> list[QuotaOverride]:
    """Parse comma-separated entries ``SCOPE NAME [produce=B/s] [fetch=B/s]`` (SCOPE ``principal`` or
    ``client``), e.g. ``principal User:alice produce=1000000, client reports fetch=0``; ValueError names a bad entry."""
    overrides = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        words = entry.split()
        if len(words) < 3 or words[0] not in ("principal", "client"):
            raise ValueError(f"quota override {entry!r}: expected 'principal|client NAME produce=N and/or fetch=N'")
        rates: dict[str, int] = {}
        for word in words[2:]:
            flow, separator, value = word.partition("=")
            if flow not in ("produce", "fetch") or not separator or not value.isdigit() or flow in rates:
                raise ValueError(f"quota override {entry!r}: {word!r} is not produce=N or fetch=N (bytes per second)")
            rates[flow] = int(value)
        overrides.append(QuotaOverride(scope=QuotaScope(words[0]), name=words[1],
                                       produce_bytes_per_second=rates.get("produce"),
                                       fetch_bytes_per_second=rates.get("fetch")))
    return overrides


@implementer(IByteRateQuotas)
class QuotaManager:
    """Tracks byte rates per principal and per client id and says how long to throttle."""

    def __init__(
        self,
        *,
        principal_quotas: Mapping[str, ByteRateQuota] | None = None,
        client_quotas: Mapping[str, ByteRateQuota] | None = None,
        default_principal_quota: ByteRateQuota = UNLIMITED,
        default_client_quota: ByteRateQuota = UNLIMITED,
        burst_ms: int = BURST_MS,
    ) -> None:
        self._principal_quotas = dict(principal_quotas or {})
        self._client_quotas = dict(client_quotas or {})
        self._default_principal_quota = default_principal_quota
        self._default_client_quota = default_client_quota
        self._burst_ms = burst_ms
        self._buckets: dict[tuple[QuotaKind, str, str], TokenBucket] = {}
        #: True if any principal or client id has a byte-rate limit (adapters skip the bookkeeping
        #: otherwise). Kept current by the setters: adapters read it on every produce and fetch.
        self.has_quotas = self._any_limit()

    def set_principal_quota(self, principal: str, quota: ByteRateQuota | None) -> None:
        """Set (or with None, reset to the default) the quota of ``principal`` (e.g. ``User:alice``)."""
        _set_or_reset(self._principal_quotas, principal, quota)
        self.has_quotas = self._any_limit()

    def set_client_quota(self, client_id: str, quota: ByteRateQuota | None) -> None:
        """Set (or with None, reset to the default) the quota of ``client_id``."""
        _set_or_reset(self._client_quotas, client_id, quota)
        self.has_quotas = self._any_limit()

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
            bucket = self._buckets.get((kind, scope, key))
            if bucket is None:
                bucket = self._buckets[(kind, scope, key)] = TokenBucket(self._burst_ms)
            delays.append(bucket.record(byte_count, limit, now_ms))
        return max(delays)

    def _any_limit(self) -> bool:
        quotas = [*self._principal_quotas.values(), *self._client_quotas.values(),
                  self._default_principal_quota, self._default_client_quota]
        return any(quota.limit(kind) is not None for quota in quotas for kind in QuotaKind)

    def expire_idle(self, now_ms: int) -> int:
        """Forget buckets nobody used for ``limits.quota_sensor_idle_ms_max``; returns how many were dropped."""
        idle = [key for key, bucket in self._buckets.items() if now_ms - bucket.last_record_ms > limits.quota_sensor_idle_ms_max]
        for key in idle:
            del self._buckets[key]
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
