"""Reading topics into Spark: the stream reader, the batch reader and the per-range read.

Planning (offsets, partitions) runs where Spark plans the query and asks the brokers with
the blocking ``Admin``; ``read`` runs in Spark's Python workers, each with its own blocking
``Consumer`` on one offset range. By default (``isolationLevel=read_committed``) a batch ends at
each partition's last stable offset and its reads leave out aborted transactions' records (and
the markers, which hold offsets but no row), as Spark's Kafka source does with
``kafka.isolation.level=read_committed``. Rows leave as Arrow record batches, which Spark takes
without converting row by row. A batch whose records do not decode is logged (topic, partition,
offsets) in the worker's log and passed over: the query goes on with the records after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from mqbroker.client import Admin, Consumer, Message
from mqbroker.errors import BrokerError
from mqbroker.records.readable import UnreadableBatch
from mqbroker_spark.offsets import EARLIEST, LATEST, OffsetRange, TopicOffsets, from_json, limit_end, plan_ranges, to_json
from mqbroker_spark.options import OptionError, SourceOptions

#: Rows per Arrow batch handed to Spark.
ROWS_PER_ARROW_BATCH = 8192
#: How long a read waits for records it was promised (below the high watermark) before failing.
READ_STALL_S_MAX = 60.0

log = logging.getLogger(__name__)

_HEADER = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
ARROW_SCHEMA = pa.schema(_FIELDS)
ARROW_SCHEMA_WITH_HEADERS = pa.schema([*_FIELDS, pa.field("headers", pa.list_(pa.field("element", _HEADER)))])


class SourceCatalog:
    """The subscribed partitions and their offsets, looked up with one ``Admin`` connection."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.admin = Admin(options.bootstrap, client_id="mqbroker-spark-planner")

    def partitions(self) -> dict[str, int]:
        """Partition count of every subscribed topic that exists now (missing topics have none yet)."""
        names = self.options.topics or None
        response = self.admin.metadata(names)
        return {
            topic.name: len(topic.partitions)
            for topic in response.topics
            if topic.error_code == 0 and topic.partitions and self.options.wants(topic.name)
        }

    def offsets(self, timestamp_ms: int, counts: dict[str, int] | None = None) -> TopicOffsets:
        """Each partition's offset for ``timestamp_ms`` (EARLIEST, LATEST, or a time: the first record at or after it)."""
        counts = self.partitions() if counts is None else counts
        offsets: TopicOffsets = {}
        for topic, count in counts.items():
            offsets[topic] = {}
            for partition in range(count):
                offset = self._list_offset(topic, partition, timestamp_ms)
                if offset < 0:  # no record at or after the time: start at the end
                    offset = self._list_offset(topic, partition, LATEST)
                offsets[topic][partition] = offset
        return offsets

    def resolve(self, spec: str | TopicOffsets, counts: dict[str, int]) -> TopicOffsets:
        """Concrete offsets for an option value: earliest, latest or JSON (where -2/-1 mean the same)."""
        if spec == "earliest":
            return self.offsets(EARLIEST, counts)
        if spec == "latest":
            return self.offsets(LATEST, counts)
        assert isinstance(spec, dict)
        resolved: TopicOffsets = {}
        for topic, partitions in spec.items():
            if topic not in counts:
                raise OptionError(f"offsets name topic {topic!r}, which is not subscribed or does not exist")
            resolved[topic] = {}
            for partition, offset in partitions.items():
                if partition >= counts[topic]:
                    raise OptionError(f"offsets name {topic}/{partition}, but {topic!r} has {counts[topic]} partitions")
                if offset < 0:
                    offset = self._list_offset(topic, partition, offset)
                resolved[topic][partition] = offset
        return resolved

    def _list_offset(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """As ``Admin.list_offset`` at the source's isolation level (LATEST: the last stable offset if committed)."""
        return self.admin.list_offset(topic, partition, timestamp_ms, self.options.isolation_level)

    def starting_offsets(self) -> TopicOffsets:
        """Where a new query starts: ``startingTimestamp`` if given, else ``startingOffsets``."""
        counts = self.partitions()
        if self.options.starting_timestamp_ms is not None:
            return self.offsets(self.options.starting_timestamp_ms, counts)
        starting = self.resolve(self.options.starting, counts)
        # Partitions the JSON leaves out start where a new partition starts: at the beginning.
        earliest = self.offsets(EARLIEST, counts) if isinstance(self.options.starting, dict) else {}
        for topic, partitions in earliest.items():
            for partition, offset in partitions.items():
                starting.setdefault(topic, {}).setdefault(partition, offset)
        return starting

    def close(self) -> None:
        """Close the connection."""
        self.admin.close()


class MqbrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offsets: each batch reads from the previous end to the high watermark (or a limit)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._catalog: SourceCatalog | None = None
        self._available_now_end: TopicOffsets | None = None

    @property
    def catalog(self) -> SourceCatalog:
        """The planner's broker connection, opened on first use (the reader is pickled before that)."""
        if self._catalog is None:
            self._catalog = SourceCatalog(self.options)
        return self._catalog

    def initialOffset(self) -> dict:
        """Where a query without a checkpoint starts."""
        return to_json(self.catalog.starting_offsets())

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as Spark's row limit, or everything."""
        if self.options.records_per_trigger_max is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.records_per_trigger_max)

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the end of an availableNow run: the high watermarks right now."""
        self._available_now_end = self.catalog.offsets(LATEST)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The high watermarks (capped by availableNow's end and the read limit); new partitions included."""
        begin = from_json(start)
        latest = self._available_now_end if self._available_now_end is not None else self.catalog.offsets(LATEST)
        end: TopicOffsets = {topic: dict(partitions) for topic, partitions in latest.items()}
        for topic, partitions in begin.items():  # a partition never moves backwards, nor disappears
            for partition, offset in partitions.items():
                current = end.setdefault(topic, {})
                current[partition] = max(offset, current.get(partition, offset))
        if isinstance(limit, ReadMaxRows):
            end = limit_end(begin, end, limit.max_rows)
        return to_json(end)

    def reportLatestOffset(self) -> dict | None:
        """The high watermarks, for the query's progress report."""
        return to_json(self.catalog.offsets(LATEST))

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """One input partition per log partition with new records, large ranges split."""
        return plan_ranges(from_json(start), from_json(end), self.options.records_per_range_max)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of one range, as Arrow batches (runs in a Python worker)."""
        assert isinstance(partition, OffsetRange), partition
        return read_range(self.options, partition)

    def stop(self) -> None:
        """Close the planner's connection."""
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None


class MqbrokerBatchReader(DataSourceReader):
    """A batch read of fixed ranges: ``startingOffsets`` (or a time) up to ``endingOffsets``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """The ranges, resolved against the brokers when Spark plans the read."""
        catalog = SourceCatalog(self.options)
        try:
            start = catalog.starting_offsets()
            counts = {topic: len(partitions) for topic, partitions in start.items()}
            end = catalog.resolve(self.options.ending, counts)
        finally:
            catalog.close()
        ranges = plan_ranges(start, end, self.options.records_per_range_max)
        # Spark needs at least one input partition; an empty range reads nothing.
        return ranges or [OffsetRange(topic="", partition=0, start=0, end=0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The records of one range, as Arrow batches (runs in a Python worker)."""
        assert isinstance(partition, OffsetRange), partition
        return read_range(self.options, partition)


def read_range(options: SourceOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Fetch ``[start, end)`` of one partition and yield it as Arrow batches of the source schema."""
    if offset_range.record_count <= 0:
        return
    target = (offset_range.topic, offset_range.partition)
    consumer = Consumer(options.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=200,
                        client_id="mqbroker-spark-reader", on_unreadable=skipped_batch,
                        isolation_level=options.isolation_level)
    try:
        consumer.assign([target])
        consumer.seek(target, offset_range.start)
        pending: list[Message] = []
        stalled_since, position = time.monotonic(), offset_range.start
        while position < offset_range.end:
            messages = consumer.poll(0.5)
            if consumer.position(target) > position:  # read_committed moves on over markers and aborted records too
                stalled_since, position = time.monotonic(), consumer.position(target)
            if not messages:
                if time.monotonic() - stalled_since > READ_STALL_S_MAX:
                    raise BrokerError(
                        f"{offset_range.topic}/{offset_range.partition} stopped at offset {position}"
                        f" before {offset_range.end}, which it had reached when the batch was planned"
                    )
                continue
            if messages[-1].offset >= offset_range.end:
                messages = [message for message in messages if message.offset < offset_range.end]
            pending += messages
            if len(pending) >= ROWS_PER_ARROW_BATCH:
                yield to_arrow(pending, options.include_headers)
                pending = []
        if pending:
            yield to_arrow(pending, options.include_headers)
    finally:
        consumer.close()


def skipped_batch(batch: UnreadableBatch) -> None:
    """A batch of the range that does not decode: logged with where it is, its records left out."""
    log.warning("mqbroker source skipped an undecodable batch of %s-%d at offsets %d..%d: %s", batch.topic,
                batch.partition, batch.first_offset, batch.last_offset, batch.error)


def to_arrow(messages: list[Message], include_headers: bool) -> pa.RecordBatch:
    """Messages as one Arrow batch: column-wise, with no per-row Spark conversion."""
    topics, partitions, offsets, keys, values, headers, timestamps = zip(*messages)
    timestamps_us = pc.multiply(pa.array(timestamps, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.array(topics, pa.string()),
        pa.array(partitions, pa.int32()),
        pa.array(offsets, pa.int64()),
        timestamps_us,
        pa.nulls(len(messages), pa.int32()).fill_null(0),  # CreateTime: the broker keeps producer timestamps
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    header_lists = [[{"key": name, "value": value} for name, value in record_headers] for record_headers in headers]
    columns.append(pa.array(header_lists, ARROW_SCHEMA_WITH_HEADERS.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_WITH_HEADERS)
