"""Admin API: connectors (Redis sources and sinks, cluster mirroring) with their tasks' status and lag.

The same operations as ``mqbroker connectors`` (the connector admin service, ``IConnectorAdmin``):
reading needs DESCRIBE on the cluster, changing ALTER. Any broker answers; a task's status is what
its owner last stored, or live on the broker running it. Credentials in a configuration are masked.
A broker with ``connectors.enabled = false`` answers 404.
"""

from __future__ import annotations

from typing import Any

from mqbroker.connector_model import ConnectorDescription, TaskState
from mqbroker.limits import connector_name_length_max
from mqbroker.ops.api.routing import ApiCall, Route, path_parameter
from mqbroker.ops.api.schemas import array_of, ref

TAG = "connectors"
CONNECTOR = path_parameter("name", "the connector's name", {
    "type": "string", "minLength": 1, "maxLength": connector_name_length_max, "pattern": "^[A-Za-z0-9._-]+$"})


def lag_of(connector: ConnectorDescription) -> dict[str, Any]:
    """A connector's lag over its tasks: records still to copy (None when a task cannot know, as a source) and
    the age of the oldest record not yet copied."""
    tasks = connector.tasks
    unknown = any(task.metrics.lag_records < 0 for task in tasks)
    return {"lag_records": None if unknown else sum(task.metrics.lag_records for task in tasks),
            "lag_seconds": max((task.metrics.lag_seconds for task in tasks), default=0.0)}


def connector_document(connector: ConnectorDescription) -> dict[str, Any]:
    """A connector with its tasks (the CLI's ``-o json`` form) and its lag."""
    return {**connector.as_document(), **lag_of(connector)}


def _summary(connector: ConnectorDescription) -> dict[str, Any]:
    states = [task.state for task in connector.tasks]
    return {"name": connector.name, "type": connector.type, "state": connector.target_state.value,
            "tasks": len(states), "running_tasks": states.count(TaskState.RUNNING),
            "failed_tasks": states.count(TaskState.FAILED),
            "errors_total": sum(task.metrics.errors_total for task in connector.tasks), **lag_of(connector)}


async def _described(call: ApiCall, name: str) -> dict[str, Any]:
    (connector,) = await call.operations.connectors(call.principal, [name])
    return connector_document(connector)


async def list_connectors(call: ApiCall) -> list[dict[str, Any]]:
    """Every connector with its tasks' states, errors and lag summed up."""
    return [_summary(connector) for connector in await call.operations.connectors(call.principal, None)]


async def describe_connector(call: ApiCall) -> dict[str, Any]:
    """A connector's configuration (credentials masked) and each task's state, owner, counters and lag."""
    return await _described(call, call.path["name"])


async def create_connector(call: ApiCall) -> dict[str, Any]:
    """Check and store a connector; its tasks start on their owners."""
    name = call.body["name"]
    await call.operations.create_connector(call.principal, name, call.body["config"])
    return await _described(call, name)


async def set_connector_state(call: ApiCall) -> dict[str, Any]:
    """Pause a connector (its tasks stop, keeping their progress) or resume it."""
    name = call.path["name"]
    if call.body["state"] == "paused":
        await call.operations.pause_connector(call.principal, name)
    else:
        await call.operations.resume_connector(call.principal, name)
    return await _described(call, name)


async def delete_connector(call: ApiCall) -> None:
    """Stop a connector's tasks and delete its configuration, status and progress."""
    await call.operations.delete_connector(call.principal, call.path["name"])


ROUTES = (
    Route(method="GET", path="/api/v1/connectors", operation_id="listConnectors", tag=TAG, handler=list_connectors,
          summary="Connectors with their tasks' states and lag", response=array_of("ConnectorSummary"),
          error_statuses=(404,)),
    Route(method="POST", path="/api/v1/connectors", operation_id="createConnector", tag=TAG, handler=create_connector,
          summary="Create a connector (a Redis source or sink, or a cluster mirror)", body=ref("NewConnector"),
          response=ref("Connector"), status=201, error_statuses=(404, 409)),
    Route(method="GET", path="/api/v1/connectors/{name}", operation_id="describeConnector", tag=TAG,
          handler=describe_connector, summary="A connector's configuration and each task's status, counters and lag",
          parameters=(CONNECTOR,), response=ref("Connector"), error_statuses=(404,)),
    Route(method="PUT", path="/api/v1/connectors/{name}/state", operation_id="setConnectorState", tag=TAG,
          handler=set_connector_state, summary="Pause or resume a connector", parameters=(CONNECTOR,),
          body=ref("ConnectorState"), response=ref("Connector"), error_statuses=(404,)),
    Route(method="DELETE", path="/api/v1/connectors/{name}", operation_id="deleteConnector", tag=TAG,
          handler=delete_connector, summary="Delete a connector with its status and progress",
          parameters=(CONNECTOR,), error_statuses=(404,)),
)
