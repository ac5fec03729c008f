"""Helpers of the transaction tests: transactional batches, markers, and read_committed reads of a log."""

from __future__ import annotations

from mqbroker.records.builder import BatchBuilder
from mqbroker.records.control import ControlType, encode_control_batch
from mqbroker.records.decoder import decode_records
from mqbroker.records.header import iter_batches, read_header
from mqbroker.records.isolation import committed_batches
from mqbroker.storage.log import PartitionLog


def txn_batch(
    producer_id: int, sequence: int, values: list[bytes], epoch: int = 0, keys: list[bytes] | None = None,
    timestamp_ms: int = 1_000,
) -> bytes:
    """A transactional data batch of ``producer_id`` (sequences from ``sequence``)."""
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, is_transactional=True)
    for slot, value in enumerate(values):
        builder.append(timestamp_ms, keys[slot] if keys else None, value)
    return builder.build()


def marker(producer_id: int, committed: bool, epoch: int = 0, coordinator_epoch: int = 0, timestamp_ms: int = 1_000) -> bytes:
    """A COMMIT or ABORT marker batch."""
    kind = ControlType.COMMIT if committed else ControlType.ABORT
    return encode_control_batch(kind, producer_id, epoch, coordinator_epoch, timestamp_ms)


def append_txn(log: PartitionLog, data: bytes, now_ms: int = 1_000) -> int:
    """Append a transactional batch after verifying (as the broker would); its base offset."""
    guard = log.start_verification(read_header(data).producer_id)
    return log.append(data, now_ms, verification_guard=guard).base_offset


def append_marker(log: PartitionLog, data: bytes, now_ms: int = 1_000) -> int:
    """Append a marker as the broker does for a coordinator; its offset."""
    return log.append(data, now_ms, markers_allowed=True).base_offset


def read_committed_values(log: PartitionLog, start: int = 0, high_watermark: int | None = None) -> list[bytes | None]:
    """What a read_committed reader sees from ``start``: values up to the LSO, aborted ones dropped."""
    high_watermark = log.log_end_offset if high_watermark is None else high_watermark
    stable = log.last_stable_offset(high_watermark)
    values: list[bytes | None] = []
    offset = start
    while offset < stable:
        data = log.read(offset, 1 << 20, max_offset=stable).records
        if not data:
            break
        aborted = [(entry.producer_id, entry.first_offset) for entry in log.aborted_transactions(offset, stable)]
        for position, header in committed_batches(data, aborted):
            values += [record.value for record in decode_records(data[position : position + header.size_bytes])]
        *_, (_, last) = iter_batches(data, check=False)
        offset = last.next_offset
    return values
