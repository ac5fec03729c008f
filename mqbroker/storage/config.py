"""Per-partition log settings, named and defaulted as Kafka's topic configs are."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from mqbroker.storage.errors import InvalidConfigError

MIB = 1024 * 1024
DAY_MS = 24 * 60 * 60 * 1000
#: Positions in a segment and in its `.index` are int32, so a segment stays below 2 GiB.
SEGMENT_BYTES_MAX = 2**31 - 1
#: Either order of both; "" (Kafka 4.1, KIP-1161): neither, the log is kept whole.
CLEANUP_POLICIES = frozenset({"delete", "compact", "compact,delete", "delete,compact", ""})
FLUSH_POLICIES = frozenset({"sync", "interval"})


@dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """Settings of one partition log; `from_mapping` reads Kafka's dotted keys."""

    segment_bytes: int = 1024 * MIB
    segment_ms: int = 7 * DAY_MS
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = DAY_MS
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    max_message_bytes: int = MIB + 12
    #: "sync": an append becomes durable only through the fsync of a later `flush()` (group commit).
    flush_policy: str = "sync"
    flush_ms: int = 1000
    flush_messages: int = 2**63 - 1
    #: How long files a log let go (retention, DeleteRecords) stay on disk, renamed `.deleted`, before they are removed.
    file_delete_delay_ms: int = 60_000

    def __post_init__(self) -> None:
        _check_range("segment.bytes", self.segment_bytes, 1024, SEGMENT_BYTES_MAX)
        _check_range("segment.ms", self.segment_ms, 1)
        _check_range("index.interval.bytes", self.index_interval_bytes, 0)
        _check_range("retention.ms", self.retention_ms, -1)
        _check_range("retention.bytes", self.retention_bytes, -1)
        _check_range("delete.retention.ms", self.delete_retention_ms, 0)
        _check_range("min.compaction.lag.ms", self.min_compaction_lag_ms, 0)
        _check_range("max.message.bytes", self.max_message_bytes, 61, SEGMENT_BYTES_MAX)
        _check_range("flush.ms", self.flush_ms, 0)
        _check_range("flush.messages", self.flush_messages, 1)
        _check_range("file.delete.delay.ms", self.file_delete_delay_ms, 0)
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise InvalidConfigError("min.cleanable.dirty.ratio must lie between 0 and 1")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise InvalidConfigError(f"cleanup.policy must be one of {sorted(CLEANUP_POLICIES)}")
        if self.flush_policy not in FLUSH_POLICIES:
            raise InvalidConfigError(f"flush.policy must be one of {sorted(FLUSH_POLICIES)}")

    @property
    def deletes(self) -> bool:
        """True when retention removes old segments."""
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        """True when the cleaner keeps only the newest record per key."""
        return "compact" in self.cleanup_policy

    @classmethod
    def from_mapping(cls, settings: Mapping[str, object], base: LogConfig | None = None) -> LogConfig:
        """Build a config from dotted Kafka keys ("segment.bytes": ...) over ``base`` (defaults)."""
        fields = {field.name: field for field in dataclasses.fields(cls)}
        changes: dict[str, object] = {}
        for key, value in settings.items():
            name = key.replace(".", "_")
            if name not in fields:
                raise InvalidConfigError(f"unknown log setting {key!r}; known: {sorted(_dotted(fields))}")
            changes[name] = _coerce(key, value, fields[name].type)
        return dataclasses.replace(base or cls(), **changes)

    def to_mapping(self) -> dict[str, object]:
        """The settings under their dotted Kafka keys (the inverse of `from_mapping`)."""
        return {name.replace("_", "."): value for name, value in dataclasses.asdict(self).items()}


def _dotted(fields: Mapping[str, object]) -> list[str]:
    return [name.replace("_", ".") for name in fields]


def _coerce(key: str, value: object, type_name: object) -> object:
    """Turn a setting's text or number into the field's type, naming the key when it cannot."""
    try:
        if type_name == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)  # type: ignore[arg-type]
        if type_name == "float":
            return float(value)  # type: ignore[arg-type]
        return str(value)
    except (TypeError, ValueError):
        raise InvalidConfigError(f"log setting {key!r} expects {type_name}, got {value!r}") from None


def _check_range(key: str, value: int, lowest: int, highest: int | None = None) -> None:
    if value < lowest or (highest is not None and value > highest):
        bound = f"between {lowest} and {highest}" if highest is not None else f"at least {lowest}"
        raise InvalidConfigError(f"log setting {key!r} must be {bound}, got {value}")
