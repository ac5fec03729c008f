# -*- test-case-name: tests.unit.storage.test_producer_snapshots -*-
"""The producer-state snapshot files of one partition directory: `<log end offset>.snapshot`.

A snapshot holds the idempotent-producer table as it stood at its offset; it is written
atomically, the newest ``SNAPSHOTS_KEPT`` are kept, and those past a truncation point are
removed. Opening a log loads the newest snapshot at or below the log end that decodes and
replays the batch headers after it, so a missing or damaged snapshot only costs a longer replay.
A snapshot is taken at the log end, which need not be durable yet: after a power loss took the
tail it describes, opening the log deletes it, or it would describe other batches once the log
grows back past its offset.
"""

from __future__ import annotations

import os

from mqbroker.storage import checkpoint, fs
from mqbroker.storage.errors import CorruptFileError
from mqbroker.storage.producers import ProducerStates
from mqbroker.storage.segment import Segment, file_name

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_KEPT = 2


def snapshot_offsets(directory: str) -> list[int]:
    """Offsets of the snapshots in ``directory``, ascending."""
    return sorted(
        int(name[: -len(SNAPSHOT_SUFFIX)]) for name in os.listdir(directory) if name.endswith(SNAPSHOT_SUFFIX)
    )


def write_snapshot(directory: str, end_offset: int, data: bytes) -> None:
    """Write the table ``data`` as the snapshot at ``end_offset`` and drop all but the newest few."""
    checkpoint.write_atomically(os.path.join(directory, file_name(end_offset, SNAPSHOT_SUFFIX)), data)
    for stale in snapshot_offsets(directory)[:-SNAPSHOTS_KEPT]:
        fs.unlink(os.path.join(directory, file_name(stale, SNAPSHOT_SUFFIX)))


def remove_snapshots_after(directory: str, offset: int) -> bool:
    """Delete the snapshots past ``offset`` (the log was truncated there); True if there were any."""
    removed = False
    for snapshot in snapshot_offsets(directory):
        if snapshot > offset:
            fs.unlink(os.path.join(directory, file_name(snapshot, SNAPSHOT_SUFFIX)))
            removed = True
    return removed


def load_producers(directory: str, segments: list[Segment], end_offset: int) -> ProducerStates:
    """The newest usable snapshot at or below ``end_offset``, plus the batch headers after it."""
    states, start_offset = ProducerStates(), segments[0].base_offset
    for snapshot in reversed(snapshot_offsets(directory)):
        if snapshot > end_offset:
            continue
        with open(os.path.join(directory, file_name(snapshot, SNAPSHOT_SUFFIX)), "rb") as file:
            try:
                states, start_offset = ProducerStates.from_bytes(file.read()), snapshot
                break
            except CorruptFileError:
                continue  # an older snapshot, or a full replay, rebuilds the same state
    for slot, segment in enumerate(segments):
        if slot + 1 < len(segments) and segments[slot + 1].base_offset <= start_offset:
            continue  # decided by base offsets alone, so a clean start leaves old indexes unread
        found = segment.position_of(start_offset)
        if found is None:
            continue
        for _, header in segment.scan(found[0], segment.size_bytes, verify=False):
            if header.base_offset >= start_offset:
                states.replay(header)
    return states
