"""``mqtt_puback``: a QoS 1 PUBACK waits for every in-sync replica's disk (``durable``) or only for the append
(``written``). A log topic whose ``min.insync.replicas`` a single broker cannot meet tells them apart: acks=all
is refused there, a leader-only append is not. With ``written`` live subscribers get messages before their fsync
(``tests/unit/protocols/mqtt/test_delivery_timing.py`` shows when); here a subscriber that falls behind gets
every message, once, in order, in both modes."""

from __future__ import annotations

import pathlib
import queue
from collections.abc import Iterator

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from mqbroker import limits
from mqbroker.client import Admin, Consumer
from mqbroker.protocols.mqtt.packets import ConnAck, Connect, Properties, PubAck, SubAck, Subscribe, SubscriptionRequest
from tests.integration.brokerprocess import running
from tests.integration.mqtt_support import MqttBroker, RawClient


@pytest.fixture(params=["durable", "written"])
def puback_broker(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[tuple[str, MqttBroker]]:
    broker = MqttBroker(data_dir=tmp_path / "data", extra_args=[
        "--set", f"mqtt_puback={request.param}", "--set", "mqtt_mapping_rules=strict/#=strict-log"])
    for started in running(broker):
        yield request.param, started  # type: ignore[misc]


def _puback_code(broker: MqttBroker, topic: str, payload: bytes) -> int:
    codes: queue.Queue[int] = queue.Queue()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="puback-probe", protocol=mqtt.MQTTv5)
    client.on_publish = lambda client, userdata, mid, code, properties: codes.put(int(code.value))
    client.connect("127.0.0.1", broker.mqtt_port)
    client.loop_start()
    try:
        client.publish(topic, payload, qos=1)
        return codes.get(timeout=15)
    finally:
        client.disconnect()
        client.loop_stop()


def test_puback_waits_for_what_mqtt_puback_names(puback_broker: tuple[str, MqttBroker]) -> None:
    mode, broker = puback_broker
    with Admin(broker.bootstrap) as admin:  # the front end made the mapped log topic at start
        admin.alter_configs("strict-log", {"min.insync.replicas": "2"})
    code = _puback_code(broker, "strict/sensor", b"21.5")
    if mode == "durable":
        assert code >= 0x80  # acks=all is refused: one broker cannot make two in-sync replicas
        return
    assert code == 0
    stored = []
    with Consumer(broker.bootstrap, topics=["strict-log"], auto_offset_reset="earliest") as consumer:
        for _ in range(40):
            stored += consumer.poll(timeout=0.25)
            if stored:
                break
        stored += consumer.poll(timeout=0.25)  # nothing more may come
    assert [message.value for message in stored] == [b"21.5"]


def test_a_subscriber_that_falls_behind_gets_every_message_once_in_order(puback_broker: tuple[str, MqttBroker]) -> None:
    _, broker = puback_broker
    subscriber = RawClient(broker)
    subscriber.send(Connect(client_id="slow-subscriber", properties=Properties(receive_maximum=1)))
    assert isinstance(subscriber.receive(), ConnAck)
    subscriber.send(Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter="behind/#", qos=1),)))
    assert isinstance(subscriber.receive(), SubAck)
    count = limits.mqtt_pending_messages_max + 200  # one in flight, a full queue, and the rest read from the log
    publisher = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="fast-publisher", protocol=mqtt.MQTTv311)
    publisher.max_inflight_messages_set(100)
    publisher.connect("127.0.0.1", broker.mqtt_port)
    publisher.loop_start()
    try:
        infos = [publisher.publish("behind/sensor", b"%d" % number, qos=1) for number in range(count)]
        for info in infos:
            info.wait_for_publish(timeout=30)
    finally:
        publisher.disconnect()
        publisher.loop_stop()
    received = []
    for _ in range(count):
        publish = subscriber.receive(timeout_s=15)
        assert publish is not None, f"the connection closed after {len(received)} messages"
        received.append(int(publish.payload))
        subscriber.send(PubAck(packet_id=publish.packet_id))
    assert received == list(range(count))
    try:  # nothing more arrives (the window is open)
        extra = subscriber.receive(timeout_s=1.0)
    except TimeoutError:
        extra = None
    assert extra is None, f"a message arrived twice: {extra}"
    subscriber.close()


def test_an_unknown_puback_mode_refuses_to_start(tmp_path: pathlib.Path) -> None:
    broker = MqttBroker(data_dir=tmp_path / "data", extra_args=["--set", "mqtt_puback=later"])
    with pytest.raises(Exception, match="mqtt_puback"):
        broker.start(timeout_s=20)
    broker.kill()
