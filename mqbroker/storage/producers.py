"""Idempotent-producer state of one partition, kept from batch headers alone (KIP-98).

For every producer id the partition remembers its epoch, the max timestamp of its latest
batch and its last five batches (first/last sequence, first/last offset, max timestamp),
which is enough to answer a retried batch with its original offsets and to detect a gap or
a fenced epoch. The state is snapshotted to `<offset>.snapshot` files and rebuilt on
recovery by replaying the headers written after the newest snapshot. A producer idle for
``producer.id.expiration.ms`` (Kafka: one day, measured from its latest batch's max
timestamp) is forgotten by `expire`, which the broker calls periodically; a later batch of
it then starts afresh at any sequence, as in Kafka.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

import crc32c

from mqbroker.records.header import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from mqbroker.storage.errors import (
    CorruptFileError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)

#: Batches remembered per producer (Kafka's NUM_BATCHES_TO_RETAIN; clients keep <= 5 in flight).
BATCHES_RETAINED = 5
SEQUENCE_MAX = 2**31 - 1
#: Version 2 added each producer's last timestamp; an older snapshot is refused and the log replayed.
SNAPSHOT_VERSION = 2
_SNAPSHOT_HEADER = struct.Struct(">hIi")
_PRODUCER = struct.Struct(">qhqb")
_BATCH = struct.Struct(">iiqqq")


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchMetadata:
    """What the partition remembers of one written batch of a producer."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    """The epoch of one producer id, its latest batch's max timestamp and its last batches, oldest first."""

    epoch: int
    batches: deque[BatchMetadata]
    last_timestamp_ms: int


def next_sequence(sequence: int) -> int:
    """The sequence after ``sequence``, wrapping from int32 max to 0."""
    return 0 if sequence == SEQUENCE_MAX else sequence + 1


class ProducerStates:
    """Per-partition producer table: check a batch before it is written, record it after."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader, staged: dict[int, ProducerEntry]) -> BatchMetadata | None:
        """Validate a client batch against the state (``staged`` holds this request's earlier batches).

        Returns the original batch when ``header`` is a retry of one, None when it is new.
        Raises ``InvalidProducerEpochError`` or ``OutOfOrderSequenceError``.
        """
        if header.producer_id == NO_PRODUCER_ID:
            return None
        entry = staged.get(header.producer_id) or self.entries.get(header.producer_id)
        if entry is None:
            return None  # no state (new, expired or retention removed it): any sequence starts it
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is fenced by epoch {entry.epoch}"
            )
        if header.is_control or header.base_sequence == NO_SEQUENCE:
            return None
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} epoch {header.producer_epoch} must start at sequence 0,"
                    f" not {header.base_sequence}"
                )
            return None
        for batch in entry.batches:
            if batch.first_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                return batch
        if entry.batches and header.base_sequence != next_sequence(entry.batches[-1].last_sequence):
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} sent sequence {header.base_sequence};"
                f" expected {next_sequence(entry.batches[-1].last_sequence)}"
            )
        return None

    def stage(self, header: BatchHeader, staged: dict[int, ProducerEntry]) -> None:
        """Record a checked batch (with its assigned offsets) in ``staged``, to be committed after the write."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        current = staged.get(header.producer_id) or self.entries.get(header.producer_id)
        if current is None or header.producer_epoch > current.epoch:
            entry = ProducerEntry(header.producer_epoch, deque(maxlen=BATCHES_RETAINED), header.max_timestamp)
        else:
            entry = ProducerEntry(current.epoch, deque(current.batches, maxlen=BATCHES_RETAINED), header.max_timestamp)
        if header.base_sequence != NO_SEQUENCE and not header.is_control:
            entry.batches.append(
                BatchMetadata(
                    first_sequence=header.base_sequence,
                    last_sequence=header.last_sequence,
                    first_offset=header.base_offset,
                    last_offset=header.last_offset,
                    max_timestamp=header.max_timestamp,
                )
            )
        staged[header.producer_id] = entry

    def commit(self, staged: dict[int, ProducerEntry]) -> None:
        """Make staged entries current once their batches are written."""
        self.entries.update(staged)

    def replay(self, header: BatchHeader) -> None:
        """Apply a batch read back from the log (recovery): no checks, it was accepted once."""
        staged: dict[int, ProducerEntry] = {}
        self.stage(header, staged)
        self.commit(staged)

    def remove_before(self, offset: int) -> None:
        """Forget producers whose last batch lies wholly below ``offset`` (removed by retention)."""
        stale = [pid for pid, entry in self.entries.items() if entry.batches and entry.batches[-1].last_offset < offset]
        for pid in stale:
            del self.entries[pid]

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers whose latest batch is ``expiration_ms`` or more older than ``now_ms``; return how many."""
        expired = [pid for pid, entry in self.entries.items() if now_ms - entry.last_timestamp_ms >= expiration_ms]
        for pid in expired:
            del self.entries[pid]
        return len(expired)

    def last_batch_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its latest batch (the batch compaction must keep)."""
        return {pid: entry.batches[-1].last_offset for pid, entry in self.entries.items() if entry.batches}

    def to_bytes(self) -> bytes:
        """Snapshot encoding: version, CRC-32C of the body, entry count, then the entries."""
        body = bytearray()
        for pid, entry in sorted(self.entries.items()):
            body += _PRODUCER.pack(pid, entry.epoch, entry.last_timestamp_ms, len(entry.batches))
            for batch in entry.batches:
                body += _BATCH.pack(
                    batch.first_sequence, batch.last_sequence, batch.first_offset, batch.last_offset, batch.max_timestamp
                )
        return _SNAPSHOT_HEADER.pack(SNAPSHOT_VERSION, crc32c.crc32c(body), len(self.entries)) + bytes(body)

    @classmethod
    def from_bytes(cls, data: bytes) -> ProducerStates:
        """Decode a snapshot; ``CorruptFileError`` if it is damaged."""
        try:
            version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
            body = memoryview(data)[_SNAPSHOT_HEADER.size :]
            if version != SNAPSHOT_VERSION or crc32c.crc32c(body) != crc:
                raise CorruptFileError("producer snapshot has a bad version or CRC")
            states = cls()
            position = 0
            for _ in range(count):
                pid, epoch, last_timestamp_ms, batch_count = _PRODUCER.unpack_from(body, position)
                position += _PRODUCER.size
                batches: deque[BatchMetadata] = deque(maxlen=BATCHES_RETAINED)
                for _ in range(batch_count):
                    first_seq, last_seq, first_offset, last_offset, timestamp = _BATCH.unpack_from(body, position)
                    position += _BATCH.size
                    batches.append(
                        BatchMetadata(
                            first_sequence=first_seq,
                            last_sequence=last_seq,
                            first_offset=first_offset,
                            last_offset=last_offset,
                            max_timestamp=timestamp,
                        )
                    )
                states.entries[pid] = ProducerEntry(epoch, batches, last_timestamp_ms)
        except struct.error as error:
            raise CorruptFileError(f"producer snapshot is truncated: {error}") from None
        return states


def reject_duplicate_in_multi_batch(header: BatchHeader) -> DuplicateSequenceError:
    """The error for a retried batch that arrives together with other batches."""
    return DuplicateSequenceError(
        f"producer {header.producer_id} resent sequences {header.base_sequence}..{header.last_sequence}"
        " inside a multi-batch append; send one batch per partition per request"
    )
