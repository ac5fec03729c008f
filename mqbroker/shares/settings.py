"""A share group's configuration: string keys as stored and sent, parsed into typed settings.

=============================  ========  =================================================================
key                            default   meaning
=============================  ========  =================================================================
``lease.ms``                   30000     visibility timeout: how long an acquired record stays leased
``max.delivery.attempts``      5         deliveries before a released or expired record is dead-lettered
``dead.letter.topic``          (none)    where dead letters go (none: they are dropped, and counted)
``delivery.delay.ms``          0         every record waits this long after its timestamp (SQS DelaySeconds)
``max.ready.records``          (none)    at most this many ready records per partition, counting those not read
                                         yet: the oldest beyond it are dead-lettered (reason ``maxlen``; AMQP
                                         ``x-max-length`` with ``x-overflow`` drop-head)
``auto.offset.reset``          latest    where a new share partition starts: ``latest`` or ``earliest``
``session.timeout.ms``         45000     a member silent this long is removed and its leases released
``heartbeat.interval.ms``      5000      how often members are told to heartbeat
``push.endpoint``              (none)    an ``http://`` or ``https://`` URL: the broker POSTs the records there
``push.secret``                (none)    HMAC-SHA256 key signing each push (set at creation if not given)
``push.ca.file``               (none)    PEM file of CAs an ``https://`` endpoint is verified against
                                         (none: the system's trust store)
``push.max.outstanding``       100       POSTs in flight at once
``push.ack.deadline.ms``       10000     an endpoint that has not answered by then failed
``push.rate.per.second``       0         POSTs per second at most (0: no limit)
``push.batch.max.messages``    1         records per POST (1: one record per request, the body its value)
``push.backoff.initial.ms``    100       first retry delay; doubles per attempt, with full jitter
``push.backoff.max.ms``        60000     longest retry delay
``push.filter``                (none)    only matching records are pushed, the rest acknowledged unseen;
                                         clauses joined by ``&&`` (see ``push.filters``)
=============================  ========  =================================================================
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Mapping

from mqbroker import errors, limits
from mqbroker.shares.push.filters import parse_filter

NUMERIC_BOUNDS: dict[str, tuple[int, int]] = {
    "lease.ms": (1, limits.share_lease_ms_max),
    "max.delivery.attempts": (1, limits.share_delivery_attempts_max),
    "delivery.delay.ms": (0, limits.share_delay_ms_max),
    "max.ready.records": (0, 2**31 - 1),
    "session.timeout.ms": (1_000, 60 * 60 * 1000),
    "heartbeat.interval.ms": (100, 60 * 1000),
    "push.max.outstanding": (1, limits.push_outstanding_max),
    "push.ack.deadline.ms": (10, limits.push_ack_deadline_ms_max),
    "push.rate.per.second": (0, 1_000_000),
    "push.batch.max.messages": (1, limits.push_batch_messages_max),
    "push.backoff.initial.ms": (1, 60 * 60 * 1000),
    "push.backoff.max.ms": (1, 24 * 60 * 60 * 1000),
}
TEXT_KEYS = frozenset({"dead.letter.topic", "auto.offset.reset", "push.endpoint", "push.secret", "push.ca.file",
                       "push.filter"})
#: Keys ``describe`` never shows.
SECRET_KEYS = frozenset({"push.secret"})
OFFSET_RESETS = ("latest", "earliest")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PushSettings:
    """How the broker pushes a subscription's records to its endpoint."""

    endpoint: str
    secret: str
    ca_file: str = ""
    max_outstanding: int = 100
    ack_deadline_ms: int = 10_000
    rate_per_second: int = 0
    batch_max_messages: int = 1
    backoff_initial_ms: int = 100
    backoff_max_ms: int = 60_000
    filter: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupSettings:
    """A share group's parsed configuration (the keys above)."""

    lease_ms: int = 30_000
    max_delivery_attempts: int = 5
    dead_letter_topic: str = ""
    delivery_delay_ms: int = 0
    #: Drop-head overflow: at most this many ready records (None: no limit).
    ready_records_max: int | None = None
    auto_offset_reset: str = "latest"
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    push: PushSettings | None = None


def _number(configs: Mapping[str, str], key: str, default: int) -> int:
    text = configs.get(key)
    if text is None:
        return default
    low, high = NUMERIC_BOUNDS[key]
    try:
        value = int(text.strip())
    except ValueError:
        raise errors.InvalidConfigError(f"share group config {key!r}: {text!r} is not an integer") from None
    if not low <= value <= high:
        raise errors.InvalidConfigError(f"share group config {key!r}: {value} is outside {low}..{high}")
    return value


def check_keys(configs: Mapping[str, str]) -> None:
    """Refuse keys this broker does not know, naming them."""
    unknown = sorted(set(configs) - set(NUMERIC_BOUNDS) - TEXT_KEYS)
    if unknown:
        known = ", ".join(sorted({*NUMERIC_BOUNDS, *TEXT_KEYS}))
        raise errors.InvalidConfigError(f"unknown share group config {', '.join(map(repr, unknown))}; known: {known}")


def parse_settings(configs: Mapping[str, str]) -> ShareGroupSettings:
    """Typed settings from config strings; ``InvalidConfigError`` names a bad key or value."""
    check_keys(configs)
    reset = configs.get("auto.offset.reset", "latest")
    if reset not in OFFSET_RESETS:
        raise errors.InvalidConfigError(f"share group config 'auto.offset.reset': {reset!r} is not latest or earliest")
    push = None
    endpoint = configs.get("push.endpoint", "")
    if endpoint:
        push = _push_settings(configs, endpoint)
    elif any(key.startswith("push.") for key in configs):
        raise errors.InvalidConfigError("push.* configs need push.endpoint; set it or remove them")
    return ShareGroupSettings(
        lease_ms=_number(configs, "lease.ms", 30_000),
        max_delivery_attempts=_number(configs, "max.delivery.attempts", 5),
        dead_letter_topic=configs.get("dead.letter.topic", ""),
        delivery_delay_ms=_number(configs, "delivery.delay.ms", 0),
        ready_records_max=_number(configs, "max.ready.records", 0) if "max.ready.records" in configs else None,
        auto_offset_reset=reset,
        session_timeout_ms=_number(configs, "session.timeout.ms", 45_000),
        heartbeat_interval_ms=_number(configs, "heartbeat.interval.ms", 5_000),
        push=push,
    )


def _push_settings(configs: Mapping[str, str], endpoint: str) -> PushSettings:
    url = urllib.parse.urlsplit(endpoint)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise errors.InvalidConfigError(f"share group config 'push.endpoint': {endpoint!r} is not an http(s):// URL")
    if not configs.get("push.secret"):
        raise errors.InvalidConfigError("share group config 'push.secret' is required with push.endpoint")
    initial = _number(configs, "push.backoff.initial.ms", 100)
    longest = _number(configs, "push.backoff.max.ms", 60_000)
    if longest < initial:
        raise errors.InvalidConfigError(f"push.backoff.max.ms ({longest}) is below push.backoff.initial.ms ({initial})")
    text = configs.get("push.filter", "")
    try:
        parse_filter(text)
    except ValueError as error:
        raise errors.InvalidConfigError(f"share group config 'push.filter': {error}") from None
    return PushSettings(
        endpoint=endpoint, secret=configs["push.secret"], ca_file=configs.get("push.ca.file", ""),
        max_outstanding=_number(configs, "push.max.outstanding", 100),
        ack_deadline_ms=_number(configs, "push.ack.deadline.ms", 10_000),
        rate_per_second=_number(configs, "push.rate.per.second", 0),
        batch_max_messages=_number(configs, "push.batch.max.messages", 1),
        backoff_initial_ms=initial, backoff_max_ms=longest, filter=text,
    )


def shown_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Configs as ``describe`` shows them: secrets masked."""
    return {key: ("********" if key in SECRET_KEYS else value) for key, value in sorted(configs.items())}


#: Bytes of randomness in a generated push signing secret (hex-encoded: twice as many characters).
SECRET_BYTES = 32


def push_configs(*, endpoint: str, secret: str, filter_text: str = "", max_outstanding: int | None = None,
                 ack_deadline_ms: int | None = None, dead_letter_topic: str = "", max_delivery_attempts: int | None = None,
                 rate_per_second: int | None = None, batch_max_messages: int | None = None, ca_file: str = "",
                 start: str | None = None) -> dict[str, str]:
    """The share-group configs of a push subscription (options left as None keep their defaults)."""
    configs = {"push.endpoint": endpoint, "push.secret": secret}
    optional = {"push.filter": filter_text or None, "push.max.outstanding": max_outstanding, "auto.offset.reset": start,
                "push.ack.deadline.ms": ack_deadline_ms, "dead.letter.topic": dead_letter_topic or None,
                "max.delivery.attempts": max_delivery_attempts, "push.rate.per.second": rate_per_second,
                "push.batch.max.messages": batch_max_messages, "push.ca.file": ca_file or None}
    configs.update({key: str(value) for key, value in optional.items() if value is not None})
    return configs
