"""Appending to a queue's log topic: the appends of one reactor turn become one record batch.

pika pipelines publishes, so one read brings hundreds; they go to the broker as one batch per
queue topic, and every message of a batch shares one ``BatchStored`` that says when the batch
is durable (or refused).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mqbroker.interfaces import IBroker
from mqbroker.limits import produce_timeout_ms_default
from mqbroker.model import Acks, Principal, ProduceResult
from mqbroker.protocols.amqp.queue_arguments import parse_expiration
from mqbroker.protocols.amqp.queue_state import QueuedMessage
from mqbroker.protocols.amqp.stored import StoredMessage, append_message, append_messages
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.record import RecordHeader

class AppendHost(Protocol):
    """What appending needs from the virtual host."""

    broker: IBroker
    principal: Principal
    reactor: IReactorTime

    def now_ms(self) -> int: ...


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


class AdmittedBatch(BatchStored):
    """The publishes one admission round judged (``x-overflow`` reject-publish, ``share_admission.py``): the first
    ``admitted`` of its ``size`` messages were appended, the rest rejected.

    It settles once the admitted ones are stored (or refused): ``outcome`` is theirs, True when none was admitted.
    Only publisher confirms look further (``confirm_runs.py``): a rejected message is nacked; everyone else (bytes
    held, transactions, routed sources) takes a rejected message as dropped, as RabbitMQ does without confirms.
    """

    __slots__ = ("admitted", "size")

    def __init__(self) -> None:
        super().__init__()
        self.size = 0  # messages in the round so far; the newest is number size - 1
        self.admitted = 0  # known once the round is decided, before the batch settles


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


class Appender:
    """Coalesces the appends of one reactor turn into one batch per queue topic.

    Classic queues append *early*: the batch is produced with acks=0, so its offsets are known
    at once and its messages go to consumers before the fsync (as RabbitMQ delivers before its
    disk write); the batch counts as stored, and its confirms go out, only once the queue's
    reads see the high watermark pass it (``durable_through``). Stream consumers read only
    durable records, so stream queues produce with acks=-1 and settle on the produce result.
    """

    log = Logger()

    def __init__(self, host: AppendHost, topic: str, on_appended: Callable[[int, int, list[QueuedMessage]], None],
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
               expiration: str | None, extra_headers: Sequence[RecordHeader] = ()) -> BatchStored:
        """Add a message to this turn's batch, which the returned ``BatchStored`` follows."""
        builder, batch = self._open()
        append_message(builder, timestamp_ms, exchange, routing_key, properties_raw, body, expiration, extra_headers)
        if self._early:
            self._keep(timestamp_ms, exchange, routing_key, properties_raw, (body,), expiration)
        return batch

    def append_run(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes,
                   bodies: Sequence[bytes], expiration: str | None,
                   extra_headers: Sequence[RecordHeader] = ()) -> BatchStored:
        """``append`` of messages alike but for their bodies, in order, with one call to the batch builder."""
        builder, batch = self._open()
        append_messages(builder, timestamp_ms, exchange, routing_key, properties_raw, bodies, expiration, extra_headers)
        if self._early:
            self._keep(timestamp_ms, exchange, routing_key, properties_raw, bodies, expiration)
        return batch

    def _keep(self, timestamp_ms: int, exchange: str, routing_key: str, properties_raw: bytes, bodies: Sequence[bytes],
              expiration: str | None) -> None:
        """Keep messages appended early for the queue (their offsets come with the produce)."""
        expiration_ms = parse_expiration(expiration) if expiration is not None else None
        self._messages += [(timestamp_ms, expiration_ms, StoredMessage(
            exchange=exchange, routing_key=routing_key, properties_raw=properties_raw, body=body)) for body in bodies]

    def _open(self) -> tuple[BatchBuilder, BatchStored]:
        """This turn's batch builder and ``BatchStored``, begun (and its flush scheduled) by the turn's first append."""
        if self._builder is None or self._batch is None:
            self._builder, self._batch = BatchBuilder(), BatchStored()
            self._host.reactor.callLater(0, self._flush)
        return self._builder, self._batch

    def _flush(self) -> None:
        assert self._builder is not None and self._batch is not None
        batch, stored, messages = self._builder.build(), self._batch, self._messages
        self._builder, self._batch, self._messages = None, None, []
        self._in_flight += 1
        acks = Acks.NONE if self._early else Acks.ALL
        produced = self._host.broker.produce(self._host.principal, self._topic, 0, batch, acks, produce_timeout_ms_default,
                                             front_end_batches=True)
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
        self._unsettled.append((result.last_offset, self._host.now_ms() + produce_timeout_ms_default, stored))
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
