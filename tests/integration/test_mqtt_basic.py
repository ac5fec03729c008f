"""MQTT publish/subscribe with real clients: paho-mqtt at both protocol levels and mosquitto_pub/sub."""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import paho.mqtt.client as mqtt
import pytest

from tests.integration.mqtt_support import Client, MqttBroker, mqtt_broker, unique  # noqa: F401

VERSIONS = [pytest.param(mqtt.MQTTv311, id="3.1.1"), pytest.param(mqtt.MQTTv5, id="5.0")]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("publish_qos", [0, 1, 2])
@pytest.mark.parametrize("subscribe_qos", [0, 1, 2])
def test_each_qos_both_ways_is_delivered_at_the_lower_qos(
    mqtt_broker: MqttBroker, version: int, publish_qos: int, subscribe_qos: int
) -> None:
    topic = unique("qos")
    subscriber = Client(mqtt_broker, version=version)
    assert [int(code.value) if hasattr(code, "value") else code for code in subscriber.subscribe(topic, subscribe_qos)] == [subscribe_qos]
    publisher = Client(mqtt_broker, version=version)
    publisher.publish(topic, b"payload", publish_qos)
    (message,) = subscriber.receive(1)
    assert (message.topic, message.payload, message.qos) == (topic, b"payload", min(publish_qos, subscribe_qos))
    assert subscriber.received_before_marker(publisher, topic, publish_qos) == []  # delivered once
    subscriber.disconnect()
    publisher.disconnect()


@pytest.mark.parametrize("version", VERSIONS)
def test_wildcards_match_levels_and_skip_dollar_topics(mqtt_broker: MqttBroker, version: int) -> None:
    root = unique("wild")
    subscriber = Client(mqtt_broker, version=version)
    subscriber.subscribe(f"{root}/+/temperature", 1)
    subscriber.subscribe(f"{root}/kitchen/#", 1)
    other = Client(mqtt_broker, version=version)
    other.subscribe("#", 0)
    publisher = Client(mqtt_broker, version=version)
    for topic in (f"{root}/hall/temperature", f"{root}/kitchen", f"{root}/hall/humidity", "$internal/x"):
        publisher.publish(topic, b"1", 1)
    received = sorted(message.topic for message in subscriber.receive(2))
    assert received == [f"{root}/hall/temperature", f"{root}/kitchen"]
    assert subscriber.received_before_marker(publisher, f"{root}/kitchen/marker") == []
    assert "$internal/x" not in {message.topic for message in other.received_before_marker(publisher, f"{root}/marker")}
    for client in (subscriber, other, publisher):
        client.disconnect()


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_messages_are_set_replaced_and_cleared(mqtt_broker: MqttBroker, version: int) -> None:
    topic = unique("retained")
    publisher = Client(mqtt_broker, version=version)
    publisher.publish(topic, b"first", 1, retain=True)
    publisher.publish(topic, b"second", 1, retain=True)
    late = Client(mqtt_broker, version=version)
    late.subscribe(topic, 1)
    (message,) = late.receive(1)
    assert (message.payload, message.retain) == (b"second", True)
    publisher.publish(topic, b"", 1, retain=True)
    (cleared,) = late.receive(1)  # the clearing message itself reaches live subscribers
    assert cleared.payload == b""
    later = Client(mqtt_broker, version=version)
    later.subscribe(topic, 1)
    assert later.received_before_marker(publisher, topic) == []  # the cleared retained message is gone
    for client in (publisher, late, later):
        client.disconnect()


def test_mosquitto_command_line_clients_publish_and_subscribe(mqtt_broker: MqttBroker) -> None:
    topic = unique("cli")
    port = str(mqtt_broker.mqtt_port)
    for qos in ("0", "1", "2"):
        subscriber = subprocess.Popen(
            ["mosquitto_sub", "-p", port, "-t", topic, "-q", qos, "-C", "1", "-W", "10", "-v"],
            stdout=subprocess.PIPE, text=True,
        )
        time.sleep(0.5)  # let it subscribe; if it is late it still gets "back" below
        paho = Client(mqtt_broker)
        paho.subscribe(topic, 2)
        subprocess.run(["mosquitto_pub", "-p", port, "-t", topic, "-m", f"m{qos}", "-q", qos], check=True, timeout=10)
        (message,) = paho.receive(1)
        assert message.payload == f"m{qos}".encode()
        paho.publish(topic, b"back", int(qos))
        output, _ = subscriber.communicate(timeout=15)
        assert output.strip() in (f"{topic} m{qos}", f"{topic} back")  # the first one it saw; -C 1 then exits
        paho.disconnect()


def test_mosquitto_sub_at_protocol_5_receives_retained_from_mosquitto_pub(mqtt_broker: MqttBroker) -> None:
    topic = unique("cli5")
    port = str(mqtt_broker.mqtt_port)
    subprocess.run(["mosquitto_pub", "-V", "mqttv5", "-p", port, "-t", topic, "-m", "kept", "-r", "-q", "1"],
                   check=True, timeout=10)
    result = subprocess.run(["mosquitto_sub", "-V", "mqttv5", "-p", port, "-t", topic, "-C", "1", "-W", "10"],
                            capture_output=True, text=True, timeout=15)
    assert result.stdout.strip() == "kept"


@pytest.mark.alone  # bounds a time or rate: no other test's load meanwhile
def test_a_fleet_connecting_at_once_is_not_dropped_by_the_listen_queue(mqtt_broker: MqttBroker) -> None:
    # 300 clients connect back to back without waiting for their CONNACKs, as a fleet does when its broker
    # restarts. The kernel completes each handshake into the listener's queue; past listen(2)'s backlog it
    # drops the SYN and the client retries a second later (Twisted's default backlog of 50 did that here).
    sockets = []
    slowest_s = 0.0
    try:
        for number in range(300):
            client_id = f"fleet-{number}".encode()
            body = b"\x00\x04MQTT\x04\x02\x00\x00" + struct.pack(">H", len(client_id)) + client_id
            connection = socket.socket()
            started = time.monotonic()
            connection.connect(("127.0.0.1", mqtt_broker.ports["mqtt"]))
            slowest_s = max(slowest_s, time.monotonic() - started)
            connection.sendall(bytes([0x10, len(body)]) + body)
            sockets.append(connection)
        assert slowest_s < 0.9, f"a connect waited {slowest_s:.2f} s: its SYN was dropped and retried"
        for connection in sockets:
            connection.settimeout(30)
            assert connection.recv(4) == b"\x20\x02\x00\x00"  # CONNACK, accepted
    finally:
        for connection in sockets:
            connection.close()
