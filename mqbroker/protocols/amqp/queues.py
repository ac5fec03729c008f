"""Queues at run time: appending to a queue's log topic, reading it back and dispatching to consumers.

A classic queue reads its topic from the ``QueueState`` cursor with one long-poll fetch at a
time (while it has consumers or a basic.get waits), leases messages to consumers within their
prefetch windows, round robin, and settles them. A stream queue keeps no per-message state:
each consumer reads the log from its own ``x-stream-offset``. Appends made in one reactor turn
go to the broker as one record batch (pika pipelines publishes), each caller's Deferred firing
with its offset once the batch is durable.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from mqbroker.interfaces import IBroker
from mqbroker.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, FetchPosition, Principal, ProduceResult
from mqbroker.protocols.amqp.actions import Delivery, Outcome
from mqbroker.protocols.amqp.queue_state import (
    DeadLetter,
    QueuedMessage,
    QueueState,
    StreamOffset,
    StreamStart,
    parse_expiration,
)
from mqbroker.protocols.amqp.stored import (
    DecompressionBudget,
    FetchBudgetSpent,
    QueueDeclaration,
    StoredMessage,
    append_message,
    queue_topic,
    queued_message,
)
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.readable import UnreadableBatch, readable_batches

#: Ready messages a classic queue reads ahead of its consumers.
READ_AHEAD_MESSAGES = 2_000
#: How long a queue's fetch waits for new messages.
FETCH_WAIT_MS = 1_000
#: Bytes one fetch may return.
FETCH_BYTES_MAX = 4 * 1024 * 1024
#: How long publishes wait for a durable append.
PRODUCE_TIMEOUT_MS = 30_000

ConsumerKey = tuple[int, int, str | None]  # (session id, channel, consumer tag; None for basic.get)


class Subscriber(Protocol):
    """What a queue needs from the session that owns a consumer."""

    session_id: int
    connection: Any  # mqbroker.protocols.amqp.channel.Connection

    def flush(self) -> None: ...

    def delivery_window(self, channel: int, consumer_tag: str) -> int: ...


@dataclasses.dataclass(slots=True)
class Consumer:
    """A consumer attached to a queue."""

    session: Subscriber
    channel: int
    tag: str
    no_ack: bool
    exclusive: bool = False  # no other consumer may join while it is attached

    @property
    def key(self) -> ConsumerKey:
        """The lease holder identity of this consumer."""
        return (self.session.session_id, self.channel, self.tag)

    def window(self) -> int:
        """How many more deliveries its prefetch allows."""
        return int(self.session.delivery_window(self.channel, self.tag))


def decode_fetched(records: bytes, skip_below: int = 0, topic: str = "") -> tuple[list[QueuedMessage], list[UnreadableBatch]]:
    """Whole record batches from a fetch → the queue's view of their records and the batches that do not decode
    (batches wholly below ``skip_below`` are not decoded: the queue has them already).

    Stops early, at a batch boundary, once the fetch's decompression budget is spent (the next fetch reads on).
    Raises ``CorruptRecordError`` only for a batch header that does not read (nothing after it can be found).
    """
    messages: list[QueuedMessage] = []
    unreadable: list[UnreadableBatch] = []
    budget = DecompressionBudget()
    batches = readable_batches(records, skip_below, topic=topic, partition=0, skipped=unreadable.append,
                               decode=lambda batch, header: budget.decode(batch, header, queued_message, _message_bytes))
    try:
        for _, decoded in batches:
            messages += decoded
    except FetchBudgetSpent:
        pass
    return messages, unreadable


def _message_bytes(message: QueuedMessage) -> int:
    stored: StoredMessage = message.payload
    return len(stored.body) + len(stored.properties_raw) + len(stored.routing_key) + len(stored.exchange)


def delivery_of(queue: str, message: QueuedMessage, redelivered: bool) -> Delivery:
    """What the connection sends for a queued message."""
    stored: StoredMessage = message.payload
    return Delivery(queue=queue, message_ref=message.offset, redelivered=redelivered, exchange=stored.exchange,
                    routing_key=stored.routing_key, properties_raw=stored.properties_raw, body=stored.body)


class QueueHost(Protocol):
    """What queues need from their virtual host."""

    broker: IBroker
    principal: Principal
    reactor: Any

    def now_ms(self) -> int: ...

    def state_changed(self, queue: ClassicQueue) -> None: ...

    def dead_letter(self, queue: ClassicQueue, dead: DeadLetter) -> None: ...

    def skip_unreadable(self, reader: str, batch: UnreadableBatch) -> None: ...


class BatchStored:
    """Whether one appended batch became durable; every message appended to it shares this.

    Cheaper than a Deferred per message: listeners are plain callables told ``True``
    (durable) or ``False`` (refused), in the order they were added.
    """

    __slots__ = ("_listeners", "outcome")

    def __init__(self) -> None:
        self._listeners: list[Callable[[bool], None]] = []
        self.outcome: bool | None = None  # None while the batch is in flight

    def when_settled(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(stored)`` once the batch's fate is known (at once if it is)."""
        if self.outcome is None:
            self._listeners.append(listener)
        else:
            listener(self.outcome)

    def settle(self, stored: bool) -> None:
        """The broker stored (or refused) the batch."""
        assert self.outcome is None, "a batch settles once"
        self.outcome = stored
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener(stored)


def all_settled(batches: Iterable[BatchStored]) -> Deferred[bool]:
    """Fires with True once every batch is durable, False as soon as one was refused."""
    unique = list(dict.fromkeys(batches))
    settled: Deferred[bool] = Deferred()
    remaining = [len(unique)]

    def one_settled(stored: bool) -> None:
        if settled.called:
            return
        remaining[0] -= 1
        if not stored or remaining[0] == 0:
            settled.callback(stored)

    if not unique:
        settled.callback(True)
    for batch in unique:
        batch.when_settled(one_settled)
    return settled


class _Appender:
    """Coalesces the appends of one reactor turn into one batch per queue topic.

    Classic queues append *early*: the batch is produced with acks=0, so its offsets are known
    at once and its messages go to consumers before the fsync (as RabbitMQ delivers before its
    disk write); the batch counts as stored, and its confirms go out, only once the queue's
    reads see the high watermark pass it (``durable_through``). Stream consumers read only
    durable records, so stream queues produce with acks=-1 and settle on the produce result.
    """

    log = Logger()

    def __init__(self, host: QueueHost, topic: str, on_appended: Callable[[int, int, list[QueuedMessage]], None],
                 early: bool) -> None:
        self._host = host
        self._topic = topic
        self._on_appended = on_appended
        self._early = early
        self._builder: BatchBuilder | None = None
        self._batch: BatchStored | None = None
        #: This batch's messages (early only): timestamp, expiration and contents; offsets come with the produce.
        self._messages: list[tuple[int, int | None, StoredMessage]] = []
        self._in_flight = 0
        self._idle_waiters: list[Deferred[None]] = []
        #: Appended early, not yet seen durable: (last offset, deadline in ms, batch), in offset order.
        self._unsettled: list[tuple[int, int, BatchStored]] = []

    @property
    def unsettled(self) -> list[BatchStored]:
        """Batches appended and not yet known durable (or refused)."""
        return [batch for _, _, batch in self._unsettled]

    @property
    def awaiting_durability(self) -> bool:
        """True while some appended batch is not yet known durable."""
        return bool(self._unsettled)

    def drained(self) -> Deferred[None]:
        """Fires once every append made so far is in the log (or refused)."""
        drained: Deferred[None] = Deferred()
        if self._builder is None and not self._in_flight:
            drained.callback(None)
        else:
            self._idle_waiters.append(drained)
        return drained

    def append(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
               expiration: str | None) -> BatchStored:
        if self._builder is None:
            self._builder, self._batch = BatchBuilder(), BatchStored()
            self._host.reactor.callLater(0, self._flush)
        append_message(self._builder, timestamp_ms, exchange, routing_key, properties_raw, body, expiration)
        if self._early:
            self._messages.append((timestamp_ms, parse_expiration(expiration) if expiration is not None else None,
                                   StoredMessage(exchange=exchange, routing_key=routing_key,
                                                 properties_raw=properties_raw, body=body)))
        assert self._batch is not None
        return self._batch

    def _flush(self) -> None:
        assert self._builder is not None and self._batch is not None
        batch, stored, messages = self._builder.build(), self._batch, self._messages
        self._builder, self._batch, self._messages = None, None, []
        self._in_flight += 1
        acks = 0 if self._early else -1
        produced = self._host.broker.produce(self._host.principal, self._topic, 0, batch, acks, PRODUCE_TIMEOUT_MS)
        produced.addCallbacks(self._stored, self._refused, callbackArgs=(stored, messages), errbackArgs=(stored,))
        produced.addBoth(self._landed)

    def _landed(self, _: Any) -> None:
        self._in_flight -= 1
        if self._builder is None and not self._in_flight:
            waiters, self._idle_waiters = self._idle_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def _stored(self, result: ProduceResult, stored: BatchStored,
                messages: list[tuple[int, int | None, StoredMessage]]) -> None:
        if not self._early:
            self._on_appended(result.base_offset, result.last_offset + 1, [])
            stored.settle(True)
            return
        self._unsettled.append((result.last_offset, self._host.now_ms() + PRODUCE_TIMEOUT_MS, stored))
        placed = [QueuedMessage(offset=offset, timestamp_ms=timestamp_ms, expiration_ms=expiration_ms, payload=payload)
                  for offset, (timestamp_ms, expiration_ms, payload) in enumerate(messages, start=result.base_offset)]
        self._on_appended(result.base_offset, result.last_offset + 1, placed)

    def _refused(self, failure: Any, stored: BatchStored) -> None:
        self.log.failure("appending a batch to {topic} failed (its confirmed publishes are nacked)", failure,
                         topic=self._topic)
        stored.settle(False)

    def durable_through(self, high_watermark: int) -> None:
        """The log is durable below ``high_watermark``: batches ending below it are stored."""
        while self._unsettled and self._unsettled[0][0] < high_watermark:
            self._unsettled.pop(0)[2].settle(True)

    def expire(self, now_ms: int) -> None:
        """Batches not seen durable within the produce timeout are refused (their publishes nacked)."""
        while self._unsettled and self._unsettled[0][1] <= now_ms:
            self._unsettled.pop(0)[2].settle(False)

    def abandon(self) -> None:
        """The queue is gone: what was not seen durable is refused."""
        unsettled, self._unsettled = self._unsettled, []
        for _, _, batch in unsettled:
            batch.settle(False)


class _Queue(abc.ABC):
    """What classic and stream queues share: a declaration, a topic, consumers and appends."""

    log = Logger()

    def __init__(self, host: QueueHost, declaration: QueueDeclaration, owner: int | None) -> None:
        self.host = host
        self.declaration = declaration
        self.name = declaration.name
        self.topic = queue_topic(declaration.name)
        self.owner = owner  # the session id of an exclusive queue's connection
        self.consumers: dict[ConsumerKey, Consumer] = {}
        self.had_consumers = False
        self.deleted = False
        self._backing_off = False  # reading failed a moment ago
        self._appender = _Appender(host, self.topic, self._appended, early=isinstance(self, ClassicQueue))

    def append(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
               expiration: str | None) -> BatchStored:
        """Store a message; the returned batch says when it (and the rest of its batch) is durable."""
        return self._appender.append(timestamp_ms, exchange, routing_key, properties_raw, body, expiration)

    def abandon_appends(self) -> None:
        """The queue was deleted: appends not yet seen durable are refused."""
        self._appender.abandon()

    def _appended(self, base_offset: int, log_end: int, messages: list[QueuedMessage]) -> None:
        """A batch landed at ``base_offset``: the log grew to ``log_end`` (``messages``: the batch, if early)."""

    def _fetch(self, offset: int, wait_ms: int) -> Deferred[list[Any]]:
        position = FetchPosition(topic=self.topic, partition=0, offset=offset, max_bytes=FETCH_BYTES_MAX)
        return self.host.broker.fetch(self.host.principal, [position], wait_ms, 1, FETCH_BYTES_MAX)

    def _fetch_failed(self, failure: Any) -> None:
        if not self.deleted:
            self.log.failure("AMQP queue {queue}: reading its log failed; retrying in 1 s", failure, queue=self.name)
            self._backing_off = True
            self.host.reactor.callLater(1.0, self._retry)

    def _skip_unreadable(self, batch: UnreadableBatch) -> None:
        self.host.skip_unreadable("AMQP queue", batch)  # counted and logged; its messages are skipped

    def _retry(self) -> None:
        self._backing_off = False
        self.dispatch()

    @abc.abstractmethod
    def dispatch(self) -> None:
        """Deliver what consumer windows allow and read ahead."""


class ClassicQueue(_Queue):
    """A queue with share-group semantics over its log."""

    def __init__(self, host: QueueHost, declaration: QueueDeclaration, owner: int | None, state: QueueState) -> None:
        super().__init__(host, declaration, owner)
        self.state = state
        self._fetching = False
        self._fetch_waiters: list[Deferred[None]] = []
        self._rotation = 0
        self._durable_end = state.cursor  # the high watermark as last read: the log is durable below it

    @property
    def message_count(self) -> int:
        """Ready messages (queue.declare-ok, basic.get-ok)."""
        return self.state.ready_count

    def _appended(self, base_offset: int, log_end: int, messages: list[QueuedMessage]) -> None:
        self.state.note_log_end(log_end)
        room = self.state.ready_in_memory < READ_AHEAD_MESSAGES
        if messages and room and self.state.cursor == base_offset and not self.deleted:
            self.state.receive(messages)  # what a read from the cursor would return, without the read
            self._changed()
        else:
            self.dispatch()

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer and start delivering."""
        self.consumers[consumer.key] = consumer
        self.had_consumers = True
        self.state.touch(self.host.now_ms())
        self.dispatch()

    def remove_consumer(self, key: ConsumerKey) -> None:
        """Detach a consumer; what it holds unacked stays leased until its channel settles or closes."""
        self.consumers.pop(key, None)
        self.state.touch(self.host.now_ms())

    def settle(self, offsets: list[Hashable], outcome: Outcome) -> None:
        """Deliveries were acked, requeued or rejected (a multiple ack settles many at once)."""
        if outcome is Outcome.ACK:
            self.state.ack_all(offsets)  # type: ignore[arg-type]
        elif outcome is Outcome.REQUEUE:
            for offset in offsets:
                self.state.requeue(offset)  # type: ignore[arg-type]
        else:
            for offset in offsets:
                self.state.reject(offset)  # type: ignore[arg-type]
        self._changed()

    def release(self, holders: set[ConsumerKey]) -> None:
        """Requeue every lease held by these consumers (their channel or connection is gone)."""
        for holder in holders & self.state.lease_holders():
            self.state.release_consumer(holder)
        self._changed()

    def purge(self) -> int:
        """Drop the ready messages."""
        dropped = self.state.purge()
        self._changed()
        return dropped

    def housekeep(self, now_ms: int) -> None:
        """Expire messages past their TTL even when nobody consumes; refuse appends never seen durable."""
        self._appender.expire(now_ms)
        self.state.expire(now_ms)
        self._changed()
        self._read_ahead(wanted=True)

    def _changed(self) -> None:
        for dead in self.state.pop_dead_letters():
            self.host.dead_letter(self, dead)
        self.host.state_changed(self)
        self.dispatch()

    def dispatch(self) -> None:
        """Deliver round robin within prefetch windows, then keep reading ahead."""
        if self.deleted:
            return
        touched: dict[int, Subscriber] = {}
        now_ms = self.host.now_ms()
        delivered = 0
        while self.consumers and self.state.ready_in_memory:
            keys = list(self.consumers)
            progressed = False
            for step in range(len(keys)):
                consumer = self.consumers[keys[(self._rotation + step) % len(keys)]]
                if consumer.window() <= 0:
                    continue
                lease = self.state.take(consumer.key, now_ms)
                if lease is None:
                    break
                consumer.session.connection.deliver(consumer.channel, consumer.tag,
                                                    delivery_of(self.name, lease.message, lease.redelivered))
                if consumer.no_ack:
                    self.state.ack(lease.message.offset)
                touched[consumer.session.session_id] = consumer.session
                progressed = True
                delivered += 1
            self._rotation += 1
            if not progressed:
                break
        for session in touched.values():
            session.flush()
        dead = self.state.pop_dead_letters()
        for message in dead:
            self.host.dead_letter(self, message)
        if delivered or dead:
            self.host.state_changed(self)
        self._read_ahead(wanted=bool(self.consumers) or bool(self._fetch_waiters))

    @property
    def unsettled_appends(self) -> list[BatchStored]:
        """Batches appended to this queue and not yet known durable."""
        return self._appender.unsettled

    def _read_ahead(self, wanted: bool) -> None:
        """One fetch at a time: from the cursor while consumers want more and memory has room, and
        from the durable end while early appends wait to be seen durable (the fetch returns once
        the high watermark passes it)."""
        if self._fetching or self._backing_off or self.deleted:
            return
        reading = wanted and self.state.ready_in_memory < READ_AHEAD_MESSAGES
        watching = self._appender.awaiting_durability
        if not (reading or watching):
            return
        if reading:
            offset = min(self.state.cursor, self._durable_end) if watching else self.state.cursor
        else:
            offset = self._durable_end
        # Waiting is only skipped for a basic.get on settled data; otherwise the broker answers at
        # once when there is data and holds the fetch (a long poll) when there is none yet.
        wait_ms = 0 if self._fetch_waiters and not watching and self.state.unread_count else FETCH_WAIT_MS
        self._fetching = True
        fetched = self._fetch(offset, wait_ms)
        fetched.addCallbacks(self._fetched, self._fetch_failed, callbackArgs=(offset,))
        fetched.addBoth(self._fetch_finished)

    def _fetched(self, results: list[Any], offset: int) -> None:
        [result] = results
        if result.error is not None:
            raise result.error
        self._durable_end = max(self._durable_end, result.high_watermark)
        self._appender.durable_through(result.high_watermark)
        self.state.note_log_end(result.high_watermark)
        if result.log_start_offset > self.state.cursor:
            self.state.note_log_start(result.log_start_offset)
        cursor = self.state.cursor
        if offset <= cursor and self.state.ready_in_memory < READ_AHEAD_MESSAGES:
            # Read from at or before the cursor: the records from the cursor on are contiguous.
            messages, unreadable = decode_fetched(result.records, skip_below=cursor, topic=self.topic)
            self.state.receive(messages)
            for batch in unreadable:
                self._skip_unreadable(batch)
                self.state.skip_unreadable(batch.first_offset, batch.last_offset)

    def _fetch_finished(self, _: Any) -> None:
        self._fetching = False
        waiters, self._fetch_waiters = self._fetch_waiters, []
        for waiter in waiters:
            waiter.callback(None)
        self._changed()

    async def get(self, key: ConsumerKey) -> tuple[QueuedMessage, bool] | None:
        """basic.get: lease one message to ``key`` or None if the queue is empty."""
        self.state.touch(self.host.now_ms())
        await self._appender.drained()  # a publish before this get on the connection must be visible to it
        if not self.state.ready_in_memory and self.state.unread_count:
            waiter: Deferred[None] = Deferred()
            self._fetch_waiters.append(waiter)
            self._read_ahead(wanted=True)
            await waiter
        lease = self.state.take(key, self.host.now_ms())
        self._changed()
        return None if lease is None else (lease.message, lease.redelivered)


@dataclasses.dataclass(slots=True)
class _StreamReader:
    consumer: Consumer
    offset: int
    buffer: list[QueuedMessage] = dataclasses.field(default_factory=list)
    fetching: bool = False


class StreamQueue(_Queue):
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

    def purge(self) -> int:
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
            fetched = self._fetch(reader.offset, FETCH_WAIT_MS)
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
