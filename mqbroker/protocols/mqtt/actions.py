"""What the MQTT session asks its adapter to do: typed, frozen actions, executed in order.

The adapter (``server.py``) executes a returned list front to back. A blocking ``StoreSession``
always comes first in its list and must be durable before the actions after it run
(persist before send, as etcd's ``Ready``). A non-blocking one comes last: the state changed in a
way a crash may lose at the cost of a redelivery only (``flows.py``), and the adapter writes it
within ``limits.mqtt_session_store_interval_ms`` while the actions run on. Either names the
session's state, which the adapter serialises when it writes it: the state as of that write, which
covers the end of every list waiting for it (a state serialised per list would cost a pass over
every in-flight message per delivery and acknowledgement).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from mqbroker.protocols.mqtt.packets import Packet
from mqbroker.protocols.mqtt.state import SessionState, Subscription


#: Made once per packet sent, so not frozen (see ``packets.Publish``); nothing changes one after it is made.
@dataclass(slots=True, kw_only=True)
class Send:
    """Write ``data`` (the encoding of ``packet``) to the client."""

    packet: Packet
    data: bytes


#: Made once per log write of QoS 1 messages, so not frozen (see ``packets.Publish``).
@dataclass(slots=True, kw_only=True)
class SendPubAcks:
    """Write a successful PUBACK for each of ``packet_ids``, in order: ``data`` is their encodings, one after
    another (the QoS 1 messages of one log write, acknowledged without a packet object and a ``Send`` each)."""

    packet_ids: list[int]
    data: bytes


#: Made once per pass over the queue that sends (see ``packets.Publish``).
@dataclass(slots=True, kw_only=True)
class SendPublishes:
    """Write ``count`` PUBLISHes, in order: ``data`` is their encodings, one after another (the plain deliveries one
    pass over the queue sends, a lone one too: one action and one join, no ``Send`` or packet object each)."""

    count: int
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Close:
    """Close the network connection once everything before this action is written."""

    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenSession:
    """CONNECT is valid: authenticate, take over an existing connection, load the session.

    Answer with ``MqttSession.session_opened(stored_state_or_None, now_ms)`` or
    ``connect_refused(reason_code, now_ms)``. With ``clean_start`` any stored state is
    discarded. A will scheduled for this client id is cancelled [MQTT-3.1.3-9].
    """

    client_id: str
    clean_start: bool
    username: str | None
    password: bytes | None
    protocol_level: int


#: Made once per message, so not frozen (see ``packets.Publish``); nothing changes one after it is made.
@dataclass(slots=True, kw_only=True)
class PublishToLog:
    """Append one record to ``log_topic``; report completion with ``log_write_completed(ticket)``.

    ``ticket`` is None for QoS 0 and will messages: nobody waits for those writes.
    """

    ticket: int | None
    log_topic: str
    key: bytes
    payload: bytes
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Retain:
    """Set the retained message of ``topic``; an empty payload clears it."""

    topic: str
    payload: bytes
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AddSubscription:
    """Add or replace a subscription in the broker's trie; then send retained messages if asked."""

    client_id: str
    subscription: Subscription
    send_retained: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveSubscription:
    """Remove the subscription ``topic_filter`` of ``client_id`` from the broker's trie."""

    client_id: str
    topic_filter: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SetTimer:
    """Call ``on_timer(now_ms)`` at ``at_ms`` (replaces any earlier timer of this connection)."""

    at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleWill:
    """At ``at_ms`` run ``actions`` (the will's log write and retain), unless the client id reconnects."""

    client_id: str
    at_ms: int
    actions: tuple[PublishToLog | Retain, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreSession:
    """Persist ``state`` (its ``to_bytes()`` when the adapter writes it) as the session of ``client_id``:
    before the actions after it run (``blocking``), or within ``limits.mqtt_session_store_interval_ms``."""

    client_id: str
    state: SessionState
    blocking: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEnded:
    """The connection is over; keep ``state`` for ``expiry_interval_s``, or forget it when None."""

    client_id: str
    state: SessionState | None
    expiry_interval_s: int


Action = Union[
    Send, SendPubAcks, SendPublishes, Close, OpenSession, PublishToLog, Retain, AddSubscription, RemoveSubscription, SetTimer,
    ScheduleWill, StoreSession, SessionEnded,
]
