"""Connector descriptions to and from their native-protocol form (server and client share it). Pure.

The wire carries rates and durations as integers: records per second rounded, lag and outage
time in milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable

from mqbroker.connector_model import ConnectorDescription, TargetState, TaskDescription, TaskMetrics, TaskState
from mqbroker.protocols.native import messages as m


def describe_response(descriptions: Iterable[ConnectorDescription]) -> m.DescribeConnectorsResponse:
    """The DescribeConnectors response of ``descriptions``."""
    return m.DescribeConnectorsResponse(connectors=tuple(
        m.DescribedConnector(name=description.name, type=description.type, state=description.target_state.value,
                             configs=dict(description.config),
                             tasks=tuple(_task(task) for task in description.tasks))
        for description in descriptions))


def _task(task: TaskDescription) -> m.DescribedConnectorTask:
    metrics = task.metrics
    return m.DescribedConnectorTask(
        task=task.task, state=task.state.value, owner_id=task.owner_id, updated_ms=task.updated_ms,
        records_total=metrics.records_total, records_per_second=round(metrics.records_per_second),
        lag_records=metrics.lag_records, lag_ms=round(metrics.lag_seconds * 1000),
        errors_total=metrics.errors_total, outages_total=metrics.outages_total,
        outage_ms=round(metrics.outage_seconds * 1000), in_outage=metrics.in_outage, last_error=metrics.last_error,
        last_error_ms=metrics.last_error_ms)


def descriptions_from(response: m.DescribeConnectorsResponse) -> list[ConnectorDescription]:
    """A DescribeConnectors response as descriptions; ``ValueError`` for a state this version does not know."""
    return [ConnectorDescription(name=connector.name, type=connector.type, target_state=TargetState(connector.state),
                                 config=dict(connector.configs),
                                 tasks=tuple(_description(task) for task in connector.tasks))
            for connector in response.connectors]


def _description(task: m.DescribedConnectorTask) -> TaskDescription:
    return TaskDescription(
        task=task.task, state=TaskState(task.state), owner_id=task.owner_id, updated_ms=task.updated_ms,
        metrics=TaskMetrics(
            records_total=task.records_total, errors_total=task.errors_total, lag_records=task.lag_records,
            lag_seconds=task.lag_ms / 1000, records_per_second=float(task.records_per_second),
            outages_total=task.outages_total, outage_seconds=task.outage_ms / 1000, in_outage=task.in_outage,
            last_error=task.last_error, last_error_ms=task.last_error_ms))
