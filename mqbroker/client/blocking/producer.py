"""The blocking ``Producer``: ``send`` appends to a batch; a background I/O thread sends it.

The caller's ``send`` only appends to the pure ``ProducerCore`` under a lock, so producing
overlaps with sending; ``ProducerIO`` (``producer_io.py``) drains the core, talks to the
partition leaders and completes each batch's ``RecordFuture``s.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence

from mqbroker.client.blocking.cluster import BlockingCluster, wall_clock_ms
from mqbroker.client.blocking.producer_io import ProducerIO
from mqbroker.client.partitioner import StickyPartitioner, partition_for_key
from mqbroker.client.producer import ProducerCore
from mqbroker.client.producer_batch import ProducerBatch, RecordMetadata
from mqbroker.client.producer_config import ProducerConfig, parse_acks
from mqbroker.client.security import ClientSecurity
from mqbroker.errors import BrokerError, RequestTimedOutError
from mqbroker.protocols.native.messages import Acks, InitProducerIdRequest, InitProducerIdResponse


class RecordFuture:
    """The delivery outcome of one record: ``result()`` waits for its ``RecordMetadata``."""

    __slots__ = ("_batch", "_index", "_timestamp_ms")

    def __init__(self, batch: ProducerBatch, index: int, timestamp_ms: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp_ms = timestamp_ms

    def done(self) -> bool:
        """True once the record is acknowledged or failed."""
        return self._batch.done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait (up to ``timeout`` seconds) and return where the record landed, or raise its error."""
        waiter = self._batch.waiter
        assert isinstance(waiter, threading.Event)
        if not waiter.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout}s")
        return self._batch.metadata(self._index, self._timestamp_ms)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait and return the record's error, or None if it was written."""
        try:
            self.result(timeout)
        except BrokerError as error:
            return error
        return None


class Producer:
    """Sends records to partition leaders in batches; ``send`` returns a ``RecordFuture``."""

    def __init__(
        self,
        bootstrap: str | Sequence[str] = "localhost:9393",
        *,
        acks: int | str = "all",
        linger_ms: int = 5,
        batch_size: int = 256 * 1024,
        compression: str = "none",
        enable_idempotence: bool | None = None,
        max_in_flight: int = 5,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        buffer_bytes_max: int = 64 * 1024 * 1024,
        max_block_ms: int = 60_000,
        client_id: str = "mqbroker-producer",
        seed: int | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        parsed_acks = parse_acks(acks)
        if enable_idempotence is None:
            enable_idempotence = parsed_acks != Acks.NONE  # on by default wherever it can be
        self._config = ProducerConfig(
            acks=parsed_acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
            compression=compression,
            enable_idempotence=enable_idempotence,
            max_in_flight=max_in_flight,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            buffer_bytes_max=buffer_bytes_max,
        ).validated()
        rng = random.Random(seed)
        self._core = ProducerCore(self._config, rng, new_waiter=threading.Event)
        self._sticky = StickyPartitioner(rng)
        self._max_block_s = max_block_ms / 1000
        self._cluster = BlockingCluster(bootstrap, client_id, request_timeout_ms / 1000, security)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._io_error: BaseException | None = None
        if enable_idempotence:
            identity = self._cluster.any_connection().request(InitProducerIdRequest(), self._cluster.timeout_s)
            assert isinstance(identity, InitProducerIdResponse)
            self._core.set_producer_identity(identity.producer_id, identity.producer_epoch)
        self._core.on_batch_full = self._batch_full
        self._io = ProducerIO(self._core, self._cluster, self._lock, self._changed)
        self._thread = threading.Thread(target=self._io.run, name="mqbroker-producer-io", daemon=True)
        self._thread.start()

    def _batch_full(self, topic: str, partition: int) -> None:
        count = self._cluster.view.partition_count(topic)
        self._sticky.batch_closed(topic, partition, count or 1)

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Queue one record; the future resolves to its ``RecordMetadata`` once acknowledged."""
        if partition is None:
            count = self._cluster.view.partition_count(topic)
            if count is None:
                count = self._wait_for_topic(topic)
            partition = partition_for_key(key, count) if key is not None else self._sticky.partition(topic, count)
        now_ms = wall_clock_ms()  # the batch's age counts from now, whatever timestamp the record carries
        if timestamp_ms is None:
            timestamp_ms = now_ms
        core = self._core
        with self._lock:
            if self._closed:
                raise RuntimeError("send() on a closed producer")
            if core.queued_bytes > self._config.buffer_bytes_max:
                self._wait_for_buffer_space()
            batch, index = core.append(topic, partition, timestamp_ms, key, value, headers, now_ms)
        if index == 0:
            self._io.wake()  # a new batch: its linger timer starts, and the previous one is due
        return RecordFuture(batch, index, timestamp_ms)

    def _wait_for_topic(self, topic: str) -> int:
        deadline = time.monotonic() + self._max_block_s
        with self._lock:
            self._core.stale_topics.add(topic)
            self._io.wake()
            while (count := self._cluster.view.partition_count(topic)) is None:
                error = self._cluster.view.topic_error(topic)
                if error is not None and not error.retriable and error.code != 3:
                    raise error
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RequestTimedOutError(f"no metadata for topic {topic!r} within max_block_ms")
                self._changed.wait(min(remaining, 0.1))
                self._core.stale_topics.add(topic)
                self._io.wake()
        return count

    def _wait_for_buffer_space(self) -> None:
        deadline = time.monotonic() + self._max_block_s
        while self._core.queued_bytes > self._config.buffer_bytes_max:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RequestTimedOutError("the producer's buffer stayed full for max_block_ms")
            self._changed.wait(remaining)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._core.flush()
            self._io.wake()
            while self._core.has_pending:
                if self._io.error is not None:
                    raise self._io.error
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"flush did not finish within {timeout}s")
                self._changed.wait(0.05 if remaining is None else min(remaining, 0.05))
                if self._core.has_pending:
                    self._core.flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the I/O thread and close the connections."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
            self._io.stop()
            self._thread.join()
            self._cluster.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
