"""The share-group state records waiting for the next write of one ``__share_group_state`` partition:
changed group definitions, deleted groups' tombstones and the records of partitions whose state changed."""

from __future__ import annotations

from collections.abc import Mapping

from mqbroker.shares.delay_index import DelayIndex
from mqbroker.shares.group import HostedGroup
from mqbroker.shares.runtime import HostedPartition
from mqbroker.shares.state_records import GroupKey, StateRecord, group_record, tombstone


class PendingState:
    """What changed in ``groups`` since the last write; ``collect`` hands it to the ``StateWriter`` and starts afresh."""

    def __init__(self, groups: Mapping[str, HostedGroup], index: DelayIndex) -> None:
        self._groups = groups
        self._index = index
        self._dirty: set[HostedPartition] = set()
        self._deleted: list[HostedGroup] = []

    def partition_changed(self, hosted: HostedPartition) -> None:
        """``hosted`` has records to write."""
        self._dirty.add(hosted)

    def group_deleted(self, group: HostedGroup) -> None:
        """``group`` was deleted: its records become tombstones, its partitions' pending records are dropped."""
        self._deleted.append(group)
        for hosted in group.partitions.values():
            self._dirty.discard(hosted)

    def collect(self) -> list[StateRecord]:
        """Everything to write: group definitions (and deletions), then each dirty partition's records."""
        records = []
        for group_id, group in self._groups.items():
            if group.definition_changed:
                group.definition_changed = False
                records.append(group_record(group_id, group.definition))
        records += self._deletions()
        dirty, self._dirty = self._dirty, set()
        for hosted in dirty:
            records += hosted.pending_records()
        return records

    def _deletions(self) -> list[StateRecord]:
        """Tombstones for the groups deleted since the last write (each partition, its delay entries, the group)."""
        records: list[StateRecord] = []
        for group in self._deleted_groups():
            for hosted in group.partitions.values():
                records += [tombstone(key) for key in hosted.delay_keys()]
                records.append(tombstone(hosted.key))
                self._index.remove_partition(hosted.index_id)
            records.append(tombstone(GroupKey(group.group_id)))
        return records

    def _deleted_groups(self) -> list[HostedGroup]:
        deleted, self._deleted = self._deleted, []
        return deleted
