"""Rebuilding a state partition's share groups from ``__share_group_state`` (a new leader, or a restart).

The partition is read up to its high watermark: the last group definitions and region snapshots
are kept in memory (a few per share partition), and the delay entries, which may be millions,
stream straight into a fresh on-disk ``DelayIndex`` (without their bytes: those are read from the
log when each is due). A delay entry counts only if the region agrees the record left it: its
offset lies below the region's start or in one of its done runs. A write split over several
batches puts delay entries before the snapshot, so a crash between them leaves entries the
region does not confirm, and the region reads those records again. A record that does not decode
is logged and skipped: the rest of the state still loads.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Iterator

from twisted.logger import Logger

from mqbroker.errors import CorruptMessageError
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
from mqbroker.shares.delay_index import DelayIndex, IndexedDelay
from mqbroker.shares.partition_snapshot import PartitionSnapshot
from mqbroker.shares.state_records import (
    STATE_TOPIC,
    GroupDefinition,
    GroupKey,
    PartitionKey,
    decode_delay_value,
    decode_group_value,
    decode_key,
    decode_partition_value,
)
from mqbroker.storage.log import PartitionLog

#: Bytes read per step of the replay.
_REPLAY_READ_BYTES = 4 * 1024 * 1024
#: Delay entries inserted into the index per transaction while replaying.
_INDEX_ROWS_PER_INSERT = 10_000

log = Logger()


@dataclasses.dataclass(slots=True, kw_only=True)
class ReplayedState:
    """What a state partition holds: group definitions, region snapshots, and the index ids of their partitions."""

    definitions: dict[str, GroupDefinition]
    snapshots: dict[PartitionKey, PartitionSnapshot]
    index_ids: dict[PartitionKey, int]
    skipped_records: int = 0


def _records(partition_log: PartitionLog, end_offset: int) -> Iterator[tuple[bytes, bytes | None]]:
    """Every (key, value) of the log below ``end_offset``; batches that do not decode are logged and skipped."""
    offset = partition_log.log_start_offset
    end = min(end_offset, partition_log.log_end_offset)
    while offset < end:
        read = partition_log.read(offset, _REPLAY_READ_BYTES, max_offset=end)
        if not read.records:
            return
        for position, header in iter_batches(read.records, check=False):
            if header.base_offset >= end:
                return
            offset = header.next_offset
            if header.is_control:
                continue
            try:
                records = decode_records(read.records[position : position + header.size_bytes])
            except CorruptRecordError as error:
                log.warn("{topic}: batch at offsets {first}..{last} does not decode and is skipped: {error}",
                         topic=STATE_TOPIC, first=header.base_offset, last=header.last_offset, error=error)
                continue
            for record in records:
                if record.key is not None:
                    yield record.key, record.value


def replay_state(partition_log: PartitionLog, end_offset: int, index: DelayIndex) -> ReplayedState:
    """Read a state partition below ``end_offset`` into memory and ``index``."""
    state = ReplayedState(definitions={}, snapshots={}, index_ids={})
    changes: list[IndexedDelay | tuple[int, int]] = []  # inserts and (index id, offset) removals, in log order
    for raw_key, value in _records(partition_log, end_offset):
        try:
            key = decode_key(raw_key)
            if isinstance(key, GroupKey):
                _apply_group(state, key, value)
            elif isinstance(key, PartitionKey):
                _index_id(state, key)
                if value is None:
                    state.snapshots.pop(key, None)
                else:
                    state.snapshots[key] = decode_partition_value(value)
            else:
                index_id = _index_id(state, PartitionKey(key.group_id, key.topic, key.partition))
                if value is None:
                    changes.append((index_id, key.offset))
                else:
                    entry = decode_delay_value(value, key.offset)
                    changes.append(IndexedDelay(index_id, key.offset, entry.deliver_at_ms, entry.delivery_count, None))
        except CorruptMessageError as error:
            state.skipped_records += 1
            log.warn("{topic}: a record does not decode and is skipped: {error}", topic=STATE_TOPIC, error=error)
            continue
        if len(changes) >= _INDEX_ROWS_PER_INSERT:
            _flush(index, changes)
    _flush(index, changes)
    _drop_unconfirmed(state, index)
    return state


def _apply_group(state: ReplayedState, key: GroupKey, value: bytes | None) -> None:
    if value is None:
        state.definitions.pop(key.group_id, None)
    else:
        state.definitions[key.group_id] = decode_group_value(value)


def _index_id(state: ReplayedState, key: PartitionKey) -> int:
    return state.index_ids.setdefault(key, len(state.index_ids) + 1)


def _flush(index: DelayIndex, changes: list[IndexedDelay | tuple[int, int]]) -> None:
    """Apply buffered index changes in log order, each run of inserts or removals at once."""
    for is_insert, run in itertools.groupby(changes, key=lambda change: isinstance(change, IndexedDelay)):
        if is_insert:
            index.add(run)  # type: ignore[arg-type]
        else:
            index.remove(run)  # type: ignore[arg-type]
    changes.clear()


def _drop_unconfirmed(state: ReplayedState, index: DelayIndex) -> None:
    """Delete index entries of deleted groups and those their region does not confirm."""
    for key, index_id in state.index_ids.items():
        snapshot = state.snapshots.get(key)
        if key.group_id not in state.definitions or snapshot is None:
            index.remove_partition(index_id)
            continue
        done_firsts = [run.first for run in snapshot.runs if run.done]
        done_runs = [run for run in snapshot.runs if run.done]
        unconfirmed = []
        for offset in index.offsets_from(index_id, snapshot.start_offset):
            slot = bisect.bisect_right(done_firsts, offset) - 1
            if slot < 0 or offset > done_runs[slot].last:
                unconfirmed.append((index_id, offset))
        index.remove(unconfirmed)
