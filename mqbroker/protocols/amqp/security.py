"""AMQP authentication (PLAIN, AMQPLAIN, EXTERNAL with a client certificate) and authorization:
exchanges route to queues, queues are log topics, and the checks are on those topics.

Publishing needs WRITE on the topic of every queue the message reaches; consuming and
basic.get need READ on the queue's topic; queue.declare needs CREATE and queue.delete or purge
DELETE; an exchange reading a native topic (``x-source-topic``) needs READ on that topic from
whoever declares it. A refusal closes the channel with 403 ACCESS_REFUSED (a failed login closes the
connection with 403).
"""

from __future__ import annotations

from typing import Any

from mqbroker import errors
from mqbroker.security.acl import AllowEverything
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.protocols.adapter import ConnectionHandle
from mqbroker.protocols.frontends import FrontEndSecurity
from mqbroker.protocols.amqp.actions import Authenticate
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode
from mqbroker.protocols.amqp.stored import queue_topic

EXTERNAL = "EXTERNAL"


def authenticate(security: FrontEndSecurity, handle: ConnectionHandle | None, action: Authenticate) -> Principal:
    """The principal of a start-ok; SaslAuthenticationError (audited) if refused."""
    host = handle.peer.rpartition(":")[0] if handle is not None else ""
    secure = bool(handle is not None and handle.secure)
    try:
        if action.mechanism == EXTERNAL:
            identity = handle.peer_certificate() if handle is not None else None
            if identity is None:
                raise errors.SaslAuthenticationError("EXTERNAL needs a verified client certificate (mutual TLS)")
            return security.authenticator.authenticate_certificate(identity.subject, identity.alternative_names, host)
        if not action.username:
            return security.authenticator.anonymous(host)
        return security.authenticator.authenticate_password_or_anonymous(
            action.username, action.password, secure, host)
    except errors.SaslAuthenticationError as error:
        security.audit.authentication_failed("amqp", host, action.username, error.message)
        raise


def check_queue(security: FrontEndSecurity | None, principal: Principal | None, queue: str, operation: Operation,
                class_id: int, method_id: int) -> None:
    """403 unless ``principal`` may ``operation`` the topic of ``queue``."""
    check_topic(security, principal, queue_topic(queue), operation, class_id, method_id, what=f"queue '{queue}' ")


def check_topic(security: FrontEndSecurity | None, principal: Principal | None, topic: str, operation: Operation,
                class_id: int, method_id: int, what: str = "") -> None:
    """403 unless ``principal`` may ``operation`` the log topic ``topic``."""
    if security is None or principal is None or isinstance(security.authorizer, AllowEverything):
        return
    if not security.authorizer.authorize(principal, operation, ResourceType.TOPIC, topic):
        raise AmqpError(ReplyCode.ACCESS_REFUSED, f"{principal} may not {operation.value} {what}(topic {topic})",
                        class_id=class_id, method_id=method_id)


def check_publish(security: FrontEndSecurity | None, principal: Principal | None, vhost: Any, exchange: str,
                  routing_key: str, headers: dict[str, Any] | None) -> None:
    """403 unless ``principal`` may write every queue the message would reach."""
    if security is None or principal is None or isinstance(security.authorizer, AllowEverything):
        return
    for name in vhost.router.route(exchange, routing_key, headers):
        if name in vhost.queues:
            check_queue(security, principal, name, Operation.WRITE, 60, 40)
