"""Connection handshake content: server properties and SASL credential parsing (PLAIN, AMQPLAIN).

Why ``product`` is "mqbroker" and not "RabbitMQ": kombu's ``qos_semantics_matches_spec``
makes Celery send ``basic.qos(global=True)`` only to RabbitMQ 3.3–3.x. With any other product
Celery asks for per-consumer prefetch (global=False), which is what it actually means, and
which mqbroker applies at run time to the channel's existing consumers as well, so Celery's
ETA and autoscale prefetch changes take effect. Impersonating RabbitMQ would buy nothing and
make every Celery worker use the coarser channel-wide limit.
"""

from __future__ import annotations

import platform
import struct
from typing import Any

from mqbroker.protocols.amqp import fields
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode

#: The SASL mechanisms offered in connection.start, as the measured clients expect them.
MECHANISMS = b"PLAIN AMQPLAIN EXTERNAL"

#: Capabilities advertised to clients; each is implemented (pika and aio-pika check some).
CAPABILITIES = {
    "publisher_confirms": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "authentication_failure_close": True,
    "per_consumer_qos": True,
    "exchange_exchange_bindings": True,
}


def server_properties(version: str) -> dict[str, Any]:
    """The server_properties table of connection.start."""
    return {
        "product": "mqbroker",
        "version": version,
        "platform": f"Python {platform.python_version()}",
        "information": "AMQP 0-9-1 front end of mqbroker; queues are log topics",
        "copyright": "mqbroker contributors",
        "capabilities": dict(CAPABILITIES),
    }


def _refused(text: str) -> AmqpError:
    # The handshake closes the connection even for 403: there is no channel to close yet.
    return AmqpError(ReplyCode.ACCESS_REFUSED, text, class_id=10, method_id=11, connection_level=True)


def parse_credentials(mechanism: str, response: bytes) -> tuple[str, str]:
    """(username, password) from a start-ok response; 403 on an unknown mechanism or bad response."""
    if mechanism == "PLAIN":
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise _refused("PLAIN response must be authzid NUL username NUL password")
        return parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
    if mechanism == "AMQPLAIN":
        # A field table without its length prefix (py-amqp's encoding).
        table = fields.Reader(struct.pack(">I", len(response)) + response).table()
        username, password = table.get("LOGIN"), table.get("PASSWORD")
        if not isinstance(username, str) or not isinstance(password, str):
            raise _refused("AMQPLAIN response needs LOGIN and PASSWORD strings")
        return username, password
    if mechanism == "EXTERNAL":
        return "", ""  # the identity is the client certificate; the response (an authzid) is ignored
    raise _refused(f"authentication mechanism {mechanism!r} is not supported; use PLAIN, AMQPLAIN or EXTERNAL")
