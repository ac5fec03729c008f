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

from mqbroker import limits
from mqbroker.protocols.mqtt.codec import PACKET_BYTES_MAX_ABSOLUTE, PacketDecoder, encode
from mqbroker.protocols.mqtt.packets import NO_PROPERTIES, PROTOCOL_LEVEL_5, Properties, Publish, RetainHandling

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
        "pending", "qos0_pending", "qos0_dropped", "pending_messages_max", "qos0_queue_length_max",
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

    def has_room(self) -> bool:
        """Whether a QoS 1/2 message may be enqueued now (the adapter pauses its log reads if not)."""
        return len(self.pending) < self.pending_messages_max

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
            "inflight": [
                {"state": entry.state.value, "publish": base64.b64encode(encode(entry.publish, PROTOCOL_LEVEL_5)).decode()}
                for entry in self.inflight.values()
            ],
            "received_qos2": sorted(self.received_qos2),
        }
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> SessionState:
        """Rebuild the durable part written by ``to_bytes`` (queues start empty)."""
        document = json.loads(data)
        assert document["version"] == _STATE_FORMAT_VERSION, document["version"]
        state = cls(document["client_id"], expiry_interval_s=document["expiry_interval_s"])
        state.next_packet_id = document["next_packet_id"]
        for item in document["subscriptions"]:
            subscription = Subscription(**{**item, "retain_handling": RetainHandling(item["retain_handling"])})
            state.subscriptions[subscription.topic_filter] = subscription
        decoder = PacketDecoder(packet_bytes_max=PACKET_BYTES_MAX_ABSOLUTE, protocol_level=PROTOCOL_LEVEL_5)
        for item in document["inflight"]:
            (publish,) = decoder.receive_data(base64.b64decode(item["publish"]))
            assert isinstance(publish, Publish) and publish.packet_id is not None
            state.inflight[publish.packet_id] = Inflight(publish=publish, state=InflightState(item["state"]))
        state.received_qos2 = set(document["received_qos2"])
        return state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SessionState) and self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]
