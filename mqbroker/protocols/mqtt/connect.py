"""CONNECT negotiation (pure): the server's limits, what a CONNECT is refused for, and the CONNACK it gets.

``SessionConfig`` holds the limits a server enforces at both protocol levels and advertises in
a level-5 CONNACK. The functions here decide from a CONNECT alone; ``MqttSession`` calls them
and keeps the outcome (keep-alive, session expiry, the client's own limits).
"""

from __future__ import annotations

from dataclasses import dataclass

from mqbroker import limits
from mqbroker.protocols.mqtt.errors import MqttProtocolError
from mqbroker.protocols.mqtt.packets import (
    NO_PROPERTIES,
    PROTOCOL_LEVEL_5,
    ConnAck,
    Connect,
    ConnectReturnCode,
    Properties,
    ReasonCode,
    Will,
)
from mqbroker.protocols.mqtt.topics import validate_topic_name

#: Session expiry meaning "never" (§3.1.2.11.2).
SESSION_NEVER_EXPIRES_S = 0xFFFF_FFFF
#: A 5.0 client that sends no Receive Maximum accepts this many (§3.1.2.11.3).
DEFAULT_RECEIVE_MAXIMUM = 65_535
#: The 3.1.1 CONNACK return code of each refusal (anything else: server unavailable).
_V4_RETURN_CODES = {
    ReasonCode.UNSUPPORTED_PROTOCOL_VERSION: ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION,
    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID: ConnectReturnCode.IDENTIFIER_REJECTED,
    ReasonCode.BAD_USER_NAME_OR_PASSWORD: ConnectReturnCode.BAD_USER_NAME_OR_PASSWORD,
    ReasonCode.NOT_AUTHORIZED: ConnectReturnCode.NOT_AUTHORIZED,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionConfig:
    """Server limits, advertised in CONNACK at level 5 and enforced at both levels."""

    receive_maximum: int = 32
    topic_alias_maximum: int = limits.mqtt_topic_aliases_max
    packet_bytes_max: int = limits.mqtt_packet_bytes_max
    maximum_qos: int = 2
    retain_available: bool = True
    wildcard_subscription_available: bool = True
    subscription_identifier_available: bool = True
    shared_subscription_available: bool = True
    #: Longest keep-alive the server accepts; a 5.0 client is told the server keep-alive.
    keep_alive_s_max: int | None = None
    #: Longest session expiry granted; 3.1.1 persistent sessions (clean session 0) get this.
    session_expiry_s_max: int = limits.mqtt_session_expiry_s_max
    #: Outbound in-flight window for 3.1.1 clients, which cannot announce a receive maximum.
    outbound_inflight_max_3_1_1: int = 20
    client_id_length_max: int = limits.mqtt_client_id_length_max
    pending_messages_max: int = limits.mqtt_pending_messages_max
    qos0_queue_length_max: int = limits.mqtt_qos0_queue_length_max
    packets_before_connack_max: int = limits.mqtt_packets_before_connack_max


def will_refusal(will: Will, config: SessionConfig) -> ReasonCode | None:
    """Why a CONNECT's will cannot be accepted, or None."""
    try:
        validate_topic_name(will.topic)
    except MqttProtocolError as error:
        return error.reason_code
    if will.qos > config.maximum_qos:
        return ReasonCode.QOS_NOT_SUPPORTED  # [MQTT-3.2.2-12]
    if will.retain and not config.retain_available:
        return ReasonCode.RETAIN_NOT_SUPPORTED  # [MQTT-3.2.2-13]
    return None


def granted_keep_alive_s(connect: Connect, config: SessionConfig) -> int:
    """The keep-alive the server grants: the client's, capped at ``keep_alive_s_max`` for a 5.0 client."""
    maximum = config.keep_alive_s_max
    if maximum is None or connect.protocol_level != PROTOCOL_LEVEL_5:
        return connect.keep_alive_s
    return maximum if connect.keep_alive_s == 0 else min(connect.keep_alive_s, maximum)


def connack_refusal(protocol_level: int, reason_code: ReasonCode, message: str | None = None) -> ConnAck:
    """The CONNACK that refuses a connection, at the client's level (3.1.1 knows only a few return codes)."""
    if protocol_level == PROTOCOL_LEVEL_5:
        return ConnAck(reason_code=reason_code, properties=Properties(reason_string=message))
    return ConnAck(reason_code=_V4_RETURN_CODES.get(reason_code, ConnectReturnCode.SERVER_UNAVAILABLE))


def connack_properties(
    connect: Connect, config: SessionConfig, *, client_id: str, expiry_interval_s: int, keep_alive_s: int
) -> Properties:
    """A level-5 CONNACK's properties: the server's limits, and whatever it granted differently from the ask."""
    if connect.protocol_level != PROTOCOL_LEVEL_5:
        return NO_PROPERTIES
    requested_expiry = connect.properties.session_expiry_interval_s or 0
    return Properties(
        session_expiry_interval_s=expiry_interval_s if expiry_interval_s != requested_expiry else None,
        assigned_client_identifier=client_id if not connect.client_id else None,
        server_keep_alive_s=keep_alive_s if keep_alive_s != connect.keep_alive_s else None,
        receive_maximum=config.receive_maximum,
        topic_alias_maximum=config.topic_alias_maximum or None,
        maximum_packet_size=config.packet_bytes_max,
        maximum_qos=config.maximum_qos if config.maximum_qos < 2 else None,
        retain_available=int(config.retain_available),
        wildcard_subscription_available=int(config.wildcard_subscription_available),
        subscription_identifier_available=int(config.subscription_identifier_available),
        shared_subscription_available=int(config.shared_subscription_available),
    )
