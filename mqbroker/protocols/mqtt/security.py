"""MQTT authentication and authorization: CONNECT credentials or the client certificate become the
principal; subscriptions and retained messages are checked against the log topics they map to.

Publishing itself is checked by the broker core (WRITE on the log topic of each message), so a
refused QoS 1/2 PUBLISH is answered with reason code 0x87 (not authorized) and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable

from mqbroker import errors
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.protocols.adapter import ConnectionHandle
from mqbroker.protocols.frontends import FrontEndSecurity
from mqbroker.protocols.mqtt.actions import OpenSession
from mqbroker.protocols.mqtt.packets import ReasonCode
from mqbroker.protocols.mqtt.topics import TopicMapping


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


def filter_authorizer(security: FrontEndSecurity, principal: Principal,
                      mapping: TopicMapping) -> Callable[[str], bool]:
    """May ``principal`` subscribe to a topic filter? READ on every log topic the filter can map to."""
    authorizer = security.authorizer
    return lambda topic_filter: all(
        authorizer.authorize(principal, Operation.READ, ResourceType.TOPIC, topic)
        for topic in mapping.log_topics_for_filter(topic_filter)
    )


def may_publish(security: FrontEndSecurity | None, principal: Principal, mapping: TopicMapping,
                mqtt_topic: str) -> bool:
    """May ``principal`` write the log topic ``mqtt_topic`` maps to? (For retained messages.)"""
    if security is None:
        return True
    return security.authorizer.authorize(principal, Operation.WRITE, ResourceType.TOPIC, mapping.log_topic_for(mqtt_topic))
