"""The folded view of __connectors: latest record per key, incarnations, and which tasks a broker runs."""

from __future__ import annotations

from mqbroker.connector_model import TargetState, TaskState, TaskStatus
from mqbroker.connectors.settings import tasks_count
from mqbroker.connectors.state import (
    ConnectorRecord,
    ProgressRecord,
    StatusRecord,
    connector_key,
    progress_key,
    status_key,
    task_partition,
)
from mqbroker.connectors.view import ConnectorsView, TaskId, task_for_partition

OLD, NEW = "a" * 32, "b" * 32


def connector(name: str, incarnation: str = OLD, tasks: int = 1, state: TargetState = TargetState.RUNNING):
    return ConnectorRecord(name=name, incarnation=incarnation, target_state=state,
                           config={"type": "redis-sink", "tasks.max": str(tasks)})


def test_a_tombstone_deletes_the_connector() -> None:
    view = ConnectorsView()
    view.apply(connector_key("c"), connector("c"))
    view.apply(connector_key("c"), None)
    assert view.connectors == {}


def test_progress_and_status_of_another_incarnation_are_ignored() -> None:
    view = ConnectorsView()
    view.apply(progress_key("c", 0), ProgressRecord(incarnation=OLD, progress={"positions": {}}))
    status = TaskStatus(state=TaskState.RUNNING, owner_id=1, updated_ms=5)
    view.apply(status_key("c", 0), StatusRecord(incarnation=OLD, status=status))
    view.apply(connector_key("c"), connector("c", NEW))
    current = TaskId(name="c", incarnation=NEW, task=0)
    assert view.progress_of(current) is None and view.status_of(current) is None
    assert view.progress_of(TaskId(name="c", incarnation=OLD, task=0)) == {"positions": {}}


def test_a_broker_plans_exactly_the_tasks_placed_in_its_claimed_partitions() -> None:
    view = ConnectorsView()
    view.apply(connector_key("wide"), connector("wide", tasks=16, state=TargetState.PAUSED))
    claimed = {0, 3}
    planned = view.planned_tasks(claimed, 8, tasks_count)
    expected = {task for task in range(16) if task_partition("wide", task, 8) in claimed}
    assert {task_id.task for task_id in planned} == expected
    assert all(plan.target_state is TargetState.PAUSED and plan.tasks_count == 16 for plan in planned.values())
    everything = view.planned_tasks(range(8), 8, tasks_count)
    assert len(everything) == 16


def test_partitions_spread_over_tasks_and_each_goes_to_one() -> None:
    owners = [task_for_partition("events", partition, 3) for partition in range(9)]
    assert sorted(owners) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
