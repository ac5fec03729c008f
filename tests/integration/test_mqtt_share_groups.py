"""Shared subscriptions against a real broker: a member that leaves with messages queued or in flight loses none."""

from __future__ import annotations

import time

import paho.mqtt.client as mqtt

from mqbroker.protocols.mqtt.packets import ConnAck, Connect, Properties, Publish
from tests.integration.mqtt_support import Client, MqttBroker, RawClient, mqtt_broker, unique  # noqa: F401
from tests.integration.test_mqtt_features import _subscribe

MESSAGES = 40


def test_a_member_that_drops_its_connection_leaves_its_share_to_the_other_member(mqtt_broker: MqttBroker) -> None:
    """The leaving member (window 1) acknowledges nothing, so its share sits in flight and in its queue when its
    connection drops; the paho member gets every message of it (MQTT 5.0 §4.8.2: its session is not kept)."""
    topic = unique("shared-leave")
    leaving = RawClient(mqtt_broker)
    leaving.send(Connect(client_id=unique("leaving"), properties=Properties(receive_maximum=1)))
    assert isinstance(leaving.receive(), ConnAck)
    _subscribe(leaving, f"$share/leave/{topic}", 1)
    staying = Client(mqtt_broker, version=mqtt.MQTTv5)
    staying.subscribe(f"$share/leave/{topic}", 1)
    publisher = Client(mqtt_broker, version=mqtt.MQTTv5)
    for number in range(MESSAGES):
        publisher.publish(topic, b"%d" % number, 1)
    first = leaving.receive()
    assert isinstance(first, Publish), first
    leaving.close()
    received = [int(message.payload) for message in staying.receive(MESSAGES, timeout_s=30)]
    assert sorted(received) == list(range(MESSAGES))
    assert int(first.payload) in received
    for client in (staying, publisher):
        client.disconnect()


def test_a_persistent_member_that_comes_back_gets_its_in_flight_message_again(mqtt_broker: MqttBroker) -> None:
    """Its queue goes to the other member when it drops; the one message in flight comes back to it, DUP set."""
    topic, client_id = unique("shared-back"), unique("returning")
    leaving = RawClient(mqtt_broker)
    leaving.send(Connect(client_id=client_id, clean_start=False,
                         properties=Properties(receive_maximum=1, session_expiry_interval_s=600)))
    assert isinstance(leaving.receive(), ConnAck)
    _subscribe(leaving, f"$share/back/{topic}", 1)
    staying = Client(mqtt_broker, version=mqtt.MQTTv5)
    staying.subscribe(f"$share/back/{topic}", 1)
    publisher = Client(mqtt_broker, version=mqtt.MQTTv5)
    for number in range(MESSAGES):
        publisher.publish(topic, b"%d" % number, 1)
    first = leaving.receive()
    assert isinstance(first, Publish), first
    leaving.close()
    received = [int(message.payload) for message in staying.receive(MESSAGES - 1, timeout_s=30)]
    assert sorted(received + [int(first.payload)]) == list(range(MESSAGES))
    back = RawClient(mqtt_broker)
    back.send(Connect(client_id=client_id, clean_start=False, properties=Properties(session_expiry_interval_s=600)))
    connack = back.receive()
    assert isinstance(connack, ConnAck) and connack.session_present
    resent = back.receive()
    assert isinstance(resent, Publish) and (resent.payload, resent.dup) == (first.payload, True)
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:  # nothing else comes to it: its queue went to the other member
        try:
            packet = back.receive(timeout_s=0.2)
        except TimeoutError:
            continue
        assert not isinstance(packet, Publish), packet
    back.close()
    for client in (staying, publisher):
        client.disconnect()
