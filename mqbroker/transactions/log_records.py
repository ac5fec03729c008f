# -*- test-case-name: tests.unit.transactions.test_log_records -*-
"""The ``__transaction_state`` record format, and the transactional ids' state replayed from it.

One record per state change of a transactional id, keyed by the id (the compacted topic keeps
the newest); all integers big-endian, strings as int32 length + UTF-8 (Kafka's layout, simplified)::

    key     version int16 (0) | transactional id
    value   version int16 (0) | producer id int64 | producer epoch int16 | timeout ms int32 |
            state int8 | partitions: count int32, each: topic | count int32 | partition int32 ... |
            last update ms int64 | transaction start ms int64 (-1: none)

A record without a value is a tombstone: the id expired and replay forgets it. Garbage raises
``CorruptMessageError``; the coordinator's state is only ever built from these records.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from mqbroker.errors import CorruptMessageError
from mqbroker.groups.model import TopicPartition
from mqbroker.records.fields import FieldReader, FieldWriter
from mqbroker.transactions.messages import TransactionState

TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
KEY_VERSION = 0
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionMetadata:
    """What the coordinator keeps, and persists, of one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    #: The partitions of the ongoing (or deciding) transaction; empty when none is.
    partitions: frozenset[TopicPartition]
    #: When the ongoing transaction began (-1: none).
    start_ms: int
    last_update_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogRecord:
    """One record of ``__transaction_state``; ``value`` None is a tombstone."""

    key: bytes
    value: bytes | None


def transaction_state_partition(transactional_id: str, partition_count: int) -> int:
    """The ``__transaction_state`` partition of a transactional id (stable across restarts)."""
    return zlib.crc32(transactional_id.encode("utf-8")) % partition_count


def _reader(data: bytes, what: str) -> FieldReader:
    return FieldReader(data, f"{what} in {TRANSACTION_STATE_TOPIC}", CorruptMessageError)


def encode_key(transactional_id: str) -> bytes:
    """The record key of a transactional id."""
    return FieldWriter().int16(KEY_VERSION).string(transactional_id).bytes()


def decode_key(data: bytes) -> str:
    """The transactional id a key names; garbage raises ``CorruptMessageError``."""
    reader = _reader(data, "key")
    reader.version(KEY_VERSION)
    transactional_id = reader.string()
    reader.done()
    return transactional_id


def metadata_record(metadata: TransactionMetadata) -> TransactionLogRecord:
    """The record that persists ``metadata``."""
    writer = FieldWriter().int16(VALUE_VERSION).int64(metadata.producer_id).int16(metadata.producer_epoch)
    writer.int32(metadata.timeout_ms).int8(metadata.state.code)
    by_topic: dict[str, list[int]] = {}
    for topic_partition in sorted(metadata.partitions):
        by_topic.setdefault(topic_partition.topic, []).append(topic_partition.partition)
    writer.int32(len(by_topic))
    for topic, numbers in by_topic.items():
        writer.string(topic).int32(len(numbers))
        for number in numbers:
            writer.int32(number)
    writer.int64(metadata.last_update_ms).int64(metadata.start_ms)
    return TransactionLogRecord(key=encode_key(metadata.transactional_id), value=writer.bytes())


def tombstone(transactional_id: str) -> TransactionLogRecord:
    """The record that forgets a transactional id."""
    return TransactionLogRecord(key=encode_key(transactional_id), value=None)


def decode_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    """The metadata a value holds; garbage raises ``CorruptMessageError``."""
    reader = _reader(data, "value")
    reader.version(VALUE_VERSION)
    producer_id, producer_epoch, timeout_ms = reader.int64(), reader.int16(), reader.int32()
    code = reader.int8()
    try:
        state = TransactionState.from_code(code)
    except ValueError as error:
        raise reader.fail(str(error)) from None
    partitions = set()
    for _ in range(reader.count()):
        topic = reader.string()
        for _ in range(reader.count()):
            partitions.add(TopicPartition(topic, reader.int32()))
    last_update_ms, start_ms = reader.int64(), reader.int64()
    reader.done()
    if producer_id < 0 or producer_epoch < 0 or timeout_ms <= 0:
        raise reader.fail(f"producer {producer_id} epoch {producer_epoch} timeout {timeout_ms} ms are impossible")
    return TransactionMetadata(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
        timeout_ms=timeout_ms, state=state, partitions=frozenset(partitions), start_ms=start_ms,
        last_update_ms=last_update_ms,
    )


def replay(records: Iterable[TransactionLogRecord]) -> dict[str, TransactionMetadata]:
    """The newest metadata of every transactional id, from a partition's records in log order."""
    state: dict[str, TransactionMetadata] = {}
    for record in records:
        transactional_id = decode_key(record.key)
        if record.value is None:
            state.pop(transactional_id, None)
        else:
            state[transactional_id] = decode_value(transactional_id, record.value)
    return state
