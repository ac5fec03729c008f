"""What the admin API shows of the MQTT front end: connected clients, stored sessions, retained messages,
and the mapping rules in force (which it may also change, cluster-wide).

Read from this broker's ``MqttHub``: the clients connected to this broker, and the sessions and
retained messages every broker replays from ``__mqtt_sessions`` and ``__mqtt_retained`` at
start. Clearing a retained message is an empty retained publish; deleting a session writes its
tombstone, as the hub does when a session expires. Plain values out, so the admin API needs
nothing from this package.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from typing import Any

from mqbroker.protocols.mqtt.actions import Retain
from mqbroker.protocols.mqtt.state import SessionState, Subscription
from mqbroker.protocols.mqtt.topics import mapping_rules_document


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionView:
    """One granted subscription."""

    topic_filter: str
    qos: int
    share_group: str | None
    no_local: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientView:
    """A client connected to this broker."""

    client_id: str
    principal: str
    peer: str
    protocol_level: int
    subscriptions: tuple[SubscriptionView, ...]
    inflight: int
    pending: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionView:
    """A session: of a connected client, or stored for one that is gone (until it expires)."""

    client_id: str
    connected: bool
    expiry_interval_s: int
    ended_at_ms: int | None
    subscriptions: tuple[SubscriptionView, ...]
    inflight: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RetainedView:
    """A retained message."""

    topic: str
    qos: int
    payload: bytes
    created_ms: int


def _subscriptions(state: SessionState | None) -> tuple[SubscriptionView, ...]:
    if state is None:
        return ()
    return tuple(_subscription(subscription) for _, subscription in sorted(state.subscriptions.items()))


def _subscription(subscription: Subscription) -> SubscriptionView:
    return SubscriptionView(topic_filter=subscription.topic_filter, qos=subscription.qos,
                            share_group=subscription.share_group, no_local=subscription.no_local)


class MqttAdminView:
    """The admin API's window on one ``MqttHub``."""

    def __init__(self, hub: Any) -> None:
        self._hub = hub

    def clients(self) -> list[ClientView]:
        """The clients connected to this broker, by client id."""
        views = []
        for client_id, connection in sorted(self._hub.connections.items()):
            session = connection.session
            state = session.session
            views.append(ClientView(
                client_id=client_id, principal=str(connection.principal), peer=connection.peer,
                protocol_level=session.protocol_level, subscriptions=_subscriptions(state),
                inflight=len(state.inflight) if state is not None else 0,
                pending=len(state.pending) + len(state.qos0_pending) if state is not None else 0))
        return views

    def sessions(self) -> list[SessionView]:
        """Sessions of connected clients and stored ones of clients that are gone, by client id."""
        views = [SessionView(client_id=client.client_id, connected=True,
                             expiry_interval_s=self._expiry_of(client.client_id), ended_at_ms=None,
                             subscriptions=client.subscriptions, inflight=client.inflight)
                 for client in self.clients()]
        for client_id, stored in sorted(self._hub.sessions.offline.items()):
            state = SessionState.from_bytes(stored.state)
            views.append(SessionView(client_id=client_id, connected=False, expiry_interval_s=state.expiry_interval_s,
                                     ended_at_ms=stored.ended_at_ms, subscriptions=_subscriptions(state),
                                     inflight=len(state.inflight)))
        return sorted(views, key=lambda view: view.client_id)

    def _expiry_of(self, client_id: str) -> int:
        state = self._hub.connections[client_id].session.session
        return state.expiry_interval_s if state is not None else 0

    def is_connected(self, client_id: str) -> bool:
        """Whether ``client_id`` is connected to this broker now."""
        return client_id in self._hub.connections

    def delete_session(self, client_id: str) -> bool:
        """Delete the stored session of a client that is not connected; False if there is none."""
        return bool(self._hub.sessions.discard_offline_session(client_id))

    def retained(self, topic_filter: str, limit: int) -> list[RetainedView]:
        """Up to ``limit`` retained messages whose topics match ``topic_filter``, by topic."""
        found = islice(self._hub.retained.matching(topic_filter), limit)
        return sorted((RetainedView(topic=message.topic, qos=message.qos, payload=message.payload,
                                    created_ms=message.created_ms) for message in found),
                      key=lambda view: view.topic)

    def clear_retained(self, topic: str) -> bool:
        """Clear the retained message of ``topic`` (an empty retained publish); False if there is none."""
        if self._hub.retained.get(topic) is None:
            return False
        self._hub.retain(Retain(topic=topic, payload=b"", headers=()))
        return True


    def mapping_rules(self) -> dict[str, Any]:
        """The mapping rules this broker applies, the default log topic and where the rules come from."""
        mapping = self._hub.mapping
        return {"rules": mapping_rules_document(mapping.rules), "default_log_topic": mapping.default_log_topic,
                "source": self._hub.mapping_rules.source}

    async def replace_mapping_rules(self, document: Any) -> dict[str, Any]:
        """Put rules (their JSON form) in force cluster-wide; ``InvalidRequestError`` says what is wrong."""
        await self._hub.mapping_rules.replace(document)
        return self.mapping_rules()

    async def reset_mapping_rules(self) -> dict[str, Any]:
        """Bring the configured rules back, cluster-wide."""
        await self._hub.mapping_rules.reset()
        return self.mapping_rules()
