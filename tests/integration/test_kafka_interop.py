"""One log, every protocol: what a Kafka client writes, native, MQTT and AMQP consumers read, and the reverse;
keys, values, headers and timestamps survive, compressed batches included."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from mqbroker.client import Consumer, Producer
from tests.integration.amqp_support import AmqpBroker, running_broker
from tests.integration.kafka_support import consume_with_confluent, kafka_bootstrap, unique
from tests.integration.mqtt_support import Client

MQTT_LOG_TOPIC = "mqtt.messages"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AmqpBroker]:
    """A broker with every front end (the AMQP helper's, which also serves MQTT, native and Kafka)."""
    for process in running_broker(tmp_path_factory.mktemp("kafka-interop") / "data"):
        yield process


def _kafka_produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], compression: str = "zstd") -> None:
    from confluent_kafka import Producer as KafkaProducer

    producer = KafkaProducer({"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 5})
    for key, value in records:
        producer.produce(topic, key=key, value=value, headers=[("origin", b"kafka")], timestamp=1_700_000_000_123)
    assert producer.flush(20) == 0


def test_a_native_consumer_reads_what_a_kafka_producer_wrote(broker: AmqpBroker) -> None:
    topic = unique("to-native")
    _kafka_produce(kafka_bootstrap(broker), topic, [(b"k%d" % i, b"v%d" % i) for i in range(50)], "lz4")
    consumer = Consumer(broker.bootstrap, group_id=None, topics=[topic], auto_offset_reset="earliest")
    read = []
    deadline = time.monotonic() + 20
    while len(read) < 50 and time.monotonic() < deadline:
        read.extend(consumer.poll(timeout=0.5))
    consumer.close()
    assert [(m.key, m.value, m.offset) for m in read] == [(b"k%d" % i, b"v%d" % i, i) for i in range(50)]
    assert list(read[0].headers) == [("origin", b"kafka")]
    assert read[0].timestamp == 1_700_000_000_123


def test_a_kafka_consumer_reads_what_a_native_producer_wrote(broker: AmqpBroker) -> None:
    topic = unique("from-native")
    with Producer(broker.bootstrap, acks="all", compression="gzip") as producer:
        for i in range(30):
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("origin", b"native")])
        producer.flush()
    read = consume_with_confluent(kafka_bootstrap(broker), topic, 30)
    assert [(m.key(), m.value(), m.headers()) for m in read] == [
        (b"k%d" % i, b"v%d" % i, [("origin", b"native")]) for i in range(30)]


def test_mqtt_and_kafka_clients_share_the_mqtt_log_topic(broker: AmqpBroker) -> None:
    """MQTT publishes land in the MQTT log topic keyed by MQTT topic; Kafka records written there reach MQTT."""
    device_topic = f"devices/{unique('d')}/temperature"
    subscriber = Client(SimpleNamespace(mqtt_port=broker.ports["mqtt"]))
    subscriber.subscribe(device_topic, qos=1)
    _kafka_produce(kafka_bootstrap(broker), MQTT_LOG_TOPIC, [(device_topic.encode(), b"21.5")])
    [received] = subscriber.receive(1)
    assert (received.topic, received.payload) == (device_topic, b"21.5")
    publisher = Client(SimpleNamespace(mqtt_port=broker.ports["mqtt"]))
    publisher.publish(device_topic, b"22.0", qos=1)
    from confluent_kafka import Consumer as KafkaConsumer, TopicPartition

    consumer = KafkaConsumer({"bootstrap.servers": kafka_bootstrap(broker), "group.id": unique("mqtt-reader")})
    consumer.assign([TopicPartition(MQTT_LOG_TOPIC, 0, 0)])
    found = []
    deadline = time.monotonic() + 20
    while not found and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None and message.value() == b"22.0":
            found.append(message)
    consumer.close()
    assert found and found[0].key() == device_topic.encode()
    subscriber.disconnect()
    publisher.disconnect()


def test_records_a_kafka_client_writes_reach_amqp_queues_of_a_source_exchange(broker: AmqpBroker) -> None:
    topic = unique("orders")
    _kafka_produce(kafka_bootstrap(broker), topic, [(b"order.eu.0", b"seed")])  # creates the topic
    connection = broker.connect()
    channel = connection.channel()
    exchange, queue = unique("orders-x"), unique("eu-orders")
    channel.exchange_declare(exchange, "topic", durable=True, arguments={"x-source-topic": topic})
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, "order.eu.*")
    _kafka_produce(kafka_bootstrap(broker), topic, [(b"order.eu.1", b"eu 1"), (b"order.us.1", b"us 1")], "snappy")
    bodies = []
    for method, properties, body in channel.consume(queue, inactivity_timeout=15):
        if method is None:
            break
        channel.basic_ack(method.delivery_tag)
        bodies.append((body, properties.headers))
        break
    connection.close()
    assert bodies == [(b"eu 1", {"origin": "kafka"})]

