"""Values of the connector admin surface: what ``describe`` returns and what a task reports. Pure."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Configuration keys whose values ``describe`` never shows (credentials).
_SECRET_MARKERS = ("password", "secret", "token")
#: The password part of a URL's user information: ``scheme://user:PASSWORD@``.
_URL_PASSWORD = re.compile(r"(://[^/@:]*:)[^/@]*@")


class TargetState(enum.Enum):
    """What the operator asked a connector to do."""

    RUNNING = "running"
    PAUSED = "paused"


class TaskState(enum.Enum):
    """Where a task stands, as its owner reports it."""

    #: No broker runs it now (its owner died and the next one has not claimed it yet).
    UNASSIGNED = "unassigned"
    RUNNING = "running"
    PAUSED = "paused"
    #: An outage (Redis or a cluster unreachable, a refused request): waiting to retry.
    BACKOFF = "backoff"
    #: An unexpected error (a bug or a setting the other system refuses): retried slowly, see ``last_error``.
    FAILED = "failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskMetrics:
    """A task's counters and gauges at one moment (also stored in its status record)."""

    records_total: int = 0
    errors_total: int = 0
    #: Records the task has still to copy (sinks, mirror: up to the high watermark; sources: -1, unknown).
    lag_records: int = 0
    #: Age of the oldest record not yet copied (0 when caught up).
    lag_seconds: float = 0.0
    records_per_second: float = 0.0
    outages_total: int = 0
    outage_seconds: float = 0.0
    in_outage: bool = False
    last_error: str | None = None
    last_error_ms: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskStatus:
    """One task as its owner last reported it."""

    state: TaskState
    owner_id: int
    updated_ms: int
    metrics: TaskMetrics = field(default_factory=TaskMetrics)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskDescription:
    """One task of a described connector."""

    task: int
    state: TaskState
    owner_id: int
    updated_ms: int
    metrics: TaskMetrics

    def as_document(self) -> dict[str, Any]:
        """JSON-ready form (the CLI's ``-o json`` and the HTTP API)."""
        metrics = self.metrics
        return {
            "task": self.task, "state": self.state.value, "owner": self.owner_id, "updated_ms": self.updated_ms,
            "records_total": metrics.records_total, "records_per_second": metrics.records_per_second,
            "lag_records": metrics.lag_records, "lag_seconds": metrics.lag_seconds,
            "errors_total": metrics.errors_total, "outages_total": metrics.outages_total,
            "outage_seconds": metrics.outage_seconds, "in_outage": metrics.in_outage,
            "last_error": metrics.last_error, "last_error_ms": metrics.last_error_ms,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectorDescription:
    """A connector: its configuration (secrets hidden), what it was asked to do and its tasks."""

    name: str
    type: str
    target_state: TargetState
    config: Mapping[str, str]
    tasks: tuple[TaskDescription, ...] = ()

    def as_document(self) -> dict[str, Any]:
        """JSON-ready form (the CLI's ``-o json`` and the HTTP API)."""
        return {"name": self.name, "type": self.type, "state": self.target_state.value, "config": dict(self.config),
                "tasks": [task.as_document() for task in self.tasks]}


def redacted(config: Mapping[str, str]) -> dict[str, str]:
    """``config`` with the values of credential keys (``*password*``, ``*secret*``, ``*token*``) and the
    passwords inside URLs (``redis://:pw@host``) hidden."""
    return {key: "*****" if any(marker in key.lower() for marker in _SECRET_MARKERS) else _URL_PASSWORD.sub(r"\1*****@", value)
            for key, value in config.items()}
