"""Sans-I/O AMQP 0-9-1 server connection: handshake, heartbeats, channels, content, qos, acks, confirms.

``Connection.receive_data(bytes, now_ms)`` and the adapter's reports (``complete``, ``fail``,
``deliver``, ``publish_settled``...) return ``Action`` lists; bytes to write accumulate in
``data_to_send()``. No clock: time arrives as ``now_ms``; the adapter calls ``tick`` at
``next_deadline_ms()``.

Errors follow the spec's classing: a soft (channel) error closes that channel with
channel.close and drops its frames until close-ok; a hard error sends connection.close and
waits (bounded) for close-ok. Either way the unacked deliveries come back to the adapter in
``ChannelClosed`` for requeueing.

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
from typing import Any

from mqbroker import limits
from mqbroker.protocols.amqp import codec, fields, spec
from mqbroker.protocols.amqp.actions import (
    Action,
    Authenticate,
    Cancel,
    ChannelClosed,
    CloseTransport,
    Consume,
    ConsumersReady,
    Delivery,
    Execute,
    Outcome,
    Publish,
    Settle,
    Unacked,
)
from mqbroker.protocols.amqp.handshake import MECHANISMS, parse_credentials, server_properties
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode

SettlingMethod = spec.BasicAck | spec.BasicNack | spec.BasicReject
#: ``delivery_window`` when no prefetch limit applies.
WINDOW_UNLIMITED = 1 << 30


class ConnectionState(enum.Enum):
    """Where the handshake and shutdown stand."""

    AWAITING_HEADER = "awaiting protocol header"
    AWAITING_START_OK = "awaiting start-ok"
    AUTHENTICATING = "authenticating"
    AWAITING_TUNE_OK = "awaiting tune-ok"
    AWAITING_OPEN = "awaiting open"
    OPEN = "open"
    CLOSING = "closing"  # we sent connection.close; only close / close-ok matter now
    CLOSED = "closed"


#: Connection-class methods the client may send in each state (anything else is 503).
TRANSITIONS: dict[ConnectionState, frozenset[type[spec.Method]]] = {
    ConnectionState.AWAITING_START_OK: frozenset({spec.ConnectionStartOk}),
    ConnectionState.AUTHENTICATING: frozenset(),
    ConnectionState.AWAITING_TUNE_OK: frozenset({spec.ConnectionTuneOk}),
    ConnectionState.AWAITING_OPEN: frozenset({spec.ConnectionOpen, spec.ConnectionClose}),
    ConnectionState.OPEN: frozenset({spec.ConnectionClose}),
    ConnectionState.CLOSING: frozenset({spec.ConnectionClose, spec.ConnectionCloseOk}),
}


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


@dataclasses.dataclass(slots=True)
class _Channel:
    number: int
    state: ChannelState = ChannelState.OPEN
    flow_active: bool = True
    content: _Content | None = None
    consumers: dict[str, _Consumer] = dataclasses.field(default_factory=dict)
    consumer_prefetch: int = 0
    channel_prefetch: int = 0
    next_delivery_tag: int = 1
    unacked: dict[int, Unacked] = dataclasses.field(default_factory=dict)  # in delivery-tag order
    confirming: bool = False
    next_publish_sequence: int = 1
    confirm_outcomes: dict[int, bool | None] = dataclasses.field(default_factory=dict)  # in sequence order
    generated_tags: int = 0
    #: The open transaction's publishes and settling methods, in order (None: not transactional).
    transaction: list[Publish | SettlingMethod] | None = None
    #: Message bytes this channel holds in memory: the announced size of a message being received, and the
    #: bodies of the open transaction's publishes.
    held_bytes: int = 0


@dataclasses.dataclass(slots=True)
class ByteBudget:
    """Bytes reserved against a bound; one is shared by every AMQP connection of a broker."""

    bytes_max: int
    reserved_bytes: int = 0

    def reserve(self, byte_count: int) -> bool:
        """Take ``byte_count`` if they fit under the bound."""
        if self.reserved_bytes + byte_count > self.bytes_max:
            return False
        self.reserved_bytes += byte_count
        return True

    def release(self, byte_count: int) -> None:
        """Give back bytes ``reserve`` took."""
        assert 0 <= byte_count <= self.reserved_bytes, (byte_count, self.reserved_bytes)
        self.reserved_bytes -= byte_count


class Connection:
    """One client connection, server side."""

    def __init__(self, *, now_ms: int, version: str = "0.1.0", broker_budget: ByteBudget | None = None) -> None:
        """``broker_budget``: the bound on message bytes held by every connection together (None: only this one's)."""
        self._broker_budget = broker_budget
        #: Message bytes the channels hold (partial messages, open transactions): bounded per connection.
        self.held_bytes = 0
        self.state = ConnectionState.AWAITING_HEADER
        self._decoder = codec.FrameDecoder(limits.amqp_frame_bytes_max)
        self._output = bytearray()
        self._version = version
        self._channels: dict[int, _Channel] = {}
        self.frame_max = limits.amqp_frame_bytes_max
        self.channel_max = limits.amqp_channels_per_connection_max
        self.heartbeat_ms = 0
        self.client_properties: dict[str, Any] = {}
        self.username: str | None = None
        #: Bytes of every basic.deliver and basic.get-ok sent so far (for fetch quotas).
        self.delivered_bytes = 0
        self._last_received_ms = now_ms
        self._last_sent_ms = now_ms
        self._sent_since_tick = False
        self._deadline_ms: int | None = now_ms + limits.amqp_handshake_ms_max

    # --- bytes in and out ---------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Bytes queued for the socket since the last call."""
        data = bytes(self._output)
        self._output.clear()
        return data

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame received so far (the adapter times out a frame that trickles)."""
        return self._decoder.buffered_bytes

    def _send(self, data: bytes) -> None:
        self._output += data
        self._sent_since_tick = True

    def _send_method(self, channel: int, method: spec.Method) -> None:
        self._send(codec.encode_method(channel, method))

    def receive_data(self, data: bytes, now_ms: int) -> list[Action]:
        """Feed bytes from the socket."""
        if self.state is ConnectionState.CLOSED or self._decoder.failed:
            return []
        self._last_received_ms = now_ms
        actions: list[Action] = []
        try:
            frames = self._decoder.receive_data(data)
        except spec.ProtocolHeaderMismatch:
            self._send(spec.PROTOCOL_HEADER)
            self.state = ConnectionState.CLOSED
            return [CloseTransport(reason="unsupported protocol header")]
        except AmqpError as error:
            return self._close_connection(error, now_ms)
        if self.state is ConnectionState.AWAITING_HEADER and not self._decoder.awaiting_protocol_header:
            self.state = ConnectionState.AWAITING_START_OK
            self._send_method(
                0, spec.ConnectionStart(server_properties=server_properties(self._version), mechanisms=MECHANISMS)
            )
        for frame in frames:
            if self.state is ConnectionState.CLOSED:
                break
            try:
                actions += self._receive_frame(frame, now_ms)
            except AmqpError as error:
                actions += self._fail(_channel_of(frame), error, now_ms)
        return actions

    # --- timers -------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        """When ``tick`` must next be called (None: no timer needed)."""
        if self.state is ConnectionState.CLOSED:
            return None
        if self.heartbeat_ms and self.state is ConnectionState.OPEN:
            return min(self._last_sent_ms + self.heartbeat_ms // 2, self._last_received_ms + 2 * self.heartbeat_ms)
        return self._deadline_ms

    def tick(self, now_ms: int) -> list[Action]:
        """Send a heartbeat when idle; drop a silent peer or a stalled handshake or close."""
        if self.state is ConnectionState.CLOSED:
            return []
        if self._sent_since_tick:
            self._last_sent_ms = now_ms
            self._sent_since_tick = False
        if self._deadline_ms is not None and now_ms >= self._deadline_ms:
            return self._drop("handshake or close-ok did not arrive in time")
        if not self.heartbeat_ms or self.state is not ConnectionState.OPEN:
            return []
        if now_ms - self._last_received_ms >= 2 * self.heartbeat_ms:
            return self._drop(f"no frame from the client for {now_ms - self._last_received_ms} ms (missed heartbeats)")
        if now_ms - self._last_sent_ms >= self.heartbeat_ms // 2:
            self._output += codec.HEARTBEAT_FRAME
            self._last_sent_ms = now_ms
        return []

    def _drop(self, reason: str) -> list[Action]:
        actions: list[Action] = [self._forget_channel(number) for number in list(self._channels)]
        self.state = ConnectionState.CLOSED
        return [*actions, CloseTransport(reason=reason)]

    # --- frame dispatch -----------------------------------------------------------------

    def _receive_frame(self, frame: codec.Frame, now_ms: int) -> list[Action]:
        if isinstance(frame, codec.HeartbeatFrame):
            return []
        if self.state is ConnectionState.CLOSING:
            if isinstance(frame, codec.MethodFrame) and type(frame.method) in TRANSITIONS[self.state]:
                return self._drop("connection closed")
            return []  # after connection.close only close / close-ok count
        if frame.channel == 0:
            if not isinstance(frame, codec.MethodFrame):
                raise AmqpError(ReplyCode.UNEXPECTED_FRAME, "content frame on channel 0")
            return self._receive_connection_method(frame.method, now_ms)
        if self.state is not ConnectionState.OPEN:
            raise AmqpError(ReplyCode.COMMAND_INVALID, f"channel frames before connection.open ({self.state.value})")
        return self._receive_channel_frame(frame)

    def _receive_connection_method(self, method: spec.Method, now_ms: int) -> list[Action]:
        if type(method) not in TRANSITIONS[self.state]:
            raise AmqpError(
                ReplyCode.COMMAND_INVALID,
                f"{method.NAME} is not expected on channel 0 while {self.state.value}",
                class_id=method.CLASS_ID,
                method_id=method.METHOD_ID,
            )
        if isinstance(method, spec.ConnectionStartOk):
            return self._start_ok(method)
        if isinstance(method, spec.ConnectionTuneOk):
            self._tune_ok(method)
            return []
        if isinstance(method, spec.ConnectionOpen):
            if method.virtual_host != "/":
                raise AmqpError(ReplyCode.NOT_ALLOWED, f"virtual host '{method.virtual_host}' does not exist; use '/'",
                                class_id=10, method_id=40)
            self.state = ConnectionState.OPEN
            self._deadline_ms = None
            self._send_method(0, spec.ConnectionOpenOk())
            return []
        assert isinstance(method, spec.ConnectionClose)
        self._send_method(0, spec.ConnectionCloseOk())
        return self._drop(f"client closed the connection ({method.reply_code} {method.reply_text})")

    def _start_ok(self, method: spec.ConnectionStartOk) -> list[Action]:
        username, password = parse_credentials(method.mechanism, method.response)
        self.client_properties = method.client_properties
        self.state = ConnectionState.AUTHENTICATING
        return [Authenticate(mechanism=method.mechanism, username=username, password=password)]

    def _tune_ok(self, method: spec.ConnectionTuneOk) -> None:
        frame_max = method.frame_max or limits.amqp_frame_bytes_max
        channel_max = method.channel_max or limits.amqp_channels_per_connection_max
        if not spec.FRAME_MIN_BYTES <= frame_max <= limits.amqp_frame_bytes_max:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"frame_max {frame_max} is outside "
                            f"{spec.FRAME_MIN_BYTES}..{limits.amqp_frame_bytes_max}", class_id=10, method_id=31)
        if channel_max > limits.amqp_channels_per_connection_max:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"channel_max {channel_max} exceeds the proposed "
                            f"{limits.amqp_channels_per_connection_max}", class_id=10, method_id=31)
        self.frame_max = self._decoder.frame_bytes_max = frame_max
        self.channel_max = channel_max
        self.heartbeat_ms = method.heartbeat * 1000
        self.state = ConnectionState.AWAITING_OPEN

    def authentication_succeeded(self) -> list[Action]:
        """The adapter's authenticator accepted the credentials: propose tuning."""
        if self.state is not ConnectionState.AUTHENTICATING:
            return []  # the connection failed while the authenticator worked
        self.state = ConnectionState.AWAITING_TUNE_OK
        self._send_method(0, spec.ConnectionTune(
            channel_max=limits.amqp_channels_per_connection_max,
            frame_max=limits.amqp_frame_bytes_max,
            heartbeat=limits.amqp_heartbeat_s,
        ))
        return []

    def authentication_failed(self, text: str, now_ms: int, reply_code: ReplyCode = ReplyCode.ACCESS_REFUSED) -> list[Action]:
        """The authenticator refused: close with 403 (capability authentication_failure_close).

        A broker that cannot serve yet (its front end still starting) closes with 320
        CONNECTION_FORCED instead, which clients read as "try again later".
        """
        if self.state is not ConnectionState.AUTHENTICATING:
            return []
        error = AmqpError(reply_code, text, class_id=10, method_id=11, connection_level=True)
        return self._close_connection(error, now_ms)

    # --- errors and closing -------------------------------------------------------------

    def fail(self, channel: int, error: AmqpError, now_ms: int) -> list[Action]:
        """The broker refused a channel's request: close that channel (soft) or the connection (hard)."""
        if channel in self._channels and self._channels[channel].state is ChannelState.CLOSING:
            return []
        return self._fail(channel, error, now_ms)

    def close(self, reply_code: ReplyCode, text: str, now_ms: int) -> list[Action]:
        """Server-initiated shutdown (320 CONNECTION_FORCED when the broker stops)."""
        if self.state in (ConnectionState.CLOSED, ConnectionState.CLOSING):
            return []
        return self._close_connection(AmqpError(reply_code, text, connection_level=True), now_ms)

    def _fail(self, channel: int, error: AmqpError, now_ms: int) -> list[Action]:
        if error.connection_level or channel == 0 or channel not in self._channels:
            return self._close_connection(error, now_ms)
        self._send_method(channel, spec.ChannelClose(
            reply_code=error.reply_code, reply_text=error.reply_text,
            class_id=error.class_id, method_id=error.method_id,
        ))
        closed = self._forget_channel(channel)
        self._channels[channel] = _Channel(number=channel, state=ChannelState.CLOSING)
        return [closed]

    def _close_connection(self, error: AmqpError, now_ms: int) -> list[Action]:
        if self.state in (ConnectionState.CLOSED, ConnectionState.CLOSING):
            return []
        actions: list[Action] = [self._forget_channel(number) for number in list(self._channels)]
        if self.state is ConnectionState.AWAITING_HEADER:
            self.state = ConnectionState.CLOSED
            return [*actions, CloseTransport(reason=str(error))]
        self._send_method(0, spec.ConnectionClose(
            reply_code=error.reply_code, reply_text=error.reply_text,
            class_id=error.class_id, method_id=error.method_id,
        ))
        if self._decoder.failed:
            # The byte stream is out of step: a close-ok could not be recognised.
            self.state = ConnectionState.CLOSED
            return [*actions, CloseTransport(reason=str(error))]
        self.state = ConnectionState.CLOSING
        self._deadline_ms = now_ms + limits.amqp_close_ok_wait_ms_max
        return actions

    def _forget_channel(self, number: int) -> ChannelClosed:
        channel = self._channels.pop(number)
        self._release(channel, channel.held_bytes)
        return ChannelClosed(
            channel=number, unacked=tuple(channel.unacked.values()), consumer_tags=tuple(channel.consumers)
        )

    # --- channels -----------------------------------------------------------------------

    def _receive_channel_frame(self, frame: codec.Frame) -> list[Action]:
        number = frame.channel  # type: ignore[union-attr]
        channel = self._channels.get(number)
        if channel is not None and channel.content is not None and not isinstance(frame, codec.MethodFrame):
            return self._receive_content(channel, frame)  # the common case: a publish's header or body
        if isinstance(frame, codec.MethodFrame) and isinstance(frame.method, spec.ChannelOpen):
            if channel is not None or number > self.channel_max:
                raise AmqpError(ReplyCode.CHANNEL_ERROR, f"channel {number} is already open or above channel_max",
                                class_id=20, method_id=10)
            self._channels[number] = _Channel(number=number)
            self._send_method(number, spec.ChannelOpenOk())
            return []
        if channel is None:
            method = frame.method if isinstance(frame, codec.MethodFrame) else None
            raise AmqpError(ReplyCode.CHANNEL_ERROR, f"channel {number} is not open",
                            class_id=method.CLASS_ID if method else 0, method_id=method.METHOD_ID if method else 0)
        if channel.state is ChannelState.CLOSING:
            if isinstance(frame, codec.MethodFrame) and isinstance(frame.method, spec.ChannelCloseOk):
                del self._channels[number]
            elif isinstance(frame, codec.MethodFrame) and isinstance(frame.method, spec.ChannelClose):
                self._send_method(number, spec.ChannelCloseOk())  # both sides closed at once
            return []
        if channel.content is not None or not isinstance(frame, codec.MethodFrame):
            return self._receive_content(channel, frame)
        return self._receive_channel_method(channel, frame.method)

    def _receive_channel_method(self, channel: _Channel, method: spec.Method) -> list[Action]:
        if method.CLASS_ID == 10 or not method.SENT_BY_CLIENT:
            raise AmqpError(ReplyCode.COMMAND_INVALID, f"{method.NAME} may not be sent by a client on a channel",
                            class_id=method.CLASS_ID, method_id=method.METHOD_ID)
        number = channel.number
        method_type = type(method)
        if method_type in EXECUTED:
            flag = EXECUTED[method_type]
            return [Execute(channel=number, method=method, reply_expected=not (flag and getattr(method, flag)))]
        try:
            handler = _CHANNEL_HANDLERS[method_type]
        except KeyError:
            raise AmqpError(ReplyCode.COMMAND_INVALID, f"{method.NAME} is not valid on an open channel",
                            class_id=method.CLASS_ID, method_id=method.METHOD_ID) from None
        try:
            return handler(self, channel, method)
        except AmqpError as error:
            error.class_id, error.method_id = method.CLASS_ID, method.METHOD_ID
            raise

    def _channel_close(self, channel: _Channel, method: spec.ChannelClose) -> list[Action]:
        self._send_method(channel.number, spec.ChannelCloseOk())
        return [self._forget_channel(channel.number)]

    def _channel_close_ok(self, channel: _Channel, method: spec.ChannelCloseOk) -> list[Action]:
        return []  # a stray close-ok on an open channel changes nothing

    def _channel_flow(self, channel: _Channel, method: spec.ChannelFlow) -> list[Action]:
        resumed = method.active and not channel.flow_active
        channel.flow_active = method.active
        self._send_method(channel.number, spec.ChannelFlowOk(active=method.active))
        return [self._ready(channel)] if resumed and channel.consumers else []

    def _confirm_select(self, channel: _Channel, method: spec.ConfirmSelect) -> list[Action]:
        if channel.transaction is not None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "a transactional channel cannot be put in confirm mode")
        channel.confirming = True
        if not method.nowait:
            self._send_method(channel.number, spec.ConfirmSelectOk())
        return []

    # --- qos and consumers --------------------------------------------------------------

    def _basic_qos(self, channel: _Channel, method: spec.BasicQos) -> list[Action]:
        if method.global_:
            channel.channel_prefetch = method.prefetch_count
        else:
            channel.consumer_prefetch = method.prefetch_count
            for consumer in channel.consumers.values():
                consumer.prefetch_count = method.prefetch_count
        self._send_method(channel.number, spec.BasicQosOk())
        return [self._ready(channel)] if channel.consumers else []

    def _basic_consume(self, channel: _Channel, method: spec.BasicConsume) -> list[Action]:
        tag = method.consumer_tag
        if not tag:
            channel.generated_tags += 1
            tag = f"amq.ctag-{channel.number}.{channel.generated_tags}"
        if tag in channel.consumers:
            raise AmqpError(ReplyCode.NOT_ALLOWED, f"consumer tag '{tag}' is already in use on channel {channel.number}")
        channel.consumers[tag] = _Consumer(tag=tag, no_ack=method.no_ack, prefetch_count=channel.consumer_prefetch,
                                           encoded_tag=fields.shortstr(tag))
        return [Consume(
            channel=channel.number, consumer_tag=tag, queue=method.queue, no_ack=method.no_ack,
            exclusive=method.exclusive, arguments=method.arguments, reply_expected=not method.nowait,
        )]

    def _basic_cancel(self, channel: _Channel, method: spec.BasicCancel) -> list[Action]:
        known = channel.consumers.pop(method.consumer_tag, None) is not None
        if not method.nowait:
            self._send_method(channel.number, spec.BasicCancelOk(consumer_tag=method.consumer_tag))
        return [Cancel(channel=channel.number, consumer_tag=method.consumer_tag)] if known else []

    def delivery_window(self, channel: int, consumer_tag: str) -> int:
        """How many more messages ``consumer_tag`` may receive now (0 if none or gone)."""
        state = self._channels.get(channel)
        if state is None or state.state is not ChannelState.OPEN or not state.flow_active:
            return 0
        consumer = state.consumers.get(consumer_tag)
        if consumer is None:
            return 0
        if consumer.no_ack:
            return WINDOW_UNLIMITED
        window = WINDOW_UNLIMITED
        if consumer.prefetch_count:
            window = consumer.prefetch_count - consumer.unacked_count
        if state.channel_prefetch:
            window = min(window, state.channel_prefetch - len(state.unacked))
        return max(window, 0)

    def _ready(self, channel: _Channel) -> ConsumersReady:
        return ConsumersReady(channel=channel.number, consumer_tags=tuple(channel.consumers))

    def cancel_consumer(self, channel: int, consumer_tag: str) -> None:
        """Server-initiated cancel (the queue was deleted): tell the client (consumer_cancel_notify)."""
        state = self._channels.get(channel)
        if state is None or state.state is not ChannelState.OPEN or state.consumers.pop(consumer_tag, None) is None:
            return
        capabilities = self.client_properties.get("capabilities", {})
        if isinstance(capabilities, dict) and capabilities.get("consumer_cancel_notify"):
            self._send_method(channel, spec.BasicCancel(consumer_tag=consumer_tag, nowait=True))

    # --- deliveries and acknowledgements -------------------------------------------------

    def deliver(self, channel: int, consumer_tag: str, delivery: Delivery) -> None:
        """Send one message to a consumer; the adapter checked ``delivery_window`` first."""
        state = self._channels[channel]
        consumer = state.consumers[consumer_tag]
        tag = self._track(state, consumer_tag if not consumer.no_ack else None, delivery, consumer.no_ack)
        encoded = codec.encode_deliver(channel, consumer.encoded_tag, tag, delivery.redelivered, delivery.exchange,
                                       delivery.routing_key, delivery.properties_raw, delivery.body, self.frame_max)
        self.delivered_bytes += len(encoded)
        self._send(encoded)

    def get_ok(self, channel: int, delivery: Delivery, message_count: int, *, no_ack: bool) -> None:
        """Answer a basic.get with a message."""
        state = self._channels.get(channel)
        if state is None or state.state is not ChannelState.OPEN:
            return
        tag = self._track(state, None, delivery, no_ack)
        method = spec.BasicGetOk(delivery_tag=tag, redelivered=delivery.redelivered, exchange=delivery.exchange,
                                 routing_key=delivery.routing_key, message_count=message_count)
        encoded = codec.encode_message(channel, method, delivery.properties_raw, delivery.body, self.frame_max)
        self.delivered_bytes += len(encoded)
        self._send(encoded)

    def _track(self, channel: _Channel, consumer_tag: str | None, delivery: Delivery, no_ack: bool) -> int:
        tag = channel.next_delivery_tag
        channel.next_delivery_tag += 1
        if not no_ack:
            channel.unacked[tag] = Unacked(delivery_tag=tag, consumer_tag=consumer_tag, queue=delivery.queue,
                                           message_ref=delivery.message_ref)
            if consumer_tag is not None:
                channel.consumers[consumer_tag].unacked_count += 1
        return tag

    def _settle(self, channel: _Channel, delivery_tag: int, multiple: bool, outcome: Outcome) -> list[Action]:
        if multiple:
            settled = [tag for tag in channel.unacked if delivery_tag == 0 or tag <= delivery_tag]
        else:
            settled = [delivery_tag] if delivery_tag in channel.unacked else []
        if not settled and not (multiple and delivery_tag == 0):
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}")
        deliveries = tuple(channel.unacked.pop(tag) for tag in settled)
        if not deliveries:
            return []
        freed: set[str] = set()
        for delivery in deliveries:
            consumer = channel.consumers.get(delivery.consumer_tag or "")
            if consumer is not None:
                consumer.unacked_count -= 1
                freed.add(consumer.tag)
        actions: list[Action] = [Settle(channel=channel.number, deliveries=deliveries, outcome=outcome)]
        if channel.channel_prefetch and channel.consumers:
            freed = set(channel.consumers)  # the shared channel window grew for everyone
        if freed:
            actions.append(ConsumersReady(channel=channel.number, consumer_tags=tuple(sorted(freed))))
        return actions

    def _basic_settle(self, channel: _Channel, method: SettlingMethod) -> list[Action]:
        """basic.ack / nack / reject: settle now, or at tx.commit on a transactional channel."""
        multiple, outcome = _settling(method)
        if channel.transaction is None:
            return self._settle(channel, method.delivery_tag, multiple, outcome)
        # An unknown tag is refused now, as outside a transaction.
        if not multiple and method.delivery_tag not in channel.unacked:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {method.delivery_tag}")
        channel.transaction.append(method)
        return []

    # --- transactions -------------------------------------------------------------------

    def _tx_select(self, channel: _Channel, method: spec.TxSelect) -> list[Action]:
        if channel.confirming:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "a channel in confirm mode cannot be transactional")
        if channel.transaction is None:
            channel.transaction = []
        self._send_method(channel.number, spec.TxSelectOk())
        return []

    def _tx_commit(self, channel: _Channel, method: spec.TxCommit) -> list[Action]:
        held = self._transaction_of(channel)
        channel.transaction = []
        self._release(channel, channel.held_bytes)
        actions: list[Action] = []
        for item in held:
            if isinstance(item, Publish):
                actions.append(item)
            else:
                actions += self._settle(channel, item.delivery_tag, *_settling(item))
        actions.append(Execute(channel=channel.number, method=method, reply_expected=True))
        return actions

    def _tx_rollback(self, channel: _Channel, method: spec.TxRollback) -> list[Action]:
        self._transaction_of(channel)
        channel.transaction = []
        self._release(channel, channel.held_bytes)
        self._send_method(channel.number, spec.TxRollbackOk())
        return []

    def _transaction_of(self, channel: _Channel) -> list[Publish | SettlingMethod]:
        if channel.transaction is None:
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "channel is not transactional; send tx.select first")
        return channel.transaction

    def _basic_recover(self, channel: _Channel, method: spec.BasicRecover) -> list[Action]:
        # requeue=False would redeliver to the same consumer; requeueing serves that too (as RabbitMQ does).
        actions = self._settle(channel, 0, True, Outcome.REQUEUE)
        self._send_method(channel.number, spec.BasicRecoverOk())
        return actions

    # --- publishing and confirms --------------------------------------------------------

    def _basic_publish(self, channel: _Channel, method: spec.BasicPublish) -> list[Action]:
        if method.immediate:
            raise AmqpError(ReplyCode.NOT_IMPLEMENTED, "immediate=true is not supported (as in RabbitMQ)")
        channel.content = _Content(method=method)
        return []

    def _receive_content(self, channel: _Channel, frame: codec.Frame) -> list[Action]:
        content = channel.content
        if content is None:
            raise AmqpError(ReplyCode.UNEXPECTED_FRAME, f"content frame on channel {channel.number} without basic.publish")
        if isinstance(frame, codec.HeaderFrame) and content.header is None:
            if frame.class_id != spec.BASIC_CLASS_ID:
                raise AmqpError(ReplyCode.UNEXPECTED_FRAME, f"content header of class {frame.class_id}, expected 60")
            if frame.body_size > limits.amqp_message_bytes_max:
                channel.content = None
                raise AmqpError(ReplyCode.CONTENT_TOO_LARGE, f"message body of {frame.body_size} bytes exceeds "
                                f"the limit of {limits.amqp_message_bytes_max}", class_id=60, method_id=40)
            self._reserve(channel, frame.body_size)
            content.header = frame
        elif isinstance(frame, codec.BodyFrame) and content.header is not None:
            content.parts.append(frame.payload)
            content.received_bytes += len(frame.payload)
            if content.received_bytes > content.header.body_size:
                raise AmqpError(ReplyCode.FRAME_ERROR, f"body frames carry {content.received_bytes} bytes, "
                                f"the header announced {content.header.body_size}")
        else:
            raise AmqpError(ReplyCode.UNEXPECTED_FRAME,
                            f"{type(frame).__name__} on channel {channel.number} while a publish awaits its content")
        if content.received_bytes < content.header.body_size:
            return []
        channel.content = None
        sequence = None
        if channel.confirming:
            sequence = channel.next_publish_sequence
            channel.next_publish_sequence += 1
            channel.confirm_outcomes[sequence] = None
        if channel.transaction is None:
            self._release(channel, content.header.body_size)  # handed on now; only a transaction keeps holding it
        publish = Publish(
            channel=channel.number, exchange=content.method.exchange, routing_key=content.method.routing_key,
            mandatory=content.method.mandatory, properties=content.header.properties,
            properties_raw=content.header.properties_raw, body=b"".join(content.parts), confirm_sequence=sequence,
            transactional=channel.transaction is not None,
        )
        if channel.transaction is not None:
            channel.transaction.append(publish)
            return []
        return [publish]

    def _reserve(self, channel: _Channel, byte_count: int) -> None:
        """Count a message's bytes against this connection's bound and the broker's, or refuse the channel."""
        if self.held_bytes + byte_count > limits.amqp_held_bytes_per_connection_max:
            channel.content = None
            raise AmqpError(ReplyCode.PRECONDITION_FAILED,
                            f"this connection holds {self.held_bytes} bytes of unfinished messages and open "
                            f"transactions; {byte_count} more would pass its limit of "
                            f"{limits.amqp_held_bytes_per_connection_max}: commit transactions sooner",
                            class_id=60, method_id=40)
        if self._broker_budget is not None and not self._broker_budget.reserve(byte_count):
            channel.content = None
            raise AmqpError(ReplyCode.PRECONDITION_FAILED,
                            f"the broker holds {self._broker_budget.reserved_bytes} bytes of unfinished AMQP messages "
                            f"and open transactions (limit {self._broker_budget.bytes_max}); retry later",
                            class_id=60, method_id=40)
        channel.held_bytes += byte_count
        self.held_bytes += byte_count

    def _release(self, channel: _Channel, byte_count: int) -> None:
        if byte_count:
            channel.held_bytes -= byte_count
            self.held_bytes -= byte_count
            if self._broker_budget is not None:
                self._broker_budget.release(byte_count)

    def return_message(self, channel: int, publish: Publish, reply_code: ReplyCode, reply_text: str) -> None:
        """Give an unroutable mandatory message back (before its confirm)."""
        state = self._channels.get(channel)
        if state is None or state.state is not ChannelState.OPEN:
            return
        method = spec.BasicReturn(reply_code=reply_code, reply_text=reply_text, exchange=publish.exchange,
                                  routing_key=publish.routing_key)
        self._send(codec.encode_message(channel, method, publish.properties_raw, publish.body, self.frame_max))

    def publish_settled(self, channel: int, sequence: int, *, stored: bool) -> None:
        """The broker stored (or refused) a confirmed publish; send ack/nack in order, coalesced."""
        self.publish_settled_range(channel, sequence, sequence, stored=stored)

    def publish_settled_range(self, channel: int, first: int, last: int, *, stored: bool) -> None:
        """``publish_settled`` for the publishes ``first..last`` at once (they shared a batch)."""
        state = self._channels.get(channel)
        if state is None or state.state is not ChannelState.OPEN:
            return  # the channel closed meanwhile: its confirms died with it
        outcomes = state.confirm_outcomes
        for sequence in range(first, last + 1):
            if sequence in outcomes:
                outcomes[sequence] = stored
        # Answer the settled prefix, one basic.ack / nack (multiple) per run of equal outcomes.
        run_first = run_last = 0
        run_outcome: bool | None = None
        for sequence, outcome in outcomes.items():
            if outcome is None:
                break
            if outcome is not run_outcome:
                if run_outcome is not None:
                    self._send_confirm(channel, run_first, run_last, run_outcome)
                run_first, run_outcome = sequence, outcome
            run_last = sequence
        if run_outcome is not None:
            self._send_confirm(channel, run_first, run_last, run_outcome)
            for sequence in range(next(iter(outcomes)), run_last + 1):
                del outcomes[sequence]

    def _send_confirm(self, channel: int, first: int, last: int, stored: bool) -> None:
        if stored:
            self._send_method(channel, spec.BasicAck(delivery_tag=last, multiple=last > first))
        else:
            self._send_method(channel, spec.BasicNack(delivery_tag=last, multiple=last > first, requeue=False))

    # --- backpressure -------------------------------------------------------------------

    def block(self, reason: str) -> None:
        """Tell a client that supports it that publishes are paused (connection.blocked)."""
        if self._client_supports("connection.blocked") and self.state is ConnectionState.OPEN:
            self._send_method(0, spec.ConnectionBlocked(reason=reason))

    def unblock(self) -> None:
        """Publishes are accepted again."""
        if self._client_supports("connection.blocked") and self.state is ConnectionState.OPEN:
            self._send_method(0, spec.ConnectionUnblocked())

    def _client_supports(self, capability: str) -> bool:
        capabilities = self.client_properties.get("capabilities", {})
        return isinstance(capabilities, dict) and bool(capabilities.get(capability))

    # --- replies from the adapter -------------------------------------------------------

    def complete(self, channel: int, reply: spec.Method) -> None:
        """Send the broker's reply to an ``Execute`` or ``Consume`` (dropped if the channel closed)."""
        state = self._channels.get(channel)
        if state is not None and state.state is ChannelState.OPEN:
            self._send_method(channel, reply)


_CHANNEL_HANDLERS: dict[type[spec.Method], Any] = {
    spec.ChannelClose: Connection._channel_close,
    spec.ChannelCloseOk: Connection._channel_close_ok,
    spec.ChannelFlow: Connection._channel_flow,
    spec.ConfirmSelect: Connection._confirm_select,
    spec.BasicQos: Connection._basic_qos,
    spec.BasicConsume: Connection._basic_consume,
    spec.BasicCancel: Connection._basic_cancel,
    spec.BasicPublish: Connection._basic_publish,
    spec.BasicAck: Connection._basic_settle,
    spec.BasicNack: Connection._basic_settle,
    spec.BasicReject: Connection._basic_settle,
    spec.BasicRecover: Connection._basic_recover,
    spec.TxSelect: Connection._tx_select,
    spec.TxCommit: Connection._tx_commit,
    spec.TxRollback: Connection._tx_rollback,
}


def _settling(method: SettlingMethod) -> tuple[bool, Outcome]:
    """(multiple, outcome) of a basic.ack / nack / reject."""
    if isinstance(method, spec.BasicAck):
        return method.multiple, Outcome.ACK
    outcome = Outcome.REQUEUE if method.requeue else Outcome.DISCARD
    return isinstance(method, spec.BasicNack) and method.multiple, outcome


def _channel_of(frame: codec.Frame) -> int:
    return 0 if isinstance(frame, codec.HeartbeatFrame) else frame.channel
