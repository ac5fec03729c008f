"""A Kafka-protocol target cluster as an outbound mirror writes it, on confluent-kafka (Twisted adapter).

An idempotent producer (``acks=all``): retries inside librdkafka add no duplicates, and a round
of records counts as written only when every one of them is acknowledged (``send`` flushes).
Topics are created with this cluster's partition count and grown with it; partition ``p`` is
written into partition ``p``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from mqbroker.connectors.mirror.kafka_client import REQUEST_TIMEOUT_S, ClientThread, KafkaClusterError, client_config
from mqbroker.connectors.mirror.settings import MirrorSettings
from mqbroker.connectors.reading import FetchedRecord

#: How long one round's records may take to be acknowledged before the round counts as failed.
FLUSH_TIMEOUT_S = 60.0
#: A full producer queue: wait this long for acknowledgements before queueing more.
QUEUE_FULL_WAIT_S = 0.05

#: One partition's records to write: (topic there, partition, records).
Run = tuple[str, int, Sequence[FetchedRecord]]


class KafkaTargetCluster:
    """An outbound mirror task's client of the Kafka-protocol cluster it writes to."""

    def __init__(self, reactor: Any, settings: MirrorSettings, client_id: str) -> None:
        assert settings.target_bootstrap is not None
        config = client_config(settings.target_bootstrap, settings.security, client_id)
        self._thread = ClientThread(reactor, f"kafka-target-{client_id}", f"Kafka target {settings.target_bootstrap}")
        self._producer = Producer({**config, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
        self._admin = AdminClient(config)

    def close(self) -> None:
        """Flush what is queued and close the producer (in its thread)."""
        self._thread.close(lambda: self._producer.flush(REQUEST_TIMEOUT_S))

    async def topics(self) -> dict[str, int]:
        """Every topic of the target cluster with its partition count."""
        metadata = await self._thread.call(self._producer.list_topics, None, REQUEST_TIMEOUT_S)
        return {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}

    async def shape_topic(self, topic: str, partitions: int, replication_factor: int, existing: int | None) -> None:
        """Create ``topic`` with ``partitions`` (``existing`` None: it does not exist there), or grow it to them."""
        def shaped() -> None:
            if existing is None:
                future = self._admin.create_topics([NewTopic(topic, num_partitions=partitions,
                                                             replication_factor=replication_factor)],
                                                   request_timeout=REQUEST_TIMEOUT_S)[topic]
                allowed = KafkaError.TOPIC_ALREADY_EXISTS
            elif existing < partitions:
                future = self._admin.create_partitions([NewPartitions(topic, partitions)],
                                                       request_timeout=REQUEST_TIMEOUT_S)[topic]
                allowed = KafkaError.INVALID_PARTITIONS
            else:
                return
            try:
                future.result()
            except Exception as error:  # the admin client's future fails with a KafkaException
                code = error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None
                if code != allowed:  # another task created or grew it meanwhile: fine
                    raise
        await self._thread.call(shaped)

    async def send(self, runs: Sequence[Run]) -> None:
        """Write ``runs`` and wait until the target acknowledged every record (``KafkaClusterError`` otherwise)."""
        await self._thread.call(self._send, runs)

    def _send(self, runs: Sequence[Run]) -> None:
        producer = self._producer
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _: Any) -> None:
            if error is not None:
                failures.append(error)

        for topic, partition, records in runs:
            for _, key, value, headers, timestamp_ms in records:
                while True:
                    try:
                        producer.produce(topic, value=value, key=key, partition=partition, timestamp=timestamp_ms,
                                         headers=list(headers) or None, on_delivery=delivered)
                        break
                    except BufferError:  # the producer's queue is full: let acknowledgements drain it
                        producer.poll(QUEUE_FULL_WAIT_S)
        unacknowledged = producer.flush(FLUSH_TIMEOUT_S)
        if failures:
            raise KafkaClusterError(f"the Kafka target refused {len(failures)} record(s): {failures[0].str()}")
        if unacknowledged:
            raise KafkaClusterError(f"{unacknowledged} record(s) not acknowledged by the Kafka target within "
                                    f"{FLUSH_TIMEOUT_S:.0f} s")
