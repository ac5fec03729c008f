"""MQTT authentication and authorization: CONNECT credentials or the client certificate become the
principal; subscriptions and retained messages are checked against the log topics they map to.

Publishing itself is checked by the broker core (WRITE on the log topic of each message), so a
refused QoS 1/2 PUBLISH is answered with reason code 0x87 (not authorized) and nothing is written.
"""

from __future__ import annotations

from typing import Any

from mqbroker import errors
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.protocols.mqtt.actions import OpenSession
from mqbroker.protocols.mqtt.packets import ReasonCode
from mqbroker.security.service import audit_authentication_failure


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
    mapping = connection.hub.mapping
    authorizer = services.authorizer
    connection.session.authorize_filter = lambda topic_filter: all(
        authorizer.authorize(principal, Operation.READ, ResourceType.TOPIC, topic)
        for topic in mapping.log_topics_for_filter(topic_filter)
    )
    return None


def may_publish(connection: Any, mqtt_topic: str) -> bool:
    """May the connection's principal write the log topic ``mqtt_topic`` maps to? (For retained messages.)"""
    services = connection._security
    if services is None:
        return True
    principal: Principal = connection.principal
    log_topic = connection.hub.mapping.log_topic_for(mqtt_topic)
    return services.authorizer.authorize(principal, Operation.WRITE, ResourceType.TOPIC, log_topic)
