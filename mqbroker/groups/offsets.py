"""Committed offsets: the ``__consumer_offsets`` record format and the store replayed from it.

The compacted topic holds two kinds of record, told apart by the key's leading int16 (Kafka's
layout, simplified; all integers big-endian, strings as int32 length + UTF-8, -1 for none)::

    offset key     1 | group | topic | partition int32
    offset value   3 | offset int64 | leader epoch int32 (-1: none) | metadata | commit timestamp int64
    group key      2 | group
    group value    1 | protocol type | generation int32 | assignor | state timestamp int64 |
                   members: count int32, each: member id | instance id (nullable) | client id |
                   client host | session timeout int32 | rebalance timeout int32 |
                   topics (count, strings) | assignment (count, topic + partition int32)

A record with no value is a tombstone: compaction removes the key and replay forgets it. The
broker appends these key/value pairs as ordinary records with the storage batch encoder;
``OffsetStore.replay`` rebuilds the coordinator's cache from them on start or takeover.
Offsets committed inside a transaction (TxnOffsetCommit) are appended in that producer's
transactional batch and stay pending until its COMMIT marker (then they apply) or ABORT marker
(then they are dropped): replay sees the same, as records carrying their ``producer_id`` and
markers carrying ``committed``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from mqbroker.errors import CorruptMessageError
from mqbroker.groups.model import TopicPartition
from mqbroker.records.fields import FieldReader, FieldWriter

OFFSET_KEY_TYPE = 1
GROUP_KEY_TYPE = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 1
NO_LEADER_EPOCH = -1



@dataclass(frozen=True, slots=True, kw_only=True)
class CommittedOffset:
    """A committed position: the next offset to read, the client's metadata and when it was committed."""

    offset: int
    metadata: str = ""
    commit_timestamp_ms: int
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadata:
    """One member as persisted with its group, so a new coordinator can restore it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadata:
    """A group's membership after a completed rebalance."""

    protocol_type: str
    generation_id: int
    assignor: str
    state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetKey:
    """Key of an offset record."""

    group_id: str
    topic_partition: TopicPartition


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupKey:
    """Key of a group-metadata record."""

    group_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetsRecord:
    """One record of ``__consumer_offsets`` as the broker appends it; ``value`` None is a tombstone.

    In a transaction's batch ``producer_id`` names its producer (-1 otherwise). A transaction
    marker is read as a record too: ``committed`` True or False, no key.
    """

    key: bytes
    value: bytes | None
    #: Where it was read from the log (-1: built for an append).
    offset: int = -1
    producer_id: int = -1
    committed: bool | None = None


def _reader(data: bytes, what: str) -> FieldReader:
    """A reader whose garbage is a ``CorruptMessageError`` naming ``__consumer_offsets``."""
    return FieldReader(data, f"{what} in __consumer_offsets", CorruptMessageError)


def offset_key(group_id: str, topic_partition: TopicPartition) -> bytes:
    """The record key of one committed offset."""
    writer = FieldWriter().int16(OFFSET_KEY_TYPE).string(group_id).string(topic_partition.topic)
    return bytes(writer.int32(topic_partition.partition).buffer)


def group_key(group_id: str) -> bytes:
    """The record key of a group's metadata."""
    return bytes(FieldWriter().int16(GROUP_KEY_TYPE).string(group_id).buffer)


def offset_commit_record(group_id: str, topic_partition: TopicPartition, committed: CommittedOffset) -> OffsetsRecord:
    """The record that commits ``committed`` for one partition of a group."""
    epoch = NO_LEADER_EPOCH if committed.leader_epoch is None else committed.leader_epoch
    writer = FieldWriter().int16(OFFSET_VALUE_VERSION).int64(committed.offset).int32(epoch)
    writer.string(committed.metadata).int64(committed.commit_timestamp_ms)
    return OffsetsRecord(key=offset_key(group_id, topic_partition), value=bytes(writer.buffer))


def group_metadata_record(group_id: str, metadata: GroupMetadata) -> OffsetsRecord:
    """The record that persists a group's membership and assignment."""
    writer = FieldWriter().int16(GROUP_VALUE_VERSION).string(metadata.protocol_type).int32(metadata.generation_id)
    writer.string(metadata.assignor).int64(metadata.state_timestamp_ms).int32(len(metadata.members))
    for member in metadata.members:
        writer.string(member.member_id).string(member.group_instance_id).string(member.client_id)
        writer.string(member.client_host).int32(member.session_timeout_ms).int32(member.rebalance_timeout_ms)
        writer.int32(len(member.topics))
        for topic in member.topics:
            writer.string(topic)
        writer.int32(len(member.assignment))
        for topic_partition in member.assignment:
            writer.string(topic_partition.topic).int32(topic_partition.partition)
    return OffsetsRecord(key=group_key(group_id), value=bytes(writer.buffer))


def tombstone(key: bytes) -> OffsetsRecord:
    """The record that deletes ``key`` (an offset or a group)."""
    return OffsetsRecord(key=key, value=None)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    """Parse a record key; garbage raises CorruptMessageError."""
    reader = _reader(data, "key")
    key_type = reader.int16()
    key: OffsetKey | GroupKey
    if key_type == OFFSET_KEY_TYPE:
        group_id, topic, partition = reader.string(), reader.string(), reader.int32()
        key = OffsetKey(group_id=group_id, topic_partition=TopicPartition(topic, partition))
    elif key_type == GROUP_KEY_TYPE:
        key = GroupKey(group_id=reader.string())
    else:
        raise reader.fail(f"key type {key_type} is unknown")
    reader.done()
    return key


def decode_offset_value(data: bytes) -> CommittedOffset:
    """Parse an offset record's value; garbage raises CorruptMessageError."""
    reader = _reader(data, "offset value")
    reader.version(OFFSET_VALUE_VERSION)
    offset, epoch, metadata, timestamp_ms = reader.int64(), reader.int32(), reader.string(), reader.int64()
    reader.done()
    leader_epoch = None if epoch == NO_LEADER_EPOCH else epoch
    return CommittedOffset(offset=offset, metadata=metadata, commit_timestamp_ms=timestamp_ms, leader_epoch=leader_epoch)


def decode_group_value(data: bytes) -> GroupMetadata:
    """Parse a group-metadata record's value; garbage raises CorruptMessageError."""
    reader = _reader(data, "group value")
    reader.version(GROUP_VALUE_VERSION)
    protocol_type, generation_id, assignor = reader.string(), reader.int32(), reader.string()
    state_timestamp_ms = reader.int64()
    members = tuple(_read_member(reader) for _ in range(reader.count()))
    reader.done()
    return GroupMetadata(
        protocol_type=protocol_type,
        generation_id=generation_id,
        assignor=assignor,
        state_timestamp_ms=state_timestamp_ms,
        members=members,
    )


def _read_member(reader: FieldReader) -> MemberMetadata:
    """One member of a group value."""
    member_id, instance_id = reader.string(), reader.nullable_string()
    client_id, client_host = reader.string(), reader.string()
    session_timeout_ms, rebalance_timeout_ms = reader.int32(), reader.int32()
    topics = tuple(reader.string() for _ in range(reader.count()))
    assignment = tuple(TopicPartition(reader.string(), reader.int32()) for _ in range(reader.count()))
    return MemberMetadata(
        member_id=member_id,
        group_instance_id=instance_id,
        client_id=client_id,
        client_host=client_host,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        topics=topics,
        assignment=assignment,
    )


class OffsetStore:
    """The coordinator's cache of ``__consumer_offsets``: the newest value per key, tombstones applied."""

    def __init__(self) -> None:
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._groups: dict[str, GroupMetadata] = {}
        #: Producer id -> offset records of its open transaction (applied on COMMIT, dropped on ABORT).
        self._pending: dict[int, list[OffsetsRecord]] = {}

    @classmethod
    def replay(
        cls, records: Iterable[OffsetsRecord], skipped: Callable[[OffsetsRecord, CorruptMessageError], None] | None = None
    ) -> OffsetStore:
        """Rebuild the store from the topic's records in log order; a record that does not decode goes to
        ``skipped`` (which counts and logs it) and the replay goes on, or, without ``skipped``, raises."""
        store = cls()
        for record in records:
            try:
                store.apply(record)
            except CorruptMessageError as error:
                if skipped is None:
                    raise
                skipped(record, error)
        return store

    def apply(self, record: OffsetsRecord) -> None:
        """Take one record (after it is durable, or while replaying); garbage raises CorruptMessageError."""
        if record.committed is not None:
            self.end_transaction(record.producer_id, record.committed)
            return
        if record.producer_id >= 0:
            self.add_pending(record.producer_id, [record])
            return
        key = decode_key(record.key)
        if isinstance(key, OffsetKey):
            offsets = self._offsets.setdefault(key.group_id, {})
            if record.value is None:
                offsets.pop(key.topic_partition, None)
                if not offsets:
                    del self._offsets[key.group_id]
            else:
                offsets[key.topic_partition] = decode_offset_value(record.value)
        elif record.value is None:
            self._groups.pop(key.group_id, None)
        else:
            self._groups[key.group_id] = decode_group_value(record.value)

    def add_pending(self, producer_id: int, records: Iterable[OffsetsRecord]) -> None:
        """Offsets committed in ``producer_id``'s transaction: kept aside until it ends."""
        for record in records:
            if not isinstance(decode_key(record.key), OffsetKey) or record.value is None:
                raise CorruptMessageError("a transaction may only commit offsets, not group metadata or tombstones")
            decode_offset_value(record.value)
            self._pending.setdefault(producer_id, []).append(
                OffsetsRecord(key=record.key, value=record.value))

    def end_transaction(self, producer_id: int, committed: bool) -> None:
        """``producer_id``'s transaction ended: its offsets apply (committed) or go."""
        for record in self._pending.pop(producer_id, []):
            if committed:
                self.apply(record)

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions of ``group_id`` with offsets waiting for a transaction to end."""
        pending = set()
        for records in self._pending.values():
            for record in records:
                key = decode_key(record.key)
                if isinstance(key, OffsetKey) and key.group_id == group_id:
                    pending.add(key.topic_partition)
        return pending

    def committed(self, group_id: str, topic_partition: TopicPartition) -> CommittedOffset | None:
        """The committed offset of one partition, if any."""
        return self._offsets.get(group_id, {}).get(topic_partition)

    def offsets(self, group_id: str) -> Mapping[TopicPartition, CommittedOffset]:
        """Every committed offset of a group."""
        return dict(self._offsets.get(group_id, {}))

    def group_metadata(self, group_id: str) -> GroupMetadata | None:
        """The last persisted membership of a group, if any."""
        return self._groups.get(group_id)

    def group_ids(self) -> set[str]:
        """Groups that have offsets or persisted metadata."""
        return set(self._offsets) | set(self._groups)

    def delete_group(self, group_id: str) -> list[OffsetsRecord]:
        """Forget a group; returns the tombstones that delete it from the topic."""
        records = [tombstone(offset_key(group_id, tp)) for tp in sorted(self._offsets.get(group_id, {}))]
        if group_id in self._groups:
            records.append(tombstone(group_key(group_id)))
        for record in records:
            self.apply(record)
        return records

    def delete_offsets(self, group_id: str, partitions: Collection[TopicPartition]) -> list[OffsetsRecord]:
        """Forget some committed offsets of a group; returns their tombstones (none for a partition without one)."""
        committed = self._offsets.get(group_id, {})
        records = [tombstone(offset_key(group_id, tp)) for tp in sorted(set(partitions)) if tp in committed]
        for record in records:
            self.apply(record)
        return records

    def expire(
        self,
        *,
        now_ms: int,
        retention_ms: int,
        empty_since_ms: Mapping[str, int],
        active_group_ids: Collection[str],
    ) -> list[OffsetsRecord]:
        """Drop offsets past retention and return their tombstones.

        A group with members keeps its offsets. An empty group loses them all ``retention_ms``
        after it became empty; offsets committed outside any group (no membership state) expire
        one by one, ``retention_ms`` after their own commit.
        """
        records = []
        for group_id in sorted(self._offsets):
            if group_id in active_group_ids:
                continue
            empty_since = empty_since_ms.get(group_id)
            for topic_partition, committed in sorted(self._offsets[group_id].items()):
                since = committed.commit_timestamp_ms if empty_since is None else empty_since
                if now_ms >= since + retention_ms:
                    records.append(tombstone(offset_key(group_id, topic_partition)))
        for record in records:
            self.apply(record)
        return records
