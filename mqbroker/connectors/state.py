"""The records of ``__connectors``: keys, JSON values, and a strict decoder. Pure.

``__connectors`` is a compacted topic; each record's key says what it holds:

- ``connector/<name>``: a connector's configuration and target state (a tombstone deletes it);
- ``status/<name>/<task>``: a task's state and metrics, written by its owner;
- ``progress/<name>/<task>``: a task's checkpoint (the type's own JSON object), written by its owner;
- ``claim/<partition>``: which broker took over the partition's tasks, at which leader epoch.

A connector's record goes to ``connector_partition(name)``; task ``t``'s status and progress go to
``task_partition(name, t)``, whose leader runs the task. Status and progress records carry the
connector's *incarnation* (a random id chosen at creation), so that a connector deleted and
created again under the same name never resumes from the old one's checkpoints.

Everything read back is checked: ``decode_key`` and ``decode_value`` raise
``CorruptConnectorStateError`` (and nothing else) for any key or value they did not write.
"""

from __future__ import annotations

import enum
import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mqbroker import limits
from mqbroker.connector_model import TargetState, TaskMetrics, TaskState, TaskStatus

CONNECTORS_TOPIC = "__connectors"
CONNECTORS_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
#: A connector name: letters, digits, '.', '_' and '-' (it appears in record keys and Redis key names).
CONNECTOR_NAME = re.compile(r"[A-Za-z0-9._-]+")
_INCARNATION = re.compile(r"[0-9a-f]{32}")


class CorruptConnectorStateError(Exception):
    """A ``__connectors`` record this broker did not write (or that was damaged): counted, logged, skipped."""


class KeyKind(enum.Enum):
    """What a ``__connectors`` record holds."""

    CONNECTOR = "connector"
    STATUS = "status"
    PROGRESS = "progress"
    CLAIM = "claim"


@dataclass(frozen=True, slots=True, kw_only=True)
class StateKey:
    """A record key: ``name`` and ``task`` for connector, status and progress keys, ``partition`` for claims."""

    kind: KeyKind
    name: str = ""
    task: int = -1
    partition: int = -1

    def encode(self) -> bytes:
        """The key as stored."""
        if self.kind is KeyKind.CONNECTOR:
            text = f"connector/{self.name}"
        elif self.kind is KeyKind.CLAIM:
            text = f"claim/{self.partition}"
        else:
            text = f"{self.kind.value}/{self.name}/{self.task}"
        return text.encode("ascii")


def connector_key(name: str) -> StateKey:
    """The key of a connector's configuration record."""
    return StateKey(kind=KeyKind.CONNECTOR, name=name)


def status_key(name: str, task: int) -> StateKey:
    """The key of a task's status record."""
    return StateKey(kind=KeyKind.STATUS, name=name, task=task)


def progress_key(name: str, task: int) -> StateKey:
    """The key of a task's progress record."""
    return StateKey(kind=KeyKind.PROGRESS, name=name, task=task)


def claim_key(partition: int) -> StateKey:
    """The key of a partition's claim record."""
    return StateKey(kind=KeyKind.CLAIM, partition=partition)


def connector_partition(name: str, partition_count: int) -> int:
    """The ``__connectors`` partition holding a connector's configuration record."""
    return zlib.crc32(name.encode("ascii")) % partition_count


def task_partition(name: str, task: int, partition_count: int) -> int:
    """The ``__connectors`` partition holding task ``task``'s status and progress; its leader runs the task."""
    return zlib.crc32(f"{name}/{task}".encode("ascii")) % partition_count


def check_connector_name(name: str) -> None:
    """Raise ``ValueError`` unless ``name`` is a valid connector name."""
    if not 0 < len(name) <= limits.connector_name_length_max or not CONNECTOR_NAME.fullmatch(name):
        raise ValueError(
            f"connector name {name[:60]!r} must be 1..{limits.connector_name_length_max} letters, digits, "
            "'.', '_' or '-'"
        )


# -- values ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectorRecord:
    """A connector as created: its configuration and what it should do."""

    name: str
    incarnation: str
    target_state: TargetState
    config: Mapping[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusRecord:
    """A task's status as its owner wrote it."""

    incarnation: str
    status: TaskStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressRecord:
    """A task's checkpoint: a JSON object each connector type reads with its own checked decoder."""

    incarnation: str
    progress: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRecord:
    """A broker took over a partition's tasks as its leader at ``leader_epoch``."""

    node_id: int
    leader_epoch: int


StateValue = ConnectorRecord | StatusRecord | ProgressRecord | ClaimRecord


def encode_value(value: StateValue) -> bytes:
    """A record value as stored (compact JSON)."""
    document: dict[str, Any]
    if isinstance(value, ConnectorRecord):
        document = {"incarnation": value.incarnation, "target_state": value.target_state.value,
                    "config": dict(value.config)}
    elif isinstance(value, StatusRecord):
        status = value.status
        metrics = status.metrics
        document = {"incarnation": value.incarnation, "state": status.state.value, "owner": status.owner_id,
                    "updated_ms": status.updated_ms, "metrics": {
                        "records_total": metrics.records_total, "errors_total": metrics.errors_total,
                        "lag_records": metrics.lag_records, "lag_seconds": metrics.lag_seconds,
                        "records_per_second": metrics.records_per_second, "outages_total": metrics.outages_total,
                        "outage_seconds": metrics.outage_seconds, "in_outage": metrics.in_outage,
                        "last_error": metrics.last_error, "last_error_ms": metrics.last_error_ms}}
    elif isinstance(value, ProgressRecord):
        document = {"incarnation": value.incarnation, "progress": dict(value.progress)}
    else:
        document = {"node": value.node_id, "epoch": value.leader_epoch}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# -- decoding ----------------------------------------------------------------------------------


def decode_key(key: bytes | None) -> StateKey:
    """The ``StateKey`` of a stored key; ``CorruptConnectorStateError`` for anything else."""
    if key is None:
        raise CorruptConnectorStateError("a __connectors record without a key")
    try:
        text = key.decode("ascii")
    except UnicodeDecodeError:
        raise CorruptConnectorStateError(f"key {key[:60]!r} is not ASCII") from None
    parts = text.split("/")
    try:
        kind = KeyKind(parts[0])
    except ValueError:
        raise CorruptConnectorStateError(f"key {text[:60]!r} names no known record kind") from None
    if kind is KeyKind.CLAIM and len(parts) == 2:
        return StateKey(kind=kind, partition=_decimal(parts[1], text))
    if kind is KeyKind.CONNECTOR and len(parts) == 2:
        return StateKey(kind=kind, name=_name(parts[1], text))
    if kind in (KeyKind.STATUS, KeyKind.PROGRESS) and len(parts) == 3:
        return StateKey(kind=kind, name=_name(parts[1], text), task=_decimal(parts[2], text))
    raise CorruptConnectorStateError(f"key {text[:60]!r} has the wrong number of parts")


def _name(text: str, key: str) -> str:
    try:
        check_connector_name(text)
    except ValueError as error:
        raise CorruptConnectorStateError(f"key {key[:60]!r}: {error}") from None
    return text


def _decimal(text: str, key: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        raise CorruptConnectorStateError(f"key {key[:60]!r}: {text[:20]!r} is not a small decimal number")
    return int(text)


def decode_value(key: StateKey, value: bytes) -> StateValue:
    """The value of a record (not a tombstone) under ``key``; ``CorruptConnectorStateError`` if it does not parse."""
    if len(value) > limits.connector_state_value_bytes_max:
        raise CorruptConnectorStateError(f"{key.encode()!r}: a {len(value)}-byte value is larger than any written")
    try:
        document = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise CorruptConnectorStateError(f"{key.encode()!r}: the value is not JSON ({error})") from None
    fields = _Fields(document, key)
    if key.kind is KeyKind.CLAIM:
        return ClaimRecord(node_id=fields.integer("node"), leader_epoch=fields.integer("epoch"))
    incarnation = fields.text("incarnation")
    if not _INCARNATION.fullmatch(incarnation):
        raise fields.corrupt(f"incarnation {incarnation[:40]!r} is not 32 hexadecimal digits")
    if key.kind is KeyKind.CONNECTOR:
        config = fields.object("config")
        if len(config) > limits.connector_config_entries_max or not all(isinstance(v, str) for v in config.values()):
            raise fields.corrupt("the config is not a bounded map of strings")
        return ConnectorRecord(name=key.name, incarnation=incarnation,
                               target_state=fields.choice("target_state", TargetState), config=config)
    if key.kind is KeyKind.PROGRESS:
        return ProgressRecord(incarnation=incarnation, progress=fields.object("progress"))
    return StatusRecord(incarnation=incarnation, status=_status(fields))


def _status(fields: _Fields) -> TaskStatus:
    metrics = _Fields(fields.object("metrics"), fields.key)
    last_error = metrics.document.get("last_error")
    if last_error is not None and not isinstance(last_error, str):
        raise fields.corrupt("last_error is neither text nor null")
    return TaskStatus(
        state=fields.choice("state", TaskState), owner_id=fields.integer("owner"), updated_ms=fields.integer("updated_ms"),
        metrics=TaskMetrics(
            records_total=metrics.integer("records_total"), errors_total=metrics.integer("errors_total"),
            lag_records=metrics.integer("lag_records"), lag_seconds=metrics.number("lag_seconds"),
            records_per_second=metrics.number("records_per_second"), outages_total=metrics.integer("outages_total"),
            outage_seconds=metrics.number("outage_seconds"), in_outage=metrics.boolean("in_outage"),
            last_error=last_error, last_error_ms=metrics.integer("last_error_ms"),
        ),
    )


class _Fields:
    """Typed reads of one decoded JSON object; any mismatch is a ``CorruptConnectorStateError``."""

    def __init__(self, document: Any, key: StateKey) -> None:
        self.key = key
        if not isinstance(document, dict):
            raise self.corrupt("the value is not a JSON object")
        self.document: dict[str, Any] = document

    def corrupt(self, problem: str) -> CorruptConnectorStateError:
        return CorruptConnectorStateError(f"{self.key.encode()!r}: {problem}")

    def _get(self, name: str, kind: type | tuple[type, ...]) -> Any:
        value = self.document.get(name)
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise self.corrupt(f"{name!r} is missing or not a {getattr(kind, '__name__', 'number')}")
        return value

    def integer(self, name: str) -> int:
        return int(self._get(name, int))

    def number(self, name: str) -> float:
        return float(self._get(name, (int, float)))

    def boolean(self, name: str) -> bool:
        return bool(self._get(name, bool))

    def text(self, name: str) -> str:
        return str(self._get(name, str))

    def object(self, name: str) -> dict[str, Any]:
        return dict(self._get(name, dict))

    def choice(self, name: str, kind: type[enum.Enum]) -> Any:
        try:
            return kind(self.text(name))
        except ValueError:
            raise self.corrupt(f"{name!r} is no {kind.__name__}") from None


def encode_positions(positions: Mapping[tuple[str, int], int]) -> dict[str, int]:
    """Offsets per topic partition as a progress field: ``{"<topic>/<partition>": offset}``."""
    return {f"{topic}/{partition}": offset for (topic, partition), offset in positions.items()}


def decode_positions(field: Any) -> dict[tuple[str, int], int]:
    """``encode_positions``'s form back; ``CorruptConnectorStateError`` for anything else."""
    if not isinstance(field, dict):
        raise CorruptConnectorStateError("positions are not a JSON object")
    positions = {}
    for name, offset in field.items():
        topic, separator, partition = name.rpartition("/")
        if (not separator or not topic or not partition.isascii() or not partition.isdigit() or len(partition) > 9
                or not isinstance(offset, int) or isinstance(offset, bool) or offset < 0):
            raise CorruptConnectorStateError(f"position {name[:60]!r}: {str(offset)[:20]} is not a partition's offset")
        positions[topic, int(partition)] = offset
    return positions
