"""The sink's write plan: which partition, in which order, in which batch, under which producer id.

Pure. Exactly-once rests on one property: a retried Spark task (or a replayed micro-batch)
plans byte-for-byte the same batch boundaries under the same producer ids and sequence
numbers as the first attempt, so the broker's idempotent-producer check answers every batch
the first attempt already appended with its original offsets and appends only the rest.

* The producer id is derived from the write identity (query id, batch id, Spark partition id),
  the target partition and a chunk number, never handed out by the broker. It lies above
  2**62, far from the broker's own counter.
* Rows are put in a canonical order (sorted by key, value and headers), because after a
  shuffle Spark may feed a retried task the same rows in another order.
* Rows without a partition go where their key hashes, or without a key where their value
  hashes: no sticky or random choice that a retry could make differently.
* A partition remembers a producer's last five batches only, so each producer id writes at
  most five batches per partition; a sixth starts the next chunk under a new producer id,
  again from sequence 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import crc32c

from mqbroker.client.partitioner import partition_for_key

#: Batches the broker remembers per producer and partition (``storage.producers.BATCHES_RETAINED``).
BATCHES_PER_PRODUCER = 5
#: Producer ids this sink derives lie in [2**62, 2**63): the broker counts its own up from 0.
PRODUCER_ID_BASE = 1 << 62
PRODUCER_EPOCH = 0
#: Bytes a record costs beyond its key, value and headers (varints, attributes), for sizing batches.
RECORD_OVERHEAD_BYTES = 24

Header = tuple[str, bytes | None]
#: ``(key, value, headers)`` of one record to write.
OutgoingRecord = tuple[bytes | None, bytes | None, tuple[Header, ...]]
TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedBatch:
    """One record batch to append: its partition, producer identity, first sequence and records."""

    topic: str
    partition: int
    producer_id: int
    base_sequence: int
    records: tuple[OutgoingRecord, ...]


def producer_id_for(write_identity: str, topic: str, partition: int, chunk: int) -> int:
    """A stable producer id for one chunk of one task's writes to one partition."""
    digest = hashlib.blake2b(f"{write_identity}\0{topic}\0{partition}\0{chunk}".encode(), digest_size=8).digest()
    return PRODUCER_ID_BASE | (int.from_bytes(digest, "big") & (PRODUCER_ID_BASE - 1))


def target_partition(key: bytes | None, value: bytes | None, partition_count: int) -> int:
    """Where a row without an explicit partition goes: by key, or by value when it has none."""
    if key is not None:
        return partition_for_key(key, partition_count)
    return crc32c.crc32c(value or b"") % partition_count


def _canonical_order(record: OutgoingRecord) -> tuple[object, ...]:
    key, value, headers = record
    return (
        key is not None,
        key or b"",
        value is not None,
        value or b"",
        tuple((name, header_value is not None, header_value or b"") for name, header_value in headers),
    )


def _size_bytes(record: OutgoingRecord) -> int:
    key, value, headers = record
    size = RECORD_OVERHEAD_BYTES + len(key or b"") + len(value or b"")
    for name, header_value in headers:
        size += len(name) + len(header_value or b"") + 4
    return size


def plan_partition(
    write_identity: str, topic: str, partition: int, records: Iterable[OutgoingRecord], batch_bytes_max: int
) -> list[PlannedBatch]:
    """The batches for one partition: canonical order, split by size, five per producer id."""
    ordered = sorted(records, key=_canonical_order)
    groups: list[list[OutgoingRecord]] = []
    size = batch_bytes_max
    for record in ordered:
        record_size = _size_bytes(record)
        if size + record_size > batch_bytes_max and (not groups or groups[-1]):
            groups.append([])
            size = 0
        groups[-1].append(record)
        size += record_size
    planned = []
    for index, group in enumerate(groups):
        chunk, position = divmod(index, BATCHES_PER_PRODUCER)
        base_sequence = sum(len(earlier) for earlier in groups[index - position : index])
        planned.append(
            PlannedBatch(
                topic=topic,
                partition=partition,
                producer_id=producer_id_for(write_identity, topic, partition, chunk),
                base_sequence=base_sequence,
                records=tuple(group),
            )
        )
    return planned


def plan_writes(
    write_identity: str, records: dict[TopicPartition, list[OutgoingRecord]], batch_bytes_max: int
) -> list[PlannedBatch]:
    """Every partition's batches, partitions in a fixed order."""
    planned: list[PlannedBatch] = []
    for (topic, partition), partition_records in sorted(records.items()):
        planned += plan_partition(write_identity, topic, partition, partition_records, batch_bytes_max)
    return planned
