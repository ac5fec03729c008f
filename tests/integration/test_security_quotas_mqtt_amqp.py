"""Byte-rate quotas on MQTT (paho) and AMQP (pika): fast publishers and consumers are throttled to within
20% of their client-id quota, and every message arrives."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import paho.mqtt.client as mqtt
import pika
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.integration.amqp_support import AmqpBroker
from tests.integration.mqtt_support import Client, MqttBroker

#: Every test bounds a rate (within 20 % of a quota): no other test's load meanwhile.
pytestmark = pytest.mark.alone

QUOTA_BYTES_PER_SECOND = 200_000
PAYLOAD = 1000
#: Clients named "bulk-..." have no quota: they fill topics and queues for the throttled consumers.
MQTT_SUBSCRIBER_QUOTA_BYTES_PER_SECOND = 50_000
OVERRIDES = ("client bulk-pub produce=0 fetch=0,client bulk-sub produce=0 fetch=0,"
             f"client quota-mqtt-sub fetch={MQTT_SUBSCRIBER_QUOTA_BYTES_PER_SECOND}")


class Broker(MqttBroker, AmqpBroker):
    """One broker process, with the MQTT and AMQP helpers."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker where every client id may produce and fetch 200 KB/s (except the bulk ones)."""
    process = Broker(data_dir=tmp_path_factory.mktemp("quotas") / "data", extra_args=[
        "--set", f"quotas.client_produce_bytes_per_second={QUOTA_BYTES_PER_SECOND}",
        "--set", f"quotas.client_fetch_bytes_per_second={QUOTA_BYTES_PER_SECOND}",
        "--set", f"quotas.overrides={OVERRIDES}",
    ])
    process.start()
    yield process
    process.kill()


def _within_quota(byte_count: int, elapsed_s: float, quota: int = QUOTA_BYTES_PER_SECOND) -> None:
    rate = byte_count / elapsed_s
    assert abs(rate - quota) / quota <= 0.20, rate


def _payload(index: int, size: int = PAYLOAD) -> bytes:
    return b"%08d" % index + b"x" * (size - 8)


def _indexes(payloads: list[bytes]) -> list[int]:
    return sorted(int(payload[:8]) for payload in payloads)


def test_a_fast_paho_publisher_is_throttled_to_its_quota_and_nothing_is_lost(broker: Broker) -> None:
    subscriber = Client(broker, "bulk-sub")
    subscriber.subscribe("quota/mqtt/produce", qos=1)
    publisher = Client(broker, "quota-mqtt-pub")
    acknowledged = threading.Semaphore(0)
    publisher.paho.on_publish = lambda client, userdata, mid, code, properties: acknowledged.release()
    outstanding = 0
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < 8.0:  # as fast as the broker reads, with at most 100 unacknowledged
        if outstanding >= 100:
            assert acknowledged.acquire(timeout=15)
            outstanding -= 1
            continue
        publisher.paho.publish("quota/mqtt/produce", _payload(sent), qos=1)
        sent += 1
        outstanding += 1
    for _ in range(outstanding):
        assert acknowledged.acquire(timeout=15)
    _within_quota(sent * PAYLOAD, time.monotonic() - started)
    received = subscriber.receive(sent, timeout_s=30)
    assert _indexes([message.payload for message in received]) == list(range(sent))
    publisher.disconnect()
    subscriber.disconnect()


def _persistent_subscriber(broker: Broker) -> Client:
    """An MQTT 5 subscriber with a stored session and 20 messages in flight at most (the throttle's grain)."""
    properties = Properties(PacketTypes.CONNECT)
    properties.ReceiveMaximum = 20
    return Client(broker, "quota-mqtt-sub", version=mqtt.MQTTv5, clean=False, session_expiry_s=300,
                  connect_properties=properties)


def test_a_fast_paho_subscriber_gets_its_backlog_at_its_quota_and_nothing_is_lost(broker: Broker) -> None:
    count, size = 1300, 300
    subscriber = _persistent_subscriber(broker)
    subscriber.subscribe("quota/mqtt/fetch", qos=1)
    subscriber.disconnect()
    publisher = Client(broker, "bulk-pub")
    infos = [publisher.paho.publish("quota/mqtt/fetch", _payload(index, size), qos=1) for index in range(count)]
    for info in infos:
        info.wait_for_publish(timeout=30)
    publisher.disconnect()
    started = time.monotonic()
    subscriber = _persistent_subscriber(broker)
    received = subscriber.receive(count, timeout_s=40)
    elapsed_s = time.monotonic() - started
    assert _indexes([message.payload for message in received]) == list(range(count))
    _within_quota(count * size, elapsed_s, MQTT_SUBSCRIBER_QUOTA_BYTES_PER_SECOND)
    subscriber.disconnect()


def _connect(broker: AmqpBroker, name: str) -> pika.BlockingConnection:
    return broker.connect(client_properties={"connection_name": name})


def test_a_fast_pika_publisher_is_throttled_to_its_quota_and_nothing_is_lost(broker: Broker) -> None:
    connection = _connect(broker, "quota-amqp-pub")
    channel = connection.channel()
    channel.queue_declare("quota-produce", durable=True)
    sent = 0
    started = time.monotonic()
    # As fast as the broker reads (a confirm per publish would cap the rate at one round trip per
    # message, below the quota on a loaded machine); the last publish is confirmed, and a confirm
    # comes only once everything published before it on the channel is stored.
    while time.monotonic() - started < 8.0:
        channel.basic_publish("", "quota-produce", _payload(sent))
        sent += 1
    channel.confirm_delivery()
    channel.basic_publish("", "quota-produce", _payload(sent))
    sent += 1
    _within_quota(sent * PAYLOAD, time.monotonic() - started)
    connection.close()
    reader = _connect(broker, "bulk-sub")
    channel = reader.channel()
    bodies = []
    for _, _, body in channel.consume("quota-produce", auto_ack=True, inactivity_timeout=5):
        if body is None:
            break
        bodies.append(body)
        if len(bodies) == sent:
            break
    reader.close()
    assert _indexes(bodies) == list(range(sent))


def test_a_fast_pika_consumer_is_throttled_to_its_quota_and_nothing_is_lost(broker: Broker) -> None:
    count = 2000
    writer = _connect(broker, "bulk-pub")
    channel = writer.channel()
    channel.queue_declare("quota-fetch", durable=True)
    channel.confirm_delivery()
    for index in range(count):
        channel.basic_publish("", "quota-fetch", _payload(index))
    writer.close()
    connection = _connect(broker, "quota-amqp-sub")
    channel = connection.channel()
    channel.basic_qos(prefetch_count=200)
    bodies = []
    started = time.monotonic()
    for method, _, body in channel.consume("quota-fetch", inactivity_timeout=15):
        if body is None:
            break
        bodies.append(body)
        channel.basic_ack(method.delivery_tag)
        if len(bodies) == count:
            break
    elapsed_s = time.monotonic() - started
    connection.close()
    assert _indexes(bodies) == list(range(count))
    _within_quota(count * PAYLOAD, elapsed_s)
