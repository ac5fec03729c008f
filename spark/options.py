"""The data source's options, read once into frozen dataclasses with errors that say what to fix.

Pure. Spark passes options as a case-insensitive mapping of strings. The TLS and SASL options
are reserved: they are recognised so a job can already carry them, but the blocking client
speaks plain TCP only, so asking for anything but ``PLAINTEXT`` is refused rather than
silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mqbroker_spark.offsets import OffsetsFormatError, TopicOffsets, parse_option

#: Records one Spark task reads at most; larger ranges are split so big backlogs spread over cores.
RECORDS_PER_RANGE_MAX = 1_000_000
#: Uncompressed bytes per record batch the sink writes (well below the default max.message.bytes).
BATCH_BYTES_MAX = 256 * 1024
#: How long a task's transaction may stay open before the coordinator aborts it (the broker's own default).
TRANSACTION_TIMEOUT_MS = 60_000

#: What the source's ``isolationLevel`` option may be (Kafka's isolation.level values), the default first.
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")

RESERVED_SECURITY_OPTIONS = (
    "security.protocol",
    "ssl.cafile",
    "ssl.certfile",
    "ssl.keyfile",
    "ssl.check.hostname",
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
)


class OptionError(ValueError):
    """A missing, malformed or contradictory data source option."""


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name)
    if not value:
        raise OptionError(f"option {name!r} is required, e.g. .option({name!r}, ...)")
    return value


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    text = options.get(name)
    if text is None:
        return default
    if not text.strip().isdigit() or int(text) <= 0:
        raise OptionError(f"option {name!r} must be a positive integer, got {text!r}")
    return int(text)


def _boolean(options: Mapping[str, str], name: str) -> bool:
    text = options.get(name, "false").strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {name!r} must be true or false, got {text!r}")
    return text == "true"


def _check_security(options: Mapping[str, str]) -> None:
    protocol = options.get("security.protocol", "PLAINTEXT").upper()
    if protocol != "PLAINTEXT":
        raise OptionError(
            f"security.protocol={protocol} is reserved: the blocking client has no TLS or SASL yet;"
            " use PLAINTEXT (the default) until it does (docs/spark.md)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOptions:
    """What to read: topics (a list or a pattern), where to start and end, how much per batch."""

    bootstrap: str
    topics: tuple[str, ...]
    pattern: str | None
    starting: str | TopicOffsets
    ending: str | TopicOffsets
    starting_timestamp_ms: int | None
    records_per_trigger_max: int | None
    records_per_range_max: int
    include_headers: bool
    #: ``read_committed`` (the default): only committed transactions' records, batches end at the last stable
    #: offset; ``read_uncommitted``: everything up to the high watermark, aborted records included.
    isolation_level: str

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> SourceOptions:
        """Validate ``options``; streams start at ``latest`` and batches at ``earliest`` by default."""
        _check_security(options)
        subscribe = options.get("subscribe")
        pattern = options.get("subscribePattern")
        if bool(subscribe) == bool(pattern):
            raise OptionError("give exactly one of 'subscribe' (comma-separated topics) or 'subscribePattern' (a regex)")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as error:
                raise OptionError(f"subscribePattern {pattern!r} is not a regular expression: {error}") from None
        topics = tuple(sorted({name.strip() for name in (subscribe or "").split(",") if name.strip()}))
        if subscribe and not topics:
            raise OptionError(f"subscribe={subscribe!r} names no topic")
        try:
            starting = parse_option(options.get("startingOffsets", "latest" if streaming else "earliest"))
            ending = parse_option(options.get("endingOffsets", "latest"))
        except OffsetsFormatError as error:
            raise OptionError(str(error)) from None
        if streaming and "endingOffsets" in options:
            raise OptionError("endingOffsets applies to batch reads only; a stream reads on as data arrives")
        if ending == "earliest":
            raise OptionError("endingOffsets=earliest would read nothing; use latest or JSON offsets")
        isolation_level = options.get("isolationLevel", "read_committed").strip().lower()
        if isolation_level not in ISOLATION_LEVELS:
            raise OptionError(f"isolationLevel must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation_level!r}")
        timestamp = options.get("startingTimestamp")
        if timestamp is not None and not timestamp.strip().isdigit():
            raise OptionError(f"startingTimestamp must be milliseconds since the epoch, got {timestamp!r}")
        return cls(
            bootstrap=_required(options, "bootstrap"),
            topics=topics,
            pattern=pattern,
            starting=starting,
            ending=ending,
            starting_timestamp_ms=None if timestamp is None else int(timestamp),
            records_per_trigger_max=_positive_int(options, "maxOffsetsPerTrigger", None),
            records_per_range_max=_positive_int(options, "maxRecordsPerPartition", RECORDS_PER_RANGE_MAX) or 0,
            include_headers=_boolean(options, "includeHeaders"),
            isolation_level=isolation_level,
        )

    def wants(self, topic: str) -> bool:
        """True if ``topic`` is subscribed (by name or by ``subscribePattern``, matched in full)."""
        if self.pattern is None:
            return topic in self.topics
        return re.fullmatch(self.pattern, topic) is not None and not topic.startswith("__")


@dataclass(frozen=True, slots=True, kw_only=True)
class SinkOptions:
    """Where to write: the brokers, a default topic for rows without one, batch size, how to be exactly once."""

    bootstrap: str
    topic: str | None
    batch_bytes_max: int
    #: False (the default): deterministic idempotent batches (``delivery``); True: one transaction per task
    #: and micro-batch (``transactional``), for read_committed readers.
    transactional: bool = False
    transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Validate ``options``."""
        _check_security(options)
        return cls(
            bootstrap=_required(options, "bootstrap"),
            topic=options.get("topic") or None,
            batch_bytes_max=_positive_int(options, "batchBytesMax", BATCH_BYTES_MAX) or 0,
            transactional=_boolean(options, "transactional"),
            transaction_timeout_ms=_positive_int(options, "transactionTimeoutMs", TRANSACTION_TIMEOUT_MS) or 0,
        )
