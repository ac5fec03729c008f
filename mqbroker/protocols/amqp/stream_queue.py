"""Stream queues: append-only, every consumer replays the log from its own ``x-stream-offset``."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

from mqbroker import limits
from mqbroker.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from mqbroker.protocols.amqp.actions import Outcome
from mqbroker.protocols.amqp.queue_arguments import StreamOffset, StreamStart
from mqbroker.protocols.amqp.queue_state import QueuedMessage
from mqbroker.protocols.amqp.queues import (
    BaseQueue,
    Consumer,
    ConsumerKey,
    QueueHost,
    decode_fetched,
    delivery_of,
)
from mqbroker.protocols.amqp.stored import QueueDeclaration


@dataclasses.dataclass(slots=True)
class _StreamReader:
    consumer: Consumer
    offset: int
    buffer: list[QueuedMessage] = dataclasses.field(default_factory=list)
    fetching: bool = False


class StreamQueue(BaseQueue):
    """An append-only queue: every consumer replays the log from its own offset."""

    def __init__(self, host: QueueHost, declaration: QueueDeclaration, owner: int | None) -> None:
        super().__init__(host, declaration, owner)
        self._readers: dict[ConsumerKey, _StreamReader] = {}
        self.log_start = 0
        self.log_end = 0

    @property
    def message_count(self) -> int:
        """Messages in the stream's log."""
        return max(0, self.log_end - self.log_start)

    def _appended(self, base_offset: int, log_end: int, messages: list[QueuedMessage]) -> None:
        self.log_end = max(self.log_end, log_end)

    async def add_consumer(self, consumer: Consumer, start: StreamOffset) -> None:
        """Attach a consumer reading from ``start``."""
        offset = await self._resolve(start)
        self.consumers[consumer.key] = consumer
        self.had_consumers = True
        self._readers[consumer.key] = _StreamReader(consumer=consumer, offset=offset)
        self.dispatch()

    async def _resolve(self, start: StreamOffset) -> int:
        broker, principal = self.host.broker, self.host.principal
        if start.start is StreamStart.OFFSET:
            first = await broker.list_offset(principal, self.topic, 0, EARLIEST_TIMESTAMP)
            return max(start.value, first.offset)
        if start.start is StreamStart.FIRST:
            return (await broker.list_offset(principal, self.topic, 0, EARLIEST_TIMESTAMP)).offset
        latest = (await broker.list_offset(principal, self.topic, 0, LATEST_TIMESTAMP)).offset
        if start.start is StreamStart.NEXT:
            return latest
        if start.start is StreamStart.LAST:
            return max(0, latest - 1)
        found = await broker.list_offset(principal, self.topic, 0, start.value)
        return latest if found.offset < 0 else found.offset

    def remove_consumer(self, key: ConsumerKey) -> None:
        """Detach a consumer."""
        self.consumers.pop(key, None)
        self._readers.pop(key, None)

    def settle(self, offsets: list[Hashable], outcome: Outcome) -> None:
        """Streams keep no per-message state: settling only reopens prefetch windows."""

    def release(self, holders: set[ConsumerKey]) -> None:
        """Nothing is leased in a stream."""

    async def purge(self) -> int:
        """Streams are append-only; retention trims them."""
        return 0

    def housekeep(self, now_ms: int) -> None:
        """Nothing expires per message in a stream."""

    def dispatch(self) -> None:
        """Deliver buffered messages within windows; fetch more for readers whose buffer ran dry."""
        for reader in list(self._readers.values()):
            self._deliver(reader)

    def _deliver(self, reader: _StreamReader) -> None:
        consumer = reader.consumer
        sent = False
        while reader.buffer and consumer.window() > 0:
            message = reader.buffer.pop(0)
            consumer.session.connection.deliver(consumer.channel, consumer.tag, delivery_of(self.name, message, False))
            reader.offset = message.offset + 1
            sent = True
        if sent:
            consumer.session.flush()
        idle = not reader.buffer and not reader.fetching and not self._backing_off
        if idle and consumer.key in self._readers and not self.deleted:
            reader.fetching = True
            fetched = self._fetch(reader.offset, limits.amqp_log_fetch_wait_ms_max)
            fetched.addCallback(self._fetched, reader)
            fetched.addErrback(self._fetch_failed)
            fetched.addBoth(self._fetch_finished, reader)

    def _fetched(self, results: list[Any], reader: _StreamReader) -> None:
        [result] = results
        if result.error is not None:
            raise result.error
        self.log_start, self.log_end = result.log_start_offset, result.high_watermark
        reader.offset = max(reader.offset, result.log_start_offset)
        messages, unreadable = decode_fetched(result.records, topic=self.topic)
        reader.buffer = [message for message in messages if message.offset >= reader.offset]
        for batch in unreadable:
            if batch.last_offset >= reader.offset:
                self._skip_unreadable(batch)
            if not reader.buffer and batch.first_offset <= reader.offset <= batch.last_offset:
                reader.offset = batch.last_offset + 1  # nothing to deliver before it: read on after it

    def _fetch_finished(self, _: Any, reader: _StreamReader) -> None:
        reader.fetching = False
        if reader.consumer.key in self._readers:
            self._deliver(reader)
