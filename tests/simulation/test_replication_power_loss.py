"""Seeded simulation of a replicated partition through power losses (see replication_simulator.py).

No acknowledged (acks=all) record is lost and the replicas never diverge, whatever subset of the
brokers loses power, whenever. A failure names its seed;
``MQBROKER_REPLICATION_SEED=<seed> pytest tests/simulation/test_replication_power_loss.py`` replays it.
"""

from __future__ import annotations

import os

import pytest

from tests.simulation.replication_simulator import run_schedule

STEPS = 300


def _seeds(count: int, first: int = 0) -> range | list[int]:
    replay = os.environ.get("MQBROKER_REPLICATION_SEED")
    return [int(replay)] if replay else range(first, first + count)


def test_acknowledged_records_survive_power_losses_and_replicas_agree(tmp_path) -> None:
    acknowledged = power_losses = 0
    for seed in _seeds(12):
        simulation = run_schedule(seed, STEPS, str(tmp_path / f"seed-{seed}"))
        acknowledged += len(simulation.acknowledged)
        power_losses += sum("power" in line for line in simulation.trace)
    assert acknowledged > 100 and power_losses > 12, (acknowledged, power_losses)


@pytest.mark.slow
def test_long_schedules_of_power_losses(tmp_path) -> None:
    for seed in _seeds(60, first=1_000_000):
        run_schedule(seed, 5 * STEPS, str(tmp_path / f"seed-{seed}"))
