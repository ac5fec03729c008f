"""MQTT 5.0 features against real clients, and MQTT <-> native interop through the log."""

from __future__ import annotations

import time
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from mqbroker import limits
from mqbroker.client import Admin, Consumer, Producer
from mqbroker.protocols.mqtt.packets import (
    ConnAck,
    Connect,
    Disconnect,
    Properties,
    PubAck,
    Publish,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscriptionRequest,
)
from tests.integration.mqtt_support import Client, MqttBroker, RawClient, mqtt_broker, own_broker, unique  # noqa: F401


def _raw(broker: MqttBroker, **properties: object) -> RawClient:
    raw = RawClient(broker)
    raw.send(Connect(client_id=unique("raw"), properties=Properties(**properties)))
    assert isinstance(raw.receive(), ConnAck)
    return raw


def _subscribe(raw: RawClient, topic_filter: str, qos: int) -> None:
    raw.send(Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter=topic_filter, qos=qos),)))
    assert isinstance(raw.receive(), SubAck)


def test_shared_subscriptions_split_the_load_without_duplicates(mqtt_broker: MqttBroker) -> None:
    topic = unique("shared")
    members = [Client(mqtt_broker, version=mqtt.MQTTv5) for _ in range(2)]
    for member in members:
        member.subscribe(f"$share/workers/{topic}", 1)
    publisher = Client(mqtt_broker, version=mqtt.MQTTv5)
    for number in range(20):
        publisher.publish(topic, b"%d" % number, 1)
    shares: list[list[Any]] = [[], []]
    deadline = time.monotonic() + 20
    while sum(map(len, shares)) < 20 and time.monotonic() < deadline:
        for share, member in zip(shares, members, strict=True):
            share += member.receive(1, timeout_s=0.1)
    assert all(shares), "every member gets a share"
    assert sorted(int(message.payload) for share in shares for message in share) == list(range(20))
    for client in (*members, publisher):
        client.disconnect()


def test_a_share_group_whose_members_are_all_full_loses_nothing(mqtt_broker: MqttBroker) -> None:
    topic = unique("shared-full")
    members = [_raw(mqtt_broker, receive_maximum=1) for _ in range(2)]  # they do not acknowledge until all is sent
    for member in members:
        _subscribe(member, f"$share/busy/{topic}", 1)
    total = 2 * (limits.mqtt_pending_messages_max + 1) + 100  # more than both members' windows and queues hold
    publisher = Client(mqtt_broker, version=mqtt.MQTTv5)
    infos = [publisher.paho.publish(topic, b"%d" % number, qos=1) for number in range(total)]
    for info in infos:
        info.wait_for_publish(timeout=30)
    received: list[int] = []
    deadline = time.monotonic() + 60
    while len(received) < total and time.monotonic() < deadline:
        for member in members:
            try:
                packet = member.receive(timeout_s=0.05)
            except TimeoutError:
                continue
            assert isinstance(packet, Publish), packet
            received.append(int(packet.payload))
            member.send(PubAck(packet_id=packet.packet_id))
    assert sorted(received) == list(range(total)), f"{total - len(set(received))} lost, {len(received) - len(set(received))} twice"
    for member in members:
        member.close()
    publisher.disconnect()


def test_topic_aliases_are_accepted_and_sent_to_clients_that_ask(mqtt_broker: MqttBroker) -> None:
    topic = unique("alias")
    raw = _raw(mqtt_broker, topic_alias_maximum=4)
    _subscribe(raw, topic, 0)
    publisher = Client(mqtt_broker, version=mqtt.MQTTv5)
    first = PahoProperties(PacketTypes.PUBLISH)
    first.TopicAlias = 3
    publisher.publish(topic, b"one", 1, properties=first)
    publisher.publish("", b"two", 1, properties=first)  # the alias stands for the topic now
    one, two = raw.receive(), raw.receive()
    assert (one.topic, one.properties.topic_alias, one.payload) == (topic, 1, b"one")
    assert (two.topic, two.properties.topic_alias, two.payload) == ("", 1, b"two")
    raw.close()
    publisher.disconnect()


def test_the_client_receive_maximum_bounds_unacknowledged_deliveries(mqtt_broker: MqttBroker) -> None:
    topic = unique("window")
    raw = _raw(mqtt_broker, receive_maximum=2)
    _subscribe(raw, topic, 1)
    publisher = Client(mqtt_broker)
    for number in range(5):
        publisher.publish(topic, b"%d" % number, 1)
    first, second = raw.receive(), raw.receive()
    assert [first.payload, second.payload] == [b"0", b"1"]
    try:
        raw.receive(timeout_s=0.5)
        raise AssertionError("a third message arrived with a window of 2")
    except TimeoutError:
        pass
    raw.send(PubAck(packet_id=first.packet_id))
    assert raw.receive().payload == b"2"
    raw.close()
    publisher.disconnect()


def test_exceeding_the_server_receive_maximum_gets_disconnect_0x93(mqtt_broker: MqttBroker) -> None:
    raw = _raw(mqtt_broker)
    topic = unique("flood")
    from mqbroker.protocols.mqtt.codec import encode

    flood = b"".join(encode(Publish(topic=topic, payload=b"x", qos=1, packet_id=n), 5) for n in range(1, 1200))
    raw.send_bytes(flood)
    packet = raw.receive()
    while isinstance(packet, PubAck):
        packet = raw.receive()
    assert isinstance(packet, Disconnect) and packet.reason_code == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
    assert raw.closed_within(5)


def test_request_response_through_response_topic_and_correlation_data(mqtt_broker: MqttBroker) -> None:
    service_topic, reply_topic = unique("service"), unique("reply")
    responder = Client(mqtt_broker, version=mqtt.MQTTv5)
    responder.subscribe(service_topic, 1)
    requester = Client(mqtt_broker, version=mqtt.MQTTv5)
    requester.subscribe(reply_topic, 1)
    request_properties = PahoProperties(PacketTypes.PUBLISH)
    request_properties.ResponseTopic = reply_topic
    request_properties.CorrelationData = b"req-42"
    request_properties.UserProperty = [("tenant", "blue")]
    requester.publish(service_topic, b"ping", 1, properties=request_properties)
    (request,) = responder.receive(1)
    assert request.properties.ResponseTopic == reply_topic
    assert request.properties.UserProperty == [("tenant", "blue")]
    reply_properties = PahoProperties(PacketTypes.PUBLISH)
    reply_properties.CorrelationData = request.properties.CorrelationData
    responder.publish(request.properties.ResponseTopic, b"pong", 1, properties=reply_properties)
    (reply,) = requester.receive(1)
    assert (reply.payload, reply.properties.CorrelationData) == (b"pong", b"req-42")
    responder.disconnect()
    requester.disconnect()


def test_a_message_matching_two_subscriptions_carries_both_identifiers(mqtt_broker: MqttBroker) -> None:
    root = unique("ids")
    raw = _raw(mqtt_broker)
    for identifier, topic_filter in ((5, f"{root}/#"), (9, f"{root}/+")):
        raw.send(Subscribe(packet_id=identifier, subscriptions=(SubscriptionRequest(topic_filter=topic_filter, qos=1),),
                           properties=Properties(subscription_identifiers=(identifier,))))
        assert isinstance(raw.receive(), SubAck)
    publisher = Client(mqtt_broker)
    publisher.publish(f"{root}/x", b"both", 1)
    delivered = raw.receive()
    assert delivered.properties.subscription_identifiers == (5, 9)
    raw.close()
    publisher.disconnect()


def test_mqtt_messages_reach_native_consumers_with_mqtt_headers(mqtt_broker: MqttBroker) -> None:
    topic = unique("interop/out")
    consumer = Consumer(mqtt_broker.bootstrap)
    partition = ("mqtt.messages", 0)
    consumer.assign([partition])
    consumer.seek_to_end(partition)
    consumer.position(partition)
    publisher = Client(mqtt_broker, version=mqtt.MQTTv5)
    properties = PahoProperties(PacketTypes.PUBLISH)
    properties.ContentType = "text/plain"
    properties.UserProperty = [("site", "north")]
    publisher.publish(topic, b"21.5", 1, properties=properties)
    deadline = time.monotonic() + 10
    found = []
    while not found and time.monotonic() < deadline:
        found = [message for message in consumer.poll(1.0) if message.key == topic.encode()]
    (record,) = found
    headers = dict(record.headers)
    assert record.value == b"21.5"
    assert headers["mqtt.qos"] == b"1" and headers["mqtt.content_type"] == b"text/plain" and headers["site"] == b"north"
    consumer.close()
    publisher.disconnect()


def test_records_produced_natively_reach_mqtt_subscribers(mqtt_broker: MqttBroker) -> None:
    topic = unique("interop/in")
    subscriber = Client(mqtt_broker, version=mqtt.MQTTv5)
    subscriber.subscribe(topic, 1)
    producer = Producer(mqtt_broker.bootstrap)
    producer.send("mqtt.messages", b"from spark", key=topic.encode(), headers=[("origin", b"native")]).result(10)
    producer.close()
    (message,) = subscriber.receive(1)
    assert (message.topic, message.payload, message.qos) == (topic, b"from spark", 1)
    assert message.properties.UserProperty == [("origin", "native")]
    subscriber.disconnect()


def test_records_on_partitions_added_later_reach_mqtt_subscribers(own_broker: MqttBroker) -> None:
    topic = unique("grown")
    subscriber = Client(own_broker, version=mqtt.MQTTv5)
    subscriber.subscribe(topic, 1)
    with Admin(own_broker.bootstrap) as admin:
        count = admin.describe_topics(["mqtt.messages"])["mqtt.messages"]
        admin.create_partitions("mqtt.messages", count + 1)
    producer = Producer(own_broker.bootstrap)
    producer.send("mqtt.messages", b"on the new partition", key=topic.encode(), partition=count).result(10)
    producer.close()
    (message,) = subscriber.receive(1, timeout_s=20)  # the hub looks for new partitions every 5 s
    assert (message.topic, message.payload) == (topic, b"on the new partition")
    subscriber.disconnect()


def test_mqtt_subscribers_see_committed_transactions_only(mqtt_broker: MqttBroker) -> None:
    """The hub reads its log topic read_committed: an aborted transaction never reaches MQTT, an open one waits."""
    topic = unique("interop/txn")
    subscriber = Client(mqtt_broker, version=mqtt.MQTTv5)
    subscriber.subscribe(topic, 1)
    with Producer(mqtt_broker.bootstrap, transactional_id=unique("mqtt-writer"), linger_ms=0) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("mqtt.messages", b"aborted", key=topic.encode(), partition=0)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("mqtt.messages", b"committed", key=topic.encode(), partition=0).result(10)
        assert subscriber.receive(1, timeout_s=1.5) == []  # still open: held back at the last stable offset
        producer.commit_transaction()
    (message,) = subscriber.receive(1)
    assert (message.topic, message.payload) == (topic, b"committed")
    subscriber.disconnect()
