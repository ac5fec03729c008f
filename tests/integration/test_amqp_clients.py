"""Other real clients: amqp-tools (librabbitmq) and kombu with publisher confirms."""

from __future__ import annotations

import subprocess

import kombu

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
