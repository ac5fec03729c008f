"""Source batches as the mirror writes them into this cluster. Pure.

The fast path copies a batch byte for byte (its CRC checked first): keys, values, headers,
timestamps, compression and the records' offset deltas stay as they are; only the producer
fields (this mirror's idempotent producer id, epoch and sequence) are written into the header,
the transactional bit cleared (the records are committed data here) and the CRC computed again. Since the offset deltas are
kept, the distance between a record's source and target offsets changes only where the mirror
skips something (transaction markers), which makes offset translation exact.

The slow path decodes and rebuilds a batch: when the copy starts inside it, or with identity
naming, where each record's origin header is checked and set (see ``naming``). It keeps each
record's offset delta too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from mqbroker.connectors.mirror.naming import ORIGIN_HEADER
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import (
    CRC_START,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    check_crc,
)
from mqbroker.records.readable import UnreadableBatch, readable_batches
from mqbroker.records.record import Record

_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
_PRODUCER = struct.Struct(">qhi")
_ATTRIBUTES_AT = 21
_CRC_AT = 17
_PRODUCER_AT = 43


@dataclass(frozen=True, slots=True, kw_only=True)
class CopiedBatch:
    """One source batch to write here: where it was, what it holds, and how to build it for a producer."""

    source_base: int
    #: The source offset after this batch (where copying goes on).
    source_next: int
    #: Offsets (and sequence numbers) it takes here: its last offset delta plus one.
    span: int
    records_count: int
    max_timestamp: int
    #: The source batch, re-stamped by ``build`` (fast path) ...
    raw: bytes | None = None
    #: ... or the records to encode again (slow path), with the batch's compression and timestamp type.
    records: tuple[Record, ...] = ()
    compression: int = 0
    timestamp_type: int = 0

    def build(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        """The batch as written here, for ``producer_id`` at ``base_sequence``."""
        if self.raw is not None:
            return restamp(self.raw, producer_id, producer_epoch, base_sequence)
        builder = BatchBuilder(compression=self.compression, producer_id=producer_id, producer_epoch=producer_epoch,
                               base_sequence=base_sequence, timestamp_type=self.timestamp_type)
        for record in self.records:
            builder.append_at(record.offset - self.source_base, record.timestamp_ms, record.key, record.value,
                              record.headers)
        return builder.build()


def restamp(batch: bytes, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """``batch`` with new producer fields, the transactional bit cleared and its CRC computed again."""
    stamped = bytearray(batch)
    (attributes,) = _ATTRIBUTES.unpack_from(stamped, _ATTRIBUTES_AT)
    _ATTRIBUTES.pack_into(stamped, _ATTRIBUTES_AT, attributes & ~TRANSACTIONAL_MASK)
    _PRODUCER.pack_into(stamped, _PRODUCER_AT, producer_id, producer_epoch, base_sequence)
    _CRC.pack_into(stamped, _CRC_AT, crc32c.crc32c(memoryview(stamped)[CRC_START:]))
    return bytes(stamped)


@dataclass(slots=True)
class Copy:
    """What one fetch result becomes: batches to write, where the source position goes, what was skipped."""

    batches: list[CopiedBatch]
    next_position: int
    #: The batches that could not be read (counted and logged by the task).
    skipped: list[UnreadableBatch]


def copy_batches(data: bytes, position: int, *, topic: str, partition: int, check_origin: bool, source_alias: str,
                 target_alias: str) -> Copy:
    """The batches of a fetch result (``data``, of source ``topic``-``partition``) at or past ``position``.

    ``check_origin`` (identity naming): drop records whose origin is ``target_alias``, mark the
    others' origin as ``source_alias`` when they have none. Transaction markers are passed over; a
    batch that does not decode is skipped (``records.readable``); framing that does not read (a
    partial batch at the end of a response) ends the copy there, the next fetch goes on from it.
    """
    copy = Copy(batches=[], next_position=position, skipped=[])

    def decode(view: memoryview, header: BatchHeader) -> list[CopiedBatch]:
        batch = _copied(bytes(view), header, position, check_origin, source_alias, target_alias)
        return [] if batch is None else [batch]

    batches = readable_batches(data, position, topic=topic, partition=partition, skipped=copy.skipped.append,
                               decode=decode)
    try:
        for _, copied in batches:
            copy.batches.extend(copied)
    except CorruptRecordError:
        pass  # the batch framing ends here: what came before it is copied
    copy.next_position = batches.next_offset
    return copy


def _copied(data: bytes, header: BatchHeader, position: int, check_origin: bool, source_alias: str,
            target_alias: str) -> CopiedBatch | None:
    if header.base_offset >= position and not check_origin:
        if header.records_count == 0:
            return None  # a batch the cleaner emptied: nothing to write
        check_crc(data, 0, header)  # restamping computes a new CRC: a damaged batch must not pass for a good one
        return CopiedBatch(source_base=header.base_offset, source_next=header.next_offset,
                           span=header.last_offset_delta + 1, records_count=header.records_count,
                           max_timestamp=header.max_timestamp, raw=data)
    kept = []
    origin = source_alias.encode("ascii")
    for record in decode_records(data):
        if record.offset < position:
            continue
        if check_origin:
            found = next((value for name, value in record.headers if name == ORIGIN_HEADER), None)
            if found == target_alias.encode("ascii"):
                continue  # it was first produced in the cluster this mirror writes to: a loop
            if found is None:
                record = Record(offset=record.offset, timestamp_ms=record.timestamp_ms, key=record.key,
                                value=record.value, headers=(*record.headers, (ORIGIN_HEADER, origin)))
        kept.append(record)
    if not kept:
        return None
    return CopiedBatch(source_base=header.base_offset, source_next=header.next_offset,
                       span=kept[-1].offset - header.base_offset + 1, records_count=len(kept),
                       max_timestamp=max(record.timestamp_ms for record in kept), records=tuple(kept),
                       compression=header.compression, timestamp_type=int(bool(header.attributes & TIMESTAMP_TYPE_MASK)))
