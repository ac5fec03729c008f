"""The connector tasks running on this broker, in ``/metrics`` (read at scrape time, nothing per record)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from mqbroker.connector_model import TaskState
from mqbroker.connectors.runtime import ConnectorRuntime

_LABELS = ["connector", "task", "type"]


class ConnectorCollector(Collector):
    """Per task on this broker: state, records, rate, lag (records and seconds), errors and outages."""

    def __init__(self, runtime: ConnectorRuntime) -> None:
        self._runtime = runtime

    def collect(self) -> Iterator[Any]:
        state = GaugeMetricFamily("mqbroker_connector_task_state",
                                  "1 for the state each connector task on this broker is in.", labels=[*_LABELS, "state"])
        families = {
            "records": CounterMetricFamily("mqbroker_connector_records", "Records the task copied.", labels=_LABELS),
            "errors": CounterMetricFamily("mqbroker_connector_errors", "Errors the task met (it retried).",
                                          labels=_LABELS),
            "outages": CounterMetricFamily("mqbroker_connector_outages",
                                           "Outages of the system the task copies from or to.", labels=_LABELS),
            "outage_seconds": CounterMetricFamily("mqbroker_connector_outage_seconds",
                                                  "Time spent in outages, the current one included.", labels=_LABELS),
            "rate": GaugeMetricFamily("mqbroker_connector_records_per_second",
                                      "Records copied per second (over the last status window).", labels=_LABELS),
            "lag_records": GaugeMetricFamily("mqbroker_connector_lag_records",
                                             "Records not copied yet (-1: the source cannot say).", labels=_LABELS),
            "lag_seconds": GaugeMetricFamily("mqbroker_connector_lag_seconds",
                                             "Age of the newest record copied, while behind.", labels=_LABELS),
        }
        runtime = self._runtime
        yield CounterMetricFamily("mqbroker_connector_state_records_skipped",
                                  "Records of __connectors this broker could not decode (logged and skipped).",
                                  value=runtime.store.corrupt_records_total)
        for task_id, type_name, status in runtime.local_tasks():
            labels = [task_id.name, str(task_id.task), type_name]
            for candidate in TaskState:
                state.add_metric([*labels, candidate.value], 1 if status.state is candidate else 0)
            metrics = status.metrics
            families["records"].add_metric(labels, metrics.records_total)
            families["errors"].add_metric(labels, metrics.errors_total)
            families["outages"].add_metric(labels, metrics.outages_total)
            families["outage_seconds"].add_metric(labels, metrics.outage_seconds)
            families["rate"].add_metric(labels, metrics.records_per_second)
            families["lag_records"].add_metric(labels, metrics.lag_records)
            families["lag_seconds"].add_metric(labels, metrics.lag_seconds)
        yield state
        yield from families.values()
