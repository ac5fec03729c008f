"""MQTT message metadata <-> log record headers, so native consumers (and Spark) see it.

A message published over MQTT becomes a record whose key is the MQTT topic name and whose
headers carry QoS, retain flag, the publishing client id and the 5.0 properties:

=========================  ===========================================
header                     value
=========================  ===========================================
``mqtt.qos``               ``0``, ``1`` or ``2`` (ASCII)
``mqtt.retain``            ``1`` when the retain flag was set
``mqtt.client_id``         the publishing client's id (for no-local)
``mqtt.payload_format``    payload format indicator, ``0`` or ``1``
``mqtt.message_expiry_s``  message expiry interval in seconds (ASCII)
``mqtt.content_type``      content type (UTF-8)
``mqtt.response_topic``    response topic (UTF-8)
``mqtt.correlation_data``  correlation data (raw bytes)
any other name             a user property, value UTF-8
=========================  ===========================================

User properties whose name starts with ``mqtt.`` are stored under ``mqtt.user.`` + name,
so they cannot be mistaken for metadata. A record written natively onto a mapped log
topic has no ``mqtt.qos``: it is delivered at the subscription's QoS. A record without a
key, or whose key is not a valid MQTT topic name, is not delivered to MQTT subscribers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mqbroker.protocols.mqtt.errors import MqttProtocolError
from mqbroker.protocols.mqtt.fields import decode_utf8
from mqbroker.protocols.mqtt.packets import NO_PROPERTIES, Properties
from mqbroker.protocols.mqtt.state import LogPosition, OutboundMessage
from mqbroker.protocols.mqtt.topics import validate_topic_name

Headers = tuple[tuple[str, bytes], ...]

_PREFIX = "mqtt."
_USER_PREFIX = "mqtt.user."
_TEXT_PROPERTIES = {"mqtt.content_type": "content_type", "mqtt.response_topic": "response_topic"}
_INTEGER_PROPERTIES = {
    "mqtt.payload_format": "payload_format_indicator",
    "mqtt.message_expiry_s": "message_expiry_interval_s",
}
#: Native records carry no QoS; they go out at the subscriber's granted QoS.
NATIVE_RECORD_QOS = 2


def record_headers(qos: int, retain: bool, client_id: str, properties: Properties) -> Headers:
    """The record headers of a message published over MQTT."""
    headers: list[tuple[str, bytes]] = [("mqtt.qos", b"%d" % qos), ("mqtt.client_id", client_id.encode())]
    if retain:
        headers.append(("mqtt.retain", b"1"))
    for header, name in _INTEGER_PROPERTIES.items():
        value = getattr(properties, name)
        if value is not None:
            headers.append((header, b"%d" % value))
    for header, name in _TEXT_PROPERTIES.items():
        value = getattr(properties, name)
        if value is not None:
            headers.append((header, value.encode()))
    if properties.correlation_data is not None:
        headers.append(("mqtt.correlation_data", properties.correlation_data))
    for name, value in properties.user_properties:
        headers.append((_USER_PREFIX + name if name.startswith(_PREFIX) else name, value.encode()))
    return tuple(headers)


#: What records without properties stand for (topic, QoS, retain flag, origin), by (key, headers): one device
#: publishes to one topic with the same few headers, so the same pairs come again and again. Bounded: at most
#: ``_SHAPES_MAX`` entries of at most ``_PLAIN_HEADERS_MAX`` headers, whose key and header values hold at most
#: ``_SHAPE_KEY_BYTES_MAX`` bytes.
_SHAPES: dict[tuple[bytes, tuple[tuple[str, bytes | None], ...]], tuple[str, int, bool, str | None, Properties] | None] = {}
_SHAPES_MAX = 4096
_SHAPE_KEY_BYTES_MAX = 512
_PLAIN_HEADERS_MAX = 3  # mqtt.qos, mqtt.client_id, mqtt.retain
_UNKNOWN = object()


def message_from_record(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]], timestamp_ms: int,
    position: LogPosition | None = None,
) -> OutboundMessage | None:
    """The MQTT message a log record stands for (at ``position`` in the log, if it is read from one), or None if it
    cannot go to MQTT subscribers. A header without a value means nothing to MQTT."""
    if key is None:
        return None
    shape_key = (key, tuple(headers)) if len(headers) <= _PLAIN_HEADERS_MAX else None
    shape: Any = _SHAPES.get(shape_key, _UNKNOWN) if shape_key is not None else _UNKNOWN
    if shape is _UNKNOWN:
        shape = _shape(key, headers)
        if (shape_key is not None and (shape is None or shape[4] is NO_PROPERTIES)
                and len(key) + sum(len(raw or b"") for _, raw in headers) <= _SHAPE_KEY_BYTES_MAX):
            if len(_SHAPES) >= _SHAPES_MAX:
                _SHAPES.clear()
            _SHAPES[shape_key] = shape
    if shape is None:
        return None
    topic, qos, retain, origin, properties = shape
    return OutboundMessage(
        topic=topic, payload=value or b"", qos=qos, retain=retain, properties=properties,
        origin_client_id=origin, created_ms=timestamp_ms, position=position,
    )


def _shape(
    key: bytes, headers: Sequence[tuple[str, bytes | None]]
) -> tuple[str, int, bool, str | None, Properties] | None:
    """A record's MQTT topic, QoS, retain flag, origin client id and properties (None: not for MQTT subscribers)."""
    try:
        topic = decode_utf8(key)
        validate_topic_name(topic)
    except MqttProtocolError:
        return None
    qos, retain, origin = NATIVE_RECORD_QOS, False, None
    fields: dict[str, object] = {}
    user_properties: list[tuple[str, str]] = []
    for name, raw in headers:
        if raw is None:
            continue
        if name == "mqtt.qos" and raw in (b"0", b"1", b"2"):
            qos = int(raw)
        elif name == "mqtt.retain":
            retain = raw == b"1"
        elif name == "mqtt.client_id":
            origin = raw.decode("utf-8", "replace")
        elif name in _INTEGER_PROPERTIES and raw.isdigit():
            fields[_INTEGER_PROPERTIES[name]] = int(raw)
        elif name in _TEXT_PROPERTIES:
            fields[_TEXT_PROPERTIES[name]] = raw.decode("utf-8", "replace")
        elif name == "mqtt.correlation_data":
            fields["correlation_data"] = raw
        elif not name.startswith(_PREFIX) or name.startswith(_USER_PREFIX):
            original = name[len(_USER_PREFIX) :] if name.startswith(_USER_PREFIX) else name
            user_properties.append((original, raw.decode("utf-8", "replace")))
    properties = (
        Properties(**fields, user_properties=tuple(user_properties))  # type: ignore[arg-type]
        if fields or user_properties else NO_PROPERTIES
    )
    return topic, qos, retain, origin, properties
