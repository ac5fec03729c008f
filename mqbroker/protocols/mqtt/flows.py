"""The PUBLISH flows of one MQTT connection, both directions: the session's second level (sans-I/O).

``MqttSession`` (``session.py``) owns the connection's states; once a CONNECT is accepted it
hands every PUBLISH, PUBACK, PUBREC, PUBREL and PUBCOMP to a ``PublishFlows``, and every message
to deliver. Like h2's per-stream machines, the flows keep the per-packet-id state:

* inbound: topic aliases, the QoS 1/2 messages on their way to the log (``PublishToLog``
  tickets), the receive maximum, the QoS 2 packet ids stored and not yet released;
* outbound: the client's window (its receive maximum), its topic aliases and maximum packet
  size, the in-flight messages and their acknowledgement states.

Both write into the session's ``Outbox``: the actions of one entry point, in order, and whether
the durable session state changed (``StoreSession``), and how:

* ``dirty``: the actions must wait until the state is durable (persist before send), because a crash
  that lost the change would break a promise: a QoS 2 PUBLISH (its packet id must survive, or the
  message would go out again under another one and the client deliver it twice), a PUBREL (no
  PUBLISH may follow it), the PUBREC and PUBCOMP of inbound QoS 2, SUBACK and UNSUBACK, CONNACK;
* ``changed``: losing the change costs only a redelivery, which QoS 1 allows: a QoS 1 PUBLISH (lost,
  its message is read again from the stored cursor and sent anew) and an acknowledgement (lost, the
  message goes out again with DUP=1). The adapter writes those within
  ``limits.mqtt_session_store_interval_ms`` without holding any send back.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from itertools import repeat
from operator import itemgetter

from mqbroker.protocols.mqtt.actions import Action, PublishToLog, Retain, Send, SendPubAcks, SendPublishes
from mqbroker.protocols.mqtt.codec import encode, encode_plain_publish
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.errors import MqttProtocolError, protocol_error
from mqbroker.protocols.mqtt.fields import encode_string
from mqbroker.protocols.mqtt.headers import record_headers
from mqbroker.protocols.mqtt.packets import (
    NO_PROPERTIES,
    PROTOCOL_LEVEL_5,
    Packet,
    PacketType,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
)
from mqbroker.protocols.mqtt.state import InflightState, OutboundMessage, SessionState, Subscription
from mqbroker.protocols.mqtt.topics import TopicMapping, record_key, validate_topic_name


#: A successful PUBACK: its fixed header (type 4, remaining length 2), then the packet id.
_PUBACK = struct.Struct(">HH")
_PUBACK_HEADER = PacketType.PUBACK << 12 | 2
_PACKET_ID = itemgetter(1)  # of a log write's (qos, packet id)
#: A refill of the client's window waits until this share of it is free (or all that waits fits): see ``pump``.
_REFILL_STEP_SHARE = 8


class Outbox:
    """What one entry point of the session produced: actions in order, and whether the stored session changed."""

    __slots__ = ("actions", "changed", "dirty", "protocol_level")

    def __init__(self) -> None:
        self.actions: list[Action] = []
        #: The durable session state changed: the session stores it before the actions run.
        self.dirty = False
        #: The durable session state changed in a way a crash may lose (a redelivery): stored soon, sends go on.
        self.changed = False
        #: The level packets are encoded at (the CONNECT's, once one arrived).
        self.protocol_level = PROTOCOL_LEVEL_5

    def send(self, packet: Packet) -> None:
        """Encode ``packet`` at the connection's level and queue it."""
        self.actions.append(Send(packet=packet, data=encode(packet, self.protocol_level)))


class PublishFlows:
    """The QoS 0/1/2 PUBLISH flows of one accepted connection (see the module docstring)."""

    def __init__(
        self, *, config: SessionConfig, mapping: TopicMapping, outbox: Outbox, client_id: str,
        client_receive_maximum: int, client_topic_alias_maximum: int, client_packet_bytes_max: int | None,
    ) -> None:
        self._config = config
        self._mapping = mapping
        self._outbox = outbox
        self._client_id = client_id
        self._client_receive_maximum = client_receive_maximum
        #: The free slots of the window a refill waits for, unless everything pending fits (``pump``).
        self._refill_step = max(1, client_receive_maximum // _REFILL_STEP_SHARE)
        self._client_topic_alias_maximum = client_topic_alias_maximum
        self._client_packet_bytes_max = client_packet_bytes_max
        #: The session state, once opened (``attach``).
        self.state: SessionState | None = None
        self._outbound_aliases: dict[str, int] = {}
        self._inbound_aliases: dict[int, str] = {}
        #: The client's QoS 1/2 messages on their way to the log: ticket -> (qos, packet id).
        self.log_writes: dict[int, tuple[int, int]] = {}
        self._plain_headers: dict[tuple[int, bool], tuple[tuple[str, bytes], ...]] = {}
        #: The last PUBLISH's (topic, mapping rules version, log topic, record key): most publish to one topic.
        self._destination: tuple[str, int, str, bytes] = ("", -1, "", b"")
        self._next_ticket = 1
        #: The last topic a PUBLISH went out on, and its string field (``_send_pending``; a drain's are all one).
        self._topic_field: tuple[str, bytes] = ("", b"")

    def attach(self, state: SessionState, now_ms: int) -> None:
        """The session is open: resend what was in flight [MQTT-4.4.0-1], then send what waits."""
        self.state = state
        self._resend_inflight()
        self.pump(now_ms)

    # ------------------------------------------------------------------ inbound PUBLISH flow

    def on_publish(self, publish: Publish, now_ms: int) -> None:
        """A client PUBLISH: append it to the log (QoS 1/2 with a ticket that completes its flow)."""
        state = self.state
        assert state is not None
        properties = publish.properties
        plain = properties is NO_PROPERTIES  # nearly every PUBLISH: no property to check or strip
        if not plain and properties.subscription_identifiers:
            raise protocol_error("a client PUBLISH carries a subscription identifier [MQTT-3.3.4-6]")
        topic = publish.topic
        if not topic or not plain:
            topic = self._resolve_topic_alias(publish)
        destination = self._destination
        if destination[0] != topic or destination[1] != self._mapping.rules_version:
            validate_topic_name(topic)  # a topic seen last time (the usual case) was valid then, and still is
            destination = self._destination = (
                topic, self._mapping.rules_version, self._mapping.log_topic_for(topic), record_key(topic))
        qos, retain = publish.qos, publish.retain
        if qos > self._config.maximum_qos:
            raise MqttProtocolError(ReasonCode.QOS_NOT_SUPPORTED, f"QoS {qos} exceeds the maximum QoS [MQTT-3.2.2-11]")
        if retain and not self._config.retain_available:
            raise MqttProtocolError(ReasonCode.RETAIN_NOT_SUPPORTED, "retain is not available [MQTT-3.2.2-14]")
        if qos == 2:
            if publish.packet_id in state.received_qos2:
                self._outbox.send(PubRec(packet_id=publish.packet_id))  # a resend: the message is already stored
                return
            if (2, publish.packet_id) in self.log_writes.values():
                return  # a resend while the first copy is being written: its PUBREC follows
        if (
            qos
            and self._outbox.protocol_level == PROTOCOL_LEVEL_5  # 3.1.1 has no receive maximum: the adapter pauses reading
            and len(self.log_writes) + len(state.received_qos2) >= self._config.receive_maximum
        ):
            raise MqttProtocolError(
                ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
                f"more than the receive maximum of {self._config.receive_maximum} unacknowledged QoS 1/2 "
                "PUBLISH packets (§3.3.4)",
            )
        if not plain and properties.topic_alias is not None:  # subscription identifiers were refused above
            properties = replace(properties, topic_alias=None)
        headers = self._plain_headers.get((qos, retain)) if properties is NO_PROPERTIES else None
        if headers is None:  # (the usual PUBLISH's are found above, without a call)
            headers = self._record_headers(qos, retain, properties)
        ticket = None
        if qos:
            assert publish.packet_id is not None
            ticket = self._next_ticket
            self._next_ticket = ticket + 1
            self.log_writes[ticket] = (qos, publish.packet_id)
        self._outbox.actions.append(PublishToLog(
            ticket=ticket, log_topic=destination[2], key=destination[3], payload=publish.payload, headers=headers,
        ))
        if retain:
            self._outbox.actions.append(Retain(topic=topic, payload=publish.payload, headers=headers))

    def _record_headers(self, qos: int, retain: bool, properties: Properties) -> tuple[tuple[str, bytes], ...]:
        if properties is not NO_PROPERTIES:
            return record_headers(qos, retain, self._client_id, properties)
        key = (qos, retain)  # nearly every PUBLISH: the same few header tuples, built once per connection
        headers = self._plain_headers.get(key)
        if headers is None:
            headers = self._plain_headers[key] = record_headers(qos, retain, self._client_id, properties)
        return headers

    def _resolve_topic_alias(self, publish: Publish) -> str:
        alias = publish.properties.topic_alias
        if alias is None:
            if not publish.topic and self._outbox.protocol_level == PROTOCOL_LEVEL_5:
                raise protocol_error("empty topic name without a topic alias (§3.3.2.3.4)")
            return publish.topic
        if alias > self._config.topic_alias_maximum:
            raise MqttProtocolError(
                ReasonCode.TOPIC_ALIAS_INVALID,
                f"topic alias {alias} exceeds the topic alias maximum {self._config.topic_alias_maximum} (§3.3.2.3.4)",
            )
        if publish.topic:
            self._inbound_aliases[alias] = publish.topic
            return publish.topic
        topic = self._inbound_aliases.get(alias)
        if topic is None:
            raise protocol_error(f"topic alias {alias} was never set on this connection (§3.3.2.3.4)")
        return topic

    def take_writes(self, tickets: Sequence[int]) -> list[tuple[int, int]]:
        """The (qos, packet id) of log writes that completed, forgotten here."""
        return list(map(self.log_writes.pop, tickets))

    def acknowledge_writes(self, writes: Sequence[tuple[int, int]], reason_code: ReasonCode) -> None:
        """PUBACK or PUBREC the client messages the log took (or refused with ``reason_code``), in order."""
        if reason_code == ReasonCode.SUCCESS and writes and max(writes)[0] == 1:  # all QoS 1 (the usual case)
            self._send_pubacks(list(map(_PACKET_ID, writes)))
            return
        puback_ids: list[int] = []  # a run of successful PUBACKs: one action
        for qos, packet_id in writes:
            if qos == 1 and reason_code == ReasonCode.SUCCESS:
                puback_ids.append(packet_id)
                continue
            if puback_ids:
                self._send_pubacks(puback_ids)
                puback_ids = []
            if qos == 1:
                self._outbox.send(PubAck(packet_id=packet_id, reason_code=reason_code))
                continue
            if reason_code < 0x80:
                assert self.state is not None
                self.state.received_qos2.add(packet_id)
                self._outbox.dirty = True
            self._outbox.send(PubRec(packet_id=packet_id, reason_code=reason_code))
        if puback_ids:
            self._send_pubacks(puback_ids)

    def _send_pubacks(self, packet_ids: list[int]) -> None:
        """Successful PUBACKs in the short form at either level [MQTT-3.4.2.1]: fixed header and packet id."""
        self._outbox.actions.append(SendPubAcks(
            packet_ids=packet_ids, data=b"".join(map(_PUBACK.pack, repeat(_PUBACK_HEADER), packet_ids))))

    def on_pubrel(self, pubrel: PubRel, now_ms: int) -> None:
        """The client releases a stored QoS 2 message: forget its packet id."""
        assert self.state is not None
        if pubrel.packet_id in self.state.received_qos2:
            self.state.received_qos2.discard(pubrel.packet_id)
            self._outbox.dirty = True
            self._outbox.send(PubComp(packet_id=pubrel.packet_id))
        else:
            self._outbox.send(PubComp(packet_id=pubrel.packet_id, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))

    # ------------------------------------------------------------------ outbound PUBLISH flow

    def on_puback(self, puback: PubAck, now_ms: int) -> None:
        """A QoS 1 delivery is acknowledged."""
        self._complete_outbound(puback.packet_id, InflightState.AWAITING_PUBACK, now_ms)

    def on_pubacks(self, packet_ids: Sequence[int], now_ms: int) -> None:
        """``on_puback`` of a run of PUBACKs (one read of a subscriber's): the window refills once, after the last."""
        state = self.state
        assert state is not None
        inflight = state.inflight
        completed = False
        for packet_id in packet_ids:
            message = inflight.get(packet_id)
            if message is not None and message.qos == 1:  # else late or duplicated: nothing waits for it (QoS 1
                del inflight[packet_id]  # awaits its PUBACK, never a PUBCOMP: ``SessionState.flow``)
                completed = True
        if completed:
            self._outbox.changed = True  # lost in a crash, the messages go out again (DUP=1), are acknowledged again
            if state.pending or state.qos0_pending:  # a live subscriber's queue is empty: nothing to ``pump``
                self.pump(now_ms)

    def on_pubrec(self, pubrec: PubRec, now_ms: int) -> None:
        """A QoS 2 delivery is received: release it (or end it, if the client refused it)."""
        assert self.state is not None
        if self.state.flow(pubrec.packet_id) is not InflightState.AWAITING_PUBREC:
            self._outbox.send(PubRel(packet_id=pubrec.packet_id, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND))
            return
        if pubrec.reason_code >= 0x80:
            self._complete_outbound(pubrec.packet_id, InflightState.AWAITING_PUBREC, now_ms)
            return
        self.state.released.add(pubrec.packet_id)
        self._outbox.dirty = True
        self._outbox.send(PubRel(packet_id=pubrec.packet_id))

    def on_pubcomp(self, pubcomp: PubComp, now_ms: int) -> None:
        """A QoS 2 delivery is complete."""
        self._complete_outbound(pubcomp.packet_id, InflightState.AWAITING_PUBCOMP, now_ms)

    def _complete_outbound(self, packet_id: int, expected: InflightState, now_ms: int) -> None:
        assert self.state is not None
        if self.state.flow(packet_id) is not expected:
            return  # a late or duplicated acknowledgement: nothing is waiting for it
        self.state.complete(packet_id)
        self._outbox.changed = True  # lost in a crash, the message goes out again (DUP=1) and is acknowledged again
        self.pump(now_ms)

    def _resend_inflight(self) -> None:
        state = self.state
        assert state is not None
        for packet_id, message in list(state.inflight.items()):
            if packet_id in state.released:
                self._outbox.send(PubRel(packet_id=packet_id))
            elif not self._send_if_fits(Publish(topic=message.topic, payload=message.payload, qos=message.qos,
                                                retain=message.retain, dup=True, packet_id=packet_id,
                                                properties=message.properties)):
                state.complete(packet_id)  # too large for this connection [MQTT-3.1.2-25]

    def deliver_many(self, deliveries: Iterable[tuple[OutboundMessage, Sequence[Subscription]]], now_ms: int) -> None:
        """Queue each (message, subscriptions) and send what may go, before the next is read (``MqttSession``'s
        ``deliver_many``). While ``pump`` would send nothing (a drain's refill, the window short of a refill step, no
        QoS 0 message waiting) the message only joins the queue."""
        state = self.state
        assert state is not None
        inflight, pending, qos0_pending = state.inflight, state.pending, state.qos0_pending
        window, step = self._client_receive_maximum, self._refill_step
        free = window - len(inflight)  # changes only when ``pump`` sends
        for message, subscriptions in deliveries:
            state.enqueue(message, subscriptions)
            if qos0_pending or free >= step or free >= len(pending):  # ``pump``'s test
                self.pump(now_ms)
                free = window - len(inflight)

    def pump(self, now_ms: int) -> None:
        """Send queued messages: QoS 0 at once, QoS 1/2 while the client's window has room.

        A refill of the window starts once a step of it is free (an eighth), or room for every queued message: a
        drain's client acknowledges a few PUBLISHes per read, and refilling at each read would cost a write and the
        adapter's work per action list for two or three messages; the window stays at least seven eighths full.
        With nothing in flight the window is wholly free, so a queued message never waits for an acknowledgement
        that will not come."""
        state = self.state
        assert state is not None
        while state.qos0_pending:
            self._send_message(state.qos0_pending.popleft(), now_ms)
        pending = state.pending
        free = self._client_receive_maximum - len(state.inflight)
        if pending and (free >= self._refill_step or free >= len(pending)):
            self._outbox.changed = True  # the stored cursor moves past what goes (QoS 2 sends set ``dirty`` too)
            self._send_pending(state, now_ms)

    def _send_pending(self, state: SessionState, now_ms: int) -> None:
        """``_send_message`` of each pending QoS 1/2 message while the window has room. A message without properties
        to a client without outbound topic aliases (a drain's every message) is sent here, its PUBLISH encoded from
        the topic's string field in one call (the same bytes ``_send_if_fits`` would write)."""
        pending, inflight, window = state.pending, state.inflight, self._client_receive_maximum
        if self._client_topic_alias_maximum:
            while pending and len(inflight) < window:
                self._send_message(pending.popleft(), now_ms)
            return
        outbox = self._outbox
        actions = outbox.actions
        v5 = outbox.protocol_level == PROTOCOL_LEVEL_5
        packet_bytes_max = self._client_packet_bytes_max
        topic, topic_field = self._topic_field
        encoded: list[bytes] = []  # the encodings of the run sent so far: one action for all of them
        while pending and len(inflight) < window:
            message = pending.popleft()
            if message.properties is not NO_PROPERTIES:
                if encoded:
                    actions.append(SendPublishes(count=len(encoded), data=b"".join(encoded)))
                    encoded = []
                self._send_message(message, now_ms)
                continue
            if message.topic != topic:
                topic = message.topic
                topic_field = encode_string(topic)
                self._topic_field = topic, topic_field
            qos, retain, payload = message.qos, message.retain, message.payload
            packet_id = state.allocate_packet_id()
            data = encode_plain_publish(topic_field, payload, qos, retain, packet_id, v5)
            if packet_bytes_max is not None and len(data) > packet_bytes_max:
                continue  # the server discards what the client cannot receive [MQTT-3.1.2-25]
            encoded.append(data)
            if qos != 1:
                outbox.dirty = True  # a QoS 2 packet id is durable before it goes out (the module docstring)
            inflight[packet_id] = message  # as it goes: no alias, no properties
        if encoded:
            actions.append(SendPublishes(count=len(encoded), data=b"".join(encoded)))

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
        assert self.state is not None
        packet_id = self.state.allocate_packet_id()
        publish = Publish(topic=message.topic, payload=message.payload, qos=message.qos, retain=message.retain,
                          packet_id=packet_id, properties=properties)
        if self._send_if_fits(publish):
            if message.qos != 1:
                self._outbox.dirty = True  # a QoS 2 packet id is durable before it goes out (the module docstring)
            if properties is not message.properties:  # in flight as it went out (its remaining lifetime)
                message = replace(message, properties=properties)
            self.state.inflight[packet_id] = message

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
        data = encode(wire, self._outbox.protocol_level)
        if self._client_packet_bytes_max is not None and len(data) > self._client_packet_bytes_max:
            return False  # the server discards what the client cannot receive [MQTT-3.1.2-25]
        if new_alias:
            self._outbound_aliases[publish.topic] = alias  # type: ignore[assignment]
        self._outbox.actions.append(Send(packet=wire, data=data))
        return True


#: The packets of the PUBLISH flows, and the handler each goes to.
FLOW_HANDLERS: dict[type, Callable[[PublishFlows, object, int], None]] = {
    Publish: PublishFlows.on_publish,  # type: ignore[dict-item]
    PubAck: PublishFlows.on_puback,  # type: ignore[dict-item]
    PubRec: PublishFlows.on_pubrec,  # type: ignore[dict-item]
    PubRel: PublishFlows.on_pubrel,  # type: ignore[dict-item]
    PubComp: PublishFlows.on_pubcomp,  # type: ignore[dict-item]
}
