"""Writing Spark rows to topics, exactly once across task retries and query restarts.

``write`` runs in Spark's Python workers. It gathers the task's rows per target partition,
asks ``delivery.plan_writes`` for deterministic batches (producer ids derived from the query,
the micro-batch and the task; see that module and docs/spark.md), encodes them with the
record codec and sends them to the partition leaders with acks=all, several in flight per
connection. A retried task or a replayed micro-batch sends the same batches again and the
broker's idempotent-producer check drops what it already has. With the ``transactional``
option the gathered rows go out as one transaction instead (``mqbroker_spark.transactional``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from mqbroker.client import Admin
from mqbroker.client.connection import BlockingConnection, raise_for_error_response
from mqbroker.errors import BrokerError, ErrorCode, TopicAlreadyExistsError, error_for_code
from mqbroker.protocols.native.messages import (
    MetadataTopic,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
)
from mqbroker.records.builder import BatchBuilder
from mqbroker_spark.delivery import PRODUCER_EPOCH, OutgoingRecord, PlannedBatch, TopicPartition, plan_writes, target_partition
from mqbroker_spark.options import OptionError, SinkOptions
from mqbroker_spark.transactional import write_transaction

#: Produce requests in flight per broker connection.
REQUESTS_IN_FLIGHT_MAX = 5
REQUEST_TIMEOUT_S = 30.0
ACKS_ALL = -1


@dataclass
class WrittenRecords(WriterCommitMessage):
    """What one task wrote: how many records (appended now or found already appended)."""

    records: int


def check_input_schema(schema: StructType, options: SinkOptions) -> None:
    """Refuse, before any task runs, input that cannot be written: no value, no topic, wrong types."""
    fields = {field.name: field.dataType for field in schema.fields}
    if "value" not in fields:
        raise OptionError("the sink needs a 'value' column (binary or string); key, topic, partition, headers are optional")
    if "topic" not in fields and options.topic is None:
        raise OptionError("give each row a 'topic' column or set .option('topic', ...)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (BinaryType, StringType)):
            raise OptionError(f"column {name!r} must be binary or string, not {fields[name].simpleString()}")


def _column(batch: pa.RecordBatch, name: str) -> list | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    column = batch.column(index)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


class PartitionWriter:
    """One task's writes: rows grouped per target partition, then the planned batches sent."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.admin = Admin(options.bootstrap, client_id="mqbroker-spark-writer")
        self.partition_counts: dict[str, int] = {}
        self.records: dict[TopicPartition, list[OutgoingRecord]] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        """Take one Arrow batch of input rows."""
        count = batch.num_rows
        values = _column(batch, "value")
        assert values is not None
        keys = _column(batch, "key") or [None] * count
        topics = batch.column("topic").to_pylist() if "topic" in batch.schema.names else [None] * count
        partitions = _column(batch, "partition") or [None] * count
        headers = _column(batch, "headers") or [None] * count
        for key, value, topic, partition, row_headers in zip(keys, values, topics, partitions, headers):
            topic = topic or self.options.topic
            if topic is None:
                raise OptionError("a row has no topic: fill the 'topic' column or set .option('topic', ...)")
            if partition is None:
                partition = target_partition(key, value, self._partition_count(topic))
            record_headers = tuple((header["key"], header["value"]) for header in row_headers or ())
            self.records.setdefault((topic, partition), []).append((key, value, record_headers))

    def _partition_count(self, topic: str) -> int:
        count = self.partition_counts.get(topic)
        if count is None:
            count = self.partition_counts[topic] = self._describe(topic)
        return count

    def _describe(self, topic: str) -> int:
        described = self._metadata_of(topic)
        if described.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            try:
                self.admin.create_topics([topic])
            except TopicAlreadyExistsError:
                pass  # another task created it first: that is what we wanted
            described = self._metadata_of(topic)
        if described.error_code != ErrorCode.NONE or not described.partitions:
            raise error_for_code(described.error_code, f"topic {topic!r} cannot be written: {described.error_message}")
        return len(described.partitions)

    def _metadata_of(self, topic: str) -> MetadataTopic:
        (described,) = self.admin.metadata([topic]).topics
        return described

    def flush(self, write_identity: str) -> int:
        """Send every planned batch and wait for all acknowledgements; return the records written."""
        planned = plan_writes(write_identity, self.records, self.options.batch_bytes_max)
        sender = _Sender(self._leaders())
        try:
            sender.send_all(planned)
        finally:
            sender.close()
        return sum(len(batch.records) for batch in planned)

    def _leaders(self) -> dict[TopicPartition, tuple[str, int]]:
        response = self.admin.metadata(sorted({topic for topic, _ in self.records}))
        brokers = {broker.node_id: (broker.host, broker.port) for broker in response.brokers}
        leaders = {}
        for topic in response.topics:
            for partition in topic.partitions:
                if partition.leader_id in brokers:
                    leaders[topic.name, partition.partition_index] = brokers[partition.leader_id]
        return leaders

    def close(self) -> None:
        """Close the admin connection."""
        self.admin.close()


class _Sender:
    """Sends planned batches to their leaders, a few in flight per connection, in plan order per connection."""

    def __init__(self, leaders: dict[TopicPartition, tuple[str, int]]) -> None:
        self.leaders = leaders
        self.connections: dict[tuple[str, int], BlockingConnection] = {}
        self.in_flight: dict[tuple[str, int], dict[int, PlannedBatch]] = {}

    def send_all(self, planned: Sequence[PlannedBatch]) -> None:
        """Send and wait: raises the first broker error (Spark then retries the task, safely)."""
        timestamp_ms = time.time_ns() // 1_000_000
        for batch in planned:
            address = self.leaders.get((batch.topic, batch.partition))
            if address is None:
                raise BrokerError(f"{batch.topic}/{batch.partition} has no leader (or does not exist)")
            connection = self._connection(address)
            pending = self.in_flight.setdefault(address, {})
            while len(pending) >= REQUESTS_IN_FLIGHT_MAX:
                self._receive(connection, pending)
            pending[connection.send(_request(batch, timestamp_ms))] = batch
        for address, pending in self.in_flight.items():
            while pending:
                self._receive(self.connections[address], pending)

    def _connection(self, address: tuple[str, int]) -> BlockingConnection:
        connection = self.connections.get(address)
        if connection is None:
            connection = BlockingConnection(address[0], address[1], "mqbroker-spark-writer", REQUEST_TIMEOUT_S)
            connection.socket.settimeout(REQUEST_TIMEOUT_S)
            self.connections[address] = connection
        return connection

    def _receive(self, connection: BlockingConnection, pending: dict[int, PlannedBatch]) -> None:
        events = connection.receive()
        if not events:
            raise BrokerError(f"no produce acknowledgement from {connection.address} within {REQUEST_TIMEOUT_S}s")
        for event in events:
            batch = pending.pop(event.correlation_id)
            response = raise_for_error_response(event.response)
            assert isinstance(response, ProduceResponse)
            for topic in response.topics:
                for result in topic.partitions:
                    if result.error_code != ErrorCode.NONE:
                        raise error_for_code(
                            result.error_code,
                            f"writing {batch.topic}/{batch.partition} failed: {result.error_message or 'no message'}",
                        )

    def close(self) -> None:
        """Close the leader connections."""
        for connection in self.connections.values():
            connection.close()


def _request(batch: PlannedBatch, timestamp_ms: int) -> ProduceRequest:
    builder = BatchBuilder(producer_id=batch.producer_id, producer_epoch=PRODUCER_EPOCH, base_sequence=batch.base_sequence)
    for key, value, headers in batch.records:
        builder.append(timestamp_ms, key, value, headers)
    partition = ProducePartition(partition_index=batch.partition, records=builder.build())
    return ProduceRequest(
        acks=ACKS_ALL,
        timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
        topics=(ProduceTopic(name=batch.topic, partitions=(partition,)),),
    )


def write_rows(
    options: SinkOptions, query_identity: str, batch_id: int, task_partition: int, batches: Iterator[pa.RecordBatch]
) -> WrittenRecords:
    """The body of both writers' ``write``: gather, then plan and send, or write one transaction."""
    writer = PartitionWriter(options)
    try:
        for batch in batches:
            writer.add(batch)
        if not options.transactional:
            return WrittenRecords(records=writer.flush(f"{query_identity}/{batch_id}/{task_partition}"))
        if not writer.records:
            return WrittenRecords(records=0)  # nothing to write, nothing a replay could duplicate
        return WrittenRecords(records=write_transaction(
            options.bootstrap, query_identity, task_partition, batch_id, writer.records, options.transaction_timeout_ms
        ))
    finally:
        writer.close()


class MqbrokerStreamWriter(DataSourceStreamArrowWriter):
    """The streaming sink: one write identity per (query, micro-batch, Spark partition)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        """Write one task's rows of one micro-batch (runs in a Python worker)."""
        context = TaskContext.get()
        assert context is not None, "write() runs inside a Spark task"
        query_id = context.getLocalProperty("sql.streaming.queryId")
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        assert query_id and batch_id is not None, "a streaming write carries its query id and batch id"
        return write_rows(self.options, query_id, int(batch_id), context.partitionId(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every record is durable once its task returned."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: Spark re-runs the batch with the same id, whose writes deduplicate (or, transactional,
        whose tasks skip what they committed and abort what they left open)."""


class MqbrokerBatchWriter(DataSourceArrowWriter):
    """The batch sink: one write identity per (job, Spark partition); retried tasks deduplicate (batch id 0)."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.job_id = str(uuid.uuid4())  # made once on the driver, pickled to every task

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WrittenRecords:
        """Write one task's rows (runs in a Python worker)."""
        context = TaskContext.get()
        assert context is not None, "write() runs inside a Spark task"
        return write_rows(self.options, self.job_id, 0, context.partitionId(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: every record is durable once its task returned."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to undo: records of finished tasks stay (committed, with the transactional option, task by task)."""
