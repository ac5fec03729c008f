"""The Raft log's file storage through simulated power losses.

A seeded workload saves what a node's ``Ready`` values would (entries appended and overwritten
by a new leader, votes in new terms, installed snapshots) and compacts, mirrored on a
``MemoryRaftStorage`` as the reference. Power is cut at a random file-system call; after the
power loss ``FileRaftStorage.open`` must succeed, the term and vote must be those of the last
completed save (or of the one cut short), and every entry a completed save stored must be
there unless the interrupted one replaced it. A failure names its seed (rerun with
``POWER_LOSS_SEED=<seed>``).
"""

from __future__ import annotations

import copy
import os
import random

import pytest

from mqbroker.raft.memory_storage import MemoryRaftStorage
from mqbroker.raft.messages import Configuration, Entry, HardState, Snapshot, SnapshotMetadata
from mqbroker.raft.storage import FileRaftStorage
from tests.powerloss import PowerCut, power_loss_disks, power_loss_seeds

VOTERS = Configuration(voters=frozenset({1, 2, 3}))
ROUNDS = 15
OPERATIONS_PER_ROUND = 25


class RaftStorageWorkload:
    """Ready-like saves and compactions on a file storage and, in step, on a memory reference."""

    def __init__(self, chooser: random.Random) -> None:
        self.chooser = chooser
        self.reference = MemoryRaftStorage(VOTERS)
        self.serial = 0

    def operation(self) -> tuple[str, tuple[object, ...]]:
        """The next call to make: ("save", (hard state, entries, snapshot)) or ("compact", (snapshot,))."""
        reference, chooser = self.reference, self.chooser
        hard_state = reference.hard_state()
        first, last = reference.first_index(), reference.last_index()
        choice = chooser.random()
        if choice < 0.5:  # a leader's new entries
            return "save", (None, self._entries(last + 1, chooser.randint(1, 4), hard_state.term), None)
        if choice < 0.65 and last >= first:  # a new leader overwrites a suffix, in a newer term
            term = hard_state.term + 1
            start = chooser.randint(first, last)
            return "save", (HardState(term=term, vote=2, commit=0), self._entries(start, chooser.randint(1, 3), term), None)
        if choice < 0.8:  # a vote in a newer term
            return "save", (HardState(term=hard_state.term + 1, vote=chooser.randint(1, 3), commit=0), [], None)
        if choice < 0.9 and last >= first:  # the application snapshots what it applied
            index = chooser.randint(first, last)
            return "compact", (self._snapshot(index, reference.term(index)),)
        snapshot = self._snapshot(last + chooser.randint(1, 5), max(hard_state.term, 1))  # a lagging follower
        return "save", (HardState(term=max(hard_state.term, 1), vote=hard_state.vote, commit=0), [], snapshot)

    def _entries(self, start: int, count: int, term: int) -> list[Entry]:
        self.serial += 1
        return [Entry(term=term, index=index, data=b"%d-%d" % (self.serial, index)) for index in range(start, start + count)]

    def _snapshot(self, index: int, term: int) -> Snapshot:
        return Snapshot(metadata=SnapshotMetadata(index=index, term=term, configuration=VOTERS), data=b"state-%d" % index)


def _apply(storage: MemoryRaftStorage | FileRaftStorage, operation: tuple[str, tuple[object, ...]]) -> None:
    name, arguments = operation
    getattr(storage, name)(*arguments)


def _entries_of(storage: MemoryRaftStorage | FileRaftStorage) -> dict[int, Entry]:
    return {entry.index: entry for entry in storage.entries(storage.first_index(), storage.last_index() + 1)}


def check_recovered(recovered: FileRaftStorage, before: MemoryRaftStorage, after: MemoryRaftStorage) -> None:
    """What survives is the last completed save plus, perhaps, some of the one the power cut interrupted."""
    term_vote = (recovered.hard_state().term, recovered.hard_state().vote)
    allowed = {(state.hard_state().term, state.hard_state().vote) for state in (before, after)}
    assert term_vote in allowed, f"term and vote {term_vote}, expected one of {allowed}"
    assert recovered.snapshot() in (before.snapshot(), after.snapshot()), "a snapshot that was never saved"
    snapshot_index = recovered.snapshot().metadata.index
    old, new, stored = _entries_of(before), _entries_of(after), _entries_of(recovered)
    for index, entry in stored.items():
        assert entry in (old.get(index), new.get(index)), f"entry {index} was never saved: {entry}"
    for index, entry in old.items():
        if index > snapshot_index and new.get(index) == entry:
            assert stored.get(index) == entry, f"entry {index}, stored by a completed save, is gone or changed"


def run_power_losses(disk_root: str, seed: int, rounds: int) -> None:
    """``rounds`` power losses in a Raft storage workload; raises on a broken promise.

    The storage's directory is created inside the disk, as a node's first start does.
    """
    chooser = random.Random(seed)
    workload = RaftStorageWorkload(chooser)
    bootstrap = Snapshot(metadata=SnapshotMetadata(configuration=VOTERS))
    directory = os.path.join(disk_root, "controller", "raft")
    with power_loss_disks(disk_root) as (disk,):
        storage = FileRaftStorage.open(directory, bootstrap=bootstrap)
        for _ in range(rounds):
            disk.cut_power_after(chooser.randint(1, 3 * OPERATIONS_PER_ROUND))
            before = after = workload.reference
            try:
                for _ in range(OPERATIONS_PER_ROUND):
                    operation = workload.operation()
                    before, after = workload.reference, copy.deepcopy(workload.reference)
                    _apply(after, operation)
                    _apply(storage, operation)
                    workload.reference = before = after
            except PowerCut:
                pass
            disk.crash(chooser, lose_everything=chooser.random() < 0.2)
            storage = FileRaftStorage.open(directory, bootstrap=bootstrap)
            check_recovered(storage, before, after)
            workload.reference = _reference_of(storage)


def _reference_of(storage: FileRaftStorage) -> MemoryRaftStorage:
    """A memory storage holding what ``storage`` recovered: the workload goes on from there."""
    reference = MemoryRaftStorage(VOTERS)
    reference.save(storage.hard_state(), [], storage.snapshot())
    reference.save(None, list(_entries_of(storage).values()), None)
    return reference


def _seeds(count: int) -> list[int]:
    return power_loss_seeds(20261128, count)


@pytest.mark.parametrize("seed", _seeds(5))
def test_saved_raft_state_survives_power_loss(tmp_path, seed: int) -> None:
    try:
        run_power_losses(str(tmp_path), seed, ROUNDS)
    except AssertionError as error:
        raise AssertionError(f"power-loss seed {seed}: {error}") from error


@pytest.mark.slow
@pytest.mark.parametrize("seed", _seeds(50))
def test_many_raft_storage_power_losses(tmp_path, seed: int) -> None:
    try:
        run_power_losses(str(tmp_path), seed, 4 * ROUNDS)
    except AssertionError as error:
        raise AssertionError(f"power-loss seed {seed}: {error}") from error
