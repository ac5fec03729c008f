"""The ``__share_group_state`` record formats: share groups, their partitions' regions and their delay entries.

The compacted internal topic holds three kinds of record, told apart by the key's leading int16
(big-endian integers; strings are int16 length + UTF-8). A record without a value is a
tombstone: replay forgets the key and compaction removes it::

    group key       1 | group
    group value     1 | created ms int64 | topics: count int32, strings | configs: count int32, (key, value) strings
    partition key   2 | group | topic | partition int32
    partition value 2 | start offset int64 | end offset int64 | owners: count int32, strings |
                    runs: count int32, each first int64 | last int64 | done int8 | delivery count int16 |
                    owner int16 (index into owners, -1: not leased) | lease end ms int64
                    (version 1, still read: no owners, runs without their last two fields)
    delay key       3 | group | topic | partition int32 | offset int64
    delay value     1 | deliver-at ms int64 | delivery count int16

A group's records all go to one partition of the topic (``state_partition`` of the group id),
so one broker, that partition's leader, hosts the whole group. Every decoder raises
``CorruptMessageError`` and nothing else for bytes it did not write.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Mapping

from mqbroker.errors import CorruptMessageError
from mqbroker.shares.partition_snapshot import PartitionSnapshot, SnapshotRun
from mqbroker.shares.partition_values import DueEntry

STATE_TOPIC = "__share_group_state"
STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact"}

GROUP_KEY_TYPE = 1
PARTITION_KEY_TYPE = 2
DELAY_KEY_TYPE = 3
VALUE_VERSION = 1
#: Version 2 of the partition value stores leases (owner and end); version 1 is still read.
PARTITION_VALUE_VERSION = 2

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_RUN_V1 = struct.Struct(">qqbh")
_RUN = struct.Struct(">qqbhhq")
_REGION = struct.Struct(">hqq")
_GROUP_HEAD = struct.Struct(">hq")
_DELAY = struct.Struct(">hqh")
_DELIVERY_COUNT_MAX = 32767


def state_partition(group_id: str, partition_count: int) -> int:
    """The ``__share_group_state`` partition holding a group's records (stable across restarts)."""
    return zlib.crc32(group_id.encode("utf-8")) % partition_count


@dataclasses.dataclass(frozen=True, slots=True)
class GroupKey:
    """Key of a share group's definition."""

    group_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionKey:
    """Key of one share partition's region."""

    group_id: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True, slots=True)
class DelayKey:
    """Key of one scheduled (or due) record of a share partition."""

    group_id: str
    topic: str
    partition: int
    offset: int


StateKey = GroupKey | PartitionKey | DelayKey


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GroupDefinition:
    """A share group as created: the topics it reads and its configuration (``settings`` parses it)."""

    created_ms: int
    topics: tuple[str, ...]
    configs: Mapping[str, str]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StateRecord:
    """One record of ``__share_group_state``; ``value`` None is a tombstone."""

    key: bytes
    value: bytes | None


def _string(value: str) -> bytes:
    encoded = value.encode("utf-8")
    assert len(encoded) <= 32767, "names are checked before they are stored"
    return _INT16.pack(len(encoded)) + encoded


def encode_key(key: StateKey) -> bytes:
    """The record key of ``key``."""
    if isinstance(key, GroupKey):
        return _INT16.pack(GROUP_KEY_TYPE) + _string(key.group_id)
    head = _INT16.pack(PARTITION_KEY_TYPE if isinstance(key, PartitionKey) else DELAY_KEY_TYPE)
    body = _string(key.group_id) + _string(key.topic) + _INT32.pack(key.partition)
    return head + body + (_INT64.pack(key.offset) if isinstance(key, DelayKey) else b"")


def group_record(group_id: str, definition: GroupDefinition) -> StateRecord:
    """The record defining (or redefining) a share group."""
    parts = [_INT16.pack(VALUE_VERSION), _INT64.pack(definition.created_ms), _INT32.pack(len(definition.topics))]
    parts += [_string(topic) for topic in definition.topics]
    parts.append(_INT32.pack(len(definition.configs)))
    for name, value in sorted(definition.configs.items()):
        parts += (_string(name), _string(value))
    return StateRecord(key=encode_key(GroupKey(group_id)), value=b"".join(parts))


def partition_record(key: PartitionKey, snapshot: PartitionSnapshot) -> StateRecord:
    """The record storing a share partition's region (with its leases)."""
    owners: dict[str, int] = {}
    for run in snapshot.runs:
        if run.owner:
            owners.setdefault(run.owner, len(owners))
    assert len(owners) <= 32767, "a group has at most limits.share_group_members_max members"
    parts = [_REGION.pack(PARTITION_VALUE_VERSION, snapshot.start_offset, snapshot.end_offset),
             _INT32.pack(len(owners)), *(_string(owner) for owner in owners), _INT32.pack(len(snapshot.runs))]
    parts += [_RUN.pack(run.first, run.last, run.done, min(run.delivery_count, _DELIVERY_COUNT_MAX),
                        owners[run.owner] if run.owner else -1, run.deadline_ms if run.owner else 0)
              for run in snapshot.runs]
    return StateRecord(key=encode_key(key), value=b"".join(parts))


def delay_record(key: PartitionKey, entry: DueEntry) -> StateRecord:
    """The record keeping one scheduled record until it is done."""
    value = _DELAY.pack(VALUE_VERSION, entry.deliver_at_ms, min(entry.delivery_count, _DELIVERY_COUNT_MAX))
    return StateRecord(key=encode_key(DelayKey(key.group_id, key.topic, key.partition, entry.offset)), value=value)


def tombstone(key: StateKey) -> StateRecord:
    """The record deleting ``key``."""
    return StateRecord(key=encode_key(key), value=None)


class _Reader:
    """Reads big-endian fields of one stored key or value; any shortfall or bad field is CorruptMessageError."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = bytes(data)
        self.position = 0
        self.what = what

    def fail(self, reason: str) -> CorruptMessageError:
        return CorruptMessageError(f"corrupt {self.what} in {STATE_TOPIC} at byte {self.position}: {reason}")

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        if layout.size > len(self.data) - self.position:
            raise self.fail(f"needs {layout.size} more bytes, has {len(self.data) - self.position}")
        values = layout.unpack_from(self.data, self.position)
        self.position += layout.size
        return values

    def int32(self) -> int:
        return self.unpack(_INT32)[0]

    def count(self, element_bytes: int) -> int:
        value = self.int32()
        if not 0 <= value * element_bytes <= len(self.data) - self.position:
            raise self.fail(f"count {value} is impossible in what is left")
        return value

    def string(self) -> str:
        (length,) = self.unpack(_INT16)
        if length < 0 or length > len(self.data) - self.position:
            raise self.fail(f"string length {length} is impossible")
        raw = self.data[self.position : self.position + length]
        self.position += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(f"string is not UTF-8 ({error.reason})") from None

    def non_negative(self, value: int, name: str) -> int:
        if value < 0:
            raise self.fail(f"{name} {value} is negative")
        return value

    def done(self) -> None:
        if self.position != len(self.data):
            raise self.fail(f"{len(self.data) - self.position} trailing bytes")


def decode_key(data: bytes) -> StateKey:
    """Parse a record key."""
    reader = _Reader(data, "key")
    (key_type,) = reader.unpack(_INT16)
    key: StateKey
    if key_type == GROUP_KEY_TYPE:
        key = GroupKey(reader.string())
    elif key_type in (PARTITION_KEY_TYPE, DELAY_KEY_TYPE):
        group_id, topic = reader.string(), reader.string()
        partition = reader.non_negative(reader.int32(), "partition")
        if key_type == PARTITION_KEY_TYPE:
            key = PartitionKey(group_id, topic, partition)
        else:
            key = DelayKey(group_id, topic, partition, reader.non_negative(reader.unpack(_INT64)[0], "offset"))
    else:
        raise reader.fail(f"key type {key_type} is unknown")
    reader.done()
    return key


def _version(reader: _Reader, version: int) -> None:
    if version != VALUE_VERSION:
        raise reader.fail(f"value version {version} is not supported (expected {VALUE_VERSION})")


def decode_group_value(data: bytes) -> GroupDefinition:
    """Parse a group definition."""
    reader = _Reader(data, "group value")
    version, created_ms = reader.unpack(_GROUP_HEAD)
    _version(reader, version)
    topics = tuple(reader.string() for _ in range(reader.count(2)))
    configs = {}
    for _ in range(reader.count(4)):
        name = reader.string()
        configs[name] = reader.string()
    reader.done()
    return GroupDefinition(created_ms=created_ms, topics=topics, configs=configs)


def decode_partition_value(data: bytes) -> PartitionSnapshot:
    """Parse a share partition's region (version 1 or 2); its runs must lie in order inside ``[start, end)``."""
    reader = _Reader(data, "partition value")
    version, start, end = reader.unpack(_REGION)
    if version not in (VALUE_VERSION, PARTITION_VALUE_VERSION):
        raise reader.fail(f"value version {version} is not supported (expected 1 or {PARTITION_VALUE_VERSION})")
    if not 0 <= start <= end:
        raise reader.fail(f"region {start}..{end} is impossible")
    owners = [reader.string() for _ in range(reader.count(2))] if version == PARTITION_VALUE_VERSION else []
    layout = _RUN if version == PARTITION_VALUE_VERSION else _RUN_V1
    runs = []
    position = start
    for _ in range(reader.count(layout.size)):
        first, last, done, delivery_count, *lease = reader.unpack(layout)
        owner_index, deadline_ms = lease or (-1, 0)
        if not position <= first <= last < end or done not in (0, 1) or delivery_count < 0:
            raise reader.fail(f"run {first}..{last} (done {done}, count {delivery_count}) is impossible here")
        if not -1 <= owner_index < len(owners) or (owner_index >= 0 and (done or deadline_ms < 0)):
            raise reader.fail(f"run {first}..{last}: lease (owner {owner_index}, end {deadline_ms}) is impossible")
        owner = owners[owner_index] if owner_index >= 0 else ""
        runs.append(SnapshotRun(first, last, bool(done), delivery_count, owner, deadline_ms if owner else 0))
        position = last + 1
    reader.done()
    return PartitionSnapshot(start_offset=start, end_offset=end, runs=tuple(runs))


def decode_delay_value(data: bytes, offset: int) -> DueEntry:
    """Parse a scheduled record's delay entry (``offset`` comes from its key)."""
    reader = _Reader(data, "delay value")
    version, deliver_at_ms, delivery_count = reader.unpack(_DELAY)
    _version(reader, version)
    reader.non_negative(delivery_count, "delivery count")
    reader.done()
    return DueEntry(offset, deliver_at_ms, delivery_count)
