"""How a share partition's region is stored, pure: done runs, delivery counts and leases with their owners and
ends (``__share_group_state`` holds it; a new host restores it and keeps the leases)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

from mqbroker.shares.partition_values import NO_OWNER, RecordState, RunView


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotRun:
    """Offsets ``first..last`` of a stored region: done, or waiting with a delivery count.

    A waiting run with an ``owner`` is leased to that member until ``deadline_ms`` (a new host
    keeps the lease); without one it is available.
    """

    first: int
    last: int
    done: bool
    delivery_count: int
    owner: str = NO_OWNER
    deadline_ms: int = 0


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PartitionSnapshot:
    """The durable part of a region: done runs, delivery counts and leases (a new leader keeps them)."""

    start_offset: int
    end_offset: int
    runs: tuple[SnapshotRun, ...]


def snapshot_of(start_offset: int, end_offset: int, runs: Iterable[RunView]) -> PartitionSnapshot:
    """The region's runs as stored: done runs, the delivery counts of the rest, and leases with owners and ends."""
    stored: list[SnapshotRun] = []
    for run in runs:
        done = run.state is RecordState.DONE
        count = 0 if done else run.delivery_count
        leased = run.state is RecordState.ACQUIRED
        owner, deadline_ms = (run.owner, run.deadline_ms) if leased else (NO_OWNER, 0)
        if stored and (stored[-1].done, stored[-1].delivery_count, stored[-1].owner, stored[-1].deadline_ms) == (
                done, count, owner, deadline_ms):
            stored[-1] = dataclasses.replace(stored[-1], last=run.last)
        else:
            stored.append(SnapshotRun(run.first, run.last, done, count, owner, deadline_ms))
    return PartitionSnapshot(start_offset=start_offset, end_offset=end_offset, runs=tuple(stored))


def restored_runs(snapshot: PartitionSnapshot) -> Iterator[RunView]:
    """The region a snapshot stores, run by run and without gaps: leased runs keep their owners and ends, the
    offsets it does not mention are available."""
    position = snapshot.start_offset
    for run in snapshot.runs:
        if run.first > position:
            yield RunView(position, run.first - 1, RecordState.AVAILABLE, 0, NO_OWNER, 0, False)
        if run.done:
            yield RunView(run.first, run.last, RecordState.DONE, 0, NO_OWNER, 0, False)
        elif run.owner:
            yield RunView(run.first, run.last, RecordState.ACQUIRED, run.delivery_count, run.owner, run.deadline_ms,
                          False)
        else:
            yield RunView(run.first, run.last, RecordState.AVAILABLE, run.delivery_count, NO_OWNER, 0, False)
        position = run.last + 1
    if snapshot.end_offset > position:
        yield RunView(position, snapshot.end_offset - 1, RecordState.AVAILABLE, 0, NO_OWNER, 0, False)
