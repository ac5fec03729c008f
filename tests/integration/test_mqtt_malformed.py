"""Malformed MQTT input gets the reason code or disconnect the specification requires; others are undisturbed."""

from __future__ import annotations

import pytest

from mqbroker.protocols.mqtt.codec import encode
from mqbroker.protocols.mqtt.packets import ConnAck, Connect, Disconnect, PubAck, ReasonCode
from tests.integration.mqtt_support import Client, MqttBroker, RawClient, mqtt_broker, unique  # noqa: F401

_CONNECT_5 = encode(Connect(client_id=""), 5)


def _connected(broker: MqttBroker, level: int = 5) -> RawClient:
    raw = RawClient(broker, level)
    raw.send(Connect(protocol_level=level, client_id=unique("bad")))
    assert isinstance(raw.receive(), ConnAck)
    return raw


@pytest.mark.parametrize(
    ("name", "data", "reason_code"),
    [
        ("remaining length over 4 bytes", b"\x30\xff\xff\xff\xff\x01", ReasonCode.MALFORMED_PACKET),
        ("reserved flags of SUBSCRIBE", b"\x80\x08\x00\x01\x00\x00\x03a/b\x00", ReasonCode.MALFORMED_PACKET),
        ("invalid UTF-8 topic", b"\x30\x06\x00\x02\xc3\x28\x00x", ReasonCode.MALFORMED_PACKET),
        ("packet over the maximum size", b"\x30\xff\xff\xff\x7f", ReasonCode.PACKET_TOO_LARGE),
        ("a second CONNECT", _CONNECT_5, ReasonCode.PROTOCOL_ERROR),
    ],
)
def test_malformed_input_gets_its_reason_code_and_others_stay_connected(
    mqtt_broker: MqttBroker, name: str, data: bytes, reason_code: ReasonCode
) -> None:
    topic = unique("bystander")
    bystander = Client(mqtt_broker)
    bystander.subscribe(topic, 1)
    offender = _connected(mqtt_broker)
    offender.send_bytes(data)
    packet = offender.receive()
    assert isinstance(packet, Disconnect) and packet.reason_code == reason_code, (name, packet)
    assert offender.closed_within(5)
    publisher = Client(mqtt_broker)
    publisher.publish(topic, b"still here", 1)
    assert [message.payload for message in bystander.receive(1)] == [b"still here"]
    bystander.disconnect()
    publisher.disconnect()


def test_a_3_1_1_client_breaking_the_protocol_is_disconnected_without_a_packet(mqtt_broker: MqttBroker) -> None:
    offender = _connected(mqtt_broker, level=4)
    offender.send_bytes(b"\x80\x08\x00\x01\x00\x03a/b\x00")  # SUBSCRIBE with reserved flags 0000, not 0010
    assert offender.closed_within(5)


def test_a_connect_with_an_unknown_protocol_level_gets_connack_0x01(mqtt_broker: MqttBroker) -> None:
    raw = RawClient(mqtt_broker, level=4)
    raw.send_bytes(b"\x10\x0c\x00\x04MQTT\x07\x02\x00\x3c\x00\x00")
    packet = raw.receive()
    assert isinstance(packet, ConnAck) and packet.reason_code == 0x01
    assert raw.closed_within(5)


def test_a_publish_before_connect_closes_the_connection(mqtt_broker: MqttBroker) -> None:
    raw = RawClient(mqtt_broker)
    raw.send_bytes(encode(PubAck(packet_id=1), 5))
    assert raw.closed_within(5)


def test_garbage_bytes_close_only_that_connection(mqtt_broker: MqttBroker) -> None:
    raw = RawClient(mqtt_broker)
    raw.send_bytes(bytes(range(256)))
    assert raw.closed_within(5)
    healthy = Client(mqtt_broker)
    assert healthy.connack_result[1] == 0
    healthy.disconnect()

