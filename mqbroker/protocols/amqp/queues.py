"""Queues at run time: appending to a queue's log topic, reading it back and dispatching to consumers.

A classic queue reads its topic from the ``QueueState`` cursor with one long-poll fetch at a
time (while it has consumers or a basic.get waits), leases messages to consumers within their
prefetch windows, round robin, and settles them. A stream queue (``stream_queue.py``) keeps no
per-message state: each consumer reads the log from its own ``x-stream-offset``. Appends made in
one reactor turn go to the broker as one record batch (``appender.py``).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from mqbroker import limits
from mqbroker.model import FetchPosition, FetchRequest
from mqbroker.protocols.amqp.actions import Delivery, Outcome
from mqbroker.protocols.amqp.appender import Appender, AppendHost, BatchStored
from mqbroker.protocols.amqp.queue_arguments import DeathReason, QueuePolicy
from mqbroker.protocols.amqp.queue_state import (
    DeadLetter,
    QueuedMessage,
    QueueState,
)
from mqbroker.protocols.amqp.stored import (
    DecompressionBudget,
    FetchBudgetSpent,
    MessageRow,
    QueueDeclaration,
    StoredMessage,
    queue_topic,
    queued_message,
)
from mqbroker.records.readable import UnreadableBatch, readable_batches

T = TypeVar("T")
ConsumerKey = tuple[int, int, str | None]  # (session id, channel, consumer tag; None for basic.get)


class Subscriber(Protocol):
    """What a queue needs from the session that owns a consumer."""

    session_id: int
    connection: Any  # mqbroker.protocols.amqp.connection.Connection

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


class RecentBatch:
    """The last batch a share queue's reader decoded, known by its base offset and CRC: the group leases a
    few hundred records of a batch per fetch, and each fetch would otherwise decode the whole batch again."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None
        self._rows: list[MessageRow] = []

    def decode(self, budget: DecompressionBudget, batch: memoryview, header: Any) -> list[MessageRow]:
        """The batch's rows: kept from the last call when it is the same batch, else decoded (and kept)."""
        key = (header.base_offset, header.crc)
        if key != self._key:
            self._rows = budget.decode_rows(batch, header)
            self._key = key
        return self._rows

    def forget_through(self, offset: int) -> None:
        """Nothing up to ``offset`` will be read again soon: drop the batch if it ends there."""
        if self._rows and self._rows[-1].offset <= offset:
            self._key, self._rows = None, []


def decode_fetched(records: bytes, skip_below: int = 0, topic: str = "", *,
                   stop_after: int | None = None) -> tuple[list[QueuedMessage], list[UnreadableBatch]]:
    """Whole record batches from a fetch → the queue's view of their records and the batches that do not decode
    (batches wholly below ``skip_below`` are not decoded: the queue has them already; none after the one holding
    ``stop_after``: the reader has no room for them).

    Stops early, at a batch boundary, once the fetch's decompression budget is spent (the next fetch reads on).
    Raises ``CorruptRecordError`` only for a batch header that does not read (nothing after it can be found).
    """
    return _decode_fetched(records, skip_below, topic, stop_after, lambda budget, batch, header: budget.decode(
        batch, header, queued_message, _message_bytes))


def decode_fetched_rows(records: bytes, skip_below: int, topic: str, *, stop_after: int,
                        recent: RecentBatch) -> tuple[list[MessageRow], list[UnreadableBatch]]:
    """``decode_fetched`` for a share queue's leases: the records as ``MessageRow``s (decoded with no Python call
    per record), no batch decoded after the one holding ``stop_after``; ``recent``, the reader's last decoded
    batch, is reused when the fetch holds it again."""
    return _decode_fetched(records, skip_below, topic, stop_after, recent.decode)


def _decode_fetched(records: bytes, skip_below: int, topic: str, stop_after: int | None,
                    decode: Callable[[DecompressionBudget, memoryview, Any], list[T]]) -> tuple[list[T],
                                                                                             list[UnreadableBatch]]:
    messages: list[T] = []
    unreadable: list[UnreadableBatch] = []
    budget = DecompressionBudget()
    batches = readable_batches(records, skip_below, topic=topic, partition=0, skipped=unreadable.append,
                               decode=lambda batch, header: decode(budget, batch, header))
    try:
        for header, decoded in batches:
            messages += decoded
            if stop_after is not None and header.last_offset >= stop_after:
                break
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


#: The owner of an exclusive queue declared through another broker of the cluster: every session here is refused it
#: (405), publishes reach it.
REMOTE_OWNER = -1


class QueueHost(AppendHost, Protocol):
    """What queues need from their virtual host."""
    def state_changed(self, queue: ClassicQueue) -> None: ...

    def dead_letter(self, queue: ClassicQueue, dead: DeadLetter) -> None: ...

    def republish_dead(self, queue: str, policy: QueuePolicy, message: QueuedMessage,
                       reason: DeathReason) -> list[BatchStored]: ...

    def skip_unreadable(self, reader: str, batch: UnreadableBatch) -> None: ...


class BaseQueue(abc.ABC):
    """What classic and stream queues share: a declaration, a topic, consumers and appends."""

    log = Logger()

    def __init__(self, host: QueueHost, declaration: QueueDeclaration, owner: int | None) -> None:
        self.host = host
        self.declaration = declaration
        self.name = declaration.name
        self.topic = queue_topic(declaration.name)
        self.owner = owner  # the session id of an exclusive queue's connection (REMOTE_OWNER: on another broker)
        self.consumers: dict[ConsumerKey, Consumer] = {}
        self.had_consumers = False
        self.deleted = False
        self._backing_off = False  # reading failed a moment ago
        self._appender = Appender(host, self.topic, self._appended, early=isinstance(self, ClassicQueue))

    def append(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes, body: bytes,
               expiration: str | None) -> BatchStored:
        """Store a message; the returned batch says when it (and the rest of its batch) is durable."""
        return self._appender.append(timestamp_ms, exchange, routing_key, properties_raw, body, expiration)

    #: Whether ``append_run`` may store a run of publishes at once (else each is judged on its own).
    takes_runs = True

    def append_run(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes,
                   bodies: list[bytes], expiration: str | None) -> BatchStored:
        """``append`` of messages alike but for their bodies, in order, into one batch."""
        return self._appender.append_run(timestamp_ms, exchange, routing_key, properties_raw, bodies, expiration)

    async def ready_count(self) -> int:
        """Messages ready for delivery (queue.declare-ok, basic.get-ok, queue.delete-ok)."""
        return self.message_count

    @property
    @abc.abstractmethod
    def message_count(self) -> int:
        """Ready messages as known here at once."""

    def abandon_appends(self) -> None:
        """The queue was deleted: appends not yet seen durable are refused."""
        self._appender.abandon()

    def _appended(self, base_offset: int, log_end: int, messages: list[QueuedMessage]) -> None:
        """A batch landed at ``base_offset``: the log grew to ``log_end`` (``messages``: the batch, if early)."""

    def _fetch(self, offset: int, wait_ms: int) -> Deferred[list[Any]]:
        position = FetchPosition(topic=self.topic, partition=0, offset=offset, max_bytes=limits.amqp_log_fetch_bytes_max)
        request = FetchRequest(positions=(position,), wait_ms_max=wait_ms, response_bytes_max=limits.amqp_log_fetch_bytes_max)
        return self.host.broker.fetch(self.host.principal, request)

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


class ClassicQueue(BaseQueue):
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
        room = self.state.ready_in_memory < limits.amqp_queue_read_ahead_messages_max
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

    async def purge(self) -> int:
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
        # Refill at half: a fetch per settled window would read the log's next megabytes again for a few messages.
        reading = wanted and self.state.ready_in_memory <= limits.amqp_queue_read_ahead_messages_max // 2
        watching = self._appender.awaiting_durability
        if not (reading or watching):
            return
        if reading:
            offset = min(self.state.cursor, self._durable_end) if watching else self.state.cursor
        else:
            offset = self._durable_end
        # Waiting is only skipped for a basic.get on settled data; otherwise the broker answers at
        # once when there is data and holds the fetch (a long poll) when there is none yet.
        wait_ms = 0 if self._fetch_waiters and not watching and self.state.unread_count else limits.amqp_log_fetch_wait_ms_max
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
        room = limits.amqp_queue_read_ahead_messages_max - self.state.ready_in_memory
        if offset <= cursor and room > 0:
            # Read from at or before the cursor: the records from the cursor on are contiguous. Only what there is
            # room for is decoded (a fetch of a backlog holds megabytes: decoding them all would hold the reactor).
            messages, unreadable = decode_fetched(result.records, skip_below=cursor, topic=self.topic,
                                                  stop_after=cursor + room - 1)
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
