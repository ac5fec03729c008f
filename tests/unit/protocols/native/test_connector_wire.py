"""Connector descriptions through the native codec and back, as the CLI receives them."""

from __future__ import annotations

import dataclasses

from mqbroker.connector_model import ConnectorDescription, TargetState, TaskDescription, TaskMetrics, TaskState
from mqbroker.protocols.native.connector_wire import describe_response, descriptions_from
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native.codec import decode_response, encode_response


def test_a_description_survives_the_wire_with_rates_rounded_and_times_in_milliseconds() -> None:
    metrics = TaskMetrics(records_total=10, errors_total=2, lag_records=3, lag_seconds=1.25, records_per_second=99.6,
                          outages_total=1, outage_seconds=4.5, in_outage=True, last_error="down", last_error_ms=7)
    task = TaskDescription(task=0, state=TaskState.BACKOFF, owner_id=2, updated_ms=9, metrics=metrics)
    description = ConnectorDescription(name="c", type="redis-sink", target_state=TargetState.PAUSED,
                                       config={"topics": "a"}, tasks=(task,))
    frame = encode_response(5, m.ApiKey.DESCRIBE_CONNECTORS, 0, describe_response([description]))
    correlation_id, decoded = decode_response(m.ApiKey.DESCRIBE_CONNECTORS, 0, frame[4:])
    (back,) = descriptions_from(decoded)
    rounded = dataclasses.replace(task, metrics=dataclasses.replace(metrics, records_per_second=100.0))
    assert correlation_id == 5 and back == dataclasses.replace(description, tasks=(rounded,))
