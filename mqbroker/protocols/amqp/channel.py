"""One AMQP 0-9-1 channel, server side (sans-I/O): consumers and prefetch, deliveries and acks, transactions,
publishes and confirms.

The second level of the connection state machine (``connection.py``), as h2's streams are:
the ``Connection`` opens and closes channels and hands each one its methods and content
frames; the ``Channel`` answers into the connection's ``FrameOutput`` and returns the actions
the adapter carries out.

Transactions: after ``tx.select`` a channel holds its publishes and acks (nack, reject) back
until ``tx.commit``, which hands them over in order followed by an ``Execute(TxCommit)`` (the
adapter answers commit-ok once the publishes are durable); ``tx.rollback`` drops them, and the
rolled-back deliveries stay unacked. A channel is transactional or confirming, never both (406).

Prefetch: ``basic.qos(global=True)`` limits the channel's unacked deliveries in total;
``global=False`` limits each consumer, and a change applies to the channel's existing
consumers too (Celery changes it at run time; see ``handshake`` for why ``product`` makes
Celery ask for per-consumer prefetch).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import operator
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from itertools import repeat, takewhile
from typing import Any

from mqbroker import limits
from mqbroker.protocols.amqp import codec, fields, spec
from mqbroker.protocols.amqp.actions import (
    Action,
    Cancel,
    ChannelClosed,
    Consume,
    ConsumersReady,
    Delivery,
    Execute,
    Outcome,
    Publish,
    PublishRun,
    Settle,
    Unacked,
)
from mqbroker.protocols.amqp.delivery_frames import encode_deliveries
from mqbroker.protocols.amqp.held_bytes import HeldBytes
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_encode_deliveries = encode_deliveries
_new_unacked = functools.partial(tuple.__new__, Unacked)
_FIRST = operator.itemgetter(0)
_CONSUMER_TAG = operator.itemgetter(1)

SettlingMethod = spec.BasicAck | spec.BasicNack | spec.BasicReject
#: ``delivery_window`` when no prefetch limit applies.
WINDOW_UNLIMITED = 1 << 30


class ChannelState(enum.Enum):
    """A channel is open, or closing after the server sent channel.close."""

    OPEN = "open"
    CLOSING = "closing"


#: Methods a channel forwards to the broker as ``Execute``, with the nowait flag's name if any.
EXECUTED: dict[type[spec.Method], str | None] = {
    spec.ExchangeDeclare: "nowait",
    spec.ExchangeDelete: "nowait",
    spec.ExchangeBind: "nowait",
    spec.ExchangeUnbind: "nowait",
    spec.QueueDeclare: "nowait",
    spec.QueueBind: "nowait",
    spec.QueuePurge: "nowait",
    spec.QueueDelete: "nowait",
    spec.QueueUnbind: None,
    spec.BasicGet: None,
}


class FrameOutput:
    """The bytes a connection and its channels queue for the socket, and the frame size they were tuned to."""

    __slots__ = ("data", "frame_max", "sent", "delivered_bytes")

    def __init__(self, frame_max: int) -> None:
        self.data = bytearray()
        self.frame_max = frame_max
        #: Something was sent since the connection last looked (heartbeats are sent only when idle).
        self.sent = False
        #: Bytes of every basic.deliver and basic.get-ok sent so far (for fetch quotas).
        self.delivered_bytes = 0

    def send(self, data: bytes) -> None:
        """Queue ``data`` for the socket."""
        self.data += data
        self.sent = True

    def send_method(self, channel: int, method: spec.Method) -> None:
        """Queue one method frame."""
        self.send(codec.encode_method(channel, method))


@dataclasses.dataclass(slots=True)
class _Consumer:
    tag: str
    no_ack: bool
    prefetch_count: int  # 0 = unlimited
    unacked_count: int = 0
    encoded_tag: bytes = b""  # the tag as a shortstr, for basic.deliver


@dataclasses.dataclass(slots=True)
class _Content:
    """A publish whose header and body frames are still arriving."""

    method: spec.BasicPublish
    header: codec.HeaderFrame | None = None
    parts: list[bytes] = dataclasses.field(default_factory=list)
    received_bytes: int = 0


class Channel:
    """One channel of a connection: its consumers, unacked deliveries, transaction and confirms."""

    def __init__(self, number: int, output: FrameOutput, held: HeldBytes,
                 state: ChannelState = ChannelState.OPEN) -> None:
        self.number = number
        self.state = state
        self._output = output
        self._held = held
        self.flow_active = True
        self.content: _Content | None = None
        self.consumers: dict[str, _Consumer] = {}
        self.consumer_prefetch = 0
        self.channel_prefetch = 0
        self.next_delivery_tag = 1
        self.unacked: dict[int, Unacked] = {}  # in delivery-tag order
        self.confirming = False
        self.next_publish_sequence = 1
        #: Every confirmed publish up to this sequence number was acked or nacked.
        self.confirmed_through = 0
        #: Runs settled past ``confirmed_through + 1``, waiting for the ones before them: first → (last, stored).
        self._settled_ahead: dict[int, tuple[int, bool]] = {}
        self.generated_tags = 0
        #: The open transaction's publishes and settling methods, in order (None: not transactional).
        self.transaction: list[Publish | SettlingMethod] | None = None
        #: Message bytes this channel holds in memory: the announced size of a message being received, and the
        #: bodies of the open transaction's publishes.
        self.held_bytes = 0

    @property
    def is_open(self) -> bool:
        """The channel is open (not closing): the broker's answers and deliveries still go out."""
        return self.state is ChannelState.OPEN

    def closed(self) -> ChannelClosed:
        """The channel is gone: give back what it held; its unacked deliveries go back to the adapter."""
        self._release(self.held_bytes)
        return ChannelClosed(channel=self.number, unacked=tuple(self.unacked.values()),
                             consumer_tags=tuple(self.consumers))

    # --- methods --------------------------------------------------------------------------

    def receive_method(self, method: spec.Method) -> list[Action]:
        """A method for this open channel (channel.open and channel.close are the connection's)."""
        if method.CLASS_ID == 10 or not method.SENT_BY_CLIENT:
            raise AmqpError(ReplyCode.COMMAND_INVALID, f"{method.NAME} may not be sent by a client on a channel",
                            class_id=method.CLASS_ID, method_id=method.METHOD_ID)
        method_type = type(method)
        if method_type in EXECUTED:
            flag = EXECUTED[method_type]
            return [Execute(channel=self.number, method=method, reply_expected=not (flag and getattr(method, flag)))]
        try:
            handler = _HANDLERS[method_type]
        except KeyError:
            raise AmqpError(ReplyCode.COMMAND_INVALID, f"{method.NAME} is not valid on an open channel",
                            class_id=method.CLASS_ID, method_id=method.METHOD_ID) from None
        try:
            return handler(self, method)
        except AmqpError as error:
            error.class_id, error.method_id = method.CLASS_ID, method.METHOD_ID
            raise

    def _channel_close_ok(self, method: spec.ChannelCloseOk) -> list[Action]:
        return []  # a stray close-ok on an open channel changes nothing

    def _channel_flow(self, method: spec.ChannelFlow) -> list[Action]:
        resumed = method.active and not self.flow_active
        self.flow_active = method.active
        self._output.send_method(self.number, spec.ChannelFlowOk(active=method.active))
        return [self.ready()] if resumed and self.consumers else []

    def _confirm_select(self, method: spec.ConfirmSelect) -> list[Action]:
        if self.transaction is not None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "a transactional channel cannot be put in confirm mode")
        self.confirming = True
        if not method.nowait:
            self._output.send_method(self.number, spec.ConfirmSelectOk())
        return []

    # --- qos and consumers --------------------------------------------------------------

    def _basic_qos(self, method: spec.BasicQos) -> list[Action]:
        if method.global_:
            self.channel_prefetch = method.prefetch_count
        else:
            self.consumer_prefetch = method.prefetch_count
            for consumer in self.consumers.values():
                consumer.prefetch_count = method.prefetch_count
        self._output.send_method(self.number, spec.BasicQosOk())
        return [self.ready()] if self.consumers else []

    def _basic_consume(self, method: spec.BasicConsume) -> list[Action]:
        tag = method.consumer_tag
        if not tag:
            self.generated_tags += 1
            tag = f"amq.ctag-{self.number}.{self.generated_tags}"
        if tag in self.consumers:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"consumer tag '{tag}' is already in use on channel {self.number}")
        self.consumers[tag] = _Consumer(tag=tag, no_ack=method.no_ack, prefetch_count=self.consumer_prefetch,
                                        encoded_tag=fields.shortstr(tag))
        return [Consume(
            channel=self.number, consumer_tag=tag, queue=method.queue, no_ack=method.no_ack,
            exclusive=method.exclusive, arguments=method.arguments, reply_expected=not method.nowait,
        )]

    def _basic_cancel(self, method: spec.BasicCancel) -> list[Action]:
        known = self.consumers.pop(method.consumer_tag, None) is not None
        if not method.nowait:
            self._output.send_method(self.number, spec.BasicCancelOk(consumer_tag=method.consumer_tag))
        return [Cancel(channel=self.number, consumer_tag=method.consumer_tag)] if known else []

    def delivery_window(self, consumer_tag: str) -> int:
        """How many more messages ``consumer_tag`` may receive now (0 if none or gone)."""
        if not self.is_open or not self.flow_active:
            return 0
        consumer = self.consumers.get(consumer_tag)
        if consumer is None:
            return 0
        if consumer.no_ack:
            return WINDOW_UNLIMITED
        window = WINDOW_UNLIMITED
        if consumer.prefetch_count:
            window = consumer.prefetch_count - consumer.unacked_count
        if self.channel_prefetch:
            window = min(window, self.channel_prefetch - len(self.unacked))
        return max(window, 0)

    def ready(self) -> ConsumersReady:
        """Every consumer of the channel may take deliveries again."""
        return ConsumersReady(channel=self.number, consumer_tags=tuple(self.consumers))

    # --- deliveries and acknowledgements -------------------------------------------------

    def deliver(self, consumer_tag: str, delivery: Delivery) -> None:
        """Send one message to a consumer; the adapter checked ``delivery_window`` first."""
        consumer = self.consumers[consumer_tag]
        tag = self._track(consumer_tag if not consumer.no_ack else None, delivery, consumer.no_ack)
        encoded = codec.encode_deliver(self.number, consumer.encoded_tag, tag, delivery.redelivered, delivery.exchange,
                                       delivery.routing_key, delivery.properties_raw, delivery.body,
                                       self._output.frame_max)
        self._output.delivered_bytes += len(encoded)
        self._output.send(encoded)

    def deliver_rows(self, consumer_tag: str, queue: str, rows: Sequence[Sequence[Any]],
                     redelivered: Collection[int]) -> None:
        """Send stored messages to a consumer at once (``delivery_frames``: rows ``(offset, key, value, headers,
        ...)``, the offset as each one's ``message_ref``; those whose offset is in ``redelivered`` flagged so); the
        adapter checked ``delivery_window`` first."""
        consumer = self.consumers[consumer_tag]
        first = self.next_delivery_tag
        count = len(rows)
        self.next_delivery_tag = first + count
        encoded = _encode_deliveries(rows, redelivered, self.number, consumer.encoded_tag, first,
                                     self._output.frame_max)
        if not consumer.no_ack:
            tags = range(first, first + count)
            self.unacked.update(zip(tags, map(_new_unacked, zip(tags, repeat(consumer_tag), repeat(queue),
                                                                map(_FIRST, rows)))))
            consumer.unacked_count += count
        self._output.delivered_bytes += len(encoded)
        self._output.send(encoded)

    def get_ok(self, delivery: Delivery, message_count: int, *, no_ack: bool) -> None:
        """Answer a basic.get with a message."""
        tag = self._track(None, delivery, no_ack)
        method = spec.BasicGetOk(delivery_tag=tag, redelivered=delivery.redelivered, exchange=delivery.exchange,
                                 routing_key=delivery.routing_key, message_count=message_count)
        encoded = codec.encode_message(self.number, method, delivery.properties_raw, delivery.body,
                                       self._output.frame_max)
        self._output.delivered_bytes += len(encoded)
        self._output.send(encoded)

    def _track(self, consumer_tag: str | None, delivery: Delivery, no_ack: bool) -> int:
        tag = self.next_delivery_tag
        self.next_delivery_tag += 1
        if not no_ack:
            self.unacked[tag] = Unacked(delivery_tag=tag, consumer_tag=consumer_tag, queue=delivery.queue,
                                        message_ref=delivery.message_ref)
            if consumer_tag is not None:
                self.consumers[consumer_tag].unacked_count += 1
        return tag

    def _settle(self, delivery_tag: int, multiple: bool, outcome: Outcome) -> list[Action]:
        if multiple:  # ``unacked`` is in tag order: the tags up to delivery_tag are its head
            settled = list(self.unacked) if delivery_tag == 0 else list(takewhile(delivery_tag.__ge__, self.unacked))
        else:
            settled = [delivery_tag] if delivery_tag in self.unacked else []
        if not settled and not (multiple and delivery_tag == 0):
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}")
        deliveries = tuple(map(self.unacked.pop, settled))
        if not deliveries:
            return []
        freed: set[str] = set()
        for tag, count in Counter(map(_CONSUMER_TAG, deliveries)).items():
            consumer = self.consumers.get(tag or "")
            if consumer is not None:
                consumer.unacked_count -= count
                freed.add(consumer.tag)
        actions: list[Action] = [Settle(channel=self.number, deliveries=deliveries, outcome=outcome)]
        if self.channel_prefetch and self.consumers:
            freed = set(self.consumers)  # the shared channel window grew for everyone
        if freed:
            actions.append(ConsumersReady(channel=self.number, consumer_tags=tuple(sorted(freed))))
        return actions

    def _basic_settle(self, method: SettlingMethod) -> list[Action]:
        """basic.ack / nack / reject: settle now, or at tx.commit on a transactional channel."""
        multiple, outcome = _settling(method)
        if self.transaction is None:
            return self._settle(method.delivery_tag, multiple, outcome)
        # An unknown tag is refused now, as outside a transaction.
        if not multiple and method.delivery_tag not in self.unacked:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {method.delivery_tag}")
        self.transaction.append(method)
        return []

    # --- transactions -------------------------------------------------------------------

    def _tx_select(self, method: spec.TxSelect) -> list[Action]:
        if self.confirming:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "a channel in confirm mode cannot be transactional")
        if self.transaction is None:
            self.transaction = []
        self._output.send_method(self.number, spec.TxSelectOk())
        return []

    def _tx_commit(self, method: spec.TxCommit) -> list[Action]:
        held = self._transaction_of()
        self.transaction = []
        self._release(self.held_bytes)
        actions: list[Action] = []
        for item in held:
            if isinstance(item, Publish):
                actions.append(item)
            else:
                actions += self._settle(item.delivery_tag, *_settling(item))
        actions.append(Execute(channel=self.number, method=method, reply_expected=True))
        return actions

    def _tx_rollback(self, method: spec.TxRollback) -> list[Action]:
        self._transaction_of()
        self.transaction = []
        self._release(self.held_bytes)
        self._output.send_method(self.number, spec.TxRollbackOk())
        return []

    def _transaction_of(self) -> list[Publish | SettlingMethod]:
        if self.transaction is None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional; send tx.select first")
        return self.transaction

    def _basic_recover(self, method: spec.BasicRecover) -> list[Action]:
        # requeue=False would redeliver to the same consumer; requeueing serves that too (as RabbitMQ does).
        actions = self._settle(0, True, Outcome.REQUEUE)
        self._output.send_method(self.number, spec.BasicRecoverOk())
        return actions

    # --- publishing and confirms --------------------------------------------------------

    def _basic_publish(self, method: spec.BasicPublish) -> list[Action]:
        _refuse_immediate(method)
        self.content = _Content(method=method)
        return []

    def receive_publish(self, frames: codec.PublishFrames) -> list[Action]:
        """Messages alike but for their bodies, each a basic.publish with its content header and whole body
        (``codec.PublishFrames``): what the method and ``receive_content`` of each of their frames do, in one call
        (the connection checked that no other message's content is under way; the splitter, that the header is of
        class 60 and each body its announced size). Outside a transaction several are one ``PublishRun``: the
        checks depend only on the method and the header."""
        method, header, bodies = frames.method, frames.header, frames.bodies
        _refuse_immediate(method)
        if self.transaction is not None:  # each held in the transaction until it commits
            for body in bodies:
                self._admit_content(header, hold=True)
                self._completed(method, header, body)
            return []
        self._admit_content(header, hold=False)  # handed on now: never held
        if len(bodies) == 1:
            return self._completed(method, header, bodies[0])
        sequence = None
        if self.confirming:
            sequence = self.next_publish_sequence
            self.next_publish_sequence += len(bodies)
        return [PublishRun(channel=self.number, exchange=method.exchange, routing_key=method.routing_key,
                           mandatory=method.mandatory, properties=header.properties,
                           properties_raw=header.properties_raw, bodies=bodies, confirm_sequence=sequence)]

    def receive_content(self, frame: codec.Frame) -> list[Action]:
        """A content header or body frame of the publish being received."""
        content = self.content
        if content is None:
            raise AmqpError(ReplyCode.UNEXPECTED_FRAME, f"content frame on channel {self.number} without basic.publish")
        if isinstance(frame, codec.HeaderFrame) and content.header is None:
            self._content_header(content, frame)
        elif isinstance(frame, codec.BodyFrame) and content.header is not None:
            self._content_body(content, frame.payload)
        else:
            raise AmqpError(ReplyCode.UNEXPECTED_FRAME,
                            f"{type(frame).__name__} on channel {self.number} while a publish awaits its content")
        if content.received_bytes < content.header.body_size:
            return []
        return self._content_complete(content)

    def _content_header(self, content: _Content, frame: codec.HeaderFrame) -> None:
        if frame.class_id != spec.BASIC_CLASS_ID:
            raise AmqpError(ReplyCode.UNEXPECTED_FRAME, f"content header of class {frame.class_id}, expected 60")
        self._admit_content(frame, hold=True)
        content.header = frame

    def _admit_content(self, frame: codec.HeaderFrame, *, hold: bool) -> None:
        """Refuse a message over the size limit or the held bytes' bounds; with ``hold``, count its bytes as held."""
        if frame.body_size > limits.amqp_message_bytes_max:
            self.content = None
            raise AmqpError(ReplyCode.CONTENT_TOO_LARGE, f"message body of {frame.body_size} bytes exceeds "
                            f"the limit of {limits.amqp_message_bytes_max}", class_id=60, method_id=40)
        if hold:
            self._reserve(frame.body_size)
        else:
            self._held.check(frame.body_size)

    def _content_body(self, content: _Content, payload: bytes) -> None:
        assert content.header is not None
        content.parts.append(payload)
        content.received_bytes += len(payload)
        if content.received_bytes > content.header.body_size:
            raise AmqpError(ReplyCode.FRAME_ERROR, f"body frames carry {content.received_bytes} bytes, "
                            f"the header announced {content.header.body_size}")

    def _content_complete(self, content: _Content) -> list[Action]:
        """The whole message is in: hand it on (or hold it in the open transaction)."""
        assert content.header is not None
        self.content = None
        if self.transaction is None:
            self._release(content.header.body_size)  # handed on now; only a transaction keeps holding it
        return self._completed(content.method, content.header, b"".join(content.parts))

    def _completed(self, method: spec.BasicPublish, header: codec.HeaderFrame, body: bytes) -> list[Action]:
        """A whole message, its bytes held only in an open transaction: hand it on (or hold it in the transaction)."""
        sequence = None
        if self.confirming:
            sequence = self.next_publish_sequence
            self.next_publish_sequence += 1
        publish = Publish(
            channel=self.number, exchange=method.exchange, routing_key=method.routing_key,
            mandatory=method.mandatory, properties=header.properties,
            properties_raw=header.properties_raw, body=body, confirm_sequence=sequence,
            transactional=self.transaction is not None,
        )
        if self.transaction is not None:
            self.transaction.append(publish)
            return []
        return [publish]

    def _reserve(self, byte_count: int) -> None:
        """Count a message's bytes against the connection's bound and the broker's, or refuse the channel."""
        try:
            self._held.reserve(byte_count)
        except AmqpError:
            self.content = None
            raise
        self.held_bytes += byte_count

    def _release(self, byte_count: int) -> None:
        if byte_count:
            self.held_bytes -= byte_count
            self._held.release(byte_count)

    def return_message(self, publish: Publish, reply_code: ReplyCode, reply_text: str) -> None:
        """Give an unroutable mandatory message back (before its confirm)."""
        method = spec.BasicReturn(reply_code=reply_code, reply_text=reply_text, exchange=publish.exchange,
                                  routing_key=publish.routing_key)
        self._output.send(codec.encode_message(self.number, method, publish.properties_raw, publish.body,
                                               self._output.frame_max))

    def publish_settled_range(self, first: int, last: int, *, stored: bool) -> None:
        """The broker stored (or refused) the confirmed publishes ``first..last``: ack/nack in order, coalesced.

        Runs are settled once each and never overlap (``confirm_runs``); what was confirmed already or was never
        published is ignored. Bookkeeping is per run, not per message: a run settled ahead of an earlier one waits
        in ``_settled_ahead`` keyed by its first sequence number.
        """
        first, last = max(first, self.confirmed_through + 1), min(last, self.next_publish_sequence - 1)
        if first > last:
            return
        if first != self.confirmed_through + 1:
            assert first not in self._settled_ahead, f"confirms {first}.. settled twice"
            self._settled_ahead[first] = last, stored
            return
        # Answer the settled prefix, one basic.ack / nack (multiple) per run of equal outcomes.
        run_first, run_outcome, ahead = first, stored, self._settled_ahead
        self.confirmed_through = last
        while ahead and (following := ahead.pop(self.confirmed_through + 1, None)) is not None:
            following_last, following_outcome = following
            if following_outcome is not run_outcome:
                self._send_confirm(run_first, self.confirmed_through, run_outcome)
                run_first, run_outcome = self.confirmed_through + 1, following_outcome
            self.confirmed_through = following_last
        self._send_confirm(run_first, self.confirmed_through, run_outcome)

    def _send_confirm(self, first: int, last: int, stored: bool) -> None:
        if stored:
            self._output.send_method(self.number, spec.BasicAck(delivery_tag=last, multiple=last > first))
        else:
            self._output.send_method(self.number, spec.BasicNack(delivery_tag=last, multiple=last > first,
                                                                 requeue=False))


_HANDLERS: dict[type[spec.Method], Callable[[Channel, spec.Method], list[Action]]] = {
    spec.ChannelCloseOk: Channel._channel_close_ok,  # type: ignore[dict-item]
    spec.ChannelFlow: Channel._channel_flow,  # type: ignore[dict-item]
    spec.ConfirmSelect: Channel._confirm_select,  # type: ignore[dict-item]
    spec.BasicQos: Channel._basic_qos,  # type: ignore[dict-item]
    spec.BasicConsume: Channel._basic_consume,  # type: ignore[dict-item]
    spec.BasicCancel: Channel._basic_cancel,  # type: ignore[dict-item]
    spec.BasicPublish: Channel._basic_publish,  # type: ignore[dict-item]
    spec.BasicAck: Channel._basic_settle,  # type: ignore[dict-item]
    spec.BasicNack: Channel._basic_settle,  # type: ignore[dict-item]
    spec.BasicReject: Channel._basic_settle,  # type: ignore[dict-item]
    spec.BasicRecover: Channel._basic_recover,  # type: ignore[dict-item]
    spec.TxSelect: Channel._tx_select,  # type: ignore[dict-item]
    spec.TxCommit: Channel._tx_commit,  # type: ignore[dict-item]
    spec.TxRollback: Channel._tx_rollback,  # type: ignore[dict-item]
}


def _refuse_immediate(method: spec.BasicPublish) -> None:
    if method.immediate:
        raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "immediate=true is not supported (as in RabbitMQ)",
                        class_id=method.CLASS_ID, method_id=method.METHOD_ID)


def _settling(method: SettlingMethod) -> tuple[bool, Outcome]:
    """(multiple, outcome) of a basic.ack / nack / reject."""
    if isinstance(method, spec.BasicAck):
        return method.multiple, Outcome.ACK
    outcome = Outcome.REQUEUE if method.requeue else Outcome.DISCARD
    return isinstance(method, spec.BasicNack) and method.multiple, outcome
