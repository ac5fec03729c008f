"""The part of an MQTT session that outlives a connection, and its serialization to bytes.

Durable (``to_bytes``/``from_bytes``, stored later in an internal compacted log topic):
the subscriptions, the outbound QoS 1/2 messages in flight with their flow state, and the
inbound QoS 2 packet ids received but not yet released. Not durable: the queues of
messages waiting for a window (``pending``, ``qos0_pending``), which the adapter refills
from the log after a restart.

In memory an in-flight delivery is its ``OutboundMessage`` (as it goes: QoS, retain flag and properties of this
delivery) under its packet id in ``inflight``; its flow state follows from its QoS and ``released`` (see
``InflightState``): no object per delivery beyond the message, which one fetch's decoding made and every session
it goes to shares.

An in-flight message read from the log is stored as where it is in the log (topic,
partition, offset) with what its delivery changed (QoS, retain flag, subscription
identifiers), not as the message: the log keeps it, as a Kafka consumer's committed offset
points into the log. A state loaded from bytes lists those in ``unread``; the adapter reads
each from the log and hands it to ``read_back`` before the session resends them (same
packet ids, DUP=1). A message that is not in the log (from the retained store) is stored
whole. Format version 2; version 1 (every in-flight message whole) still loads.

Queue bounds and overflow: ``pending`` (QoS 1/2) holds at most ``pending_messages_max``
messages; ``has_room`` tells the adapter to stop reading the log for this session until
the client acknowledges (nothing is lost: the log is the queue). ``qos0_pending`` holds at
most ``qos0_queue_length_max`` QoS 0 messages; on overflow the OLDEST is dropped and
``qos0_dropped`` counts it (HiveMQ's discard-oldest; QoS 0 promises at most once).
"""

from __future__ import annotations

import base64
import enum
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from mqbroker import limits
from mqbroker.errors import CorruptMessageError
from mqbroker.protocols.mqtt.codec import (
    PACKET_BYTES_MAX_ABSOLUTE,
    PacketDecoder,
    encode,
)
from mqbroker.protocols.mqtt.errors import MqttProtocolError
from mqbroker.protocols.mqtt.packets import (
    NO_PROPERTIES,
    PROTOCOL_LEVEL_5,
    Properties,
    Publish,
    RetainHandling,
)
from mqbroker.protocols.mqtt.topics import topic_matches

_STATE_FORMAT_VERSION = 2
#: The versions ``from_bytes`` reads: 1 stored every in-flight message whole (a record written before an upgrade).
_STATE_FORMAT_VERSIONS_READ = (1, 2)
#: The largest subscription identifier (a variable byte integer, MQTT 5.0 §3.8.2.1.2).
_SUBSCRIPTION_IDENTIFIER_MAX = 268_435_455

#: Where a message is in the log: (log topic, partition, offset).
LogPosition = tuple[str, int, int]
#: A share group as messages are split over it: (group name, filter without ``$share/{group}/``).
GroupKey = tuple[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    """One granted subscription of a session (``topic_filter`` as sent, ``$share/...`` included)."""

    topic_filter: str
    share_group: str | None = None
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: RetainHandling = RetainHandling.SEND_ON_SUBSCRIBE
    subscription_identifier: int | None = None


#: Made once per message read from the log, so not frozen (see ``packets.Publish``); nothing changes one after it
#: is made (one object may go to every subscriber it matches, and stay in flight in each).
@dataclass(slots=True, kw_only=True)
class OutboundMessage:
    """A message on its way to one session: what the adapter read from the log or the retained store; in flight,
    the delivery as it went out (full topic name, no alias)."""

    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    properties: Properties = NO_PROPERTIES
    origin_client_id: str | None = None
    created_ms: int = 0
    #: Where the message is in the log (None: it is not, e.g. it came from the retained store).
    position: LogPosition | None = None


def group_key_of(subscription: Subscription) -> GroupKey:
    """The share group ``subscription`` belongs to (it must be a shared subscription)."""
    group = subscription.share_group
    assert group is not None, subscription
    return group, subscription.topic_filter[len("$share/") + len(group) + 1 :]


class InflightState(enum.Enum):
    """Where an outbound QoS 1/2 message is in its acknowledgement flow (``SessionState.flow``): a QoS 1 delivery
    awaits its PUBACK, a QoS 2 one its PUBREC, then (its packet id in ``released``) its PUBCOMP."""

    AWAITING_PUBACK = "awaiting-puback"
    AWAITING_PUBREC = "awaiting-pubrec"
    AWAITING_PUBCOMP = "awaiting-pubcomp"


_AWAITING_PUBACK, _AWAITING_PUBREC, _AWAITING_PUBCOMP = (
    InflightState.AWAITING_PUBACK, InflightState.AWAITING_PUBREC, InflightState.AWAITING_PUBCOMP)


class SessionState:
    """Subscriptions, in-flight flows and queues of one client id, across connections."""

    __slots__ = (
        "client_id", "expiry_interval_s", "subscriptions", "inflight", "released", "received_qos2", "next_packet_id",
        "pending", "qos0_pending", "qos0_dropped", "pending_messages_max", "qos0_queue_length_max", "_stored_inflight",
        "unread",
    )

    def __init__(
        self,
        client_id: str,
        *,
        expiry_interval_s: int = 0,
        pending_messages_max: int = limits.mqtt_pending_messages_max,
        qos0_queue_length_max: int = limits.mqtt_qos0_queue_length_max,
    ) -> None:
        self.client_id = client_id
        self.expiry_interval_s = expiry_interval_s
        self.subscriptions: dict[str, Subscription] = {}
        #: The QoS 1/2 deliveries in flight by packet id, as they went out; insertion order is the order to resend in.
        #: Loaded from bytes, a message in the log has its QoS, retain flag and subscription identifiers but no topic
        #: or payload until ``read_back`` (``unread``).
        self.inflight: dict[int, OutboundMessage] = {}
        #: The packet ids of in-flight QoS 2 deliveries the client received (PUBREC; PUBREL sent): awaiting PUBCOMP.
        self.released: set[int] = set()
        self.received_qos2: set[int] = set()
        self.next_packet_id = 1
        self.pending: deque[OutboundMessage] = deque()
        self.qos0_pending: deque[OutboundMessage] = deque()
        self.qos0_dropped = 0
        self.pending_messages_max = pending_messages_max
        self.qos0_queue_length_max = qos0_queue_length_max
        #: ``to_bytes``'s entry of each in-flight message stored whole, by packet id, with the message and flow state
        #: it was made of: a message is encoded once, not in every state written while it is in flight.
        self._stored_inflight: dict[int, tuple[OutboundMessage, InflightState, object]] = {}
        #: In-flight deliveries loaded from bytes whose message is still to be read from the log, by packet id.
        self.unread: dict[int, LogPosition] = {}

    def has_room(self) -> bool:
        """Whether a QoS 1/2 message may be enqueued now (the adapter pauses its log reads if not)."""
        return len(self.pending) < self.pending_messages_max

    def wants_refill(self) -> bool:
        """Whether log reads paused for a full queue should resume: it has drained to half. Resuming at the first
        free slot would read (and decode) a whole fetch per acknowledgement to queue the one message it made room for."""
        return len(self.pending) <= self.pending_messages_max // 2

    def enqueue(
        self, message: OutboundMessage, subscriptions: Sequence[Subscription], *, from_retained_store: bool = False
    ) -> bool:
        """Queue ``message`` as matched by ``subscriptions`` of this session; False if it was skipped.

        Overlapping subscriptions yield ONE copy at the highest granted QoS carrying every
        subscription identifier (what EMQX users ask for, and what MQTT 5.0 §3.3.4 allows).
        """
        if message.origin_client_id == self.client_id:
            subscriptions = [s for s in subscriptions if not s.no_local]  # [MQTT-3.8.3-3]
        if not subscriptions:
            return False
        if len(subscriptions) == 1:  # the common case, without building sets and generators
            (only,) = subscriptions
            qos = message.qos if message.qos <= only.qos else only.qos
            keeps_retain = from_retained_store or only.retain_as_published
            identifier = only.subscription_identifier
            identifiers: tuple[int, ...] = () if identifier is None else (identifier,)
        else:
            qos = min(message.qos, max(subscription.qos for subscription in subscriptions))
            keeps_retain = from_retained_store or any(s.retain_as_published for s in subscriptions)
            identifiers = tuple(sorted({s.subscription_identifier for s in subscriptions} - {None}))  # type: ignore[type-var]
        retain = message.retain and keeps_retain  # [MQTT-3.3.1-12, MQTT-3.3.1-13]
        properties = message.properties
        if properties.subscription_identifiers != identifiers or properties.topic_alias is not None:
            properties = replace(properties, subscription_identifiers=identifiers, topic_alias=None)
        if qos == message.qos and retain == message.retain and properties is message.properties:
            delivery = message  # frozen: one message object serves every subscriber it goes to unchanged
        else:
            delivery = replace(message, qos=qos, retain=retain, properties=properties)
        if qos == 0:
            if len(self.qos0_pending) >= self.qos0_queue_length_max:
                self.qos0_pending.popleft()
                self.qos0_dropped += 1
            self.qos0_pending.append(delivery)
            return True
        assert len(self.pending) < self.pending_messages_max, "the adapter checks has_room() before delivering QoS 1/2"
        self.pending.append(delivery)
        return True

    def take_shared(self, in_flight_too: bool) -> list[tuple[OutboundMessage, Subscription]]:
        """The session ended: its queued QoS 1/2 messages (never sent), and with ``in_flight_too`` those sent whose
        receipt the client has not acknowledged (no PUBACK, no PUBREC; a session that is not kept: nobody resends
        them), that match one of its shared subscriptions, each with that subscription. They leave the queue: its
        share group hands them to another member (``ShareBacklog.hand_back``)."""
        if not (self.pending or in_flight_too and self.inflight):
            return []
        messages = list(self.pending)
        self.pending.clear()
        if in_flight_too:  # a message loaded from bytes and not read back yet has no topic
            messages += [message for packet_id, message in self.inflight.items()
                         if message.position is not None and message.topic and packet_id not in self.released]
        shared = [subscription for subscription in self.subscriptions.values() if subscription.share_group is not None]
        return [(message, subscription) for message in messages for subscription in shared
                if topic_matches(group_key_of(subscription)[1], message.topic)]

    def flow(self, packet_id: int) -> InflightState | None:
        """Where the in-flight delivery ``packet_id`` is in its flow (None: nothing is in flight under it)."""
        message = self.inflight.get(packet_id)
        if message is None:
            return None
        if message.qos == 1:
            return _AWAITING_PUBACK
        return _AWAITING_PUBCOMP if packet_id in self.released else _AWAITING_PUBREC

    def complete(self, packet_id: int) -> None:
        """The in-flight delivery ``packet_id`` is over (acknowledged, refused, or not sent again)."""
        del self.inflight[packet_id]
        self.released.discard(packet_id)

    def allocate_packet_id(self) -> int:
        """A packet id not in flight (at most 65,535 are: receive maximum is a 16-bit value)."""
        assert len(self.inflight) < 0xFFFF, "every packet identifier is in flight"
        packet_id = self.next_packet_id
        while packet_id in self.inflight:
            packet_id = packet_id % 0xFFFF + 1
        self.next_packet_id = packet_id % 0xFFFF + 1
        return packet_id

    def to_bytes(self) -> bytes:
        """The durable part as bytes (JSON, format version 2: see the module docstring)."""
        document = {
            "version": _STATE_FORMAT_VERSION,
            "client_id": self.client_id,
            "expiry_interval_s": self.expiry_interval_s,
            "next_packet_id": self.next_packet_id,
            "subscriptions": [
                {
                    "topic_filter": s.topic_filter, "share_group": s.share_group, "qos": s.qos,
                    "no_local": s.no_local, "retain_as_published": s.retain_as_published,
                    "retain_handling": int(s.retain_handling), "subscription_identifier": s.subscription_identifier,
                }
                for s in self.subscriptions.values()
            ],
            "inflight": self._inflight_documents(),
            "received_qos2": sorted(self.received_qos2),
        }
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    def _inflight_documents(self) -> list[object]:
        """``to_bytes``'s in-flight entries, in order.

        Messages in the log go as runs: ``[first packet id, count, flow state, log topic, partition, first offset,
        QoS, retain, [subscription identifiers]]`` stands for ``count`` deliveries with consecutive packet ids and
        offsets and the rest alike (a window of a drain is one run). Any other message goes whole,
        ``{"state": flow state, "publish": base64 MQTT 5.0 PUBLISH}``, encoded once while its message and flow state
        stay the same.
        """
        documents: list[object] = []
        known, whole, released = self._stored_inflight, {}, self.released
        # The run being extended, what its next entry would be, and what all of its entries share (in locals: a
        # state written ten times a second during a drain walks a whole window of entries each time).
        run: list[Any] = []
        next_packet_id = next_offset = -1  # no run: no packet id is -1
        run_state: InflightState | None = None
        run_topic, run_partition, run_qos, run_retain = "", -1, -1, False
        run_identifiers: tuple[int, ...] = ()
        for packet_id, message in self.inflight.items():
            qos = message.qos
            if qos == 1:
                flow = _AWAITING_PUBACK
            else:
                flow = _AWAITING_PUBCOMP if packet_id in released else _AWAITING_PUBREC
            position = message.position
            if position is None:
                cached = known.get(packet_id)
                if cached is None or cached[0] is not message or cached[1] is not flow:
                    publish = Publish(topic=message.topic, payload=message.payload, qos=qos, retain=message.retain,
                                      packet_id=packet_id, properties=message.properties)
                    cached = message, flow, {"state": flow.value,
                                             "publish": base64.b64encode(encode(publish, PROTOCOL_LEVEL_5)).decode()}
                whole[packet_id] = cached
                documents.append(cached[2])
                next_packet_id = -1
                continue
            if (packet_id == next_packet_id and position[2] == next_offset and flow is run_state
                    and position[1] == run_partition and position[0] == run_topic and qos == run_qos
                    and message.retain == run_retain
                    and message.properties.subscription_identifiers == run_identifiers):
                run[1] += 1
                next_packet_id += 1
                next_offset += 1
                continue
            run_state, (run_topic, run_partition, first_offset) = flow, position
            run_qos, run_retain = qos, message.retain
            run_identifiers = message.properties.subscription_identifiers
            run = [packet_id, 1, run_state.value, run_topic, run_partition, first_offset, run_qos, run_retain,
                   list(run_identifiers)]
            documents.append(run)
            next_packet_id, next_offset = packet_id + 1, first_offset + 1
        self._stored_inflight = whole
        return documents

    @classmethod
    def from_bytes(cls, data: bytes) -> SessionState:
        """Rebuild the durable part written by ``to_bytes`` (queues start empty; ``unread`` lists the in-flight
        messages to read back from the log).

        Raises ``CorruptMessageError`` (and nothing else) for bytes that are not such a record.
        """
        where = "MQTT session state"
        document = load_stored_document(data, _STATE_FORMAT_VERSIONS_READ, where)
        state = cls(stored_field(document, "client_id", str, where),
                    expiry_interval_s=stored_field(document, "expiry_interval_s", int, where, 0, 0xFFFF_FFFF))
        state.next_packet_id = stored_field(document, "next_packet_id", int, where, 1, 0xFFFF)
        for item in stored_field(document, "subscriptions", list, where):
            subscription = _subscription_from(item)
            state.subscriptions[subscription.topic_filter] = subscription
        for item in stored_field(document, "inflight", list, where):
            for packet_id, message, flow in _logged_inflight(item) if isinstance(item, list) else [_whole_inflight(item)]:
                if packet_id in state.inflight:
                    raise CorruptMessageError(f"{where}: packet id {packet_id} is in flight twice")
                if (flow is _AWAITING_PUBACK) != (message.qos == 1):
                    raise CorruptMessageError(f"{where}: a QoS {message.qos} delivery in flight is {flow.value}")
                state.inflight[packet_id] = message
                if flow is _AWAITING_PUBCOMP:
                    state.released.add(packet_id)  # after PUBREC only the packet id matters (PUBREL)
                elif message.position is not None:
                    state.unread[packet_id] = message.position
        received = stored_field(document, "received_qos2", list, where)
        for packet_id in received:
            _check_stored_value(packet_id, int, f"{where} received_qos2", 1, 0xFFFF)
        state.received_qos2 = set(received)
        return state

    def read_back(self, packet_id: int, message: OutboundMessage | None, now_ms: int) -> None:
        """The message of the ``unread`` in-flight delivery ``packet_id``, read from the log at its position; None
        if the log no longer has it (retention deleted it): the delivery is dropped."""
        del self.unread[packet_id]
        stub = self.inflight[packet_id]
        if message is None:
            self.complete(packet_id)
            return
        properties = message.properties
        expiry_s = properties.message_expiry_interval_s
        if expiry_s is not None:  # its delivery began: it goes out, with what is left of its lifetime (at least 1 s)
            expiry_s = max(1, expiry_s - (now_ms - message.created_ms) // 1000)
        identifiers = stub.properties.subscription_identifiers
        if (identifiers, expiry_s) != (properties.subscription_identifiers, properties.message_expiry_interval_s) \
                or properties.topic_alias is not None:
            properties = replace(properties, subscription_identifiers=identifiers, message_expiry_interval_s=expiry_s,
                                 topic_alias=None)
        self.inflight[packet_id] = replace(  # the same place in the resend order
            message, qos=stub.qos, retain=stub.retain, properties=properties, position=stub.position)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SessionState) and self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]


#: (type, optional) of every field of a stored subscription, as ``to_bytes`` writes it.
_SUBSCRIPTION_FIELDS: dict[str, tuple[type, bool]] = {
    "topic_filter": (str, False), "share_group": (str, True), "qos": (int, False), "no_local": (bool, False),
    "retain_as_published": (bool, False), "retain_handling": (int, False), "subscription_identifier": (int, True),
}


def _subscription_from(item: object) -> Subscription:
    where = "MQTT session state subscription"
    if not isinstance(item, dict) or item.keys() != _SUBSCRIPTION_FIELDS.keys():
        raise CorruptMessageError(f"{where} is not an object with the fields {sorted(_SUBSCRIPTION_FIELDS)}")
    for name, (kind, optional) in _SUBSCRIPTION_FIELDS.items():
        if not (optional and item[name] is None):
            _check_stored_value(item[name], kind, f"{where} field '{name}'")
    if not 0 <= item["qos"] <= 2:
        raise CorruptMessageError(f"{where}: QoS {item['qos']} is not 0, 1 or 2")
    try:
        retain_handling = RetainHandling(item["retain_handling"])
    except ValueError:
        raise CorruptMessageError(f"{where}: unknown retain handling {item['retain_handling']}") from None
    return Subscription(**{**item, "retain_handling": retain_handling})


#: An in-flight entry as ``to_bytes`` stored it: its packet id, its message (as delivered) and its flow state.
_StoredInflight = tuple[int, OutboundMessage, InflightState]


def _whole_inflight(item: object) -> _StoredInflight:
    """An in-flight entry stored whole: ``{"state": ..., "publish": base64 PUBLISH}`` (every entry of version 1)."""
    where = "MQTT session state in-flight message"
    publish = _inflight_publish(stored_base64(item, "publish", where))
    message = OutboundMessage(topic=publish.topic, payload=publish.payload, qos=publish.qos, retain=publish.retain,
                              properties=publish.properties)
    return publish.packet_id, message, _flow_state(stored_field(item, "state", str, where))  # type: ignore[return-value]


def _logged_inflight(item: list[object]) -> list[_StoredInflight]:
    """A run of in-flight entries stored by their log positions (``SessionState._inflight_documents``); their
    messages wait for ``read_back`` for their topic and payload."""
    where = "MQTT session state in-flight run"
    if len(item) != 9:
        raise CorruptMessageError(f"{where} is not [first packet id, count, state, topic, partition, first offset, "
                                  f"QoS, retain, [subscription identifiers]]: it has {len(item)} items")
    first, count, flow, topic, partition, offset, qos, retain, identifiers = item
    _check_stored_value(first, int, f"{where} packet id", 1, 0xFFFF)
    _check_stored_value(count, int, f"{where} count", 1, 0x1_0000 - first)  # type: ignore[operator]
    _check_stored_value(topic, str, f"{where} topic")
    _check_stored_value(partition, int, f"{where} partition", 0, 0x7FFF_FFFF)
    _check_stored_value(offset, int, f"{where} offset", 0, 0x7FFF_FFFF_FFFF_FFFF - count)  # type: ignore[operator]
    _check_stored_value(qos, int, f"{where} QoS", 1, 2)
    _check_stored_value(retain, bool, f"{where} retain flag")
    for identifier in _check_stored_value(identifiers, list, f"{where} subscription identifiers"):
        _check_stored_value(identifier, int, f"{where} subscription identifier", 1, _SUBSCRIPTION_IDENTIFIER_MAX)
    state = _flow_state(_check_stored_value(flow, str, f"{where} state"))
    properties = Properties(subscription_identifiers=tuple(identifiers)) if identifiers else NO_PROPERTIES
    return [(first + index,  # type: ignore[operator]
             OutboundMessage(topic="", payload=b"", qos=qos, retain=retain, properties=properties,  # type: ignore[arg-type]
                             position=(topic, partition, offset + index)),  # type: ignore[arg-type,operator]
             state)
            for index in range(count)]  # type: ignore[arg-type]


def _flow_state(value: str) -> InflightState:
    try:
        return InflightState(value)
    except ValueError:
        raise CorruptMessageError(f"MQTT session state: unknown in-flight state {value!r}") from None


def _inflight_publish(packet: bytes) -> Publish:
    where = "MQTT session state in-flight message"
    decoder = PacketDecoder(packet_bytes_max=PACKET_BYTES_MAX_ABSOLUTE, protocol_level=PROTOCOL_LEVEL_5)
    try:
        packets = decoder.receive_data(packet)
    except MqttProtocolError as error:
        raise CorruptMessageError(f"{where} does not decode: {error}") from None
    if len(packets) != 1 or not isinstance(packets[0], Publish) or packets[0].packet_id is None:
        raise CorruptMessageError(f"{where} is not one whole PUBLISH with a packet id")
    return packets[0]


def load_stored_document(data: bytes, version: int | tuple[int, ...], where: str) -> dict[str, Any]:
    """The JSON object of a stored record of format ``version`` (or one of them); CorruptMessageError if ``data``
    is not one."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise CorruptMessageError(f"{where} is not JSON: {error}") from None
    versions = version if isinstance(version, tuple) else (version,)
    found = document.get("version") if isinstance(document, dict) else None
    if type(found) is not int or found not in versions:
        raise CorruptMessageError(f"{where} is not a JSON object of format version "
                                  f"{' or '.join(map(str, versions))} (found {found!r:.40})")
    return document


def stored_field(document: object, name: str, kind: type, where: str,
                 minimum: int | None = None, maximum: int | None = None) -> Any:
    """``document[name]`` checked to be a ``kind`` (within bounds if given); CorruptMessageError otherwise."""
    if not isinstance(document, dict) or name not in document:
        raise CorruptMessageError(f"{where}: field '{name}' is missing")
    return _check_stored_value(document[name], kind, f"{where} field '{name}'", minimum, maximum)


def stored_base64(document: object, name: str, where: str) -> bytes:
    """The bytes of a base64 string field; CorruptMessageError if it is not one."""
    try:
        return base64.b64decode(stored_field(document, name, str, where), validate=True)
    except ValueError as error:  # binascii.Error, or a non-ASCII string
        raise CorruptMessageError(f"{where}: field '{name}' is not base64: {error}") from None


def _check_stored_value(value: object, kind: type, what: str, minimum: int | None = None,
                        maximum: int | None = None) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CorruptMessageError(f"{what} is {type(value).__name__}, not {kind.__name__}")
    too_small = minimum is not None and value < minimum  # type: ignore[operator]
    too_large = maximum is not None and value > maximum  # type: ignore[operator]
    if too_small or too_large:
        raise CorruptMessageError(f"{what} {value} is out of range [{minimum}, {maximum}]")
    return value
