"""The installed package provides the twistd plugin and the console script, seen from outside the repo."""

import os
import subprocess

from tests.integration.brokerprocess import TWISTD


def _run_outside_repository(tmp_path, *command: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=environment, timeout=120)


def test_twistd_help_lists_the_mqbroker_plugin(tmp_path) -> None:
    result = _run_outside_repository(tmp_path, *TWISTD, "--help")
    assert result.returncode == 0, result.stderr
    assert "mqbroker" in result.stdout


def test_twistd_mqbroker_help_lists_the_broker_options(tmp_path) -> None:
    result = _run_outside_repository(tmp_path, *TWISTD, "mqbroker", "--help")
    assert result.returncode == 0, result.stderr
    for option in ("--data-dir", "--native-port", "--controller-quorum", "--set"):
        assert option in result.stdout


def test_console_script_is_installed(tmp_path) -> None:
    result = _run_outside_repository(tmp_path, "mqbroker", "--help")
    assert result.returncode == 0, result.stderr
    for command in ("serve", "topics", "produce", "consume", "bench"):
        assert command in result.stdout
