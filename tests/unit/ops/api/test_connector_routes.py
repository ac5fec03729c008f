"""The connector route handlers over a fake ``AdminOperations``: summaries, lag over tasks, pause and resume."""

from __future__ import annotations

from typing import Any

import pytest

from mqbroker import errors
from mqbroker.connector_model import ConnectorDescription, TargetState, TaskDescription, TaskMetrics, TaskState
from mqbroker.model import Principal
from mqbroker.ops.api import connector_routes
from mqbroker.ops.api.routing import Schemas
from mqbroker.ops.api.schemas import COMPONENTS, array_of, ref
from tests.unit.ops.api.handlers import run_handler


def _task(task: int, state: TaskState, lag_records: int, lag_seconds: float, errors_total: int = 0) -> TaskDescription:
    return TaskDescription(task=task, state=state, owner_id=2, updated_ms=1_000, metrics=TaskMetrics(
        records_total=10, lag_records=lag_records, lag_seconds=lag_seconds, errors_total=errors_total))


class Operations:
    """The connector calls of ``AdminOperations`` over a dict of descriptions."""

    def __init__(self) -> None:
        self.described = {
            "sink": ConnectorDescription(name="sink", type="redis-sink", target_state=TargetState.RUNNING,
                                         config={"redis.url": "redis://:*****@cache"},
                                         tasks=(_task(0, TaskState.RUNNING, 3, 0.5),
                                                _task(1, TaskState.FAILED, 4, 2.0, errors_total=7))),
            "source": ConnectorDescription(name="source", type="redis-source", target_state=TargetState.PAUSED,
                                           config={}, tasks=(_task(0, TaskState.PAUSED, -1, 0.0),)),
        }
        self.calls: list[tuple[str, str]] = []

    async def connectors(self, principal: Principal, names: Any) -> list[ConnectorDescription]:
        if names is None:
            return list(self.described.values())
        missing = [name for name in names if name not in self.described]
        if missing:
            raise errors.ResourceNotFoundError(f"no connector {missing[0]!r}")
        return [self.described[name] for name in names]

    async def pause_connector(self, principal: Principal, name: str) -> None:
        self.calls.append(("pause", name))

    async def resume_connector(self, principal: Principal, name: str) -> None:
        self.calls.append(("resume", name))


def test_the_listing_counts_task_states_sums_errors_and_lag() -> None:
    listed = run_handler(connector_routes.list_connectors, Operations())
    assert listed[0] == {"name": "sink", "type": "redis-sink", "state": "running", "tasks": 2, "running_tasks": 1,
                         "failed_tasks": 1, "errors_total": 7, "lag_records": 7, "lag_seconds": 2.0}
    assert listed[1]["lag_records"] is None  # a source cannot know how much is left
    assert not Schemas(COMPONENTS).errors_in(listed, array_of("ConnectorSummary"))


def test_a_description_keeps_the_masked_config_and_each_tasks_metrics() -> None:
    found = run_handler(connector_routes.describe_connector, Operations(), {"name": "sink"})
    assert found["config"] == {"redis.url": "redis://:*****@cache"} and found["lag_records"] == 7
    assert [task["state"] for task in found["tasks"]] == ["running", "failed"]
    assert not Schemas(COMPONENTS).errors_in(found, ref("Connector"))
    with pytest.raises(errors.ResourceNotFoundError):
        run_handler(connector_routes.describe_connector, Operations(), {"name": "nope"})


def test_the_state_route_pauses_or_resumes_then_describes() -> None:
    operations = Operations()
    run_handler(connector_routes.set_connector_state, operations, {"name": "sink"}, {"state": "paused"})
    run_handler(connector_routes.set_connector_state, operations, {"name": "source"}, {"state": "running"})
    assert operations.calls == [("pause", "sink"), ("resume", "source")]


@pytest.mark.parametrize("body", [
    {"name": "a/b", "config": {}}, {"name": "", "config": {}}, {"name": "x" * 129, "config": {}},
    {"name": "ok", "config": {"k": 1}}, {"name": "ok"}, {"name": "ok", "config": {"k": "v" * (64 * 1024 + 1)}},
])
def test_connector_bodies_out_of_bounds_are_refused(body: dict[str, Any]) -> None:
    assert Schemas(COMPONENTS).errors_in(body, ref("NewConnector"))
