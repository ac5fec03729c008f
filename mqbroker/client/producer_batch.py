"""What the producer core hands its drivers: batches (with their delivery outcome) and produce plans."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from mqbroker.client.batch_records import BatchRecords
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.messages import ProducePartition, ProduceRequest, ProduceTopic


class RecordMetadata(NamedTuple):
    """Where a produced record landed (offset -1 with acks=0, which learns nothing).

    A named tuple rather than a dataclass: one is built per record, and a tuple is the cheapest
    immutable value Python builds.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int



@dataclass(slots=True)
class DeliveryCounts:
    """How many of a producer's records have been acknowledged and how many failed, since it was made.

    Kafka's producer keeps the same figures as the ``record-send-total`` and ``record-error-total`` metrics;
    a caller that only needs totals (a benchmark) reads these instead of keeping a future per record.
    """

    acknowledged: int = 0
    failed: int = 0
    #: The first failure, if any record failed.
    first_error: BrokerError | None = None


class ProducerBatch:
    """The records of one partition sent (and retried) together; its outcome covers them all.

    ``waiter`` belongs to the driver (a threading event, a list of Deferreds): the core never
    touches it. ``base_offset`` and ``log_append_time_ms`` are set on success, ``error`` on
    failure; ``done`` is set either way.
    """

    __slots__ = (
        "topic",
        "partition",
        "builder",
        "created_ms",
        "payload",
        "base_sequence",
        "record_count",
        "size_bytes",
        "attempts",
        "retry_at_ms",
        "sent_to",
        "awaiting_leader",
        "waiter",
        "base_offset",
        "log_append_time_ms",
        "error",
        "done",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        builder: BatchRecords | None,
        base_sequence: int,
        created_ms: int,
        waiter: object,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.created_ms = created_ms
        self.payload = b""
        self.base_sequence = base_sequence
        self.record_count = 0
        self.size_bytes = 0
        self.attempts = 0
        self.retry_at_ms = 0
        #: The node the batch was last sent to, and whether that node failed as its leader.
        self.sent_to = -1
        self.awaiting_leader = False
        self.waiter = waiter
        self.base_offset = -1
        self.log_append_time_ms = -1
        self.error: BrokerError | None = None
        self.done = False

    def metadata(self, index: int, timestamp_ms: int) -> RecordMetadata:
        """The metadata of record ``index`` (raise the batch's error if it failed)."""
        assert self.done
        if self.error is not None:
            raise self.error
        offset = -1 if self.base_offset < 0 else self.base_offset + index
        timestamp = timestamp_ms if self.log_append_time_ms < 0 else self.log_append_time_ms
        return RecordMetadata(self.topic, self.partition, offset, timestamp)


@dataclass(slots=True, kw_only=True)
class ProducePlan:
    """One produce request to send to ``node_id``: a batch per partition."""

    node_id: int
    acks: int
    timeout_ms: int
    batches: list[ProducerBatch]
    transactional_id: str | None = None
    add_to_transaction: bool = False

    def request(self) -> ProduceRequest:
        """The ProduceRequest carrying this plan's batches."""
        by_topic: dict[str, list[ProducePartition]] = {}
        for batch in self.batches:
            partitions = by_topic.setdefault(batch.topic, [])
            partitions.append(ProducePartition(partition_index=batch.partition, records=batch.payload))
        topics = tuple(ProduceTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
        return ProduceRequest(acks=self.acks, timeout_ms=self.timeout_ms, transactional_id=self.transactional_id,
                              topics=topics, add_to_transaction=self.add_to_transaction)
