"""Kill -9 a process appending with the sync policy, many times: what it was told is durable survives."""

from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from mqbroker.records.header import iter_batches, stamp
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from tests.unit.storage.logtools import payload_batch, read_all

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
SEED = 20261121
# The log grows every round and each round reopens and rereads all of it, so the cost is quadratic in the
# kill count: the default run kills 12 times, -m slow the full 50.
KILLS_SHORT, KILLS_FULL = 12, 50


def expected_batch(base_offset: int, tag: int, count: int, value_bytes: int) -> bytes:
    batch = bytearray(payload_batch(tag, record_count=count, value_bytes=value_bytes))
    stamp(batch, 0, base_offset, -1)
    return bytes(batch)


def run_child(directory: pathlib.Path, seed: int, lifetime_s: float) -> list[tuple[int, bytes]]:
    """Start the child, SIGKILL it ``lifetime_s`` after its log is open (start-up on a loaded machine takes
    longer than any lifetime), return the batches it reported durable."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.log_crash_child", str(directory), str(seed)],
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"  # the lifetime counts from an open log
    time.sleep(lifetime_s)
    child.send_signal(signal.SIGKILL)
    output, _ = child.communicate()
    assert child.returncode == -signal.SIGKILL
    whole_lines = output.split("\n")[:-1]  # a kill can cut the last line short: only newline-ended lines count
    reports = [line.split()[1:] for line in whole_lines if line.startswith("durable")]
    return [(int(base), expected_batch(*map(int, (base, tag, count, size)))) for base, tag, count, size in reports]


@pytest.mark.parametrize("kills", [KILLS_SHORT, pytest.param(KILLS_FULL, marks=pytest.mark.slow)])
def test_durable_batches_survive_repeated_sigkill(tmp_path, kills):
    chooser = random.Random(SEED)
    directory = tmp_path / "partition"
    reported: dict[int, bytes] = {}
    config = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024)
    for round_number in range(kills):
        for base, batch in run_child(directory, chooser.randrange(2**31), chooser.uniform(0.02, 0.4)):
            reported[base] = batch
        log = PartitionLog.open(str(directory), config, now_ms=0)
        stored = {next(iter_batches(batch))[1].base_offset: batch for batch in read_all(log)}  # CRCs checked
        for base, batch in reported.items():
            assert stored.get(base) == batch, f"round {round_number} (seed {SEED}): durable batch at {base} lost or changed"
        log.close()
    assert len(reported) > kills, "the children hardly reported anything durable"
    assert os.listdir(directory)
