"""Partition logs, checkpoints, producer snapshots and epoch caches through simulated power losses.

Each round runs a seeded broker-like workload (``power_loss_workload``) on the power-loss file
system, cuts the power at a random file-system call, rebuilds the disk from what was fsynced
plus a torn part of the rest, and checks that recovery succeeds, every batch reported durable
is there, and nothing invalid comes back. A failure names its seed: rerun it with
``POWER_LOSS_SEED=<seed>``.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.powerloss import PowerCut, power_loss_disks, power_loss_seeds
from tests.unit.storage.power_loss_workload import LogWorkload

ROUNDS = 12
STEPS_PER_ROUND = 60


def run_power_losses(disk_root: str, seed: int, rounds: int, *, fsync_works: bool = True) -> None:
    """``rounds`` rounds of workload, each ended by a power loss at a random point; raises on a broken promise.

    The data directory is created inside the disk, as a broker's first start does.
    """
    chooser = random.Random(seed)
    data_dir = os.path.join(disk_root, "var", "data")
    with power_loss_disks(disk_root, fsync_works=fsync_works) as (disk,):
        workload = LogWorkload(data_dir, chooser)
        for _ in range(rounds):
            disk.cut_power_after(chooser.randint(1, 4 * STEPS_PER_ROUND))
            try:
                workload.run(STEPS_PER_ROUND)
            except PowerCut:
                workload.trace.append("power cut")
            disk.crash(chooser, lose_everything=chooser.random() < 0.2)
            try:
                workload.restart_after_power_loss()
            except AssertionError as error:
                raise AssertionError(f"{error}\nlast operations: {', '.join(workload.trace[-30:])}") from error


def _seeds(count: int) -> list[int]:
    return power_loss_seeds(20261126, count)


@pytest.mark.parametrize("seed", _seeds(6))
def test_durable_batches_survive_power_loss_and_recovery_never_fails(tmp_path, seed: int) -> None:
    try:
        run_power_losses(str(tmp_path), seed, ROUNDS)
    except AssertionError as error:
        raise AssertionError(f"power-loss seed {seed}: {error}") from error


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(60))
def test_many_power_losses(tmp_path, seed: int) -> None:
    try:
        run_power_losses(str(tmp_path), seed, 4 * ROUNDS)
    except AssertionError as error:
        raise AssertionError(f"power-loss seed {seed}: {error}") from error


def test_a_log_whose_fsync_does_nothing_is_caught(tmp_path) -> None:
    """The checks can fail: with fsync a no-op, some power loss loses a batch reported durable."""
    with pytest.raises(AssertionError, match="durable batch .* was lost|vanished"):
        for seed in range(20):
            run_power_losses(str(tmp_path / str(seed)), seed, ROUNDS, fsync_works=False)
