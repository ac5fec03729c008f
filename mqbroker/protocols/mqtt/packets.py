"""MQTT 3.1.1 and 5.0 control packets, properties and reason codes as plain data.

One dataclass per packet type serves both protocol levels: fields 3.1.1 cannot carry
(properties, most reason codes) keep their defaults there, and the codec leaves them out
when it encodes for level 4. Packets are frozen, slotted and keyword-only, so they can be
compared, hashed in tests and printed in interaction scripts.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

#: Protocol levels carried in the CONNECT variable header.
PROTOCOL_LEVEL_3_1_1 = 4
PROTOCOL_LEVEL_5 = 5
SUPPORTED_PROTOCOL_LEVELS = (PROTOCOL_LEVEL_3_1_1, PROTOCOL_LEVEL_5)


class PacketType(enum.IntEnum):
    """The control packet type in the high nibble of the fixed header."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


class ReasonCode(enum.IntEnum):
    """MQTT 5.0 reason codes (§2.4); 0x00 has a different name per packet."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


class ConnectReturnCode(enum.IntEnum):
    """MQTT 3.1.1 CONNACK return codes (§3.2.2.3 of 3.1.1)."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USER_NAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


#: The 3.1.1 SUBACK failure return code; 5.0 refines it into reason codes >= 0x80.
SUBACK_FAILURE_3_1_1 = 0x80


class PropertyType(enum.Enum):
    """How a 5.0 property value is encoded (§2.2.2.2)."""

    BYTE = "byte"
    TWO_BYTE_INTEGER = "two-byte integer"
    FOUR_BYTE_INTEGER = "four-byte integer"
    VARIABLE_BYTE_INTEGER = "variable byte integer"
    UTF8_STRING = "UTF-8 string"
    BINARY = "binary data"
    UTF8_STRING_PAIR = "UTF-8 string pair"


class PropertyId(enum.IntEnum):
    """5.0 property identifiers (§2.2.2.2)."""

    PAYLOAD_FORMAT_INDICATOR = 0x01
    MESSAGE_EXPIRY_INTERVAL = 0x02
    CONTENT_TYPE = 0x03
    RESPONSE_TOPIC = 0x08
    CORRELATION_DATA = 0x09
    SUBSCRIPTION_IDENTIFIER = 0x0B
    SESSION_EXPIRY_INTERVAL = 0x11
    ASSIGNED_CLIENT_IDENTIFIER = 0x12
    SERVER_KEEP_ALIVE = 0x13
    AUTHENTICATION_METHOD = 0x15
    AUTHENTICATION_DATA = 0x16
    REQUEST_PROBLEM_INFORMATION = 0x17
    WILL_DELAY_INTERVAL = 0x18
    REQUEST_RESPONSE_INFORMATION = 0x19
    RESPONSE_INFORMATION = 0x1A
    SERVER_REFERENCE = 0x1C
    REASON_STRING = 0x1F
    RECEIVE_MAXIMUM = 0x21
    TOPIC_ALIAS_MAXIMUM = 0x22
    TOPIC_ALIAS = 0x23
    MAXIMUM_QOS = 0x24
    RETAIN_AVAILABLE = 0x25
    USER_PROPERTY = 0x26
    MAXIMUM_PACKET_SIZE = 0x27
    WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
    SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
    SHARED_SUBSCRIPTION_AVAILABLE = 0x2A


#: "Will" is not a packet type; it names the will properties inside CONNECT's payload.
WILL = "will"

_P = PacketType
_ALL_ACKS = frozenset({_P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP, _P.SUBACK, _P.UNSUBACK})


@dataclass(frozen=True, slots=True)
class PropertySpec:
    """One row of the property table: attribute name, wire type and where it may appear."""

    name: str
    type: PropertyType
    allowed_in: frozenset[PacketType | str]


#: The property table of §2.2.2.2: name of the ``Properties`` field, type, packets allowed in.
PROPERTY_SPECS: dict[PropertyId, PropertySpec] = {
    PropertyId.PAYLOAD_FORMAT_INDICATOR: PropertySpec(
        "payload_format_indicator", PropertyType.BYTE, frozenset({_P.PUBLISH, WILL})
    ),
    PropertyId.MESSAGE_EXPIRY_INTERVAL: PropertySpec(
        "message_expiry_interval_s", PropertyType.FOUR_BYTE_INTEGER, frozenset({_P.PUBLISH, WILL})
    ),
    PropertyId.CONTENT_TYPE: PropertySpec("content_type", PropertyType.UTF8_STRING, frozenset({_P.PUBLISH, WILL})),
    PropertyId.RESPONSE_TOPIC: PropertySpec("response_topic", PropertyType.UTF8_STRING, frozenset({_P.PUBLISH, WILL})),
    PropertyId.CORRELATION_DATA: PropertySpec("correlation_data", PropertyType.BINARY, frozenset({_P.PUBLISH, WILL})),
    PropertyId.SUBSCRIPTION_IDENTIFIER: PropertySpec(
        "subscription_identifiers", PropertyType.VARIABLE_BYTE_INTEGER, frozenset({_P.PUBLISH, _P.SUBSCRIBE})
    ),
    PropertyId.SESSION_EXPIRY_INTERVAL: PropertySpec(
        "session_expiry_interval_s", PropertyType.FOUR_BYTE_INTEGER, frozenset({_P.CONNECT, _P.CONNACK, _P.DISCONNECT})
    ),
    PropertyId.ASSIGNED_CLIENT_IDENTIFIER: PropertySpec(
        "assigned_client_identifier", PropertyType.UTF8_STRING, frozenset({_P.CONNACK})
    ),
    PropertyId.SERVER_KEEP_ALIVE: PropertySpec(
        "server_keep_alive_s", PropertyType.TWO_BYTE_INTEGER, frozenset({_P.CONNACK})
    ),
    PropertyId.AUTHENTICATION_METHOD: PropertySpec(
        "authentication_method", PropertyType.UTF8_STRING, frozenset({_P.CONNECT, _P.CONNACK, _P.AUTH})
    ),
    PropertyId.AUTHENTICATION_DATA: PropertySpec(
        "authentication_data", PropertyType.BINARY, frozenset({_P.CONNECT, _P.CONNACK, _P.AUTH})
    ),
    PropertyId.REQUEST_PROBLEM_INFORMATION: PropertySpec(
        "request_problem_information", PropertyType.BYTE, frozenset({_P.CONNECT})
    ),
    PropertyId.WILL_DELAY_INTERVAL: PropertySpec(
        "will_delay_interval_s", PropertyType.FOUR_BYTE_INTEGER, frozenset({WILL})
    ),
    PropertyId.REQUEST_RESPONSE_INFORMATION: PropertySpec(
        "request_response_information", PropertyType.BYTE, frozenset({_P.CONNECT})
    ),
    PropertyId.RESPONSE_INFORMATION: PropertySpec(
        "response_information", PropertyType.UTF8_STRING, frozenset({_P.CONNACK})
    ),
    PropertyId.SERVER_REFERENCE: PropertySpec(
        "server_reference", PropertyType.UTF8_STRING, frozenset({_P.CONNACK, _P.DISCONNECT})
    ),
    PropertyId.REASON_STRING: PropertySpec(
        "reason_string", PropertyType.UTF8_STRING, _ALL_ACKS | {_P.CONNACK, _P.DISCONNECT, _P.AUTH}
    ),
    PropertyId.RECEIVE_MAXIMUM: PropertySpec(
        "receive_maximum", PropertyType.TWO_BYTE_INTEGER, frozenset({_P.CONNECT, _P.CONNACK})
    ),
    PropertyId.TOPIC_ALIAS_MAXIMUM: PropertySpec(
        "topic_alias_maximum", PropertyType.TWO_BYTE_INTEGER, frozenset({_P.CONNECT, _P.CONNACK})
    ),
    PropertyId.TOPIC_ALIAS: PropertySpec("topic_alias", PropertyType.TWO_BYTE_INTEGER, frozenset({_P.PUBLISH})),
    PropertyId.MAXIMUM_QOS: PropertySpec("maximum_qos", PropertyType.BYTE, frozenset({_P.CONNACK})),
    PropertyId.RETAIN_AVAILABLE: PropertySpec("retain_available", PropertyType.BYTE, frozenset({_P.CONNACK})),
    PropertyId.USER_PROPERTY: PropertySpec(
        "user_properties",
        PropertyType.UTF8_STRING_PAIR,
        frozenset(PacketType) - {_P.PINGREQ, _P.PINGRESP} | {WILL},
    ),
    PropertyId.MAXIMUM_PACKET_SIZE: PropertySpec(
        "maximum_packet_size", PropertyType.FOUR_BYTE_INTEGER, frozenset({_P.CONNECT, _P.CONNACK})
    ),
    PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE: PropertySpec(
        "wildcard_subscription_available", PropertyType.BYTE, frozenset({_P.CONNACK})
    ),
    PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE: PropertySpec(
        "subscription_identifier_available", PropertyType.BYTE, frozenset({_P.CONNACK})
    ),
    PropertyId.SHARED_SUBSCRIPTION_AVAILABLE: PropertySpec(
        "shared_subscription_available", PropertyType.BYTE, frozenset({_P.CONNACK})
    ),
}

#: Properties that may appear more than once in one packet; every other one at most once.
REPEATABLE_PROPERTIES = frozenset({PropertyId.USER_PROPERTY, PropertyId.SUBSCRIPTION_IDENTIFIER})

#: Byte properties whose only legal values are 0 and 1.
BOOLEAN_BYTE_PROPERTIES = frozenset({
    PropertyId.PAYLOAD_FORMAT_INDICATOR,
    PropertyId.REQUEST_PROBLEM_INFORMATION,
    PropertyId.REQUEST_RESPONSE_INFORMATION,
    PropertyId.MAXIMUM_QOS,
    PropertyId.RETAIN_AVAILABLE,
    PropertyId.WILDCARD_SUBSCRIPTION_AVAILABLE,
    PropertyId.SUBSCRIPTION_IDENTIFIER_AVAILABLE,
    PropertyId.SHARED_SUBSCRIPTION_AVAILABLE,
})

#: Integer properties for which 0 is a protocol error (§3.1.2.11, §3.3.2.3.4, §3.8.2.1.2).
NONZERO_PROPERTIES = frozenset({
    PropertyId.RECEIVE_MAXIMUM,
    PropertyId.MAXIMUM_PACKET_SIZE,
    PropertyId.TOPIC_ALIAS,
    PropertyId.SUBSCRIPTION_IDENTIFIER,
})


@dataclass(frozen=True, slots=True, kw_only=True)
class Properties:
    """The 5.0 properties of one packet; ``None`` (or empty) means absent."""

    payload_format_indicator: int | None = None
    message_expiry_interval_s: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval_s: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive_s: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval_s: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None


NO_PROPERTIES = Properties()


@dataclass(frozen=True, slots=True, kw_only=True)
class Will:
    """The will message carried in CONNECT, published when the connection ends abnormally."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True, kw_only=True)
class Connect:
    """CONNECT: the first packet of every connection."""

    protocol_name: str = "MQTT"
    protocol_level: int = PROTOCOL_LEVEL_5
    clean_start: bool = True
    keep_alive_s: int = 60
    client_id: str = ""
    will: Will | None = None
    username: str | None = None
    password: bytes | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnAck:
    """CONNACK: the server's answer to CONNECT; ``reason_code`` is the 3.1.1 return code at level 4."""

    session_present: bool = False
    reason_code: int = ReasonCode.SUCCESS
    properties: Properties = NO_PROPERTIES


#: PUBLISH and its responses are made once per message on the hot path: they are plain (not frozen)
#: slotted dataclasses, since a frozen dataclass's __init__ sets each field through object.__setattr__ and
#: costs about twice as much (2.8 vs 1.0 us for a PUBLISH); nothing changes one after it is made.
@dataclass(slots=True, kw_only=True)
class Publish:
    """PUBLISH in either direction; ``packet_id`` is None exactly when ``qos`` is 0."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, kw_only=True)
class PublishResponse:
    """The shape shared by PUBACK, PUBREC, PUBREL and PUBCOMP."""

    packet_id: int
    reason_code: int = ReasonCode.SUCCESS
    properties: Properties = NO_PROPERTIES


@dataclass(slots=True, kw_only=True)
class PubAck(PublishResponse):
    """PUBACK: completes a QoS 1 delivery."""


@dataclass(slots=True, kw_only=True)
class PubRec(PublishResponse):
    """PUBREC: first answer in a QoS 2 delivery."""


@dataclass(slots=True, kw_only=True)
class PubRel(PublishResponse):
    """PUBREL: releases a QoS 2 message after PUBREC."""


@dataclass(slots=True, kw_only=True)
class PubComp(PublishResponse):
    """PUBCOMP: completes a QoS 2 delivery."""


class RetainHandling(enum.IntEnum):
    """Subscription option: when retained messages are sent on subscribe (§3.8.3.1)."""

    SEND_ON_SUBSCRIBE = 0
    SEND_IF_NEW_SUBSCRIPTION = 1
    DO_NOT_SEND = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class SubscriptionRequest:
    """One topic filter with its options, as carried in SUBSCRIBE."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: RetainHandling = RetainHandling.SEND_ON_SUBSCRIBE


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscribe:
    """SUBSCRIBE: one or more topic filters."""

    packet_id: int
    subscriptions: tuple[SubscriptionRequest, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True, kw_only=True)
class SubAck:
    """SUBACK: one reason code (granted QoS or failure) per requested filter."""

    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsubscribe:
    """UNSUBSCRIBE: one or more topic filters to remove."""

    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True, kw_only=True)
class UnsubAck:
    """UNSUBACK: at level 5 one reason code per filter; at level 4 none."""

    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True, kw_only=True)
class PingReq:
    """PINGREQ: keep-alive probe from the client."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PingResp:
    """PINGRESP: the server's answer to PINGREQ."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Disconnect:
    """DISCONNECT in either direction (the server sends it only at level 5)."""

    reason_code: int = ReasonCode.NORMAL_DISCONNECTION
    properties: Properties = NO_PROPERTIES


@dataclass(frozen=True, slots=True, kw_only=True)
class Auth:
    """AUTH: enhanced authentication exchange (level 5 only)."""

    reason_code: int = ReasonCode.SUCCESS
    properties: Properties = NO_PROPERTIES


Packet = Union[
    Connect, ConnAck, Publish, PubAck, PubRec, PubRel, PubComp, Subscribe, SubAck,
    Unsubscribe, UnsubAck, PingReq, PingResp, Disconnect, Auth,
]

#: Packet class for each type, and back.
PACKET_CLASSES: dict[PacketType, type] = {
    PacketType.CONNECT: Connect,
    PacketType.CONNACK: ConnAck,
    PacketType.PUBLISH: Publish,
    PacketType.PUBACK: PubAck,
    PacketType.PUBREC: PubRec,
    PacketType.PUBREL: PubRel,
    PacketType.PUBCOMP: PubComp,
    PacketType.SUBSCRIBE: Subscribe,
    PacketType.SUBACK: SubAck,
    PacketType.UNSUBSCRIBE: Unsubscribe,
    PacketType.UNSUBACK: UnsubAck,
    PacketType.PINGREQ: PingReq,
    PacketType.PINGRESP: PingResp,
    PacketType.DISCONNECT: Disconnect,
    PacketType.AUTH: Auth,
}
PACKET_TYPES: dict[type, PacketType] = {cls: packet_type for packet_type, cls in PACKET_CLASSES.items()}


def packet_type_of(packet: Packet) -> PacketType:
    """The wire type of ``packet``."""
    return PACKET_TYPES[type(packet)]

