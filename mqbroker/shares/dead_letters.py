"""The batch that carries a share group's dead letters to its dead-letter topic, pure.

Each record keeps its key, value, timestamp and headers, and gains the origin headers every
dead-letter path in mqbroker uses (``records.dead_letters``): topic, partition, offset, delivery
attempts, last error, reason and group.
"""

from __future__ import annotations

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.dead_letters import dead_letter_headers
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
from mqbroker.shares.partition_values import DeadLetter


def dead_letter_batch(batches: bytes, dead: DeadLetter, *, group_id: str, topic: str, partition: int) -> bytes | None:
    """The records ``dead.first..dead.last`` found in ``batches``, with origin headers (None: none decode)."""
    builder = BatchBuilder()
    try:
        for position, header in iter_batches(batches, check=False):
            if header.is_control or header.last_offset < dead.first or header.base_offset > dead.last:
                continue
            for record in decode_records(batches[position : position + header.size_bytes]):
                if dead.first <= record.offset <= dead.last:
                    headers = [*record.headers, *dead_letter_headers(
                        topic=topic, partition=partition, offset=record.offset, attempts=dead.delivery_count,
                        error=dead.last_error, reason=dead.reason.value, group=group_id)]
                    builder.append(record.timestamp_ms, record.key, record.value, headers)
    except CorruptRecordError:
        pass  # what decoded before the bad batch still goes; the rest cannot be copied
    return builder.build() if builder.records_count else None
