"""``mqbroker connectors``: TOML settings flattened to dotted keys, and the list's per-connector totals."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqbroker.cli import build_parser
from mqbroker.cli.common import UsageError
from mqbroker.cli.connectors import settings_from_toml, summary
from mqbroker.connector_model import ConnectorDescription, TargetState, TaskDescription, TaskMetrics, TaskState


def test_tables_become_dotted_keys_and_values_strings() -> None:
    text = """
type = "mirror"
topics = ["orders", "payments"]
tasks = 3
[source]
bootstrap = "east-1:9393,east-2:9393"
alias = "east"
tls = true
[source.sasl]
password = "s3cret"
"""
    assert settings_from_toml(text) == {
        "type": "mirror", "topics": "orders,payments", "tasks": "3", "source.bootstrap": "east-1:9393,east-2:9393",
        "source.alias": "east", "source.tls": "true", "source.sasl.password": "s3cret"}


@pytest.mark.parametrize("text, problem", [
    ("type = ", "not TOML"),
    ("when = 2024-05-01T12:00:00Z", "datetime values are not settings"),
    ("topics = [[1], [2]]", "only plain values"),
])
def test_what_is_no_setting_is_a_usage_error(text: str, problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        settings_from_toml(text)


@given(st.text(max_size=200))
def test_any_text_gives_settings_or_a_usage_error(text: str) -> None:
    try:
        settings = settings_from_toml(text)
    except UsageError:
        return
    assert all(isinstance(key, str) and isinstance(value, str) for key, value in settings.items())


def test_the_list_row_adds_up_the_tasks() -> None:
    def task(number: int, state: TaskState, records: int, lag: int) -> TaskDescription:
        return TaskDescription(task=number, state=state, owner_id=1, updated_ms=0,
                               metrics=TaskMetrics(records_total=records, lag_records=lag, records_per_second=1.5,
                                                   errors_total=number))

    connector = ConnectorDescription(name="m", type="mirror", target_state=TargetState.RUNNING, config={},
                                     tasks=(task(0, TaskState.RUNNING, 10, 2), task(1, TaskState.BACKOFF, 5, -1)))
    assert summary(connector) == {"name": "m", "type": "mirror", "state": "running", "tasks": 2, "running": 1,
                                  "records_total": 15, "records_per_second": 3.0, "lag_records": 2, "errors_total": 1}


def test_every_action_parses() -> None:
    parser = build_parser()
    assert parser.parse_args(["connectors", "create", "c", "type=redis-sink", "-f", "c.toml"]).settings == ["type=redis-sink"]
    assert parser.parse_args(["connectors", "describe", "a", "b", "-o", "json"]).names == ["a", "b"]
    for action in ("pause", "resume", "delete"):
        assert parser.parse_args(["connectors", action, "c"]).action == action
