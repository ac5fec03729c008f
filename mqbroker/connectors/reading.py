"""The records a fetch returned, from a position on: what the sink reads. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

from mqbroker.records.decoder import decode_records_as
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import read_header
from mqbroker.records.record import RecordHeader

#: One decoded record: (offset, key, value, headers, timestamp_ms).
FetchedRecord = tuple[int, bytes | None, bytes | None, tuple[RecordHeader, ...], int]


def _as_tuple(offset: int, key: bytes | None, value: bytes | None, headers: tuple[RecordHeader, ...],
              timestamp_ms: int) -> FetchedRecord:
    return offset, key, value, headers, timestamp_ms


@dataclass(slots=True)
class Fetched:
    """Records at or past a position, where reading goes on next, and the batches that did not decode."""

    records: list[FetchedRecord] = field(default_factory=list)
    next_position: int = 0
    #: One line per batch skipped because it is corrupt (the caller counts and logs them).
    skipped: list[str] = field(default_factory=list)


def records_from(data: bytes, position: int) -> Fetched:
    """Decode the batches of ``data`` (a fetch result) into records at or past ``position``.

    Control batches are passed over; a batch that does not decode is skipped and reported, so a
    damaged batch cannot stop a connector forever. A damaged header ends the reading there (its
    length cannot be trusted): the next fetch starts again at ``next_position``.
    """
    fetched = Fetched(next_position=position)
    view = memoryview(data)
    start = 0
    while start < len(data):
        try:
            header = read_header(data, start, require_whole=False)
        except CorruptRecordError as error:
            fetched.skipped.append(f"unreadable batch header after offset {fetched.next_position}: {error}")
            break
        end = start + header.size_bytes
        if end > len(data):
            break  # a partial batch at the end of the response: the next fetch reads it whole
        if header.next_offset > fetched.next_position and not header.is_control:
            try:
                decoded = decode_records_as(view[start:end], _as_tuple)
            except CorruptRecordError as error:
                fetched.skipped.append(f"batch at offset {header.base_offset}: {error}")
                decoded = []
            if header.base_offset < position:
                decoded = [record for record in decoded if record[0] >= position]
            fetched.records.extend(decoded)
        fetched.next_position = max(fetched.next_position, header.next_offset)
        start = end
    return fetched
