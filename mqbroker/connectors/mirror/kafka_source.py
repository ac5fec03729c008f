"""A Kafka-protocol source cluster as a mirror task reads it, on confluent-kafka (Twisted adapter).

One consumer without a group (``assign``/``seek`` to the task's positions, nothing committed),
``isolation.level=read_committed``: aborted transactions and markers never reach the mirror.
The records of each partition are encoded again as batches that keep their source offsets
(``kafka_batches``), so the task copies them as it copies native batches. The consumer's position
after a round says where reading goes on past the markers and aborted records it passed over.

Delivery: a copy from a Kafka cluster is exactly-once while its owner runs; after a crash of the
owner the batches rebuilt now need not be cut where those written before the crash were, so the
reconciliation may stop at the first difference and copy again from there (at-least-once).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from zope.interface import implementer

from mqbroker import errors
from mqbroker.connectors.mirror.kafka_batches import ConsumedRecord, batches_of
from mqbroker.connectors.mirror.kafka_client import REQUEST_TIMEOUT_S, ClientThread, client_config
from mqbroker.connectors.mirror.settings import MirrorSettings
from mqbroker.connectors.mirror.source import Fetched, IMirrorSource
from mqbroker.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

Partition = tuple[str, int]
#: Records one round takes from the consumer at most (what librdkafka prefetched meanwhile waits).
ROUND_RECORDS_MAX = 10_000
#: After the consumer was (re)assigned, the first round waits at least this long for its first fetch.
ASSIGNED_WAIT_MS = 1_000


@implementer(IMirrorSource)
class KafkaSourceCluster:
    """A mirror task's client of a Kafka-protocol source cluster (read_committed)."""

    def __init__(self, reactor: Any, settings: MirrorSettings, client_id: str) -> None:
        config = client_config(settings.source_bootstrap, settings.security, client_id)
        self._thread = ClientThread(reactor, f"kafka-source-{client_id}", f"Kafka source {settings.source_bootstrap}")
        self._consumer = Consumer({**config, "group.id": client_id, "enable.auto.commit": False,
                                   "enable.auto.offset.store": False, "isolation.level": "read_committed",
                                   "auto.offset.reset": "error", "enable.partition.eof": False})
        self._admin = AdminClient(config)
        #: The offset the consumer hands out next, per assigned partition.
        self._next: dict[Partition, int] = {}

    def close(self) -> None:
        """Close the consumer (in its thread, after what is queued)."""
        self._thread.close(self._consumer.close)

    async def topics(self) -> dict[str, int]:
        """Every topic of the source cluster with its partition count."""
        metadata = await self._thread.call(self._consumer.list_topics, None, REQUEST_TIMEOUT_S)
        return {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}

    async def topic_configs(self, topic: str) -> dict[str, str]:
        """A source topic's effective configuration."""
        def describe() -> dict[str, str]:
            (future,) = self._admin.describe_configs([ConfigResource("topic", topic)],
                                                     request_timeout=REQUEST_TIMEOUT_S).values()
            return {name: entry.value for name, entry in future.result().items() if entry.value is not None}
        return await self._thread.call(describe)

    async def offset(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """The earliest (-2) or latest (-1) offset of a source partition."""
        assert timestamp_ms in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP), timestamp_ms
        low, high = await self._thread.call(self._consumer.get_watermark_offsets, TopicPartition(topic, partition),
                                            REQUEST_TIMEOUT_S)
        return int(low if timestamp_ms == EARLIEST_TIMESTAMP else high)

    async def fetch(self, positions: Mapping[Partition, int], wait_ms: int,
                    partition_bytes: int) -> dict[Partition, Fetched]:
        """Committed records from each position, as batches keeping their offsets (long-poll up to ``wait_ms``).

        ``partition_bytes`` does not apply: librdkafka sizes its own fetches; a round takes at most
        ``ROUND_RECORDS_MAX`` records.
        """
        return await self._thread.call(self._fetch, dict(positions), wait_ms)

    def _fetch(self, positions: dict[Partition, int], wait_ms: int) -> dict[Partition, Fetched]:
        """In the client's thread: move the consumer to ``positions``, take what it has, one batch run per partition."""
        consumer = self._consumer
        moved = {tp: offset for tp, offset in positions.items() if self._next.get(tp) != offset}
        if moved and set(positions) == set(self._next):
            try:
                for (topic, partition), offset in moved.items():
                    consumer.seek(TopicPartition(topic, partition, offset))
                    self._next[topic, partition] = offset
                moved = {}
            except KafkaException:  # a partition whose fetching has not started cannot seek yet: assign again
                pass
        if moved or set(positions) != set(self._next):
            consumer.assign([TopicPartition(topic, partition, offset) for (topic, partition), offset in positions.items()])
            self._next = dict(positions)
            wait_ms = max(wait_ms, ASSIGNED_WAIT_MS)
        messages = consumer.consume(ROUND_RECORDS_MAX, 0)
        if not messages:
            first = consumer.poll(wait_ms / 1000.0)
            if first is not None:
                messages = [first, *consumer.consume(ROUND_RECORDS_MAX - 1, 0)]
        records: dict[Partition, list[ConsumedRecord]] = {}
        failed: dict[Partition, errors.BrokerError] = {}
        for message in messages:
            problem = message.error()
            tp = (message.topic(), message.partition())
            if problem is not None:
                if tp[0] is not None and tp in positions:
                    failed[tp] = _broker_error(problem, tp)
                continue
            headers = tuple((name, value) for name, value in (message.headers() or ()))
            records.setdefault(tp, []).append((message.offset(), message.timestamp()[1], message.key(),
                                               message.value(), headers))
        for tp, run in records.items():
            self._next[tp] = run[-1][0] + 1
        # The consumer's position is past the markers and aborted records it passed over as well.
        for found in consumer.position([TopicPartition(*tp) for tp in positions]):
            tp = (found.topic, found.partition)
            self._next[tp] = max(self._next[tp], found.offset)
        fetched: dict[Partition, Fetched] = {}
        for tp in positions:
            if tp in failed:
                fetched[tp] = Fetched(error=failed[tp])
                continue
            _, high = consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
            fetched[tp] = Fetched(records=batches_of(records.get(tp, ())), high_watermark=high,
                                  next_position=self._next[tp])
        return fetched

    async def groups(self) -> list[str]:
        """Every consumer group of the source cluster."""
        def listed() -> list[str]:
            result = self._admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S).result()
            return sorted(group.group_id for group in result.valid)
        return await self._thread.call(listed)

    async def committed_offsets(self, group_id: str) -> dict[Partition, int]:
        """Every offset ``group_id`` committed in the source cluster."""
        def committed() -> dict[Partition, int]:
            futures = self._admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group_id)],
                                                              request_timeout=REQUEST_TIMEOUT_S)
            found = futures[group_id].result()
            return {(item.topic, item.partition): item.offset for item in found.topic_partitions
                    if item.error is None and item.offset >= 0}
        return await self._thread.call(committed)


def _broker_error(problem: KafkaError, tp: Partition) -> errors.BrokerError:
    """A consumer error for one partition, as the mirror task handles it."""
    text = f"Kafka source {tp[0]}-{tp[1]}: {problem.str()}"
    if problem.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET):
        return errors.OffsetOutOfRangeError(text)
    return errors.LeaderNotAvailableError(text)

