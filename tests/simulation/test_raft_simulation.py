"""Seeded fault-injecting simulation of a Raft cluster (see raft_simulator.py for what is checked).

A failure names its seed; ``MQBROKER_RAFT_SEED=<seed> pytest tests/simulation`` replays it alone.
"""

from __future__ import annotations

import itertools
import os
import pathlib
import random

import pytest

from mqbroker.raft.log import IRaftStorage
from mqbroker.raft.messages import Configuration, Snapshot, SnapshotMetadata
from mqbroker.raft.storage import FileRaftStorage
from mqbroker.storage import fs
from tests.powerloss import Disk, PowerLossFileSystem
from tests.simulation.raft_simulator import run_schedule

#: Short schedules in the default run and in -m slow (seeds 0..N-1: the short run is a prefix of the long).
SCHEDULES_SHORT, SCHEDULES_FULL = 500, 2000
SCHEDULE_STEPS = 200


def _seeds(count: int) -> range | list[int]:
    replay = os.environ.get("MQBROKER_RAFT_SEED")
    return [int(replay)] if replay else range(count)


@pytest.mark.parametrize("schedules", [SCHEDULES_SHORT, pytest.param(SCHEDULES_FULL, marks=pytest.mark.slow)])
def test_short_schedules_keep_every_invariant_and_recover(schedules: int) -> None:
    """Hundreds (thousands with -m slow) of short schedules: safety after every step, liveness after healing."""
    committed = 0
    seeds = _seeds(schedules)
    for seed in seeds:
        simulation = run_schedule(seed, SCHEDULE_STEPS)
        committed += len(simulation.committed)
    assert committed > len(seeds)  # the schedules did replicate something, not just elect leaders


def test_three_node_cluster_without_spare_nodes_recovers() -> None:
    """The smallest interesting cluster, where every crash costs the quorum's slack."""
    for seed in _seeds(200):
        run_schedule(seed, SCHEDULE_STEPS, node_count=3)


def test_schedules_on_file_storage_recover_from_disk(tmp_path: pathlib.Path) -> None:
    """Every restart reopens the node's directory: recovery from the files keeps every invariant."""

    def open_storage(node_id: int, configuration: Configuration, previous: IRaftStorage | None) -> IRaftStorage:
        if isinstance(previous, FileRaftStorage):
            previous.close()
        bootstrap = Snapshot(metadata=SnapshotMetadata(configuration=configuration))
        return FileRaftStorage.open(str(tmp_path / f"seed-{seed}" / f"node-{node_id}"), bootstrap=bootstrap)

    for seed in _seeds(20):
        run_schedule(seed, SCHEDULE_STEPS, open_storage=open_storage)


def test_schedules_on_file_storage_survive_power_losses(tmp_path: pathlib.Path) -> None:
    """Every restart follows a power loss of the node's disk (what no fsync covered is lost or torn):
    what each ``Ready`` was persisted as is still there, and every invariant holds."""
    file_system = PowerLossFileSystem()
    disks: dict[tuple[int, int], Disk] = {}
    power_losses = itertools.count()

    def open_storage(node_id: int, configuration: Configuration, previous: IRaftStorage | None) -> IRaftStorage:
        root = tmp_path / f"seed-{seed}" / f"node-{node_id}"
        if previous is None:
            disks[(seed, node_id)] = file_system.add_disk(str(root))
        else:
            assert isinstance(previous, FileRaftStorage)
            previous.close()
            disks[(seed, node_id)].crash(random.Random(next(power_losses)))
        bootstrap = Snapshot(metadata=SnapshotMetadata(configuration=configuration))
        return FileRaftStorage.open(str(root / "raft"), bootstrap=bootstrap)

    with fs.use(file_system):
        for seed in _seeds(20):
            run_schedule(seed, SCHEDULE_STEPS, open_storage=open_storage)


@pytest.mark.slow
def test_long_schedules_keep_every_invariant_and_recover() -> None:
    """Fewer, much longer schedules: compaction, snapshots and membership churn pile up."""
    for seed in _seeds(300):
        run_schedule(1_000_000 + seed, 3000)
