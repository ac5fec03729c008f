"""``__connectors`` folded into the current state, and the decision which tasks a broker runs. Pure.

Every broker keeps a ``ConnectorsView`` by reading all partitions of ``__connectors``: list and
describe answer from it on any broker. A broker runs the tasks placed in the partitions it has
*claimed*: it leads them, wrote its claim record, and read the partition up to that record (so
the view holds the last checkpoint the previous owner wrote before it died).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mqbroker.connector_model import TargetState
from mqbroker.connectors.state import (
    ClaimRecord,
    ConnectorRecord,
    KeyKind,
    ProgressRecord,
    StateKey,
    StateValue,
    StatusRecord,
    task_partition,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskId:
    """One task of one incarnation of a connector."""

    name: str
    incarnation: str
    task: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedTask:
    """A task this broker should run, with its connector's configuration and target state."""

    task_id: TaskId
    partition: int
    target_state: TargetState
    config: Mapping[str, str]
    tasks_count: int


class ConnectorsView:
    """The latest record per key of ``__connectors``, as read so far."""

    def __init__(self) -> None:
        self.connectors: dict[str, ConnectorRecord] = {}
        self._statuses: dict[tuple[str, int], StatusRecord] = {}
        self._progress: dict[tuple[str, int], ProgressRecord] = {}
        self.claims: dict[int, ClaimRecord] = {}

    def apply(self, key: StateKey, value: StateValue | None) -> None:
        """Fold one record in (``value`` None: a tombstone)."""
        if key.kind is KeyKind.CONNECTOR:
            _put(self.connectors, key.name, value)
        elif key.kind is KeyKind.STATUS:
            _put(self._statuses, (key.name, key.task), value)
        elif key.kind is KeyKind.PROGRESS:
            _put(self._progress, (key.name, key.task), value)
        else:
            _put(self.claims, key.partition, value)

    def status_of(self, task_id: TaskId) -> StatusRecord | None:
        """The task's last status record, if it belongs to this incarnation."""
        found = self._statuses.get((task_id.name, task_id.task))
        return found if found is not None and found.incarnation == task_id.incarnation else None

    def progress_of(self, task_id: TaskId) -> Mapping[str, Any] | None:
        """The task's last checkpoint, if it belongs to this incarnation."""
        found = self._progress.get((task_id.name, task_id.task))
        return found.progress if found is not None and found.incarnation == task_id.incarnation else None

    def stale_task_keys(self, name: str) -> list[StateKey]:
        """Status and progress keys of ``name`` that belong to no current incarnation (to delete)."""
        current = self.connectors.get(name)
        incarnation = current.incarnation if current is not None else None
        keys = [StateKey(kind=KeyKind.STATUS, name=n, task=t) for (n, t), record in self._statuses.items()
                if n == name and record.incarnation != incarnation]
        keys += [StateKey(kind=KeyKind.PROGRESS, name=n, task=t) for (n, t), record in self._progress.items()
                 if n == name and record.incarnation != incarnation]
        return keys

    def planned_tasks(self, claimed: Iterable[int], partition_count: int,
                      tasks_count_of: Any) -> dict[TaskId, PlannedTask]:
        """The tasks placed in the ``claimed`` partitions; ``tasks_count_of(config)`` says how many a connector has."""
        claimed_set = set(claimed)
        planned = {}
        for connector in self.connectors.values():
            tasks_count = tasks_count_of(connector.config)
            for task in range(tasks_count):
                partition = task_partition(connector.name, task, partition_count)
                if partition in claimed_set:
                    task_id = TaskId(name=connector.name, incarnation=connector.incarnation, task=task)
                    planned[task_id] = PlannedTask(task_id=task_id, partition=partition,
                                                   target_state=connector.target_state, config=connector.config,
                                                   tasks_count=tasks_count)
        return planned


def task_for_partition(topic: str, partition: int, tasks_count: int) -> int:
    """Which of a connector's tasks copies a topic partition (stable; a topic's partitions spread evenly)."""
    return (zlib.crc32(topic.encode("utf-8")) + partition) % tasks_count


def _put(table: dict[Any, Any], key: Any, value: Any) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
