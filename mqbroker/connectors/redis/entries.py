"""Redis Stream entries and list items as log records: key, value, headers and partition. Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mqbroker.client.partitioner import partition_for_key
from mqbroker.records.record import RecordHeader

#: The header naming the Stream entry a record came from: ``<connector>:<entry id>``.
ENTRY_HEADER = "mqbroker.redis.entry"


class MalformedReplyError(Exception):
    """A Redis reply without the shape the command documents (a bug, or not a Redis server)."""


class EntryTooLargeError(Exception):
    """A Stream entry or list item too large for one batch of the topic (its ``max.message.bytes``)."""


#: What a batch takes beyond its records (its header), and the most a record takes beyond its key,
#: value and headers (length varints, timestamp and offset deltas, attributes): sizes are estimated
#: from above, so a batch built from records within the budget is within ``max.message.bytes``.
BATCH_OVERHEAD_BYTES = 61
RECORD_OVERHEAD_BYTES = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceRecord:
    """One record to produce, and where it came from."""

    entry_id: bytes
    key: bytes | None
    value: bytes
    headers: tuple[RecordHeader, ...]


def stream_entries(reply: Any) -> list[tuple[bytes, list[bytes]]]:
    """``(id, [field, value, ...])`` pairs of an XREADGROUP reply for one stream (or of XAUTOCLAIM's entry list).

    Entries whose data is nil (deleted while pending) come with an empty field list.
    """
    if reply is None:
        return []
    if not isinstance(reply, list):
        raise MalformedReplyError(f"expected a list of entries, got {type(reply).__name__}")
    entries = []
    for entry in reply:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], bytes):
            raise MalformedReplyError("an entry is not [id, fields]")
        fields = entry[1] if isinstance(entry[1], list) else []
        if len(fields) % 2 or not all(isinstance(item, bytes) for item in fields):
            raise MalformedReplyError(f"entry {entry[0]!r} has malformed fields")
        entries.append((entry[0], fields))
    return entries


def read_group_entries(reply: Any) -> list[tuple[bytes, list[bytes]]]:
    """The entries of an XREADGROUP reply for a single stream (nil: none arrived within the block time)."""
    if reply is None:
        return []
    if not isinstance(reply, list) or len(reply) != 1 or not isinstance(reply[0], list) or len(reply[0]) != 2:
        raise MalformedReplyError("an XREADGROUP reply for one stream is [[key, entries]]")
    return stream_entries(reply[0][1])


def entry_record(connector: str, entry_id: bytes, fields: Sequence[bytes], key_field: str | None,
                 value_field: str | None) -> SourceRecord:
    """A Stream entry as a record: key from ``key_field``, value from ``value_field`` (else every field
    as a JSON object, values decoded as UTF-8 with replacement), its origin as a header."""
    named = dict(zip(fields[::2], fields[1::2]))
    key = named.get(key_field.encode("utf-8")) if key_field is not None else None
    if value_field is not None:
        value = named.get(value_field.encode("utf-8"), b"")
    else:
        value = json.dumps({name.decode("utf-8", "replace"): data.decode("utf-8", "replace")
                            for name, data in named.items()}, separators=(",", ":")).encode("utf-8")
    return SourceRecord(entry_id=entry_id, key=key, value=value,
                        headers=((ENTRY_HEADER, connector.encode("ascii") + b":" + entry_id),))


def list_record(item: bytes) -> SourceRecord:
    """A list item as a record: no key, the item as the value."""
    return SourceRecord(entry_id=b"", key=None, value=item, headers=())


def record_partition(record: SourceRecord, partition_count: int) -> int:
    """The key's partition (as clients choose it); a keyless record's by its entry id, or a list item's by its bytes."""
    chosen_by = record.key if record.key is not None else (record.entry_id or record.value)
    return partition_for_key(chosen_by, partition_count)


def record_bytes(record: SourceRecord) -> int:
    """At most what ``record`` takes in a batch."""
    headers = sum(len(name.encode("utf-8")) + len(value or b"") + 10 for name, value in record.headers)
    return len(record.key or b"") + len(record.value) + headers + RECORD_OVERHEAD_BYTES


def fits(record: SourceRecord, max_message_bytes: int) -> bool:
    """True if ``record`` fits a batch of ``max_message_bytes`` alone."""
    return record_bytes(record) <= max_message_bytes - BATCH_OVERHEAD_BYTES


def too_large(record: SourceRecord, max_message_bytes: int) -> str:
    """What is wrong with a record that does not fit, and what to do."""
    origin = record.entry_id.decode("ascii", "replace") or f"a list item of {len(record.value)} bytes"
    return (f"entry {origin} needs about {record_bytes(record)} bytes in a batch, more than the topic's "
            f"max.message.bytes ({max_message_bytes}) allows: raise max.message.bytes on the topic, or set "
            "oversized=skip")


def size_chunks(records: Sequence[SourceRecord], max_message_bytes: int) -> list[tuple[int, int]]:
    """``(start, end)`` runs of ``records``, in order, each fitting one batch of ``max_message_bytes``.

    Raises ``EntryTooLargeError`` for a record that cannot fit even alone.
    """
    budget = max_message_bytes - BATCH_OVERHEAD_BYTES
    runs: list[tuple[int, int]] = []
    start, used = 0, 0
    for index, record in enumerate(records):
        size = record_bytes(record)
        if size > budget:
            raise EntryTooLargeError(too_large(record, max_message_bytes))
        if used + size > budget and index > start:
            runs.append((start, index))
            start, used = index, 0
        used += size
    if start < len(records):
        runs.append((start, len(records)))
    return runs
