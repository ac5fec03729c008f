"""``mqbroker connectors``: create, list, describe, pause, resume and delete connectors (docs/connectors.md)."""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Mapping
from typing import Any

from mqbroker.cli.common import UsageError, add_client_options, parse_key_values, reporting_errors
from mqbroker.cli.output import Column, Table, add_output_options, emit
from mqbroker.cli.topics import admin_client
from mqbroker.connector_model import ConnectorDescription

CONNECTOR_COLUMNS = (
    Column("name", "name"), Column("type", "type"), Column("state", "state"), Column("tasks", "tasks", numeric=True),
    Column("running", "running", numeric=True), Column("records_total", "records", numeric=True),
    Column("records_per_second", "records/s", numeric=True), Column("lag_records", "lag", numeric=True),
    Column("errors_total", "errors", numeric=True),
)
TASK_COLUMNS = (
    Column("connector", "connector"), Column("task", "task", numeric=True), Column("state", "state"),
    Column("owner", "owner", numeric=True), Column("records_total", "records", numeric=True),
    Column("records_per_second", "records/s", numeric=True), Column("lag_records", "lag", numeric=True),
    Column("lag_seconds", "lag s", numeric=True), Column("errors_total", "errors", numeric=True),
    Column("outages_total", "outages", numeric=True), Column("last_error", "last error"),
)
_DONE = {"pause": "paused", "resume": "resumed", "delete": "deleted"}
CONFIG_COLUMNS = (Column("connector", "connector"), Column("key", "key"), Column("value", "value"))


def add_parser(commands: Any) -> None:
    """Register ``connectors`` and its subcommands."""
    connectors = commands.add_parser(
        "connectors", help="create, list, describe, pause, resume and delete connectors (Redis, mirror)",
        description="Connectors run inside the brokers; see docs/connectors.md for their settings.")
    actions = connectors.add_subparsers(dest="connectors_command", metavar="ACTION", required=True)

    create = actions.add_parser(
        "create", help="create a connector from a TOML file and/or KEY=VALUE settings",
        description="Settings come from --config-file (TOML; nested tables become dotted keys) and then the "
                    "KEY=VALUE arguments, which win. Keep passwords in the file: arguments show in `ps`.")
    add_client_options(create)
    create.add_argument("name")
    create.add_argument("settings", nargs="*", metavar="KEY=VALUE", help="e.g. type=redis-sink topic=telemetry")
    create.add_argument("-f", "--config-file", metavar="FILE.toml", help="settings as TOML")
    create.set_defaults(run=reporting_errors(_create))

    listing = actions.add_parser("list", help="every connector, its state and its tasks' totals")
    add_client_options(listing)
    add_output_options(listing)
    listing.set_defaults(run=reporting_errors(_list))

    describe = actions.add_parser("describe", help="a connector's settings (secrets hidden) and each task's status")
    add_client_options(describe)
    describe.add_argument("names", nargs="+", metavar="NAME")
    add_output_options(describe)
    describe.set_defaults(run=reporting_errors(_describe))

    for action, help_text in (("pause", "stop a connector's tasks (they keep their checkpoints)"),
                              ("resume", "run a paused connector's tasks again from their checkpoints"),
                              ("delete", "stop a connector for good and forget its progress")):
        parser = actions.add_parser(action, help=help_text)
        add_client_options(parser)
        parser.add_argument("name")
        parser.set_defaults(run=reporting_errors(_alter), action=action)


def settings_from_toml(text: str) -> dict[str, str]:
    """A TOML document as flat connector settings: tables become dotted prefixes, values strings.

    ``[source]\\nbootstrap = "a:9393"`` gives ``source.bootstrap = a:9393``; booleans are
    ``true``/``false`` and arrays of names are joined with commas (``topics = ["a", "b"]``).
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"the config file is not TOML: {error}") from None
    settings: dict[str, str] = {}
    _flatten(document, "", settings)
    return settings


def _flatten(table: Mapping[str, Any], prefix: str, into: dict[str, str]) -> None:
    for key, value in table.items():
        name = prefix + key
        if isinstance(value, Mapping):
            _flatten(value, name + ".", into)
        elif isinstance(value, bool):
            into[name] = "true" if value else "false"
        elif isinstance(value, list):
            if any(isinstance(item, (Mapping, list)) for item in value):
                raise UsageError(f"config key {name!r}: a list may hold only plain values")
            into[name] = ",".join(str(item) for item in value)
        elif isinstance(value, (str, int, float)):
            into[name] = str(value)
        else:  # dates and times: no connector setting takes one
            raise UsageError(f"config key {name!r}: {type(value).__name__} values are not settings")


def _create(arguments: argparse.Namespace) -> int:
    settings: dict[str, str] = {}
    if arguments.config_file:
        with open(arguments.config_file, encoding="utf-8") as file:
            settings.update(settings_from_toml(file.read()))
    settings.update(parse_key_values(arguments.settings, "a setting"))
    if not settings:
        raise UsageError("a connector needs settings: --config-file FILE.toml and/or KEY=VALUE (type=... at least)")
    with admin_client(arguments) as admin:
        admin.create_connector(arguments.name, settings)
    print(f"created connector {arguments.name!r}")
    return 0


def _alter(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        admin.alter_connector(arguments.name, arguments.action)
    print(f"{_DONE[arguments.action]} connector {arguments.name!r}")
    return 0


def summary(connector: ConnectorDescription) -> dict[str, Any]:
    """One row of ``connectors list``: the connector and its tasks' totals."""
    tasks = connector.tasks
    return {
        "name": connector.name, "type": connector.type, "state": connector.target_state.value, "tasks": len(tasks),
        "running": sum(1 for task in tasks if task.state.value == "running"),
        "records_total": sum(task.metrics.records_total for task in tasks),
        "records_per_second": round(sum(task.metrics.records_per_second for task in tasks), 1),
        "lag_records": sum(max(task.metrics.lag_records, 0) for task in tasks),
        "errors_total": sum(task.metrics.errors_total for task in tasks),
    }


def _list(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        records = [summary(connector) for connector in admin.describe_connectors()]
    emit(arguments, {"connectors": records},
         [Table(columns=CONNECTOR_COLUMNS, records=records, empty="no connectors")])
    return 0


def _describe(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        connectors = admin.describe_connectors(arguments.names)
    documents = [connector.as_document() for connector in connectors]
    tasks = [{"connector": connector.name, **task.as_document()} for connector in connectors
             for task in connector.tasks]
    configs = [{"connector": connector.name, "key": key, "value": value} for connector in connectors
               for key, value in sorted(connector.config.items())]
    emit(arguments, {"connectors": documents},
         [Table(columns=TASK_COLUMNS, records=tasks, title="tasks", empty="no tasks"),
          Table(columns=CONFIG_COLUMNS, records=configs, title="settings")])
    return 0
