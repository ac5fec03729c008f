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


def test_the_wheel_ships_the_console(tmp_path) -> None:
    """The console's static files are package data: a built wheel holds them (no build step to run the broker)."""
    import sys
    import zipfile
    from pathlib import Path

    repository = Path(__file__).resolve().parents[2]
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path), str(repository)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("mqbroker-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in ("index.html", "app.js", "pipelines.js", "charts.js", "style.css"):
        assert f"mqbroker/ops/static/{asset}" in names
