"""What the hub needs of one MQTT connection: the contract between ``hub.MqttHub`` and ``server.MqttConnection``."""

from __future__ import annotations

from typing import Protocol

from twisted.internet.defer import Deferred

from mqbroker.protocols.mqtt.state import OutboundMessage, Subscription
from mqbroker.protocols.mqtt.stored import PartitionKey

#: A record handed to a live session: its offset, its message and the session's subscriptions it matches.
LiveOffer = tuple[int, OutboundMessage, list[Subscription]]


class Connection(Protocol):
    """What the hub needs from one MQTT connection (``server.MqttConnection``)."""

    client_id: str

    def accepts_live(self, partition_key: PartitionKey) -> bool: ...

    def offer_live(self, partition_key: PartitionKey, offset: int, message: OutboundMessage,
                   subscriptions: list[Subscription]) -> None: ...

    def offer_live_many(self, partition_key: PartitionKey, offers: list[LiveOffer]) -> None: ...

    def deliver_direct(self, message: OutboundMessage, subscriptions: list[Subscription]) -> None: ...

    def take_over(self) -> Deferred[None]: ...

    def flush(self, *, even_when_corked: bool = False) -> None: ...

    def shut_down(self) -> None: ...

    def has_room(self) -> bool: ...

    def stood_past(self, partition_key: PartitionKey, offset: int) -> bool: ...

    def deliver(self, message: OutboundMessage, subscriptions: list[Subscription]) -> None: ...

    def take_queued_shared(self, in_flight_too: bool) -> list[tuple[OutboundMessage, Subscription]]: ...
