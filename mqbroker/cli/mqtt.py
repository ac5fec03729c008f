"""``mqbroker mqtt mapping-rules``: read, replace and reset the MQTT mapping rules (docs/mqtt.md).

The rules live in the cluster metadata; these commands go through a broker's admin HTTP API
(``--http``, the broker's ``http_port``), which any broker of the cluster answers, with HTTP basic
auth (``--username``/``--password``, a broker user) when the API asks for it.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from typing import Any

from mqbroker.cli.common import EXIT_FAILED, EXIT_OK, EXIT_UNREACHABLE, UsageError, reporting_errors
from mqbroker.cli.output import Column, Table, add_output_options, emit

DEFAULT_HTTP = "http://localhost:9394"
#: The environment variable that replaces ``DEFAULT_HTTP`` as --http's default.
HTTP_VARIABLE = "MQBROKER_HTTP"
RULES_PATH = "/api/v1/mqtt/mapping-rules"
RULE_COLUMNS = (Column("order", "order", numeric=True), Column("filter", "MQTT topic filter"),
                Column("log_topic", "log topic"))
#: How long one admin API call may take (the answer waits for the cluster metadata commit).
_TIMEOUT_S = 30


class AdminApiError(Exception):
    """The admin API refused the call (its message says why) or could not be reached."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_parser(commands: Any) -> None:
    """Register ``mqtt`` and its subcommands."""
    mqtt = commands.add_parser("mqtt", help="the MQTT front end's cluster-wide settings (mapping rules)",
                               description="MQTT settings kept in the cluster metadata; see docs/mqtt.md.")
    groups = mqtt.add_subparsers(dest="mqtt_command", metavar="WHAT", required=True)
    rules = groups.add_parser("mapping-rules", help="MQTT topic filter -> log topic rules, first match wins",
                              description="Read or change the mapping rules every broker applies.")
    actions = rules.add_subparsers(dest="mapping_command", metavar="ACTION", required=True)
    get = actions.add_parser("get", help="the rules in force and where they come from (configuration or cluster)")
    add_output_options(get)
    _add_http_options(get)
    get.set_defaults(run=reporting_errors(_reporting_api_errors(_get)))
    replace = actions.add_parser("set", help="replace the rules on every broker (their log topics are created)")
    replace.add_argument("rules", nargs="*", metavar="FILTER=LOG_TOPIC",
                         help="the rules in order, e.g. 'alarms/#=mqtt.alarms' (none: no rules, all to mqtt.messages)")
    add_output_options(replace)
    _add_http_options(replace)
    replace.set_defaults(run=reporting_errors(_reporting_api_errors(_set)))
    reset = actions.add_parser("reset", help="bring the configured rules (mqtt_mapping_rules) back on every broker")
    add_output_options(reset)
    _add_http_options(reset)
    reset.set_defaults(run=reporting_errors(_reporting_api_errors(_reset)))


def _add_http_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--http", default=os.environ.get(HTTP_VARIABLE) or DEFAULT_HTTP, metavar="URL",
                        help=f"a broker's admin API [default: ${HTTP_VARIABLE} or {DEFAULT_HTTP}]")
    parser.add_argument("--username", metavar="NAME", help="authenticate as this broker user (HTTP basic auth)")
    parser.add_argument("--password", metavar="PASSWORD", help="the user's password")
    parser.add_argument("--tls-ca", metavar="FILE", help="trust this CA (PEM) for an https:// --http")


def rules_from_arguments(items: list[str]) -> list[dict[str, str]]:
    """``["filter=log_topic", ...]`` → the rules' JSON form (the broker checks filters and topic names)."""
    rules = []
    for item in items:
        mqtt_filter, equals, log_topic = item.rpartition("=")
        if not equals or not mqtt_filter or not log_topic:
            raise UsageError(f"mapping rule {item!r} is not FILTER=LOG_TOPIC (e.g. 'alarms/#=mqtt.alarms')")
        rules.append({"filter": mqtt_filter, "log_topic": log_topic})
    return rules


def _get(arguments: argparse.Namespace) -> int:
    _show(arguments, _call(arguments, "GET"))
    return EXIT_OK


def _set(arguments: argparse.Namespace) -> int:
    _show(arguments, _call(arguments, "PUT", {"rules": rules_from_arguments(arguments.rules)}))
    return EXIT_OK


def _reset(arguments: argparse.Namespace) -> int:
    _show(arguments, _call(arguments, "DELETE"))
    return EXIT_OK


def _show(arguments: argparse.Namespace, document: dict[str, Any]) -> None:
    records = [{"order": number, **rule} for number, rule in enumerate(document["rules"], start=1)]
    records.append({"order": None, "filter": "(anything else)", "log_topic": document["default_log_topic"]})
    emit(arguments, document, [Table(columns=RULE_COLUMNS, records=records,
                                     title=f"MQTT mapping rules (from the {document['source']})")])


def _call(arguments: argparse.Namespace, method: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    url = arguments.http.rstrip("/") + RULES_PATH
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"--http {arguments.http!r} is not an http:// or https:// URL")
    request = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                     headers={"content-type": "application/json", "accept": "application/json"})
    if arguments.username is not None:
        token = base64.b64encode(f"{arguments.username}:{arguments.password or ''}".encode()).decode()
        request.add_header("authorization", f"Basic {token}")
    context = ssl.create_default_context(cafile=arguments.tls_ca) if url.startswith("https://") else None
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S, context=context) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as error:
        raise AdminApiError(_error_message(error), EXIT_FAILED) from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
        reason = getattr(error, "reason", error)
        raise AdminApiError(f"cannot reach the admin API at {arguments.http}: {reason}. Is the broker's "
                            f"http_port there? Set --http or ${HTTP_VARIABLE}.", EXIT_UNREACHABLE) from None


def _error_message(error: urllib.error.HTTPError) -> str:
    try:
        found = json.loads(error.read())["error"]
        return f"{found['message']} ({found['code']}, HTTP {error.code})"
    except (ValueError, KeyError, TypeError):
        return f"the admin API answered HTTP {error.code} {error.reason}"


def _reporting_api_errors(run: Any) -> Any:
    def wrapper(arguments: argparse.Namespace) -> int:
        try:
            return int(run(arguments))
        except AdminApiError as error:
            print(f"mqbroker: error: {error}", file=sys.stderr)
            return error.exit_code

    return wrapper
