"""Compaction through simulated power losses: a pass cut anywhere (mid-rewrite, in the swap, before its
checkpoint) never loses a key's newest durable record, and the log always opens and reads.

The workload is the compaction crash test's (``compaction_workload``), run in-process on the
power-loss file system; a failure names its seed (rerun with ``POWER_LOSS_SEED=<seed>``).
"""

from __future__ import annotations

import random

import pytest

from mqbroker.storage.log import PartitionLog
from tests.powerloss import PowerCut, power_loss_disks, power_loss_seeds
from tests.unit.storage.compaction_workload import CONFIG, CompactionWorkload, DurableRecord, check_log

ROUNDS = 10


def run_power_losses(directory: str, seed: int, rounds: int) -> int:
    """``rounds`` power losses at random calls of a compacting workload; return how many landed in a pass."""
    chooser = random.Random(seed)
    newest_durable: dict[bytes, tuple[int, bytes | None]] = {}
    in_pass = 0
    serial = 0
    with power_loss_disks(directory) as (disk,):
        for _ in range(rounds):
            workload = CompactionWorkload(PartitionLog.open(directory, CONFIG, now_ms=0), chooser.randrange(2**31), serial)
            progress: list[str] = []

            def durable(records: list[DurableRecord]) -> None:
                for offset, key, value in records:
                    newest_durable[key] = (offset, value)

            disk.cut_power_after(chooser.randint(1, 400))
            try:
                while True:
                    workload.round(durable, progress.append)
            except PowerCut:
                pass
            serial = workload.serial
            in_pass += bool(progress) and progress[-1] == "cleaning"
            disk.crash(chooser, lose_everything=chooser.random() < 0.2)
            check_log(directory, newest_durable)
    return in_pass


def _seeds(count: int) -> list[int]:
    return power_loss_seeds(20261127, count)


@pytest.mark.parametrize("seed", _seeds(4))
def test_compaction_cut_by_power_losses_keeps_every_key_newest_durable_record(tmp_path, seed: int) -> None:
    try:
        in_pass = run_power_losses(str(tmp_path / "partition"), seed, ROUNDS)
    except AssertionError as error:
        raise AssertionError(f"power-loss seed {seed}: {error}") from error
    assert in_pass >= 1, f"seed {seed}: no power loss landed in a compaction pass"


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(40))
def test_many_compaction_power_losses(tmp_path, seed: int) -> None:
    try:
        run_power_losses(str(tmp_path / "partition"), seed, 5 * ROUNDS)
    except AssertionError as error:
        raise AssertionError(f"power-loss seed {seed}: {error}") from error
