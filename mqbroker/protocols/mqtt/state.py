"""The part of an MQTT session that outlives a connection, and its serialization to bytes.

Durable (``to_bytes``/``from_bytes``, stored later in an internal compacted log topic):
the subscriptions, the outbound QoS 1/2 messages in flight with their flow state, and the
inbound QoS 2 packet ids received but not yet released. Not durable: the queues of
messages waiting for a window (``pending``, ``qos0_pending``), which the adapter refills
from the log after a restart.

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

_STATE_FORMAT_VERSION = 1


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


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboundMessage:
    """A message on its way to one session: what the adapter read from the log or the retained store."""

    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    properties: Properties = NO_PROPERTIES
    origin_client_id: str | None = None
    created_ms: int = 0


class InflightState(enum.Enum):
    """Where an outbound QoS 1/2 message is in its acknowledgement flow."""

    AWAITING_PUBACK = "awaiting-puback"
    AWAITING_PUBREC = "awaiting-pubrec"
    AWAITING_PUBCOMP = "awaiting-pubcomp"


@dataclass(frozen=True, slots=True, kw_only=True)
class Inflight:
    """An outbound QoS 1/2 PUBLISH (full topic name, no alias) and its flow state."""

    publish: Publish
    state: InflightState


class SessionState:
    """Subscriptions, in-flight flows and queues of one client id, across connections."""

    __slots__ = (
        "client_id", "expiry_interval_s", "subscriptions", "inflight", "received_qos2", "next_packet_id",
        "pending", "qos0_pending", "qos0_dropped", "pending_messages_max", "qos0_queue_length_max", "_stored_inflight",
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
        self.inflight: dict[int, Inflight] = {}  # insertion order is the order to resend in
        self.received_qos2: set[int] = set()
        self.next_packet_id = 1
        self.pending: deque[OutboundMessage] = deque()
        self.qos0_pending: deque[OutboundMessage] = deque()
        self.qos0_dropped = 0
        self.pending_messages_max = pending_messages_max
        self.qos0_queue_length_max = qos0_queue_length_max
        #: ``to_bytes``'s entry of each in-flight message, by packet id, with the ``Inflight`` it was made of: a
        #: message is encoded once, not in every state written while it is in flight.
        self._stored_inflight: dict[int, tuple[Inflight, dict[str, str]]] = {}

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
            qos = min(message.qos, only.qos)
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
        assert self.has_room(), "the adapter checks has_room() before delivering QoS 1/2"
        self.pending.append(delivery)
        return True

    def allocate_packet_id(self) -> int:
        """A packet id not in flight (at most 65,535 are: receive maximum is a 16-bit value)."""
        assert len(self.inflight) < 0xFFFF, "every packet identifier is in flight"
        packet_id = self.next_packet_id
        while packet_id in self.inflight:
            packet_id = packet_id % 0xFFFF + 1
        self.next_packet_id = packet_id % 0xFFFF + 1
        return packet_id

    def to_bytes(self) -> bytes:
        """The durable part as bytes (JSON; payloads as base64-encoded MQTT 5.0 PUBLISH packets)."""
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

    def _inflight_documents(self) -> list[dict[str, str]]:
        """``to_bytes``'s in-flight entries, in order; each encoded once while its ``Inflight`` stays the same."""
        known, stored = self._stored_inflight, {}
        for packet_id, entry in self.inflight.items():
            cached = known.get(packet_id)
            if cached is None or cached[0] is not entry:
                cached = entry, {"state": entry.state.value,
                                 "publish": base64.b64encode(encode(entry.publish, PROTOCOL_LEVEL_5)).decode()}
            stored[packet_id] = cached
        self._stored_inflight = stored
        return [document for _, document in stored.values()]

    @classmethod
    def from_bytes(cls, data: bytes) -> SessionState:
        """Rebuild the durable part written by ``to_bytes`` (queues start empty).

        Raises ``CorruptMessageError`` (and nothing else) for bytes that are not such a record.
        """
        where = "MQTT session state"
        document = load_stored_document(data, _STATE_FORMAT_VERSION, where)
        state = cls(stored_field(document, "client_id", str, where),
                    expiry_interval_s=stored_field(document, "expiry_interval_s", int, where, 0, 0xFFFF_FFFF))
        state.next_packet_id = stored_field(document, "next_packet_id", int, where, 1, 0xFFFF)
        for item in stored_field(document, "subscriptions", list, where):
            subscription = _subscription_from(item)
            state.subscriptions[subscription.topic_filter] = subscription
        for item in stored_field(document, "inflight", list, where):
            publish = _inflight_publish(stored_base64(item, "publish", where))
            try:
                flow = InflightState(stored_field(item, "state", str, where))
            except ValueError:
                raise CorruptMessageError(f"{where}: unknown in-flight state {item['state']!r}") from None
            state.inflight[publish.packet_id] = Inflight(publish=publish, state=flow)  # type: ignore[index]
        received = stored_field(document, "received_qos2", list, where)
        for packet_id in received:
            _check_stored_value(packet_id, int, f"{where} received_qos2", 1, 0xFFFF)
        state.received_qos2 = set(received)
        return state

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


def load_stored_document(data: bytes, version: int, where: str) -> dict[str, Any]:
    """The JSON object of a stored record of format ``version``; CorruptMessageError if ``data`` is not one."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise CorruptMessageError(f"{where} is not JSON: {error}") from None
    if not isinstance(document, dict) or document.get("version") != version:
        raise CorruptMessageError(f"{where} is not a JSON object of format version {version}")
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
