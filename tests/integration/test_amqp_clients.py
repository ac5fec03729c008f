"""Other real clients: amqp-tools (librabbitmq), kombu with publisher confirms, aio-pika and pika's
SelectConnection."""

from __future__ import annotations

import asyncio
import subprocess

import aio_pika
import aiormq
import kombu
import pika

from tests.integration.amqp_support import AmqpBroker, amqp_broker  # noqa: F401 (fixture)


def test_amqp_tools_declare_publish_consume(amqp_broker: AmqpBroker) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{amqp_broker.ports['amqp']}"
    declared = subprocess.run(["amqp-declare-queue", "--url", url, "-d", "-q", "tools-queue"],
                              capture_output=True, text=True, timeout=20, check=True)
    assert declared.stdout.strip() == "tools-queue"
    subprocess.run(["amqp-publish", "--url", url, "-r", "tools-queue", "-b", "from amqp-tools"],
                   timeout=20, check=True)
    consumed = subprocess.run(["amqp-consume", "--url", url, "-q", "tools-queue", "-c", "1", "cat"],
                              capture_output=True, timeout=20, check=True)
    assert consumed.stdout == b"from amqp-tools"


def test_kombu_with_confirm_publish(amqp_broker: AmqpBroker) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{amqp_broker.ports['amqp']}//"
    exchange = kombu.Exchange("kombu-tasks", type="direct", durable=True)
    queue = kombu.Queue("kombu-queue", exchange, routing_key="task", durable=True)
    with kombu.Connection(url, transport_options={"confirm_publish": True}) as connection:
        producer = connection.Producer()
        for index in range(5):
            producer.publish({"n": index}, exchange=exchange, routing_key="task", declare=[queue], serializer="json")
        received = []
        with connection.Consumer(queue, callbacks=[lambda body, message: (received.append(body["n"]), message.ack())]):
            while len(received) < 5:
                connection.drain_events(timeout=5)
    assert received == [0, 1, 2, 3, 4]


def test_aio_pika_declare_bind_publish_with_confirms_consume_and_ack(amqp_broker: AmqpBroker) -> None:
    url = f"amqp://guest:guest@127.0.0.1:{amqp_broker.ports['amqp']}/"

    async def scenario() -> tuple[list[tuple[str, bytes, dict[str, object]]], int]:
        connection = await aio_pika.connect_robust(url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.declare_exchange("aio-events", aio_pika.ExchangeType.TOPIC, durable=True)
            queue = await channel.declare_queue("aio-queue", durable=True)
            await queue.bind(exchange, routing_key="event.#")
            for index in range(10):
                # With publisher_confirms, publish returns once the broker acked the message.
                confirmation = await exchange.publish(
                    aio_pika.Message(b"event %d" % index, headers={"n": index},
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=f"event.{index % 3}")
                assert isinstance(confirmation, aiormq.spec.Basic.Ack)
            await channel.set_qos(prefetch_count=4)
            received = []
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():  # acks on leaving the block
                        received.append((message.routing_key or "", message.body, dict(message.headers)))
                    if len(received) == 10:
                        break
            left = await channel.declare_queue("aio-queue", passive=True)
            return received, left.declaration_result.message_count

    received, left = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    assert [body for _, body, _ in received] == [b"event %d" % index for index in range(10)]
    assert received[4] == ("event.1", b"event 4", {"n": 4})
    assert left == 0


def test_pika_select_connection_publishes_with_confirms_and_consumes(amqp_broker: AmqpBroker) -> None:
    """The callback-driven adapter: every publish confirmed (acks may be multiple), every message consumed."""
    count = 50
    confirmed: set[int] = set()
    received: list[bytes] = []
    failures: list[str] = []

    def on_open(connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=on_channel)

    def on_channel(channel: pika.channel.Channel) -> None:
        channel.queue_declare("select-queue", durable=True, callback=lambda _: channel.confirm_delivery(
            on_confirm, callback=lambda _: start(channel)))

    def start(channel: pika.channel.Channel) -> None:
        channel.basic_qos(prefetch_count=10)
        channel.basic_consume("select-queue", on_message)
        for index in range(count):
            channel.basic_publish("", "select-queue", b"select %d" % index,
                                  pika.BasicProperties(delivery_mode=2))

    def on_confirm(frame: pika.frame.Method) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            failures.append(f"nack {method.delivery_tag}")
        tags = range(1, method.delivery_tag + 1) if method.multiple else [method.delivery_tag]
        confirmed.update(tags)
        finish_if_done()

    def on_message(channel: pika.channel.Channel, deliver: pika.spec.Basic.Deliver,
                   properties: pika.BasicProperties, body: bytes) -> None:
        received.append(body)
        channel.basic_ack(deliver.delivery_tag)
        finish_if_done()

    def finish_if_done() -> None:
        if len(confirmed) == count and len(received) == count:
            connection.close()

    def give_up() -> None:
        failures.append(f"timed out: {len(confirmed)} confirmed, {len(received)} received")
        connection.close()

    connection = pika.SelectConnection(amqp_broker.parameters(), on_open_callback=on_open,
                                       on_close_callback=lambda *_: connection.ioloop.stop())
    connection.ioloop.call_later(30, give_up)
    connection.ioloop.start()
    assert not failures
    assert confirmed == set(range(1, count + 1))
    assert received == [b"select %d" % index for index in range(count)]
