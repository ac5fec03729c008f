"""Helpers shared by the record tests: sample records, Kafka-written batches, batches with a rewritten records section."""

from __future__ import annotations

import struct

from mqbroker.records.compression import Compression
from mqbroker.records.header import HEADER_BYTES, compute_crc
from mqbroker.records.record import Record

TIMESTAMP_MS = 1_700_000_000_000
CODECS = list(Compression)


def sample_records(count: int = 3, base_offset: int = 0) -> list[Record]:
    """``count`` records with keys, values and timestamps that differ, from ``base_offset``."""
    return [
        Record(
            offset=base_offset + index,
            timestamp_ms=TIMESTAMP_MS + index,
            key=b"key-%d" % index,
            value=b"value-%d" % index * 10,
        )
        for index in range(count)
    ]


def with_fixed_crc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC recomputed, so a mutation reaches the record decoder."""
    stamped = bytearray(batch)
    struct.pack_into(">I", stamped, 17, compute_crc(stamped, 0, len(stamped)))
    return bytes(stamped)


def with_records_section(batch: bytes, section: bytes, records_count: int | None = None) -> bytes:
    """An uncompressed batch whose records section (and maybe count) is replaced, CRC fixed."""
    header = bytearray(batch[:HEADER_BYTES])
    struct.pack_into(">i", header, 8, HEADER_BYTES - 12 + len(section))
    if records_count is not None:
        struct.pack_into(">i", header, 57, records_count)
    return with_fixed_crc(bytes(header) + section)


# Two batches as a Kafka 0.11 broker stored them (the fixture kafka-python's tests use).
KAFKA_BATCH_ONE_RECORD = bytes.fromhex(
    "00000000000000000000003b00000001020318a2700000000000000000015dff7b063c0000015dff7b063c"
    "ffffffffffffffffffffffffffff0000000112000000010631323300"
)


KAFKA_BATCH_TWO_EMPTY_RECORDS = bytes.fromhex(
    "0000000000000001000000400000000202c85cbd230000000000010000015dff7cdd6c0000015dff7cde14"
    "ffffffffffffffffffffffffffff000000020c0000000100000e00d00202010000"
)
