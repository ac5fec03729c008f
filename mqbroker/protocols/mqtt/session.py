"""Sans-I/O MQTT 3.1.1 / 5.0 server connection: bytes and broker events in, typed actions out.

``MqttSession`` is one client connection bound (after CONNECT) to a ``SessionState`` that
may outlive it. It reads no clock (every entry point takes ``now_ms``), owns no socket and
no timer: it returns ``Action`` lists (``actions.py``) that a thin Twisted adapter executes
against the broker core. Entry points:

* ``receive_data(bytes, now_ms)``: packets from the client;
* ``session_opened(state, now_ms)`` / ``connect_refused(code, now_ms)``: the adapter's answer
  to ``OpenSession`` (authentication, takeover and session loading are the adapter's);
* ``log_write_completed(ticket, now_ms, reason_code)``: a QoS 1/2 message reached the log
  (``log_writes_completed`` for the tickets of one write at once);
* ``deliver(message, subscriptions, now_ms)``: a message matching this client's subscriptions;
* ``on_timer(now_ms)``, ``connection_lost(now_ms)``, ``close(reason_code, now_ms)``.

This module is the connection level: its states, CONNECT, DISCONNECT and the end of the
session. The PUBLISH flows of an accepted connection are the second level (``flows.py``); what
a CONNECT is refused for and the CONNACK it gets are decided in ``connect.py``, what a
SUBSCRIBE grants in ``subscriptions.py``.

A client's protocol violation never raises out of here: it becomes the DISCONNECT with the
reason code the specification requires (level 5; level 4 just closes), the will, the end
of the session and the terminal ERROR state.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence

from mqbroker import limits
from mqbroker.protocols.mqtt.actions import (
    Action,
    Close,
    OpenSession,
    PublishToLog,
    Retain,
    ScheduleWill,
    SessionEnded,
    SetTimer,
    StoreSession,
)
from mqbroker.protocols.mqtt.codec import PacketDecoder
from mqbroker.protocols.mqtt.connect import (
    DEFAULT_RECEIVE_MAXIMUM,
    SESSION_NEVER_EXPIRES_S,
    SessionConfig,
    connack_properties,
    connack_refusal,
    granted_keep_alive_s,
    will_refusal,
)
from mqbroker.protocols.mqtt.errors import MqttProtocolError, protocol_error
from mqbroker.protocols.mqtt.flows import FLOW_HANDLERS, Outbox, PublishFlows
from mqbroker.protocols.mqtt.headers import record_headers
from mqbroker.protocols.mqtt.packets import (
    PROTOCOL_LEVEL_3_1_1,
    PROTOCOL_LEVEL_5,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    Publish,
    ReasonCode,
    Subscribe,
    Unsubscribe,
    Will,
)
from mqbroker.protocols.mqtt.state import OutboundMessage, SessionState, Subscription
from mqbroker.protocols.mqtt.subscriptions import subscribe, unsubscribe
from mqbroker.protocols.mqtt.topics import TopicMapping, record_key

# Bound here, not imported: see docs/architecture.md, "Hot paths".
_FLOW_HANDLERS = FLOW_HANDLERS


class ConnectionState(enum.Enum):
    """Where the connection is; CLOSED and ERROR are terminal."""

    AWAITING_CONNECT = "awaiting-connect"
    OPENING = "opening"
    CONNECTED = "connected"
    CLOSED = "closed"
    ERROR = "error"


class Event(enum.Enum):
    """What moves the connection between states."""

    CONNECT = "connect"
    SESSION_OPENED = "session-opened"
    CONNECT_REFUSED = "connect-refused"
    DISCONNECT = "disconnect"
    CLOSE = "close"
    PROTOCOL_ERROR = "protocol-error"
    CONNECTION_LOST = "connection-lost"


_S, _E = ConnectionState, Event
_TRANSITIONS: dict[tuple[ConnectionState, Event], ConnectionState] = {
    (_S.AWAITING_CONNECT, _E.CONNECT): _S.OPENING,
    (_S.AWAITING_CONNECT, _E.PROTOCOL_ERROR): _S.ERROR,
    (_S.AWAITING_CONNECT, _E.CONNECTION_LOST): _S.CLOSED,
    (_S.AWAITING_CONNECT, _E.CLOSE): _S.CLOSED,
    (_S.OPENING, _E.SESSION_OPENED): _S.CONNECTED,
    (_S.OPENING, _E.CONNECT_REFUSED): _S.CLOSED,
    (_S.OPENING, _E.PROTOCOL_ERROR): _S.ERROR,
    (_S.OPENING, _E.CONNECTION_LOST): _S.CLOSED,
    (_S.OPENING, _E.CLOSE): _S.CLOSED,
    (_S.CONNECTED, _E.DISCONNECT): _S.CLOSED,
    (_S.CONNECTED, _E.CLOSE): _S.CLOSED,
    (_S.CONNECTED, _E.PROTOCOL_ERROR): _S.ERROR,
    (_S.CONNECTED, _E.CONNECTION_LOST): _S.CLOSED,
}
_TERMINAL = frozenset({ConnectionState.CLOSED, ConnectionState.ERROR})
_CONNECTED, _CLOSED, _ERROR = ConnectionState.CONNECTED, ConnectionState.CLOSED, ConnectionState.ERROR
_PUBACK_FIRST_BYTE = PacketType.PUBACK << 4


class MqttSession:
    """One client connection's state machine (see the module docstring for the entry points)."""

    def __init__(
        self, *, config: SessionConfig, mapping: TopicMapping, generate_client_id: Callable[[], str]
    ) -> None:
        self.config = config
        self.state = ConnectionState.AWAITING_CONNECT
        self.session: SessionState | None = None
        self.client_id = ""
        self._mapping = mapping
        self._generate_client_id = generate_client_id
        # Until the client is authenticated and its session open, packets are small (CONNECT, a will).
        self._decoder = PacketDecoder(
            packet_bytes_max=min(config.packet_bytes_max, limits.pre_authentication_frame_bytes_max))
        #: May this client subscribe to the filter? (The adapter checks READ on the log topics it maps to.)
        self.authorize_filter: Callable[[str], bool] = lambda topic_filter: True
        self._connect: Connect | None = None
        self._will: Will | None = None
        self._keep_alive_s = 0
        self._last_received_ms = 0
        self._expiry_interval_s = 0
        self._outbox = Outbox()
        #: The PUBLISH flows, once a CONNECT is accepted.
        self._flows: PublishFlows | None = None
        self._early_packets: list[Packet] = []
        #: The non-blocking ``StoreSession`` of the session state (frozen: one per state serves every list).
        self._store_soon: StoreSession | None = None

    @property
    def protocol_level(self) -> int:
        """The protocol level of the connection (the CONNECT's; 5 until one arrived)."""
        return self._outbox.protocol_level

    @protocol_level.setter
    def protocol_level(self, level: int) -> None:
        self._outbox.protocol_level = level

    # ------------------------------------------------------------------ entry points

    @property
    def buffered_bytes(self) -> int:
        """Bytes of a packet received so far but not yet complete."""
        return self._decoder.buffered_bytes

    @property
    def will_topic(self) -> str | None:
        """The topic of the will the CONNECT carried (the adapter checks the client may publish it)."""
        return self._will.topic if self._will is not None else None

    def receive_data(self, data: bytes, now_ms: int) -> list[Action]:
        """Bytes from the client."""
        state = self.state
        if state is _CLOSED or state is _ERROR:  # ``_TERMINAL``, without an Enum ``__hash__`` call per read
            return []  # the transport is closing; late bytes mean nothing
        self._last_received_ms = now_ms
        if state is _CONNECTED and data and data[0] == _PUBACK_FIRST_BYTE:  # (a publisher's read starts with a PUBLISH)
            packet_ids = self._decoder.plain_pubacks(data)
            if packet_ids is not None:  # a subscriber's usual read: its PUBACKs, completed together
                self._flows.on_pubacks(packet_ids, now_ms)  # type: ignore[union-attr]
                return self._finish()
        acknowledged: list[int] = []  # a run of PUBACKs, completed together before the next other packet
        try:
            for packet in self._decoder.receive_data(data):
                state = self.state
                kind = type(packet)
                if state is _CONNECTED and kind is PubAck:  # a subscriber's: nearly every packet it sends
                    acknowledged.append(packet.packet_id)  # type: ignore[union-attr]
                    continue
                if acknowledged:
                    self._flows.on_pubacks(acknowledged, now_ms)  # type: ignore[union-attr]
                    acknowledged = []
                if state is _CONNECTED and kind is Publish:  # a publisher's every packet: straight to its flow
                    self._flows.on_publish(packet, now_ms)  # type: ignore[union-attr]
                elif state is _CLOSED or state is _ERROR:
                    break
                else:
                    self._dispatch(packet, now_ms)
            if acknowledged:
                self._flows.on_pubacks(acknowledged, now_ms)  # type: ignore[union-attr]
        except MqttProtocolError as error:
            self._fail(error, now_ms)
        return self._finish()

    def session_opened(self, stored: SessionState | None, now_ms: int) -> list[Action]:
        """The adapter authenticated the client and loaded (or did not find) its session."""
        if self.state in _TERMINAL:
            # The client left while the session was loading: hand the state back untouched.
            if stored is not None and self._connect is not None:
                return [SessionEnded(client_id=stored.client_id, state=stored, expiry_interval_s=stored.expiry_interval_s)]
            return []
        connect, flows = self._connect, self._flows
        assert self.state is ConnectionState.OPENING and connect is not None and flows is not None, self.state
        self._move(Event.SESSION_OPENED)
        self._decoder.allow_packets_up_to(self.config.packet_bytes_max)
        present = stored is not None and not connect.clean_start
        if present:
            assert stored is not None and not stored.unread, "the adapter reads the in-flight messages back first"
            self.session = stored
        else:
            self.session = SessionState(
                self.client_id, pending_messages_max=self.config.pending_messages_max,
                qos0_queue_length_max=self.config.qos0_queue_length_max,
            )
        self.session.expiry_interval_s = self._expiry_interval_s
        self._outbox.dirty = True
        self._outbox.send(ConnAck(session_present=present, properties=connack_properties(
            connect, self.config, client_id=self.client_id, expiry_interval_s=self._expiry_interval_s,
            keep_alive_s=self._keep_alive_s)))
        if self._keep_alive_s:
            self._outbox.actions.append(SetTimer(at_ms=self._keep_alive_deadline_ms()))
        flows.attach(self.session, now_ms)
        early, self._early_packets = self._early_packets, []
        try:
            for packet in early:
                if self.state in _TERMINAL:
                    break
                self._dispatch(packet, now_ms)
        except MqttProtocolError as error:
            self._fail(error, now_ms)
        return self._finish()

    def connect_refused(self, reason_code: ReasonCode, now_ms: int) -> list[Action]:
        """The adapter refused the CONNECT (bad credentials, not authorized, server busy...)."""
        if self.state in _TERMINAL:
            return []
        self._move(Event.CONNECT_REFUSED)
        self._outbox.send(connack_refusal(self.protocol_level, reason_code))
        self._outbox.actions.append(Close(reason=f"CONNECT refused: {reason_code.name}"))
        return self._finish()

    def log_write_completed(
        self, ticket: int, now_ms: int, reason_code: ReasonCode = ReasonCode.SUCCESS
    ) -> list[Action]:
        """A ``PublishToLog`` with this ticket is durable (or failed with ``reason_code``)."""
        return self.log_writes_completed((ticket,), now_ms, reason_code)

    def log_writes_completed(
        self, tickets: Sequence[int], now_ms: int, reason_code: ReasonCode = ReasonCode.SUCCESS
    ) -> list[Action]:
        """``log_write_completed`` for several tickets of one log write, in order, as one action list."""
        flows = self._flows
        assert flows is not None, "log writes come only from an accepted connection"
        writes = flows.take_writes(tickets)
        if self.state is not ConnectionState.CONNECTED:
            return []  # the client left; it resends the PUBLISH when it comes back
        if reason_code >= 0x80 and self.protocol_level != PROTOCOL_LEVEL_5:
            # 3.1.1 has no negative acknowledgement: closing makes the client resend later.
            return self._close_now(ReasonCode.UNSPECIFIED_ERROR, f"log write failed: {reason_code.name}", now_ms)
        flows.acknowledge_writes(writes, reason_code)
        return self._finish()

    def deliver(
        self,
        message: OutboundMessage,
        subscriptions: Sequence[Subscription],
        now_ms: int,
        *,
        from_retained_store: bool = False,
    ) -> list[Action]:
        """Send ``message`` (matched by ``subscriptions`` of this client) or queue it for the window."""
        assert self.session is not None and self._flows is not None and self.state is ConnectionState.CONNECTED
        self.session.enqueue(message, subscriptions, from_retained_store=from_retained_store)
        self._flows.pump(now_ms)
        return self._finish()

    def deliver_many(
        self, deliveries: Iterable[tuple[OutboundMessage, Sequence[Subscription]]], now_ms: int
    ) -> list[Action]:
        """``deliver`` of each (message, subscriptions) in order, as one action list (a fetch's messages). The
        iterable is read one delivery at a time, after the one before it was queued or sent: it may check
        ``accepting_deliveries`` before it yields a QoS 1/2 message."""
        assert self.session is not None and self._flows is not None and self.state is ConnectionState.CONNECTED
        self._flows.deliver_many(deliveries, now_ms)
        return self._finish()

    @property
    def log_writes_in_flight(self) -> int:
        """Client QoS 1/2 messages on their way to the log (the adapter stops reading at the receive maximum)."""
        return len(self._flows.log_writes) if self._flows is not None else 0

    @property
    def accepting_deliveries(self) -> bool:
        """Whether ``deliver`` may be called with a QoS 1/2 message now."""
        return self.session is not None and self.session.has_room()

    @property
    def wants_refill(self) -> bool:
        """Whether reads of the log paused for a full queue should resume (``SessionState.wants_refill``)."""
        return self.session is not None and self.session.wants_refill()

    def on_timer(self, now_ms: int) -> list[Action]:
        """The ``SetTimer`` deadline passed: close on keep-alive timeout, else re-arm."""
        if self.state is not ConnectionState.CONNECTED or not self._keep_alive_s:
            return []
        deadline_ms = self._keep_alive_deadline_ms()
        if now_ms < deadline_ms:
            self._outbox.actions.append(SetTimer(at_ms=deadline_ms))
            return self._finish()
        return self._close_now(
            ReasonCode.KEEP_ALIVE_TIMEOUT,
            f"no packet for 1.5 x the keep-alive of {self._keep_alive_s} s [MQTT-3.1.2-22]",
            now_ms,
        )

    def connection_lost(self, now_ms: int) -> list[Action]:
        """The transport closed without a DISCONNECT: the will goes out (after its delay)."""
        if self.state in _TERMINAL:
            return []
        was_connected = self.state is ConnectionState.CONNECTED
        self._move(Event.CONNECTION_LOST)
        if was_connected:
            self._end_session(now_ms, publish_will=True)
        return self._finish()

    def close(self, reason_code: ReasonCode, now_ms: int) -> list[Action]:
        """Server-initiated close: SESSION_TAKEN_OVER, SERVER_SHUTTING_DOWN, ADMINISTRATIVE_ACTION."""
        if self.state in _TERMINAL:
            return []
        return self._close_now(reason_code, f"closed by the server: {reason_code.name}", now_ms)

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, packet: Packet, now_ms: int) -> None:
        if isinstance(packet, Connect):
            if self.state is not ConnectionState.AWAITING_CONNECT:
                raise protocol_error("a second CONNECT on one connection [MQTT-3.1.0-2]")
            self._on_connect(packet)
            return
        if self.state is ConnectionState.OPENING:
            if len(self._early_packets) >= self.config.packets_before_connack_max:
                raise MqttProtocolError(
                    ReasonCode.QUOTA_EXCEEDED,
                    f"more than {self.config.packets_before_connack_max} packets before CONNACK",
                )
            self._early_packets.append(packet)
            return
        flow_handler = _FLOW_HANDLERS.get(type(packet))
        if flow_handler is not None:
            assert self._flows is not None
            flow_handler(self._flows, packet, now_ms)
            return
        handler = _HANDLERS.get(type(packet))
        if handler is None:
            raise protocol_error(f"{type(packet).__name__.upper()} is sent by servers, not clients")
        handler(self, packet, now_ms)

    def _move(self, event: Event) -> None:
        next_state = _TRANSITIONS.get((self.state, event))
        assert next_state is not None, f"no transition from {self.state} on {event}"
        self.state = next_state

    # ------------------------------------------------------------------ CONNECT

    def _on_connect(self, connect: Connect) -> None:
        self.protocol_level = connect.protocol_level
        v5 = connect.protocol_level == PROTOCOL_LEVEL_5
        properties = connect.properties
        if properties.authentication_method is not None:
            self._refuse_connect(ReasonCode.BAD_AUTHENTICATION_METHOD, "enhanced authentication is not supported")
            return
        client_id = connect.client_id
        if not client_id:
            if not v5 and not connect.clean_start:
                self._refuse_connect(
                    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                    "an empty client id needs clean session 1 in MQTT 3.1.1 [MQTT-3.1.3-8]",
                )
                return
            client_id = self._generate_client_id()
        elif len(client_id) > self.config.client_id_length_max:
            self._refuse_connect(ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client id is too long")
            return
        if connect.will is not None:
            refusal = will_refusal(connect.will, self.config)
            if refusal is not None:
                self._refuse_connect(refusal, f"will refused: {refusal.name}")
                return
        self.client_id = client_id
        self._connect = connect
        self._will = connect.will
        self._keep_alive_s = granted_keep_alive_s(connect, self.config)
        if v5:
            requested_expiry = properties.session_expiry_interval_s or 0
            client_receive_maximum = properties.receive_maximum or DEFAULT_RECEIVE_MAXIMUM
            client_topic_alias_maximum = properties.topic_alias_maximum or 0
            client_packet_bytes_max = properties.maximum_packet_size
        else:
            requested_expiry = 0 if connect.clean_start else SESSION_NEVER_EXPIRES_S
            client_receive_maximum = self.config.outbound_inflight_max_3_1_1
            client_topic_alias_maximum, client_packet_bytes_max = 0, None
        self._expiry_interval_s = min(requested_expiry, self.config.session_expiry_s_max)
        self._flows = PublishFlows(
            config=self.config, mapping=self._mapping, outbox=self._outbox, client_id=client_id,
            client_receive_maximum=client_receive_maximum, client_topic_alias_maximum=client_topic_alias_maximum,
            client_packet_bytes_max=client_packet_bytes_max,
        )
        self._move(Event.CONNECT)
        self._outbox.actions.append(OpenSession(
            client_id=client_id, clean_start=connect.clean_start, username=connect.username,
            password=connect.password, protocol_level=connect.protocol_level,
        ))

    def _refuse_connect(self, reason_code: ReasonCode, message: str) -> None:
        self._outbox.send(connack_refusal(self.protocol_level, reason_code, message))
        self._move(Event.CLOSE)
        self._outbox.actions.append(Close(reason=message))

    # ------------------------------------------------------------------ SUBSCRIBE / UNSUBSCRIBE

    def _on_subscribe(self, request: Subscribe, now_ms: int) -> None:
        assert self.session is not None
        subscribe(request, state=self.session, config=self.config, client_id=self.client_id, outbox=self._outbox,
                  authorize_filter=self.authorize_filter)

    def _on_unsubscribe(self, request: Unsubscribe, now_ms: int) -> None:
        assert self.session is not None
        unsubscribe(request, state=self.session, client_id=self.client_id, outbox=self._outbox)

    # ------------------------------------------------------------------ PING, DISCONNECT, AUTH

    def _on_pingreq(self, ping: PingReq, now_ms: int) -> None:
        self._outbox.send(PingResp())

    def _on_disconnect(self, disconnect: Disconnect, now_ms: int) -> None:
        requested = disconnect.properties.session_expiry_interval_s
        if requested is not None:
            if self._expiry_interval_s == 0 and requested != 0:
                raise protocol_error("session expiry changed from 0 at DISCONNECT [MQTT-3.14.2-2]")
            self._expiry_interval_s = min(requested, self.config.session_expiry_s_max)
        self._move(Event.DISCONNECT)
        with_will = disconnect.reason_code == ReasonCode.DISCONNECT_WITH_WILL_MESSAGE
        self._end_session(now_ms, publish_will=with_will)  # a normal DISCONNECT drops the will [MQTT-3.1.2-10]
        self._outbox.actions.append(Close(reason=f"client sent DISCONNECT ({disconnect.reason_code:#04x})"))

    def _on_auth(self, auth: Auth, now_ms: int) -> None:
        raise protocol_error("AUTH without enhanced authentication in CONNECT [MQTT-4.12.0-1]")

    # ------------------------------------------------------------------ ending

    def _fail(self, error: MqttProtocolError, now_ms: int) -> None:
        was_connected = self.state is ConnectionState.CONNECTED
        if self.state is ConnectionState.AWAITING_CONNECT:
            if error.reason_code == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION:
                self.protocol_level = PROTOCOL_LEVEL_3_1_1  # answer in a format every client reads [MQTT-3.1.2-2]
                self._outbox.send(connack_refusal(self.protocol_level, error.reason_code))
        elif was_connected and self.protocol_level == PROTOCOL_LEVEL_5:  # never before CONNACK [MQTT-3.14.0-1]
            self._outbox.send(Disconnect(reason_code=error.reason_code, properties=Properties(reason_string=error.message)))
        self._move(Event.PROTOCOL_ERROR)
        if was_connected:
            self._end_session(now_ms, publish_will=True)
        self._outbox.actions.append(Close(reason=str(error)))

    def _close_now(self, reason_code: ReasonCode, message: str, now_ms: int) -> list[Action]:
        was_connected = self.state is ConnectionState.CONNECTED
        if self.protocol_level == PROTOCOL_LEVEL_5 and was_connected:
            self._outbox.send(Disconnect(reason_code=reason_code, properties=Properties(reason_string=message)))
        self._move(Event.CLOSE)
        if was_connected:
            self._end_session(now_ms, publish_will=True)
        self._outbox.actions.append(Close(reason=message))
        return self._finish()

    def _end_session(self, now_ms: int, *, publish_will: bool) -> None:
        assert self.session is not None
        if publish_will and self._will is not None:
            self._outbox.actions.append(self._will_action(self._will, now_ms))
        self._will = None
        keep = self._expiry_interval_s > 0
        self.session.expiry_interval_s = self._expiry_interval_s
        self._outbox.actions.append(SessionEnded(
            client_id=self.client_id, state=self.session if keep else None, expiry_interval_s=self._expiry_interval_s,
        ))

    def pending_will(self, now_ms: int) -> ScheduleWill | None:
        """The will as it would be scheduled if the connection ended abnormally at ``now_ms`` (None without one)."""
        return None if self._will is None else self._will_action(self._will, now_ms)

    def _will_action(self, will: Will, now_ms: int) -> ScheduleWill:
        headers = record_headers(will.qos, will.retain, self.client_id, will.properties)
        write = PublishToLog(
            ticket=None, log_topic=self._mapping.log_topic_for(will.topic), key=record_key(will.topic),
            payload=will.payload, headers=headers,
        )
        actions: tuple[PublishToLog | Retain, ...] = (write,)
        if will.retain:
            actions += (Retain(topic=will.topic, payload=will.payload, headers=headers),)
        # The will goes out at the will delay or at session end, whichever comes first.
        delay_s = min(will.properties.will_delay_interval_s or 0, self._expiry_interval_s)
        return ScheduleWill(client_id=self.client_id, at_ms=now_ms + delay_s * 1000, actions=actions)

    # ------------------------------------------------------------------ helpers

    def _keep_alive_deadline_ms(self) -> int:
        return self._last_received_ms + self._keep_alive_s * 1500

    def _finish(self) -> list[Action]:
        outbox = self._outbox
        actions, outbox.actions = outbox.actions, []
        if self.session is not None and self._expiry_interval_s > 0:
            if outbox.dirty:
                actions.insert(0, StoreSession(client_id=self.client_id, state=self.session))
            elif outbox.changed:
                store = self._store_soon
                if store is None or store.state is not self.session:
                    store = self._store_soon = StoreSession(client_id=self.client_id, state=self.session, blocking=False)
                actions.append(store)
        outbox.dirty = outbox.changed = False
        return actions


_HANDLERS: dict[type, Callable[[MqttSession, object, int], None]] = {
    Subscribe: MqttSession._on_subscribe,  # type: ignore[dict-item]
    Unsubscribe: MqttSession._on_unsubscribe,  # type: ignore[dict-item]
    PingReq: MqttSession._on_pingreq,  # type: ignore[dict-item]
    Disconnect: MqttSession._on_disconnect,  # type: ignore[dict-item]
    Auth: MqttSession._on_auth,  # type: ignore[dict-item]
}
