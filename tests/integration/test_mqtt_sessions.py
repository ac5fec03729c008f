"""Persistent sessions on the log: offline queueing, broker restarts, QoS 2 across reconnects, wills, takeover."""

from __future__ import annotations

import paho.mqtt.client as mqtt

from mqbroker.protocols.mqtt.packets import (
    Connect,
    ConnAck,
    Disconnect,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    Will,
)
from tests.integration.clusterprocess import wait_for
from tests.integration.mqtt_support import Client, MqttBroker, RawClient, mqtt_broker, own_broker, unique  # noqa: F401
from tests.integration.mqtt_support import stored_state


def test_qos1_messages_published_while_offline_arrive_on_reconnect(mqtt_broker: MqttBroker) -> None:
    topic, device = unique("offline"), unique("device")
    subscriber = Client(mqtt_broker, device, clean=False)
    subscriber.subscribe(topic, 1)
    subscriber.disconnect()
    publisher = Client(mqtt_broker)
    for number in range(5):
        publisher.publish(topic, b"%d" % number, 1)
    back = Client(mqtt_broker, device, clean=False)
    assert back.connack_result[0].session_present
    assert [message.payload for message in back.receive(5)] == [b"0", b"1", b"2", b"3", b"4"]
    assert back.received_before_marker(publisher, topic) == []  # nothing twice
    back.disconnect()
    publisher.disconnect()


def test_a_5_0_session_with_expiry_keeps_messages_and_a_clean_start_drops_them(mqtt_broker: MqttBroker) -> None:
    topic, device = unique("expiry"), unique("device5")
    subscriber = Client(mqtt_broker, device, version=mqtt.MQTTv5, clean=False, session_expiry_s=300)
    subscriber.subscribe(topic, 2)
    subscriber.disconnect()
    publisher = Client(mqtt_broker, version=mqtt.MQTTv5)
    publisher.publish(topic, b"while away", 2)
    back = Client(mqtt_broker, device, version=mqtt.MQTTv5, clean=False, session_expiry_s=300)
    assert [message.payload for message in back.receive(1)] == [b"while away"]
    back.disconnect()
    publisher.publish(topic, b"dropped", 1)
    fresh = Client(mqtt_broker, device, version=mqtt.MQTTv5, clean=True)
    assert not fresh.connack_result[0].session_present
    fresh.subscribe(topic, 1)  # a kept session would deliver "dropped" before anything published from now on
    assert fresh.received_before_marker(publisher, topic) == []
    fresh.disconnect()
    publisher.disconnect()


def test_acknowledged_messages_and_retained_survive_a_broker_kill(own_broker: MqttBroker) -> None:
    topic, device = unique("crash"), unique("device")
    subscriber = Client(own_broker, device, clean=False)
    subscriber.subscribe(topic, 1)
    subscriber.disconnect()
    publisher = Client(own_broker)
    for number in range(20):
        publisher.publish(topic, b"%d" % number, 1)  # returns once PUBACK arrived: durable
    publisher.publish(f"{topic}/state", b"on", 1, retain=True)
    publisher.disconnect()
    own_broker.kill()
    own_broker.restart()
    back = Client(own_broker, device, clean=False)
    assert back.connack_result[0].session_present
    assert [message.payload for message in back.receive(20)] == [b"%d" % n for n in range(20)]
    late = Client(own_broker)
    late.subscribe(f"{topic}/state", 1)
    assert [message.payload for message in late.receive(1)] == [b"on"]
    back.disconnect()
    late.disconnect()


def _raw_session(broker: MqttBroker, client_id: str, clean: bool) -> tuple[RawClient, ConnAck]:
    raw = RawClient(broker)
    raw.send(Connect(client_id=client_id, clean_start=clean, properties=Properties(session_expiry_interval_s=300)))
    connack = raw.receive()
    assert isinstance(connack, ConnAck) and connack.reason_code == 0, connack
    return raw, connack


def test_an_inbound_qos2_message_is_stored_once_across_a_reconnect_before_pubrel(mqtt_broker: MqttBroker) -> None:
    topic, device = unique("qos2in"), unique("sender")
    subscriber = Client(mqtt_broker)
    subscriber.subscribe(topic, 2)
    raw, _ = _raw_session(mqtt_broker, device, clean=True)
    raw.send(Publish(topic=topic, payload=b"once", qos=2, packet_id=7))
    assert raw.receive() == PubRec(packet_id=7)
    raw.close()  # gone before PUBREL
    raw, connack = _raw_session(mqtt_broker, device, clean=False)
    assert connack.session_present
    raw.send(Publish(topic=topic, payload=b"once", qos=2, packet_id=7, dup=True))  # the client resends
    assert raw.receive() == PubRec(packet_id=7)
    raw.send(PubRel(packet_id=7))
    assert raw.receive() == PubComp(packet_id=7)
    assert [message.payload for message in subscriber.receive(1)] == [b"once"]
    publisher = Client(mqtt_broker)
    assert subscriber.received_before_marker(publisher, topic, qos=2) == []  # stored once
    publisher.disconnect()
    raw.close()
    subscriber.disconnect()


def test_an_outbound_qos2_message_is_not_redelivered_after_pubrec(mqtt_broker: MqttBroker) -> None:
    topic, device = unique("qos2out"), unique("receiver")
    raw, _ = _raw_session(mqtt_broker, device, clean=True)
    raw.send(Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter=topic, qos=2),)))
    assert isinstance(raw.receive(), SubAck)
    publisher = Client(mqtt_broker)
    publisher.publish(topic, b"exactly once", 2)
    delivered = raw.receive()
    assert isinstance(delivered, Publish) and delivered.payload == b"exactly once"
    raw.send(PubRec(packet_id=delivered.packet_id))
    assert raw.receive() == PubRel(packet_id=delivered.packet_id)
    raw.close()  # gone before PUBCOMP
    raw, connack = _raw_session(mqtt_broker, device, clean=False)
    assert connack.session_present
    assert raw.receive() == PubRel(packet_id=delivered.packet_id)  # resent, not the PUBLISH
    raw.send(PubComp(packet_id=delivered.packet_id))
    publisher.publish(topic, b"next", 2)
    following = raw.receive()
    assert isinstance(following, Publish) and following.payload == b"next"
    raw.close()
    publisher.disconnect()


def test_a_will_is_sent_on_an_abnormal_close_and_not_on_disconnect(mqtt_broker: MqttBroker) -> None:
    topic = unique("will")
    watcher = Client(mqtt_broker)
    watcher.subscribe(f"{topic}/#", 1)
    dying = Client(mqtt_broker, will=(f"{topic}/dying", b"gone", 1))
    dying.drop()
    (will,) = watcher.receive(1)
    assert (will.topic, will.payload) == (f"{topic}/dying", b"gone")
    polite = Client(mqtt_broker, will=(f"{topic}/polite", b"gone", 1))
    polite.disconnect()
    assert watcher.quiet(0.7) == []
    watcher.disconnect()


def test_a_will_delay_is_cancelled_when_the_client_comes_back(mqtt_broker: MqttBroker) -> None:
    topic, device = unique("willdelay"), unique("flaky")
    watcher = Client(mqtt_broker)
    watcher.subscribe(topic, 1)
    raw = RawClient(mqtt_broker)
    will = Will(topic=topic, payload=b"late", qos=1, properties=Properties(will_delay_interval_s=2))
    raw.send(Connect(client_id=device, will=will, properties=Properties(session_expiry_interval_s=60)))
    assert isinstance(raw.receive(), ConnAck)
    raw.close()
    back, _ = _raw_session(mqtt_broker, device, clean=False)
    assert watcher.quiet(2.5) == []
    back.close()  # this connection has no will
    watcher.disconnect()


def test_a_delayed_will_goes_out_when_the_client_stays_away(mqtt_broker: MqttBroker) -> None:
    topic = unique("willlate")
    watcher = Client(mqtt_broker)
    watcher.subscribe(topic, 1)
    raw = RawClient(mqtt_broker)
    will = Will(topic=topic, payload=b"late", qos=1, properties=Properties(will_delay_interval_s=1))
    raw.send(Connect(client_id=unique("away"), will=will, properties=Properties(session_expiry_interval_s=60)))
    assert isinstance(raw.receive(), ConnAck)
    raw.close()
    assert watcher.quiet(0.5) == []
    assert [message.payload for message in watcher.receive(1, timeout_s=3)] == [b"late"]
    watcher.disconnect()


def test_a_second_connection_with_the_same_client_id_takes_the_session_over(mqtt_broker: MqttBroker) -> None:
    topic, device = unique("takeover"), unique("twin")
    first, _ = _raw_session(mqtt_broker, device, clean=True)
    first.send(Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter=topic, qos=1),)))
    assert isinstance(first.receive(), SubAck)
    second = Client(mqtt_broker, device, version=mqtt.MQTTv5, clean=False, session_expiry_s=300)
    assert second.connack_result[0].session_present
    assert first.receive() == Disconnect(reason_code=ReasonCode.SESSION_TAKEN_OVER,
                                         properties=Properties(reason_string="closed by the server: SESSION_TAKEN_OVER"))
    assert first.closed_within(5)
    publisher = Client(mqtt_broker)
    publisher.publish(topic, b"to the new one", 1)
    assert [message.payload for message in second.receive(1)] == [b"to the new one"]
    second.disconnect()
    publisher.disconnect()


def test_a_graceful_shutdown_tells_5_0_clients_the_server_is_shutting_down(own_broker: MqttBroker) -> None:
    modern, legacy = RawClient(own_broker), RawClient(own_broker, level=4)
    modern.send(Connect(client_id=unique("modern")))
    legacy.send(Connect(protocol_level=4, client_id=unique("legacy")))
    assert isinstance(modern.receive(), ConnAck) and isinstance(legacy.receive(), ConnAck)
    own_broker.stop()
    farewell = modern.receive()
    assert isinstance(farewell, Disconnect) and farewell.reason_code == ReasonCode.SERVER_SHUTTING_DOWN
    assert modern.closed_within(5)
    assert legacy.receive() is None  # 3.1.1 has no server DISCONNECT: the connection just closes


def _inflight_ids(broker: MqttBroker, client_id: str, count: int) -> object:
    """Whether the stored session of ``client_id`` has ``count`` messages in flight (QoS 1 ones are stored within
    ``limits.mqtt_session_store_interval_ms`` of their send)."""
    state = stored_state(broker.bootstrap, client_id)
    return state is not None and len(state.inflight) == count


def test_messages_in_flight_at_a_kill9_are_resent_from_the_log_with_their_packet_ids(
    own_broker: MqttBroker,  # noqa: F811
) -> None:
    topic, device = unique("inflight"), unique("receiver")
    raw, _ = _raw_session(own_broker, device, clean=True)
    raw.send(Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter=f"{topic}/#", qos=2),),
                       properties=Properties(subscription_identifiers=(42,))))
    assert isinstance(raw.receive(), SubAck)
    publisher = Client(own_broker)
    for number, qos in enumerate((1, 2, 1, 1, 2)):
        publisher.publish(f"{topic}/{number}", b"message %d" % number, qos)
    sent = [raw.receive() for _ in range(5)]  # never acknowledged
    assert [(p.topic, p.payload, p.qos, p.dup) for p in sent] == [
        (f"{topic}/{n}", b"message %d" % n, qos, False) for n, qos in enumerate((1, 2, 1, 1, 2))]
    wait_for(lambda: _inflight_ids(own_broker, device, 5), what="the in-flight messages stored")
    raw.close()
    publisher.disconnect()
    own_broker.kill()
    own_broker.restart()
    raw, connack = _raw_session(own_broker, device, clean=False)
    assert connack.session_present
    resent = [raw.receive() for _ in range(5)]
    assert resent == [Publish(topic=p.topic, payload=p.payload, qos=p.qos, dup=True, packet_id=p.packet_id,
                              properties=p.properties) for p in sent]  # read from the log, in order, DUP=1
    assert all(p.properties.subscription_identifiers == (42,) for p in resent)
    for packet in resent:
        raw.send(PubAck(packet_id=packet.packet_id) if packet.qos == 1 else PubRec(packet_id=packet.packet_id))
    released = [raw.receive() for _ in range(2)]
    assert released == [PubRel(packet_id=sent[1].packet_id), PubRel(packet_id=sent[4].packet_id)]
    for packet in released:
        raw.send(PubComp(packet_id=packet.packet_id))
    marker = Client(own_broker)
    marker.publish(f"{topic}/marker", b"marker", 1)
    following = raw.receive()
    assert isinstance(following, Publish) and following.payload == b"marker", following  # nothing resent twice
    raw.close()
    marker.disconnect()
