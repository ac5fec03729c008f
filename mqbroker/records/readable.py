"""Reading fetched batches inside the broker without stalling on bad data (pure).

The log checks a batch's framing and CRC when it is appended, not its records: a producer can
append a batch whose CRC is right and whose records are garbage (an 80-byte batch produced to
``mqtt.messages`` once stopped every MQTT subscriber until restart). So every reader inside the
broker (the MQTT hub, the AMQP source readers and internal-topic replay, the group coordinator's
offsets loader) decodes a fetch through ``readable_batches`` or ``readable_records``: a batch
whose CRC or records do not decode becomes an ``UnreadableBatch``, handed to the reader's
``skipped`` callback (which counts it in ``UnreadableTally``, a metric, and logs its topic,
partition and offsets), and reading goes on after it (``next_offset``, ``next_offset_after``). A batch is decoded
whole before any of its records is handed out: it is delivered completely or not at all. Given a
read_committed fetch's aborted transactions (``aborted``), the batches of those transactions are
passed over too (``records.isolation``): inside the broker every reader reads committed data only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from mqbroker.records.decoder import decode_records_as
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import BatchHeader, iter_batches
from mqbroker.records.isolation import AbortedRange, ReadCommittedFilter
from mqbroker.records.record import Record, RecordHeader

#: Decodes one batch (its bytes and header) into what a reader wants of its records; ``CorruptRecordError`` if it
#: cannot (a reader's own decoder may add bounds, e.g. the AMQP readers' decompression budget).
BatchDecoder = Callable[[memoryview, BatchHeader], list[Any]]

#: The log line a reader writes for a skipped batch or record; its fields are ``UnreadableTally.skipped``'s.
SKIPPED_LOG_FORMAT = ("{reader} skipped {what} of {topic}-{partition} at offsets {first_offset}..{last_offset} "
                      "({skipped_total} so far): {error}")


@dataclass(frozen=True, slots=True, kw_only=True)
class UnreadableBatch:
    """A fetched batch whose CRC or records do not decode: where it is and why."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    #: Why (``CorruptRecordError``, or a stored record's own decoder's typed error).
    error: Exception


def _record(offset: int, key: bytes | None, value: bytes | None, headers: tuple[RecordHeader, ...],
            timestamp_ms: int) -> Record:
    return Record(offset=offset, timestamp_ms=timestamp_ms, key=key, value=value, headers=headers)


def decode_whole(batch: memoryview, header: BatchHeader) -> list[Record]:
    """Every record of one batch (CRC checked, decompression bounded); ``CorruptRecordError`` if any is bad."""
    return decode_records_as(batch, _record)


class ReadableBatches:
    """``(header, decode(batch, header))`` for each data batch of ``data`` that reaches ``start_offset``; a batch
    that ``decode`` refuses with ``CorruptRecordError`` goes to ``skipped`` instead.

    ``next_offset`` is where the next read starts: after the last batch handed out, skipped or passed
    over (control batches, batches before ``start_offset``). Another exception from ``decode`` (a
    reader's "stop here for now") ends the iteration with ``next_offset`` before that batch.
    Batch framing comes from the log, which checked it on append: only a fetch that is not whole
    batches raises ``CorruptRecordError``.
    """

    def __init__(
        self, data: bytes | memoryview, start_offset: int, *, topic: str, partition: int,
        skipped: Callable[[UnreadableBatch], None], decode: BatchDecoder = decode_whole,
        aborted: Iterable[AbortedRange] | None = None,
    ) -> None:
        self._view = memoryview(data)
        self._aborted = list(aborted or ())
        self._start_offset = start_offset
        self._topic = topic
        self._partition = partition
        self._skipped = skipped
        self._decode = decode
        self.next_offset = start_offset

    def __iter__(self) -> Iterator[tuple[BatchHeader, list[Any]]]:
        view = self._view
        keeper = ReadCommittedFilter(self._aborted) if self._aborted else None
        for position, header in iter_batches(view, check=False):
            if keeper is not None and not keeper.keep(view, position, header):
                self.next_offset = max(self.next_offset, header.next_offset)
                continue
            if not header.is_control and header.last_offset >= self._start_offset:
                try:
                    decoded = self._decode(view[position : position + header.size_bytes], header)
                except CorruptRecordError as error:
                    self._skipped(UnreadableBatch(topic=self._topic, partition=self._partition,
                                                  first_offset=header.base_offset, last_offset=header.last_offset,
                                                  error=error))
                else:
                    self.next_offset = max(self.next_offset, header.next_offset)
                    yield header, decoded
            self.next_offset = max(self.next_offset, header.next_offset)


def readable_batches(
    data: bytes | memoryview, start_offset: int, *, topic: str, partition: int,
    skipped: Callable[[UnreadableBatch], None], decode: BatchDecoder = decode_whole,
    aborted: Iterable[AbortedRange] | None = None,
) -> ReadableBatches:
    """The readable batches of ``data`` (see ``ReadableBatches``)."""
    return ReadableBatches(data, start_offset, topic=topic, partition=partition, skipped=skipped, decode=decode,
                           aborted=aborted)


def readable_records(
    data: bytes | memoryview, start_offset: int, *, topic: str, partition: int,
    skipped: Callable[[UnreadableBatch], None], aborted: Iterable[AbortedRange] | None = None,
) -> Iterator[Record]:
    """The data records of ``data`` from ``start_offset`` on, each undecodable batch handed to ``skipped``
    (``aborted``: a read_committed fetch's aborted transactions, whose batches are passed over)."""
    for _, records in readable_batches(data, start_offset, topic=topic, partition=partition, skipped=skipped,
                                       aborted=aborted):
        for record in records:
            if record.offset >= start_offset:
                yield record


def next_offset_after(data: bytes | memoryview, start_offset: int) -> int:
    """The offset after the last batch in ``data`` (``start_offset`` if it holds none): where the next read starts,
    past skipped batches too."""
    end = start_offset
    for _, header in iter_batches(data, check=False):
        end = max(end, header.next_offset)
    return end


class UnreadableTally:
    """How many batches (and stored records) each reader inside the broker skipped, by topic (a metric).

    One per broker process, shared by the readers; ``/metrics`` reads it as
    ``mqbroker_unreadable_batches_total{reader, topic}``.
    """

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}

    def skipped(self, reader: str, batch: UnreadableBatch) -> dict[str, Any]:
        """Count ``batch`` for ``reader``; return the fields of ``SKIPPED_LOG_FORMAT`` for the reader's log line."""
        return self.skipped_at(reader, batch.topic, batch.partition, batch.first_offset, batch.last_offset,
                               batch.error, what="an undecodable batch")

    def skipped_at(self, reader: str, topic: str, partition: int, first_offset: int, last_offset: int,
                   error: Exception | str, what: str = "an undecodable record") -> dict[str, Any]:
        """Count a skipped batch or stored record at these offsets; return the log line's fields."""
        key = (reader, topic)
        self._counts[key] = self._counts.get(key, 0) + 1
        return {"reader": reader, "what": what, "topic": topic, "partition": partition, "first_offset": first_offset,
                "last_offset": last_offset, "skipped_total": self._counts[key], "error": error}

    def counts(self) -> Mapping[tuple[str, str], int]:
        """Skipped batches and records so far, by (reader, topic)."""
        return dict(self._counts)
