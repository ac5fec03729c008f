"""Idempotent- and transactional-producer state of one partition, kept from batch headers alone (KIP-98).

For every producer id the partition remembers its epoch, the max timestamp of its latest
batch and its last five batches (first/last sequence, first/last offset, max timestamp),
which is enough to answer a retried batch with its original offsets and to detect a gap or
a fenced epoch. A transactional producer also has the first offset of its open transaction
here and the epoch of the coordinator that wrote its last marker: a transaction opens with
the producer's first transactional batch and ends with its COMMIT or ABORT marker (a control
batch, whose meaning the log reads and passes in). The open transactions, and the finished ones
whose markers the high watermark has not passed yet, bound the last stable offset. The state is snapshotted to `<offset>.snapshot` files and rebuilt on
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
from mqbroker.records.markers import ControlRecord
from mqbroker.storage.errors import (
    CorruptFileError,
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from mqbroker.storage.txn_index import AbortedTxn

#: Batches remembered per producer (Kafka's NUM_BATCHES_TO_RETAIN; clients keep <= 5 in flight).
BATCHES_RETAINED = 5
SEQUENCE_MAX = 2**31 - 1
#: Version 2 added each producer's last timestamp, 3 its open transaction and coordinator epoch; an
#: older snapshot is refused and the log replayed.
SNAPSHOT_VERSION = 3
#: ``current_txn_first_offset`` of a producer without an open transaction here.
NO_TRANSACTION = -1
NO_COORDINATOR_EPOCH = -1
_SNAPSHOT_HEADER = struct.Struct(">hIi")
_PRODUCER = struct.Struct(">qhqqib")
_BATCH = struct.Struct(">iiqqq")


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchMetadata:
    """What the partition remembers of one written batch of a producer."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CompletedTxn:
    """A transaction its marker just ended: data from ``first_offset``, the marker at ``last_offset``."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(slots=True)
class ProducerEntry:
    """One producer id's epoch, latest max timestamp, last batches (oldest first) and open transaction."""

    epoch: int
    batches: deque[BatchMetadata]
    last_timestamp_ms: int
    #: First offset of the producer's open transaction in this partition (NO_TRANSACTION: none).
    current_txn_first_offset: int = NO_TRANSACTION
    #: Epoch of the coordinator that wrote the producer's last marker (older coordinators are fenced).
    coordinator_epoch: int = NO_COORDINATOR_EPOCH


def next_sequence(sequence: int) -> int:
    """The sequence after ``sequence``, wrapping from int32 max to 0."""
    return 0 if sequence == SEQUENCE_MAX else sequence + 1


class ProducerStates:
    """Per-partition producer table: check a batch before it is written, record it after."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        #: Producer id -> first offset of its open transaction (the entries' non-empty ones, for the LSO).
        self.ongoing: dict[int, int] = {}
        #: Transactions ended by a marker the high watermark has not passed yet, in marker order.
        self.unreplicated: deque[CompletedTxn] = deque()

    def check(
        self, header: BatchHeader, staged: dict[int, ProducerEntry], marker: ControlRecord | None = None
    ) -> BatchMetadata | None:
        """Validate a client batch against the state (``staged`` holds this request's earlier batches).

        ``marker`` is the meaning of a control batch. Returns the original batch when ``header``
        is a retry of one, None when it is new. Raises ``InvalidProducerEpochError``,
        ``OutOfOrderSequenceError``, ``InvalidTxnStateError``, ``InvalidRecordError`` or
        ``TransactionCoordinatorFencedError``.
        """
        if header.producer_id == NO_PRODUCER_ID:
            if header.is_transactional:
                raise InvalidRecordError("a transactional batch needs a producer id; call InitProducerId first")
            return None
        entry = staged.get(header.producer_id) or self.entries.get(header.producer_id)
        if entry is None:
            return None  # no state (new, expired or retention removed it): any sequence starts it
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is fenced by epoch {entry.epoch}"
            )
        if header.is_control:
            if marker is not None and marker.coordinator_epoch is not None and (
                marker.coordinator_epoch < entry.coordinator_epoch
            ):
                raise TransactionCoordinatorFencedError(
                    f"marker for producer {header.producer_id} from coordinator epoch {marker.coordinator_epoch}; "
                    f"this partition has seen epoch {entry.coordinator_epoch}"
                )
            return None
        if not header.is_transactional and entry.current_txn_first_offset != NO_TRANSACTION:
            raise InvalidTxnStateError(
                f"producer {header.producer_id} wrote a non-transactional batch inside its open transaction "
                f"(from offset {entry.current_txn_first_offset}); commit or abort it first"
            )
        if header.base_sequence == NO_SEQUENCE:
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

    def starts_transaction(self, header: BatchHeader, staged: dict[int, ProducerEntry]) -> bool:
        """True when ``header`` is a transactional data batch of a producer without an open transaction here."""
        if not header.is_transactional or header.is_control:
            return False
        entry = staged.get(header.producer_id) or self.entries.get(header.producer_id)
        return entry is None or entry.current_txn_first_offset == NO_TRANSACTION

    def stage(
        self, header: BatchHeader, staged: dict[int, ProducerEntry], marker: ControlRecord | None = None
    ) -> CompletedTxn | None:
        """Record a checked batch (with its assigned offsets) in ``staged``, to be committed after the write.

        Returns the transaction a COMMIT or ABORT ``marker`` ends (None if the producer had none open).
        """
        if header.producer_id == NO_PRODUCER_ID:
            return None
        current = staged.get(header.producer_id) or self.entries.get(header.producer_id)
        txn_first = NO_TRANSACTION if current is None else current.current_txn_first_offset
        coordinator_epoch = NO_COORDINATOR_EPOCH if current is None else current.coordinator_epoch
        if current is None or header.producer_epoch > current.epoch:
            entry = ProducerEntry(header.producer_epoch, deque(maxlen=BATCHES_RETAINED), header.max_timestamp,
                                  txn_first, coordinator_epoch)
        else:
            entry = ProducerEntry(current.epoch, deque(current.batches, maxlen=BATCHES_RETAINED), header.max_timestamp,
                                  txn_first, coordinator_epoch)
        completed = None
        if header.is_control:
            if marker is not None and marker.is_marker:
                if entry.current_txn_first_offset != NO_TRANSACTION:
                    completed = CompletedTxn(producer_id=header.producer_id, first_offset=entry.current_txn_first_offset,
                                             last_offset=header.base_offset, aborted=not marker.committed)
                entry.current_txn_first_offset = NO_TRANSACTION
                assert marker.coordinator_epoch is not None
                entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        else:
            if header.is_transactional and entry.current_txn_first_offset == NO_TRANSACTION:
                entry.current_txn_first_offset = header.base_offset
            if header.base_sequence != NO_SEQUENCE:
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
        return completed

    def commit(self, staged: dict[int, ProducerEntry], completed: list[CompletedTxn] | None = None) -> None:
        """Make staged entries (and the transactions their markers ended) current once their batches are written."""
        self.entries.update(staged)
        for producer_id, entry in staged.items():
            if entry.current_txn_first_offset != NO_TRANSACTION:
                self.ongoing[producer_id] = entry.current_txn_first_offset
            else:
                self.ongoing.pop(producer_id, None)
        if completed:
            self.unreplicated.extend(completed)

    def replay(self, header: BatchHeader, marker: ControlRecord | None = None) -> CompletedTxn | None:
        """Apply a batch read back from the log (recovery): no checks, it was accepted once."""
        staged: dict[int, ProducerEntry] = {}
        completed = self.stage(header, staged, marker)
        self.commit(staged, [completed] if completed is not None else None)
        return completed

    def first_unstable_offset(self, high_watermark: int | None) -> int | None:
        """The first offset of an open transaction, or of a finished one whose marker is not below ``high_watermark``.

        Passing the high watermark forgets the finished transactions whose markers it passed
        (it only grows); None leaves them. None when every transaction here is stable.
        """
        unreplicated = self.unreplicated
        if not unreplicated and not self.ongoing:  # no transactions here (every read_committed wait asks)
            return None
        if high_watermark is not None:
            while unreplicated and unreplicated[0].last_offset < high_watermark:
                unreplicated.popleft()
        firsts = list(self.ongoing.values())
        firsts.extend(txn.first_offset for txn in unreplicated)
        return min(firsts) if firsts else None

    def aborted_entry(self, completed: CompletedTxn, staged: dict[int, ProducerEntry]) -> AbortedTxn:
        """The `.txnindex` entry of an aborted transaction whose marker was just staged.

        Its last stable offset is the first offset of another producer's open transaction (as
        ``staged`` leaves them), else the marker's offset plus one (Kafka's ``lastStableOffset``).
        """
        pid = completed.producer_id
        firsts = [first for other, first in self.ongoing.items() if other != pid and other not in staged]
        firsts += [entry.current_txn_first_offset for other, entry in staged.items()
                   if other != pid and entry.current_txn_first_offset != NO_TRANSACTION]
        return AbortedTxn(producer_id=pid, first_offset=completed.first_offset, last_offset=completed.last_offset,
                          last_stable_offset=min(firsts, default=completed.last_offset + 1))

    def has_open_transaction(self, producer_id: int, producer_epoch: int = -1) -> bool:
        """True while ``producer_id`` has an open transaction in this partition, at ``producer_epoch`` or later."""
        entry = self.entries.get(producer_id)
        return producer_id in self.ongoing and (entry is None or entry.epoch >= producer_epoch)

    def remove_before(self, offset: int) -> None:
        """Forget producers whose last batch lies wholly below ``offset`` (removed by retention); open transactions stay."""
        stale = [pid for pid, entry in self.entries.items() if entry.batches and entry.batches[-1].last_offset < offset
                 and entry.current_txn_first_offset == NO_TRANSACTION]
        for pid in stale:
            del self.entries[pid]

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for ``expiration_ms`` or more (not those with an open transaction); return how many."""
        expired = [pid for pid, entry in self.entries.items() if now_ms - entry.last_timestamp_ms >= expiration_ms
                   and entry.current_txn_first_offset == NO_TRANSACTION]
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
            body += _PRODUCER.pack(pid, entry.epoch, entry.last_timestamp_ms, entry.current_txn_first_offset,
                                   entry.coordinator_epoch, len(entry.batches))
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
                pid, epoch, last_timestamp_ms, txn_first, coordinator_epoch, batch_count = _PRODUCER.unpack_from(
                    body, position
                )
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
                states.entries[pid] = ProducerEntry(epoch, batches, last_timestamp_ms, txn_first, coordinator_epoch)
                if txn_first != NO_TRANSACTION:
                    states.ongoing[pid] = txn_first
        except struct.error as error:
            raise CorruptFileError(f"producer snapshot is truncated: {error}") from None
        return states


def reject_duplicate_in_multi_batch(header: BatchHeader) -> DuplicateSequenceError:
    """The error for a retried batch that arrives together with other batches."""
    return DuplicateSequenceError(
        f"producer {header.producer_id} resent sequences {header.base_sequence}..{header.last_sequence}"
        " inside a multi-batch append; send one batch per partition per request"
    )
