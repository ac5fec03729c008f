# -*- test-case-name: tests.unit.storage.test_producer_snapshots -*-
"""The producer-state snapshot files of one partition directory: `<log end offset>.snapshot`.

A snapshot holds the producer table (idempotence and open transactions) as it stood at its
offset; it is written atomically, at every checkpoint and when a segment rolls (as Kafka
does); the newest ``SNAPSHOTS_KEPT`` are kept, plus the newest at or below the active
segment's base, and those past a truncation point are removed. Opening a log loads the newest
snapshot at or below the log end that decodes and replays the batch headers after it, so a
missing or damaged snapshot only costs a longer replay. The same replay rebuilds the
aborted-transaction indexes of the segments that need it (from the first one recovery
checked, or whose `.txnindex` was missing or malformed): it starts from a snapshot at or
below that segment's base, which the roll snapshot usually is.
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


def write_snapshot(directory: str, end_offset: int, data: bytes, keep_at_or_below: int | None = None) -> None:
    """Write the table ``data`` as the snapshot at ``end_offset``; drop all but the newest few.

    The newest snapshot at or below ``keep_at_or_below`` (the active segment's base) stays too:
    an unclean restart replays from there to rebuild that segment's aborted-transaction index.
    """
    checkpoint.write_atomically(os.path.join(directory, file_name(end_offset, SNAPSHOT_SUFFIX)), data)
    offsets = snapshot_offsets(directory)
    kept = set(offsets[-SNAPSHOTS_KEPT:])
    if keep_at_or_below is not None:
        below = [offset for offset in offsets if offset <= keep_at_or_below]
        if below:
            kept.add(below[-1])
    for stale in offsets:
        if stale not in kept:
            fs.unlink(os.path.join(directory, file_name(stale, SNAPSHOT_SUFFIX)))


def remove_snapshots_after(directory: str, offset: int) -> bool:
    """Delete the snapshots past ``offset`` (the log was truncated there); True if there were any."""
    removed = False
    for snapshot in snapshot_offsets(directory):
        if snapshot > offset:
            fs.unlink(os.path.join(directory, file_name(snapshot, SNAPSHOT_SUFFIX)))
            removed = True
    return removed


def load_producers(
    directory: str,
    segments: list[Segment],
    end_offset: int,
    rebuild_from: int | None = None,
    snapshots: list[int] | None = None,
) -> ProducerStates:
    """The newest usable snapshot at or below ``end_offset``, plus the batch headers after it.

    With ``rebuild_from`` the replay starts at or below that offset and rebuilds the
    aborted-transaction index of every segment from the one holding it on (and fsyncs them).
    ``snapshots``: the snapshot offsets in ``directory`` if the caller has listed them already.
    """
    start_limit = end_offset if rebuild_from is None else min(end_offset, rebuild_from)
    states, start_offset = ProducerStates(), segments[0].base_offset
    for snapshot in reversed(snapshot_offsets(directory) if snapshots is None else snapshots):
        if snapshot > start_limit:
            continue
        with open(os.path.join(directory, file_name(snapshot, SNAPSHOT_SUFFIX)), "rb") as file:
            try:
                states, start_offset = ProducerStates.from_bytes(file.read()), snapshot
                break
            except CorruptFileError:
                continue  # an older snapshot, or a full replay, rebuilds the same state
    rebuilt = [segment for segment in segments if rebuild_from is not None and segment.base_offset >= rebuild_from]
    for segment in rebuilt:
        segment.txn_index.reset()
    for slot, segment in enumerate(segments):
        if slot + 1 < len(segments) and segments[slot + 1].base_offset <= start_offset:
            continue  # decided by base offsets alone, so a clean start leaves old indexes unread
        found = segment.position_of(start_offset)
        if found is None:
            continue
        indexing = segment in rebuilt
        for position, header in segment.scan(found[0], segment.size_bytes, verify=False):
            if header.base_offset < start_offset:
                continue
            marker = segment.read_control(position, header) if header.is_control else None
            completed = states.replay(header, marker)
            if indexing and completed is not None and completed.aborted:
                segment.txn_index.append(states.aborted_entry(completed, {}))
    for segment in rebuilt:
        segment.txn_index.write_pending()
        fs.fsync_path(segment.txn_index.path)
    return states
