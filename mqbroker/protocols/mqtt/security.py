"""MQTT authentication and authorization: CONNECT credentials or the client certificate become the
principal; subscriptions and retained messages are checked against the log topics they map to.

Publishing itself is checked by the broker core (WRITE on the log topic of each message), so a
refused QoS 1/2 PUBLISH is answered with reason code 0x87 (not authorized) and nothing is written.
On top of that, the cluster's MQTT topic ACLs (``mqbroker.protocols.mqtt.acl``) decide per MQTT
topic: publishing, the will (at CONNECT), subscribing, and each delivery.
"""

from __future__ import annotations

from typing import Any

from mqbroker import errors
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.protocols.mqtt.acl import MqttIdentity, MqttTopicAcls, TopicDecisions
from mqbroker.protocols.mqtt.actions import OpenSession
from mqbroker.protocols.mqtt.packets import ReasonCode
from mqbroker.security.acl import Denial
from mqbroker.security.service import audit_authentication_failure


class ListenerAcls:
    """The MQTT topic ACLs one listener enforces: rebuilt from the ACL authorizer whenever they change.

    None (nothing to enforce) without the ACL authorizer or while the cluster has no MQTT topic ACL.
    """

    def __init__(self, services: Any) -> None:
        self._services = services
        self._version = -1
        self._acls: MqttTopicAcls | None = None

    def current(self) -> MqttTopicAcls | None:
        """The ACLs in force now (one shared snapshot per change, for every connection of the listener)."""
        services = self._services
        if services is None or services.authorizer is not services.acls:
            return None
        authorizer = services.acls
        if authorizer.mqtt_version != self._version:
            self._version = authorizer.mqtt_version
            self._acls = MqttTopicAcls(authorizer.acls(ResourceType.MQTT_TOPIC)) or None
        return self._acls


def topic_allowed(connection: Any, operation: Operation, mqtt_topic: str) -> bool:
    """May the connection publish (WRITE) or receive (READ) ``mqtt_topic`` under the MQTT topic ACLs? Denials are
    audited."""
    decisions: TopicDecisions | None = connection.topic_decisions
    acls = connection.topic_acls.current() if decisions is not None else None
    if acls is None or connection._security.acls.is_super_user(connection.principal):
        return True
    if decisions.may(acls, operation, mqtt_topic):  # type: ignore[union-attr]
        return True
    connection._security.acls.report_denial(Denial(principal=connection.principal, operation=operation,
                                                   resource_type=ResourceType.MQTT_TOPIC, resource_name=mqtt_topic))
    return False


def _filter_allowed(connection: Any, topic_filter: str) -> bool:
    """May the connection subscribe to ``topic_filter`` under the MQTT topic ACLs?"""
    acls = connection.topic_acls.current()
    if acls is None or connection._security.acls.is_super_user(connection.principal):
        return True
    return acls.may_subscribe(connection.topic_decisions.identity, topic_filter)


def _host(connection: Any) -> str:
    handle = connection._connection
    return handle.peer.rpartition(":")[0] if handle is not None else ""


def authenticate(connection: Any, action: OpenSession) -> ReasonCode | None:
    """Set ``connection.principal`` from the CONNECT (username/password, else the client certificate,
    else anonymous); return the CONNACK refusal instead when that is not allowed."""
    services = connection._security
    handle = connection._connection
    host = _host(connection)
    secure = bool(handle is not None and handle.secure)
    try:
        if action.username is not None:
            password = (action.password or b"").decode("utf-8", "replace")
            principal = services.authenticator.authenticate_password_or_anonymous(
                action.username, password, secure, host)
        else:
            identity = handle.peer_certificate() if handle is not None else None
            if identity is not None:
                principal = services.authenticator.authenticate_certificate(
                    identity.subject, identity.alternative_names, host)
            else:
                principal = services.authenticator.anonymous(host)
    except errors.SaslAuthenticationError as error:
        audit_authentication_failure("mqtt", host, action.username or "", error.message)
        return ReasonCode.BAD_USER_NAME_OR_PASSWORD if action.username is not None else ReasonCode.NOT_AUTHORIZED
    connection.principal = principal
    connection.topic_decisions = TopicDecisions(MqttIdentity(principal=principal, client_id=action.client_id))
    mapping = connection.hub.mapping
    authorizer = services.authorizer
    connection.session.authorize_filter = lambda topic_filter: all(
        authorizer.authorize(principal, Operation.READ, ResourceType.TOPIC, topic)
        for topic in mapping.log_topics_for_filter(topic_filter)
    ) and _filter_allowed(connection, topic_filter)
    will_topic = connection.session.will_topic
    if will_topic is not None and not may_publish(connection, will_topic):
        return ReasonCode.NOT_AUTHORIZED  # as Mosquitto 2: a will the client may not publish refuses the CONNECT
    return None


def may_publish(connection: Any, mqtt_topic: str) -> bool:
    """May the connection's principal write the log topic ``mqtt_topic`` maps to, and the MQTT topic itself?
    (For retained messages and the will.)"""
    services = connection._security
    if services is None:
        return True
    principal: Principal = connection.principal
    log_topic = connection.hub.mapping.log_topic_for(mqtt_topic)
    return (services.authorizer.authorize(principal, Operation.WRITE, ResourceType.TOPIC, log_topic)
            and topic_allowed(connection, Operation.WRITE, mqtt_topic))
