"""Shared subscriptions against a real broker: a member that leaves with messages queued or in flight loses none."""

from __future__ import annotations

import time

import paho.mqtt.client as mqtt

from mqbroker.protocols.mqtt.packets import ConnAck, Connect, Properties, Publish
from tests.integration import mqtt_support
from tests.integration.mqtt_support import Client, MqttBroker, RawClient, unique
from tests.integration.test_mqtt_features import _subscribe

mqtt_broker = mqtt_support.mqtt_broker  # the module's broker (a fixture)
MESSAGES = 40


def _left_after_one_delivery(broker: MqttBroker, connect: Connect, group_filter: str) -> tuple[Publish, Client, Client]:
    """``connect``'s raw member (window 1, acknowledging nothing) and a paho member share ``group_filter``; MESSAGES
    are published to it; the raw member drops its connection once it got its first. That PUBLISH, the paho member
    and the publisher."""
    leaving = RawClient(broker)
    leaving.send(connect)
    assert isinstance(leaving.receive(), ConnAck)
    _subscribe(leaving, group_filter, 1)
    staying = Client(broker, version=mqtt.MQTTv5)
    staying.subscribe(group_filter, 1)
    publisher = Client(broker, version=mqtt.MQTTv5)
    for number in range(MESSAGES):
        publisher.publish(group_filter.split("/", 2)[2], b"%d" % number, 1)
    first = leaving.receive()
    assert isinstance(first, Publish), first
    leaving.close()
    return first, staying, publisher


def test_a_member_that_drops_its_connection_leaves_its_share_to_the_other_member(mqtt_broker: MqttBroker) -> None:
    """The leaving member (window 1) acknowledges nothing, so its share sits in flight and in its queue when its
    connection drops; the paho member gets every message of it (MQTT 5.0 §4.8.2: its session is not kept)."""
    connect = Connect(client_id=unique("leaving"), properties=Properties(receive_maximum=1))
    first, staying, publisher = _left_after_one_delivery(mqtt_broker, connect, f"$share/leave/{unique('shared-leave')}")
    received = [int(message.payload) for message in staying.receive(MESSAGES, timeout_s=30)]
    assert sorted(received) == list(range(MESSAGES))
    assert int(first.payload) in received
    for client in (staying, publisher):
        client.disconnect()


def test_a_persistent_member_that_comes_back_gets_its_in_flight_message_again(mqtt_broker: MqttBroker) -> None:
    """Its queue goes to the other member when it drops; the one message in flight comes back to it, DUP set."""
    client_id = unique("returning")
    connect = Connect(client_id=client_id, clean_start=False,
                      properties=Properties(receive_maximum=1, session_expiry_interval_s=600))
    first, staying, publisher = _left_after_one_delivery(mqtt_broker, connect, f"$share/back/{unique('shared-back')}")
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


def test_a_persistent_member_alone_in_its_group_gets_what_was_published_while_it_was_away(
    mqtt_broker: MqttBroker,
) -> None:
    """Its group has no other member: nobody had the messages; its session's cursor holds them (they were lost)."""
    client_id, topic = unique("alone"), unique("shared-alone")
    member = Client(mqtt_broker, client_id, version=mqtt.MQTTv5, clean=True, session_expiry_s=600)
    member.subscribe(f"$share/alone/{topic}", 1)
    publisher = Client(mqtt_broker, version=mqtt.MQTTv5)
    publisher.publish(topic, b"before", 1)
    assert [message.payload for message in member.receive(1)] == [b"before"]
    member.disconnect()
    for number in range(MESSAGES):
        publisher.publish(topic, b"%d" % number, 1)
    back = Client(mqtt_broker, client_id, version=mqtt.MQTTv5, clean=False, session_expiry_s=600)
    assert back.connack_result[0].session_present
    received = {int(message.payload) for message in back.receive(MESSAGES, timeout_s=30) if message.payload != b"before"}
    assert received == set(range(MESSAGES))
    for client in (back, publisher):
        client.disconnect()


def test_a_message_handed_to_another_member_goes_with_its_qos_and_subscription_identifier(
    mqtt_broker: MqttBroker,
) -> None:
    """The leaving member (QoS 1, no identifier) drops with its QoS 2 messages in flight and queued: the staying
    member (QoS 2, identifier 7) gets each at QoS 2 with identifier 7, as if delivered to it first."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties as PahoProperties
    from paho.mqtt.subscribeoptions import SubscribeOptions

    group_filter = f"$share/hand/{unique('shared-hand')}"
    leaving = RawClient(mqtt_broker)
    leaving.send(Connect(client_id=unique("leaving"), properties=Properties(receive_maximum=1)))
    assert isinstance(leaving.receive(), ConnAck)
    _subscribe(leaving, group_filter, 1)
    staying = Client(mqtt_broker, version=mqtt.MQTTv5)
    identifier = PahoProperties(PacketTypes.SUBSCRIBE)
    identifier.SubscriptionIdentifier = 7
    staying.paho.subscribe(group_filter, options=SubscribeOptions(qos=2), properties=identifier)
    assert staying.suback.get(timeout=10)[0].value == 2
    publisher = Client(mqtt_broker, version=mqtt.MQTTv5)
    for number in range(MESSAGES):
        publisher.publish(group_filter.split("/", 2)[2], b"%d" % number, 2)
    first = leaving.receive()
    assert isinstance(first, Publish) and first.qos == 1
    leaving.close()
    received = staying.receive(MESSAGES, timeout_s=30)
    assert sorted(int(message.payload) for message in received) == list(range(MESSAGES))
    assert {(message.qos, tuple(message.properties.SubscriptionIdentifier)) for message in received} == {(2, (7,))}
    for client in (staying, publisher):
        client.disconnect()
