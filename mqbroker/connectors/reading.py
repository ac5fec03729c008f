"""The records a fetch returned, from a position on: what the sink and the source's recovery read. Pure.

Decoding goes through ``records.readable`` like every reader inside the broker: a batch whose CRC
or records do not decode is skipped (handed back in ``Fetched.skipped``, which the task counts in
``mqbroker_unreadable_batches_total`` and logs) and reading goes on after it, so a poison batch
cannot stop a connector.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mqbroker.model import FetchResult
from mqbroker.records.decoder import decode_records_as
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import BatchHeader, iter_batches
from mqbroker.records.isolation import committed_records
from mqbroker.records.readable import UnreadableBatch, readable_batches
from mqbroker.records.record import RecordHeader

#: One decoded record: (offset, key, value, headers, timestamp_ms).
FetchedRecord = tuple[int, bytes | None, bytes | None, tuple[RecordHeader, ...], int]


def _as_tuple(offset: int, key: bytes | None, value: bytes | None, headers: tuple[RecordHeader, ...],
              timestamp_ms: int) -> FetchedRecord:
    return offset, key, value, headers, timestamp_ms


def _decode_tuples(batch: memoryview, header: BatchHeader) -> list[FetchedRecord]:
    return decode_records_as(batch, _as_tuple)


@dataclass(slots=True)
class Fetched:
    """Records at or past a position, where reading goes on next, and the batches that did not decode."""

    records: list[FetchedRecord] = field(default_factory=list)
    next_position: int = 0
    #: The batches skipped because they do not decode (the caller counts and logs them).
    skipped: list[UnreadableBatch] = field(default_factory=list)


def records_from(data: bytes, position: int, *, topic: str, partition: int) -> Fetched:
    """Decode the batches of ``data`` (a fetch result of ``topic``-``partition``) into records at or past ``position``.

    Control batches are passed over; a batch that does not decode is skipped and reported. Framing
    that does not read (a partial batch at the end of a response) ends the reading there: the next
    fetch starts again at ``next_position``.
    """
    fetched = Fetched(next_position=position)
    batches = readable_batches(data, position, topic=topic, partition=partition, skipped=fetched.skipped.append,
                               decode=_decode_tuples)
    try:
        for header, records in batches:
            if header.base_offset < position:
                records = [record for record in records if record[0] >= position]
            fetched.records.extend(records)
    except CorruptRecordError:
        pass  # the batch framing ends here: what came before it is read, the next fetch goes on from there
    fetched.next_position = batches.next_offset
    return fetched


def read_committed(result: FetchResult, position: int) -> Fetched:
    """The records of a read_committed fetch ``result`` at or past ``position``, without the aborted transactions
    it lists; reading goes on past the markers and aborted batches it ends with."""
    data = result.records
    aborted = [(item.producer_id, item.first_offset) for item in result.aborted_transactions or ()]
    try:
        kept = committed_records(data, aborted) if aborted else data
        end = max((header.next_offset for _, header in iter_batches(data, check=False)), default=position)
    except CorruptRecordError:
        kept, end = data, position  # broken framing: read what frames, the next fetch goes on from there
    fetched = records_from(bytes(kept), position, topic=result.topic, partition=result.partition)
    fetched.next_position = max(fetched.next_position, end)
    return fetched
