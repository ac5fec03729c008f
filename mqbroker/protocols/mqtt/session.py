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

A client's protocol violation never raises out of here: it becomes the DISCONNECT with the
reason code the specification requires (level 5; level 4 just closes), the will, the end
of the session and the terminal ERROR state.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from mqbroker import limits
from mqbroker.protocols.mqtt.actions import (
    Action,
    AddSubscription,
    Close,
    OpenSession,
    PublishToLog,
    RemoveSubscription,
    Retain,
    ScheduleWill,
    Send,
    SessionEnded,
    SetTimer,
    StoreSession,
)
from mqbroker.protocols.mqtt.codec import PacketDecoder, encode
from mqbroker.protocols.mqtt.errors import MqttProtocolError, protocol_error
from mqbroker.protocols.mqtt.headers import record_headers
from mqbroker.protocols.mqtt.packets import (
    NO_PROPERTIES,
    PROTOCOL_LEVEL_3_1_1,
    PROTOCOL_LEVEL_5,
    SUBACK_FAILURE_3_1_1,
    Auth,
    ConnAck,
    Connect,
    ConnectReturnCode,
    Disconnect,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    RetainHandling,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    UnsubAck,
    Unsubscribe,
    Will,
)
from mqbroker.protocols.mqtt.state import Inflight, InflightState, OutboundMessage, SessionState, Subscription
from mqbroker.protocols.mqtt.topics import (
    TopicMapping,
    has_wildcards,
    parse_subscription_filter,
    record_key,
    validate_topic_name,
)

#: Session expiry meaning "never" (§3.1.2.11.2).
SESSION_NEVER_EXPIRES_S = 0xFFFF_FFFF
#: A 5.0 client that sends no Receive Maximum accepts this many (§3.1.2.11.3).
DEFAULT_RECEIVE_MAXIMUM = 65_535


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionConfig:
    """Server limits, advertised in CONNACK at level 5 and enforced at both levels."""

    receive_maximum: int = 32
    topic_alias_maximum: int = 16
    packet_bytes_max: int = limits.mqtt_packet_bytes_max
    maximum_qos: int = 2
    retain_available: bool = True
    wildcard_subscription_available: bool = True
    subscription_identifier_available: bool = True
    shared_subscription_available: bool = True
    #: Longest keep-alive the server accepts; a 5.0 client is told the server keep-alive.
    keep_alive_s_max: int | None = None
    #: Longest session expiry granted; 3.1.1 persistent sessions (clean session 0) get this.
    session_expiry_s_max: int = 7 * 24 * 3600
    #: Outbound in-flight window for 3.1.1 clients, which cannot announce a receive maximum.
    outbound_inflight_max_3_1_1: int = 20
    client_id_length_max: int = 256
    pending_messages_max: int = limits.mqtt_pending_messages_max
    qos0_queue_length_max: int = limits.mqtt_qos0_queue_length_max
    packets_before_connack_max: int = limits.mqtt_packets_before_connack_max


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
_V4_RETURN_CODES = {
    ReasonCode.UNSUPPORTED_PROTOCOL_VERSION: ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION,
    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID: ConnectReturnCode.IDENTIFIER_REJECTED,
    ReasonCode.BAD_USER_NAME_OR_PASSWORD: ConnectReturnCode.BAD_USER_NAME_OR_PASSWORD,
    ReasonCode.NOT_AUTHORIZED: ConnectReturnCode.NOT_AUTHORIZED,
}


class MqttSession:
    """One client connection's state machine (see the module docstring for the entry points)."""

    def __init__(
        self, *, config: SessionConfig, mapping: TopicMapping, generate_client_id: Callable[[], str]
    ) -> None:
        self.config = config
        self.state = ConnectionState.AWAITING_CONNECT
        self.session: SessionState | None = None
        self.client_id = ""
        self.protocol_level = PROTOCOL_LEVEL_5
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
        self._client_receive_maximum = DEFAULT_RECEIVE_MAXIMUM
        self._client_topic_alias_maximum = 0
        self._client_packet_bytes_max: int | None = None
        self._outbound_aliases: dict[str, int] = {}
        self._inbound_aliases: dict[int, str] = {}
        self._writes: dict[int, tuple[int, int]] = {}  # ticket -> (qos, packet id) awaiting the log
        self._plain_headers: dict[tuple[int, bool], tuple[tuple[str, bytes], ...]] = {}
        self._next_ticket = 1
        self._early_packets: list[Packet] = []
        self._actions: list[Action] = []
        self._dirty = False

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
        if self.state in _TERMINAL:
            return []  # the transport is closing; late bytes mean nothing
        self._last_received_ms = now_ms
        try:
            for packet in self._decoder.receive_data(data):
                if self.state in _TERMINAL:
                    break
                self._dispatch(packet, now_ms)
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
        connect = self._connect
        assert self.state is ConnectionState.OPENING and connect is not None, self.state
        self._move(Event.SESSION_OPENED)
        self._decoder.allow_packets_up_to(self.config.packet_bytes_max)
        present = stored is not None and not connect.clean_start
        if present:
            assert stored is not None
            self.session = stored
        else:
            self.session = SessionState(
                self.client_id, pending_messages_max=self.config.pending_messages_max,
                qos0_queue_length_max=self.config.qos0_queue_length_max,
            )
        self.session.expiry_interval_s = self._expiry_interval_s
        self._dirty = True
        self._send(ConnAck(session_present=present, properties=self._connack_properties(connect)))
        if self._keep_alive_s:
            self._actions.append(SetTimer(at_ms=self._keep_alive_deadline_ms()))
        self._resend_inflight()  # [MQTT-4.4.0-1]
        self._pump(now_ms)
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
        self._send_connack_error(reason_code)
        self._actions.append(Close(reason=f"CONNECT refused: {reason_code.name}"))
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
        writes = [self._writes.pop(ticket) for ticket in tickets]
        if self.state is not ConnectionState.CONNECTED:
            return []  # the client left; it resends the PUBLISH when it comes back
        v5 = self.protocol_level == PROTOCOL_LEVEL_5
        if reason_code >= 0x80 and not v5:
            # 3.1.1 has no negative acknowledgement: closing makes the client resend later.
            return self._close_now(ReasonCode.UNSPECIFIED_ERROR, f"log write failed: {reason_code.name}", now_ms)
        for qos, packet_id in writes:
            if qos == 1:
                self._send(PubAck(packet_id=packet_id, reason_code=reason_code))
                continue
            if reason_code < 0x80:
                assert self.session is not None
                self.session.received_qos2.add(packet_id)
                self._dirty = True
            self._send(PubRec(packet_id=packet_id, reason_code=reason_code))
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
        assert self.session is not None and self.state is ConnectionState.CONNECTED, self.state
        self.session.enqueue(message, subscriptions, from_retained_store=from_retained_store)
        self._pump(now_ms)
        return self._finish()

    @property
    def log_writes_in_flight(self) -> int:
        """Client QoS 1/2 messages on their way to the log (the adapter stops reading at the receive maximum)."""
        return len(self._writes)

    @property
    def accepting_deliveries(self) -> bool:
        """Whether ``deliver`` may be called with a QoS 1/2 message now."""
        return self.session is not None and self.session.has_room()

    def on_timer(self, now_ms: int) -> list[Action]:
        """The ``SetTimer`` deadline passed: close on keep-alive timeout, else re-arm."""
        if self.state is not ConnectionState.CONNECTED or not self._keep_alive_s:
            return []
        deadline_ms = self._keep_alive_deadline_ms()
        if now_ms < deadline_ms:
            self._actions.append(SetTimer(at_ms=deadline_ms))
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
            refusal = self._will_refusal(connect.will)
            if refusal is not None:
                self._refuse_connect(refusal, f"will refused: {refusal.name}")
                return
        self.client_id = client_id
        self._connect = connect
        self._will = connect.will
        self._keep_alive_s = self._granted_keep_alive_s(connect)
        if v5:
            requested_expiry = properties.session_expiry_interval_s or 0
            self._client_receive_maximum = properties.receive_maximum or DEFAULT_RECEIVE_MAXIMUM
            self._client_topic_alias_maximum = properties.topic_alias_maximum or 0
            self._client_packet_bytes_max = properties.maximum_packet_size
        else:
            requested_expiry = 0 if connect.clean_start else SESSION_NEVER_EXPIRES_S
            self._client_receive_maximum = self.config.outbound_inflight_max_3_1_1
        self._expiry_interval_s = min(requested_expiry, self.config.session_expiry_s_max)
        self._move(Event.CONNECT)
        self._actions.append(OpenSession(
            client_id=client_id, clean_start=connect.clean_start, username=connect.username,
            password=connect.password, protocol_level=connect.protocol_level,
        ))

    def _will_refusal(self, will: Will) -> ReasonCode | None:
        try:
            validate_topic_name(will.topic)
        except MqttProtocolError as error:
            return error.reason_code
        if will.qos > self.config.maximum_qos:
            return ReasonCode.QOS_NOT_SUPPORTED  # [MQTT-3.2.2-12]
        if will.retain and not self.config.retain_available:
            return ReasonCode.RETAIN_NOT_SUPPORTED  # [MQTT-3.2.2-13]
        return None

    def _granted_keep_alive_s(self, connect: Connect) -> int:
        maximum = self.config.keep_alive_s_max
        if maximum is None or connect.protocol_level != PROTOCOL_LEVEL_5:
            return connect.keep_alive_s
        return maximum if connect.keep_alive_s == 0 else min(connect.keep_alive_s, maximum)

    def _refuse_connect(self, reason_code: ReasonCode, message: str) -> None:
        self._send_connack_error(reason_code, message)
        self._move(Event.CLOSE)
        self._actions.append(Close(reason=message))

    def _send_connack_error(self, reason_code: ReasonCode, message: str | None = None) -> None:
        if self.protocol_level == PROTOCOL_LEVEL_5:
            self._send(ConnAck(reason_code=reason_code, properties=Properties(reason_string=message)))
        else:
            code = _V4_RETURN_CODES.get(reason_code, ConnectReturnCode.SERVER_UNAVAILABLE)
            self._send(ConnAck(reason_code=code))

    def _connack_properties(self, connect: Connect) -> Properties:
        if self.protocol_level != PROTOCOL_LEVEL_5:
            return NO_PROPERTIES
        config = self.config
        requested_expiry = connect.properties.session_expiry_interval_s or 0
        return Properties(
            session_expiry_interval_s=self._expiry_interval_s if self._expiry_interval_s != requested_expiry else None,
            assigned_client_identifier=self.client_id if not connect.client_id else None,
            server_keep_alive_s=self._keep_alive_s if self._keep_alive_s != connect.keep_alive_s else None,
            receive_maximum=config.receive_maximum,
            topic_alias_maximum=config.topic_alias_maximum or None,
            maximum_packet_size=config.packet_bytes_max,
            maximum_qos=config.maximum_qos if config.maximum_qos < 2 else None,
            retain_available=int(config.retain_available),
            wildcard_subscription_available=int(config.wildcard_subscription_available),
            subscription_identifier_available=int(config.subscription_identifier_available),
            shared_subscription_available=int(config.shared_subscription_available),
        )

    # ------------------------------------------------------------------ inbound PUBLISH flow

    def _on_publish(self, publish: Publish, now_ms: int) -> None:
        assert self.session is not None
        if publish.properties.subscription_identifiers:
            raise protocol_error("a client PUBLISH carries a subscription identifier [MQTT-3.3.4-6]")
        topic = self._resolve_topic_alias(publish)
        validate_topic_name(topic)
        if publish.qos > self.config.maximum_qos:
            raise MqttProtocolError(ReasonCode.QOS_NOT_SUPPORTED, f"QoS {publish.qos} exceeds the maximum QoS [MQTT-3.2.2-11]")
        if publish.retain and not self.config.retain_available:
            raise MqttProtocolError(ReasonCode.RETAIN_NOT_SUPPORTED, "retain is not available [MQTT-3.2.2-14]")
        if publish.qos == 2 and publish.packet_id in self.session.received_qos2:
            self._send(PubRec(packet_id=publish.packet_id))  # a resend: the message is already stored
            return
        if publish.qos == 2 and (2, publish.packet_id) in self._writes.values():
            return  # a resend while the first copy is being written: its PUBREC follows
        if (
            publish.qos
            and self.protocol_level == PROTOCOL_LEVEL_5  # 3.1.1 has no receive maximum: the adapter pauses reading
            and len(self._writes) + len(self.session.received_qos2) >= self.config.receive_maximum
        ):
            raise MqttProtocolError(
                ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
                f"more than the receive maximum of {self.config.receive_maximum} unacknowledged QoS 1/2 "
                "PUBLISH packets (§3.3.4)",
            )
        properties = publish.properties
        if properties.topic_alias is not None:  # subscription identifiers were refused above
            properties = replace(properties, topic_alias=None)
        headers = self._record_headers(publish.qos, publish.retain, properties)
        ticket = None
        if publish.qos:
            assert publish.packet_id is not None
            ticket = self._next_ticket
            self._next_ticket += 1
            self._writes[ticket] = (publish.qos, publish.packet_id)
        self._actions.append(PublishToLog(
            ticket=ticket, log_topic=self._mapping.log_topic_for(topic), key=record_key(topic),
            payload=publish.payload, headers=headers,
        ))
        if publish.retain:
            self._actions.append(Retain(topic=topic, payload=publish.payload, headers=headers))

    def _record_headers(self, qos: int, retain: bool, properties: Properties) -> tuple[tuple[str, bytes], ...]:
        if properties is not NO_PROPERTIES:
            return record_headers(qos, retain, self.client_id, properties)
        key = (qos, retain)  # nearly every PUBLISH: the same few header tuples, built once per connection
        headers = self._plain_headers.get(key)
        if headers is None:
            headers = self._plain_headers[key] = record_headers(qos, retain, self.client_id, properties)
        return headers

    def _resolve_topic_alias(self, publish: Publish) -> str:
        alias = publish.properties.topic_alias
        if alias is None:
            if not publish.topic and self.protocol_level == PROTOCOL_LEVEL_5:
                raise protocol_error("empty topic name without a topic alias (§3.3.2.3.4)")
            return publish.topic
        if alias > self.config.topic_alias_maximum:
            raise MqttProtocolError(
                ReasonCode.TOPIC_ALIAS_INVALID,
                f"topic alias {alias} exceeds the topic alias maximum {self.config.topic_alias_maximum} (§3.3.2.3.4)",
            )
        if publish.topic:
            self._inbound_aliases[alias] = publish.topic
            return publish.topic
        topic = self._inbound_aliases.get(alias)
        if topic is None:
            raise protocol_error(f"topic alias {alias} was never set on this connection (§3.3.2.3.4)")
        return topic

    def _on_pubrel(self, pubrel: PubRel, now_ms: int) -> None:
        assert self.session is not None
        if pubrel.packet_id in self.session.received_qos2:
            self.session.received_qos2.discard(pubrel.packet_id)
            self._dirty = True
            self._send(PubComp(packet_id=pubrel.packet_id))
        else:
            self._send(PubComp(packet_id=pubrel.packet_id, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))

    # ------------------------------------------------------------------ outbound PUBLISH flow

    def _on_puback(self, puback: PubAck, now_ms: int) -> None:
        self._complete_outbound(puback.packet_id, InflightState.AWAITING_PUBACK, now_ms)

    def _on_pubrec(self, pubrec: PubRec, now_ms: int) -> None:
        assert self.session is not None
        entry = self.session.inflight.get(pubrec.packet_id)
        if entry is None or entry.state is not InflightState.AWAITING_PUBREC:
            self._send(PubRel(packet_id=pubrec.packet_id, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))
            return
        if pubrec.reason_code >= 0x80:
            self._complete_outbound(pubrec.packet_id, InflightState.AWAITING_PUBREC, now_ms)
            return
        self.session.inflight[pubrec.packet_id] = replace(entry, state=InflightState.AWAITING_PUBCOMP)
        self._dirty = True
        self._send(PubRel(packet_id=pubrec.packet_id))

    def _on_pubcomp(self, pubcomp: PubComp, now_ms: int) -> None:
        self._complete_outbound(pubcomp.packet_id, InflightState.AWAITING_PUBCOMP, now_ms)

    def _complete_outbound(self, packet_id: int, expected: InflightState, now_ms: int) -> None:
        assert self.session is not None
        entry = self.session.inflight.get(packet_id)
        if entry is None or entry.state is not expected:
            return  # a late or duplicated acknowledgement: nothing is waiting for it
        del self.session.inflight[packet_id]
        self._dirty = True
        self._pump(now_ms)

    def _resend_inflight(self) -> None:
        assert self.session is not None
        for packet_id, entry in list(self.session.inflight.items()):
            if entry.state is InflightState.AWAITING_PUBCOMP:
                self._send(PubRel(packet_id=packet_id))
            elif not self._send_if_fits(replace(entry.publish, dup=True)):
                del self.session.inflight[packet_id]  # too large for this connection [MQTT-3.1.2-25]

    def _pump(self, now_ms: int) -> None:
        """Send queued messages: QoS 0 at once, QoS 1/2 while the client's window has room."""
        session = self.session
        assert session is not None
        while session.qos0_pending:
            self._send_message(session.qos0_pending.popleft(), now_ms)
        while session.pending and len(session.inflight) < self._client_receive_maximum:
            self._send_message(session.pending.popleft(), now_ms)
            self._dirty = True

    def _send_message(self, message: OutboundMessage, now_ms: int) -> None:
        properties = message.properties
        expiry_s = properties.message_expiry_interval_s
        if expiry_s is not None:
            remaining_s = expiry_s - (now_ms - message.created_ms) // 1000
            if remaining_s <= 0:
                return  # expired while queued [MQTT-3.3.2-5]
            properties = replace(properties, message_expiry_interval_s=remaining_s)  # [MQTT-3.3.2-6]
        if message.qos == 0:
            self._send_if_fits(Publish(topic=message.topic, payload=message.payload, retain=message.retain,
                                       properties=properties))
            return
        assert self.session is not None
        publish = Publish(topic=message.topic, payload=message.payload, qos=message.qos, retain=message.retain,
                          packet_id=self.session.allocate_packet_id(), properties=properties)
        if self._send_if_fits(publish):
            state = InflightState.AWAITING_PUBACK if message.qos == 1 else InflightState.AWAITING_PUBREC
            self.session.inflight[publish.packet_id] = Inflight(publish=publish, state=state)  # type: ignore[index]

    def _send_if_fits(self, publish: Publish) -> bool:
        """Send ``publish`` with an outbound topic alias if it fits the client's maximum packet size."""
        alias = self._outbound_aliases.get(publish.topic)
        new_alias = alias is None and len(self._outbound_aliases) < self._client_topic_alias_maximum
        if new_alias:
            alias = len(self._outbound_aliases) + 1
        wire = publish
        if alias is not None:
            wire = replace(publish, topic="" if not new_alias else publish.topic,
                           properties=replace(publish.properties, topic_alias=alias))
        data = encode(wire, self.protocol_level)
        if self._client_packet_bytes_max is not None and len(data) > self._client_packet_bytes_max:
            return False  # the server discards what the client cannot receive [MQTT-3.1.2-25]
        if new_alias:
            self._outbound_aliases[publish.topic] = alias  # type: ignore[assignment]
        self._actions.append(Send(packet=wire, data=data))
        return True

    # ------------------------------------------------------------------ SUBSCRIBE / UNSUBSCRIBE

    def _on_subscribe(self, subscribe: Subscribe, now_ms: int) -> None:
        identifiers = subscribe.properties.subscription_identifiers
        if identifiers and not self.config.subscription_identifier_available:
            raise MqttProtocolError(
                ReasonCode.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED, "subscription identifiers are not available"
            )
        identifier = identifiers[0] if identifiers else None
        codes = tuple(self._subscribe_one(request, identifier) for request in subscribe.subscriptions)
        if self.protocol_level != PROTOCOL_LEVEL_5:
            codes = tuple(SUBACK_FAILURE_3_1_1 if code >= 0x80 else code for code in codes)
        self._send(SubAck(packet_id=subscribe.packet_id, reason_codes=codes))

    def _subscribe_one(self, request: SubscriptionRequest, identifier: int | None) -> int:
        assert self.session is not None
        try:
            parsed = parse_subscription_filter(request.topic_filter)
        except MqttProtocolError as error:
            return error.reason_code
        if parsed.share_group is not None:
            if request.no_local:
                raise protocol_error("no-local on a shared subscription [MQTT-3.8.3-4]")
            if not self.config.shared_subscription_available:
                return ReasonCode.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED
        if has_wildcards(parsed.topic_filter) and not self.config.wildcard_subscription_available:
            return ReasonCode.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED
        if not self.authorize_filter(parsed.topic_filter):
            return ReasonCode.NOT_AUTHORIZED
        granted = min(request.qos, self.config.maximum_qos)
        is_new = request.topic_filter not in self.session.subscriptions
        subscription = Subscription(
            topic_filter=request.topic_filter, share_group=parsed.share_group, qos=granted,
            no_local=request.no_local, retain_as_published=request.retain_as_published,
            retain_handling=request.retain_handling, subscription_identifier=identifier,
        )
        self.session.subscriptions[request.topic_filter] = subscription  # replaces [MQTT-3.8.4-3]
        self._dirty = True
        send_retained = parsed.share_group is None and (  # none for shared subscriptions (§4.8.2)
            request.retain_handling is RetainHandling.SEND_ON_SUBSCRIBE
            or (request.retain_handling is RetainHandling.SEND_IF_NEW_SUBSCRIPTION and is_new)
        )
        self._actions.append(AddSubscription(client_id=self.client_id, subscription=subscription,
                                             send_retained=send_retained))
        return granted

    def _on_unsubscribe(self, unsubscribe: Unsubscribe, now_ms: int) -> None:
        assert self.session is not None
        codes = []
        for topic_filter in unsubscribe.topic_filters:
            try:
                parse_subscription_filter(topic_filter)
            except MqttProtocolError as error:
                codes.append(int(error.reason_code))
                continue
            if self.session.subscriptions.pop(topic_filter, None) is None:
                codes.append(ReasonCode.NO_SUBSCRIPTION_EXISTED)
                continue
            self._dirty = True
            self._actions.append(RemoveSubscription(client_id=self.client_id, topic_filter=topic_filter))
            codes.append(ReasonCode.SUCCESS)
        self._send(UnsubAck(packet_id=unsubscribe.packet_id, reason_codes=tuple(codes)))

    # ------------------------------------------------------------------ PING, DISCONNECT, AUTH

    def _on_pingreq(self, ping: PingReq, now_ms: int) -> None:
        self._send(PingResp())

    def _on_disconnect(self, disconnect: Disconnect, now_ms: int) -> None:
        requested = disconnect.properties.session_expiry_interval_s
        if requested is not None:
            if self._expiry_interval_s == 0 and requested != 0:
                raise protocol_error("session expiry changed from 0 at DISCONNECT [MQTT-3.14.2-2]")
            self._expiry_interval_s = min(requested, self.config.session_expiry_s_max)
        self._move(Event.DISCONNECT)
        with_will = disconnect.reason_code == ReasonCode.DISCONNECT_WITH_WILL_MESSAGE
        self._end_session(now_ms, publish_will=with_will)  # a normal DISCONNECT drops the will [MQTT-3.1.2-10]
        self._actions.append(Close(reason=f"client sent DISCONNECT ({disconnect.reason_code:#04x})"))

    def _on_auth(self, auth: Auth, now_ms: int) -> None:
        raise protocol_error("AUTH without enhanced authentication in CONNECT [MQTT-4.12.0-1]")

    # ------------------------------------------------------------------ ending

    def _fail(self, error: MqttProtocolError, now_ms: int) -> None:
        was_connected = self.state is ConnectionState.CONNECTED
        if self.state is ConnectionState.AWAITING_CONNECT:
            if error.reason_code == ReasonCode.UNSUPPORTED_PROTOCOL_VERSION:
                self.protocol_level = PROTOCOL_LEVEL_3_1_1  # answer in a format every client reads [MQTT-3.1.2-2]
                self._send_connack_error(error.reason_code)
        elif was_connected and self.protocol_level == PROTOCOL_LEVEL_5:  # never before CONNACK [MQTT-3.14.0-1]
            self._send(Disconnect(reason_code=error.reason_code, properties=Properties(reason_string=error.message)))
        self._move(Event.PROTOCOL_ERROR)
        if was_connected:
            self._end_session(now_ms, publish_will=True)
        self._actions.append(Close(reason=str(error)))

    def _close_now(self, reason_code: ReasonCode, message: str, now_ms: int) -> list[Action]:
        was_connected = self.state is ConnectionState.CONNECTED
        if self.protocol_level == PROTOCOL_LEVEL_5 and was_connected:
            self._send(Disconnect(reason_code=reason_code, properties=Properties(reason_string=message)))
        self._move(Event.CLOSE)
        if was_connected:
            self._end_session(now_ms, publish_will=True)
        self._actions.append(Close(reason=message))
        return self._finish()

    def _end_session(self, now_ms: int, *, publish_will: bool) -> None:
        assert self.session is not None
        if publish_will and self._will is not None:
            self._actions.append(self._will_action(self._will, now_ms))
        self._will = None
        keep = self._expiry_interval_s > 0
        self.session.expiry_interval_s = self._expiry_interval_s
        self._actions.append(SessionEnded(
            client_id=self.client_id, state=self.session if keep else None, expiry_interval_s=self._expiry_interval_s,
        ))

    def _will_action(self, will: Will, now_ms: int) -> Action:
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

    def _send(self, packet: Packet) -> None:
        self._actions.append(Send(packet=packet, data=encode(packet, self.protocol_level)))

    def _finish(self) -> list[Action]:
        actions, self._actions = self._actions, []
        if self._dirty and self.session is not None and self._expiry_interval_s > 0:
            actions.insert(0, StoreSession(client_id=self.client_id, data=self.session.to_bytes()))
        self._dirty = False
        return actions


_HANDLERS: dict[type, Callable[[MqttSession, object, int], None]] = {
    Publish: MqttSession._on_publish,  # type: ignore[dict-item]
    PubAck: MqttSession._on_puback,  # type: ignore[dict-item]
    PubRec: MqttSession._on_pubrec,  # type: ignore[dict-item]
    PubRel: MqttSession._on_pubrel,  # type: ignore[dict-item]
    PubComp: MqttSession._on_pubcomp,  # type: ignore[dict-item]
    Subscribe: MqttSession._on_subscribe,  # type: ignore[dict-item]
    Unsubscribe: MqttSession._on_unsubscribe,  # type: ignore[dict-item]
    PingReq: MqttSession._on_pingreq,  # type: ignore[dict-item]
    Disconnect: MqttSession._on_disconnect,  # type: ignore[dict-item]
    Auth: MqttSession._on_auth,  # type: ignore[dict-item]
}
