"""Sans-I/O AMQP 0-9-1 server connection: handshake, heartbeats, channels opening and closing, errors.

``Connection.receive_data(bytes, now_ms)`` and the adapter's reports (``complete``, ``fail``,
``deliver``, ``publish_settled``...) return ``Action`` lists; bytes to write accumulate in
``data_to_send()``. No clock: time arrives as ``now_ms``; the adapter calls ``tick`` at
``next_deadline_ms()``. What happens on a channel once it is open (consumers, acks,
transactions, publishes, confirms) is the second level, ``channel.py``.

Errors follow the spec's classing: a soft (channel) error closes that channel with
channel.close and drops its frames until close-ok; a hard error sends connection.close and
waits (bounded) for close-ok. Either way the unacked deliveries come back to the adapter in
``ChannelClosed`` for requeueing.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from typing import Any

from mqbroker import limits
from mqbroker.protocols.amqp import codec, spec
from mqbroker.protocols.amqp.actions import (
    Action,
    Authenticate,
    ChannelClosed,
    CloseTransport,
    Delivery,
    Publish,
)
from mqbroker.protocols.amqp.channel import Channel, ChannelState, FrameOutput
from mqbroker.protocols.amqp.handshake import (
    MECHANISMS,
    parse_credentials,
    server_properties,
)
from mqbroker.protocols.amqp.held_bytes import ByteBudget, HeldBytes
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode

_PUBLISH_FRAMES = codec.PublishFrames


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


class Connection:
    """One client connection, server side."""

    def __init__(self, *, now_ms: int, version: str = "0.1.0", broker_budget: ByteBudget | None = None) -> None:
        """``broker_budget``: the bound on message bytes held by every connection together (None: only this one's)."""
        #: Message bytes the channels hold (partial messages, open transactions): bounded per connection.
        self.held = HeldBytes(broker_budget=broker_budget)
        self.state = ConnectionState.AWAITING_HEADER
        self._decoder = codec.FrameDecoder(limits.amqp_frame_bytes_max)
        self._output = FrameOutput(limits.amqp_frame_bytes_max)
        self._version = version
        self._channels: dict[int, Channel] = {}
        self.channel_max = limits.amqp_channels_per_connection_max
        self.heartbeat_ms = 0
        self.client_properties: dict[str, Any] = {}
        self.username: str | None = None
        self._last_received_ms = now_ms
        self._last_sent_ms = now_ms
        self._deadline_ms: int | None = now_ms + limits.amqp_handshake_ms_max

    @property
    def held_bytes(self) -> int:
        """Message bytes this connection's channels hold in memory."""
        return self.held.held_bytes

    @property
    def frame_max(self) -> int:
        """The largest frame, as tuned with the client."""
        return self._output.frame_max

    @property
    def delivered_bytes(self) -> int:
        """Bytes of every basic.deliver and basic.get-ok sent so far (for fetch quotas)."""
        return self._output.delivered_bytes

    # --- bytes in and out ---------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Bytes queued for the socket since the last call."""
        data = bytes(self._output.data)
        self._output.data.clear()
        return data

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame received so far (the adapter times out a frame that trickles)."""
        return self._decoder.buffered_bytes

    def receive_data(self, data: bytes, now_ms: int) -> list[Action]:
        """Feed bytes from the socket."""
        if self.state is ConnectionState.CLOSED or self._decoder.failed:
            return []
        self._last_received_ms = now_ms
        actions: list[Action] = []
        try:
            frames = self._decoder.receive_data(data)
        except spec.ProtocolHeaderMismatch:
            self._output.send(spec.PROTOCOL_HEADER)
            self.state = ConnectionState.CLOSED
            return [CloseTransport(reason="unsupported protocol header")]
        except AmqpError as error:
            return self._close_connection(error, now_ms)
        if self.state is ConnectionState.AWAITING_HEADER and not self._decoder.awaiting_protocol_header:
            self.state = ConnectionState.AWAITING_START_OK
            self._output.send_method(
                0, spec.ConnectionStart(server_properties=server_properties(self._version), mechanisms=MECHANISMS)
            )
        for item in frames:
            if type(item) is _PUBLISH_FRAMES:  # published messages with their content
                channel = self._publishing_channel(item.channel)  # type: ignore[union-attr]
                if channel is not None:
                    try:
                        actions += channel.receive_publish(item)  # type: ignore[arg-type]
                    except AmqpError as error:
                        actions += self._fail(channel.number, error, now_ms)
                    continue
                parts = item.frames()  # type: ignore[union-attr]  # judged frame by frame, as they came
            else:
                parts = (item,)
            for frame in parts:
                if self.state is ConnectionState.CLOSED:
                    return actions
                try:
                    actions += self._receive_frame(frame, now_ms)
                except AmqpError as error:
                    actions += self._fail(_channel_of(frame), error, now_ms)
        return actions

    def _publishing_channel(self, number: int) -> Channel | None:
        """The channel a published message with its content goes to in one piece: an open channel of an open
        connection with no other message's content under way (None: its frames go one by one)."""
        if self.state is not ConnectionState.OPEN:
            return None
        channel = self._channels.get(number)
        if channel is None or channel.state is not ChannelState.OPEN or channel.content is not None:
            return None
        return channel

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
        if self._output.sent:
            self._last_sent_ms = now_ms
            self._output.sent = False
        if self._deadline_ms is not None and now_ms >= self._deadline_ms:
            return self._drop("handshake or close-ok did not arrive in time")
        if not self.heartbeat_ms or self.state is not ConnectionState.OPEN:
            return []
        if now_ms - self._last_received_ms >= 2 * self.heartbeat_ms:
            return self._drop(f"no frame from the client for {now_ms - self._last_received_ms} ms (missed heartbeats)")
        if now_ms - self._last_sent_ms >= self.heartbeat_ms // 2:
            self._output.data += codec.HEARTBEAT_FRAME
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
            self._output.send_method(0, spec.ConnectionOpenOk())
            return []
        assert isinstance(method, spec.ConnectionClose)
        self._output.send_method(0, spec.ConnectionCloseOk())
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
        self._output.frame_max = self._decoder.frame_bytes_max = frame_max
        self.channel_max = channel_max
        self.heartbeat_ms = method.heartbeat * 1000
        self.state = ConnectionState.AWAITING_OPEN

    def authentication_succeeded(self) -> list[Action]:
        """The adapter's authenticator accepted the credentials: propose tuning."""
        if self.state is not ConnectionState.AUTHENTICATING:
            return []  # the connection failed while the authenticator worked
        self.state = ConnectionState.AWAITING_TUNE_OK
        self._output.send_method(0, spec.ConnectionTune(
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
        self._output.send_method(channel, spec.ChannelClose(
            reply_code=error.reply_code, reply_text=error.reply_text,
            class_id=error.class_id, method_id=error.method_id,
        ))
        closed = self._forget_channel(channel)
        self._channels[channel] = Channel(channel, self._output, self.held, ChannelState.CLOSING)
        return [closed]

    def _close_connection(self, error: AmqpError, now_ms: int) -> list[Action]:
        if self.state in (ConnectionState.CLOSED, ConnectionState.CLOSING):
            return []
        actions: list[Action] = [self._forget_channel(number) for number in list(self._channels)]
        if self.state is ConnectionState.AWAITING_HEADER:
            self.state = ConnectionState.CLOSED
            return [*actions, CloseTransport(reason=str(error))]
        self._output.send_method(0, spec.ConnectionClose(
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
        return self._channels.pop(number).closed()

    # --- channels -----------------------------------------------------------------------

    def _receive_channel_frame(self, frame: codec.Frame) -> list[Action]:
        number = frame.channel  # type: ignore[union-attr]
        channel = self._channels.get(number)
        if channel is not None and channel.content is not None and not isinstance(frame, codec.MethodFrame):
            return channel.receive_content(frame)  # the common case: a publish's header or body
        if isinstance(frame, codec.MethodFrame) and isinstance(frame.method, spec.ChannelOpen):
            if channel is not None or number > self.channel_max:
                raise AmqpError(ReplyCode.CHANNEL_ERROR, f"channel {number} is already open or above channel_max",
                                class_id=20, method_id=10)
            self._channels[number] = Channel(number, self._output, self.held)
            self._output.send_method(number, spec.ChannelOpenOk())
            return []
        if channel is None:
            method = frame.method if isinstance(frame, codec.MethodFrame) else None
            raise AmqpError(ReplyCode.CHANNEL_ERROR, f"channel {number} is not open",
                            class_id=method.CLASS_ID if method else 0, method_id=method.METHOD_ID if method else 0)
        if channel.state is ChannelState.CLOSING:
            if isinstance(frame, codec.MethodFrame) and isinstance(frame.method, spec.ChannelCloseOk):
                del self._channels[number]
            elif isinstance(frame, codec.MethodFrame) and isinstance(frame.method, spec.ChannelClose):
                self._output.send_method(number, spec.ChannelCloseOk())  # both sides closed at once
            return []
        if channel.content is not None or not isinstance(frame, codec.MethodFrame):
            return channel.receive_content(frame)
        if isinstance(frame.method, spec.ChannelClose):
            self._output.send_method(number, spec.ChannelCloseOk())
            return [self._forget_channel(number)]
        return channel.receive_method(frame.method)

    def _open_channel(self, number: int) -> Channel | None:
        """The channel ``number`` if it is open (not closing): the broker's answers to a closed one are dropped."""
        channel = self._channels.get(number)
        return channel if channel is not None and channel.is_open else None

    # --- what the adapter reports ---------------------------------------------------------

    def delivery_window(self, channel: int, consumer_tag: str) -> int:
        """How many more messages ``consumer_tag`` may receive now (0 if none or gone)."""
        state = self._open_channel(channel)
        return state.delivery_window(consumer_tag) if state is not None else 0

    def cancel_consumer(self, channel: int, consumer_tag: str) -> None:
        """Server-initiated cancel (the queue was deleted): tell the client (consumer_cancel_notify)."""
        state = self._open_channel(channel)
        if state is None or state.consumers.pop(consumer_tag, None) is None:
            return
        if self._client_supports("consumer_cancel_notify"):
            self._output.send_method(channel, spec.BasicCancel(consumer_tag=consumer_tag, nowait=True))

    def deliver(self, channel: int, consumer_tag: str, delivery: Delivery) -> None:
        """Send one message to a consumer; the adapter checked ``delivery_window`` first."""
        self._channels[channel].deliver(consumer_tag, delivery)

    def deliver_rows(self, channel: int, consumer_tag: str, queue: str, rows: Sequence[Sequence[Any]],
                     redelivered: Collection[int]) -> None:
        """Send stored messages to one consumer at once (``Channel.deliver_rows``); the adapter checked
        ``delivery_window`` first."""
        self._channels[channel].deliver_rows(consumer_tag, queue, rows, redelivered)

    def get_ok(self, channel: int, delivery: Delivery, message_count: int, *, no_ack: bool) -> None:
        """Answer a basic.get with a message."""
        state = self._open_channel(channel)
        if state is not None:
            state.get_ok(delivery, message_count, no_ack=no_ack)

    def return_message(self, channel: int, publish: Publish, reply_code: ReplyCode, reply_text: str) -> None:
        """Give an unroutable mandatory message back (before its confirm)."""
        state = self._open_channel(channel)
        if state is not None:
            state.return_message(publish, reply_code, reply_text)

    def publish_settled(self, channel: int, sequence: int, *, stored: bool) -> None:
        """The broker stored (or refused) a confirmed publish; send ack/nack in order, coalesced."""
        self.publish_settled_range(channel, sequence, sequence, stored=stored)

    def publish_settled_range(self, channel: int, first: int, last: int, *, stored: bool) -> None:
        """``publish_settled`` for the publishes ``first..last`` at once (they shared a batch)."""
        state = self._open_channel(channel)
        if state is not None:  # else the channel closed meanwhile: its confirms died with it
            state.publish_settled_range(first, last, stored=stored)

    def complete(self, channel: int, reply: spec.Method) -> None:
        """Send the broker's reply to an ``Execute`` or ``Consume`` (dropped if the channel closed)."""
        if self._open_channel(channel) is not None:
            self._output.send_method(channel, reply)

    # --- backpressure -------------------------------------------------------------------

    def block(self, reason: str) -> None:
        """Tell a client that supports it that publishes are paused (connection.blocked)."""
        if self._client_supports("connection.blocked") and self.state is ConnectionState.OPEN:
            self._output.send_method(0, spec.ConnectionBlocked(reason=reason))

    def unblock(self) -> None:
        """Publishes are accepted again."""
        if self._client_supports("connection.blocked") and self.state is ConnectionState.OPEN:
            self._output.send_method(0, spec.ConnectionUnblocked())

    def _client_supports(self, capability: str) -> bool:
        capabilities = self.client_properties.get("capabilities", {})
        return isinstance(capabilities, dict) and bool(capabilities.get(capability))


def _channel_of(frame: codec.Frame) -> int:
    return 0 if isinstance(frame, codec.HeartbeatFrame) else frame.channel
