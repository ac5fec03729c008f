"""Kill -9 a process that appends and compacts, many times, some kills exactly in the swap: the log stays
readable, holds only records that were written, and never loses a key's newest durable record."""

from __future__ import annotations

import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.unit.storage.compaction_workload import check_log

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
#: Kills in the default run and in -m slow (every assertion runs in both).
KILLS_SHORT, KILLS_FULL = 15, 30
SEED = 20261122


def run_child(directory: pathlib.Path, seed: int, kill_at_rename: int, lifetime_s: float) -> list[str]:
    """Start the child, SIGKILL it after ``lifetime_s`` unless it killed itself first; return its output lines."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.log_compaction_crash_child", str(directory), str(seed),
         str(kill_at_rename)],
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"  # the lifetime counts from an open log
    deadline = time.monotonic() + lifetime_s
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    output, _ = child.communicate()
    assert child.returncode == -signal.SIGKILL
    return output.split("\n")[:-1]  # a kill can cut the last line short: only newline-ended lines count


@pytest.mark.parametrize("kills", [KILLS_SHORT, pytest.param(KILLS_FULL, marks=pytest.mark.slow)])
def test_compaction_killed_at_random_moments_and_in_its_swap_loses_no_newest_record(tmp_path, kills):
    chooser = random.Random(SEED)
    directory = tmp_path / "partition"
    newest_durable: dict[bytes, tuple[int, bytes | None]] = {}
    killed_while_cleaning = 0
    for round_number in range(kills):
        kill_at_rename = chooser.randint(1, 8) if round_number % 2 else 0
        lines = run_child(directory, chooser.randrange(2**31), kill_at_rename, chooser.uniform(0.3, 1.5))
        for line in lines:
            if line.startswith("durable"):
                _, offset, key, value = line.split()
                newest_durable[key.encode()] = (int(offset), None if value == "-" else value.encode())
        progress = [line for line in lines if line in ("cleaning", "cleaned")]
        killed_while_cleaning += bool(progress) and progress[-1] == "cleaning"
        check_log(str(directory), newest_durable)
    assert len(newest_durable) == 8, "the children hardly wrote anything"
    assert killed_while_cleaning >= kills // 3, f"only {killed_while_cleaning} kills landed in a compaction pass"
