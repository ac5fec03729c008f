"""MQTT authentication and authorization: CONNECT credentials or the client certificate become the
principal; subscriptions and retained messages are checked against the log topics they map to.

Publishing itself is checked by the broker core (WRITE on the log topic of each message), so a
refused QoS 1/2 PUBLISH is answered with reason code 0x87 (not authorized) and nothing is written.
On top of that, the cluster's MQTT topic ACLs (``mqbroker.protocols.mqtt.acl``) decide per MQTT
topic: publishing, the will (at CONNECT), subscribing, and each delivery.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mqbroker import errors
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.protocols.adapter import ConnectionHandle
from mqbroker.protocols.frontends import FrontEndSecurity
from mqbroker.protocols.mqtt.acl import MqttTopicAcls, TopicDecisions
from mqbroker.protocols.mqtt.actions import OpenSession
from mqbroker.protocols.mqtt.packets import ReasonCode
from mqbroker.protocols.mqtt.topics import TopicMapping
from mqbroker.security.acl import Denial


class ListenerAcls:
    """The MQTT topic ACLs one listener enforces: rebuilt from the broker's ACLs whenever they change.

    None (nothing to enforce) without the ACL authorizer or while the cluster has no MQTT topic ACL.
    """

    def __init__(self, security: FrontEndSecurity | None) -> None:
        self._view = security.acls if security is not None else None
        self._version = -1
        self._acls: MqttTopicAcls | None = None

    def current(self) -> MqttTopicAcls | None:
        """The ACLs in force now (one shared snapshot per change, for every connection of the listener)."""
        view = self._view
        if view is None:
            return None
        if view.mqtt_version != self._version:
            self._version = view.mqtt_version
            self._acls = MqttTopicAcls(view.acls(ResourceType.MQTT_TOPIC)) or None
        return self._acls


class TopicAclSubject(Protocol):
    """What the MQTT topic ACL checks need of a connection."""

    principal: Principal
    topic_acls: ListenerAcls
    topic_decisions: TopicDecisions | None
    security: FrontEndSecurity | None


def topic_acls_apply(connection: TopicAclSubject) -> bool:
    """Whether the MQTT topic ACLs may refuse the connection anything now (False: ``topic_allowed`` is True for
    every topic, so a batch of messages needs no check each)."""
    security = connection.security
    return (connection.topic_decisions is not None and security is not None and security.acls is not None
            and connection.topic_acls.current() is not None and not security.acls.is_super_user(connection.principal))


def topic_allowed(connection: TopicAclSubject, operation: Operation, mqtt_topic: str) -> bool:
    """May the connection publish (WRITE) or receive (READ) ``mqtt_topic`` under the MQTT topic ACLs? Denials are
    audited."""
    if not topic_acls_apply(connection):
        return True
    decisions, acls, security = connection.topic_decisions, connection.topic_acls.current(), connection.security
    assert decisions is not None and acls is not None and security is not None and security.acls is not None
    if decisions.may(acls, operation, mqtt_topic):
        return True
    security.acls.report_denial(Denial(principal=connection.principal, operation=operation,
                                       resource_type=ResourceType.MQTT_TOPIC, resource_name=mqtt_topic))
    return False


def filter_allowed(connection: TopicAclSubject, topic_filter: str) -> bool:
    """May the connection subscribe to ``topic_filter`` under the MQTT topic ACLs?"""
    acls = connection.topic_acls.current()
    decisions = connection.topic_decisions
    security = connection.security
    if acls is None or decisions is None or security is None or security.acls is None:
        return True
    return security.acls.is_super_user(connection.principal) or acls.may_subscribe(decisions.identity, topic_filter)


def peer_host(handle: ConnectionHandle | None) -> str:
    """The client's address without its port ("" before the connection is made)."""
    return handle.peer.rpartition(":")[0] if handle is not None else ""


def authenticate(security: FrontEndSecurity, handle: ConnectionHandle | None,
                 action: OpenSession) -> Principal | ReasonCode:
    """The principal of a CONNECT (username/password, else the client certificate, else anonymous), or the
    CONNACK refusal when that is not allowed (audited)."""
    host = peer_host(handle)
    secure = bool(handle is not None and handle.secure)
    try:
        if action.username is not None:
            password = (action.password or b"").decode("utf-8", "replace")
            return security.authenticator.authenticate_password_or_anonymous(action.username, password, secure, host)
        identity = handle.peer_certificate() if handle is not None else None
        if identity is not None:
            return security.authenticator.authenticate_certificate(identity.subject, identity.alternative_names, host)
        return security.authenticator.anonymous(host)
    except errors.SaslAuthenticationError as error:
        security.audit.authentication_failed("mqtt", host, action.username or "", error.message)
        return ReasonCode.BAD_USER_NAME_OR_PASSWORD if action.username is not None else ReasonCode.NOT_AUTHORIZED


def filter_authorizer(connection: TopicAclSubject, mapping: TopicMapping) -> Callable[[str], bool]:
    """May the connection's principal subscribe to a topic filter? READ on every log topic the filter can map to,
    and the MQTT topic ACLs."""
    security = connection.security
    assert security is not None
    authorizer, principal = security.authorizer, connection.principal
    return lambda topic_filter: all(
        authorizer.authorize(principal, Operation.READ, ResourceType.TOPIC, topic)
        for topic in mapping.log_topics_for_filter(topic_filter)
    ) and filter_allowed(connection, topic_filter)


def may_publish(connection: TopicAclSubject, mapping: TopicMapping, mqtt_topic: str) -> bool:
    """May the connection's principal write the log topic ``mqtt_topic`` maps to, and the MQTT topic itself?
    (For retained messages and the will.)"""
    security = connection.security
    if security is None:
        return True
    log_topic = mapping.log_topic_for(mqtt_topic)
    return (security.authorizer.authorize(connection.principal, Operation.WRITE, ResourceType.TOPIC, log_topic)
            and topic_allowed(connection, Operation.WRITE, mqtt_topic))
