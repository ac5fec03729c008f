"""The options every client command shares, and the exit codes (docs/cli.md lists them)."""

from __future__ import annotations

import argparse

import pytest

from mqbroker.cli import build_parser
from mqbroker.cli.common import (
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    UsageError,
    parse_key_values,
    reporting_errors,
)
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.errors import UnknownTopicOrPartitionError


def test_bootstrap_defaults_to_the_environment_then_to_localhost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MQBROKER_BOOTSTRAP", raising=False)
    assert build_parser().parse_args(["topics", "list"]).bootstrap == "localhost:9393"
    monkeypatch.setenv("MQBROKER_BOOTSTRAP", "broker-1:9393,broker-2:9393")
    assert build_parser().parse_args(["groups", "list"]).bootstrap == "broker-1:9393,broker-2:9393"
    assert build_parser().parse_args(["topics", "list", "-b", "other:1"]).bootstrap == "other:1"


@pytest.mark.parametrize("bootstrap", ["broker-1", "broker-1:9393,broker-2", ","])
def test_a_malformed_bootstrap_is_a_usage_error(bootstrap: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["topics", "list", "--bootstrap", bootstrap])
    assert exited.value.code == EXIT_USAGE
    assert "HOST:PORT" in capsys.readouterr().err


def test_a_malformed_environment_bootstrap_is_a_usage_error_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MQBROKER_BOOTSTRAP", "no-port")
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["cluster", "describe"])
    assert exited.value.code == EXIT_USAGE


def _exit_code_of(error: Exception, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    def run(arguments: argparse.Namespace) -> int:
        raise error

    code = reporting_errors(run)(argparse.Namespace(bootstrap="a:1,b:2"))
    return code, capsys.readouterr().err


def test_each_kind_of_failure_has_its_exit_code_and_one_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, message = _exit_code_of(UsageError("--offset needs --partition"), capsys)
    assert (code, message) == (EXIT_USAGE, "mqbroker: --offset needs --partition\n")
    code, message = _exit_code_of(BrokerUnavailableError("no broker reachable: ..."), capsys)
    assert code == EXIT_UNREACHABLE and "cannot reach a broker at a:1,b:2" in message
    code, message = _exit_code_of(UnknownTopicOrPartitionError("topic 'x' does not exist"), capsys)
    assert (code, message) == (EXIT_FAILED, "mqbroker: error: topic 'x' does not exist (UNKNOWN_TOPIC_OR_PARTITION)\n")
    assert _exit_code_of(ConnectionResetError("reset"), capsys)[0] == EXIT_FAILED


def test_a_config_without_equals_sign_is_a_usage_error() -> None:
    assert parse_key_values(["a=1", "b=x=y"], "--config") == {"a": "1", "b": "x=y"}
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_key_values(["retention.ms"], "--config")
