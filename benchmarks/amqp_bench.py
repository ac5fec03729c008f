"""AMQP benchmark with pika: confirmed publish, prefetched consume with multiple acks, e2e latency.

Usage: ``python benchmarks/amqp_bench.py --port 5672 [--messages 20000]`` against a running
broker (mqbroker or RabbitMQ: same client, same settings). 100-byte bodies, a durable queue.
"""

from __future__ import annotations

import argparse
import struct
import time
import uuid

import pika

BODY_BYTES = 100
CONFIRM_WINDOW = 1_000
PREFETCH = 1_000
#: RabbitMQ 3.10 on this machine, from the issue (used when no local RabbitMQ runs).
RABBITMQ_REFERENCE = {"publish_confirms_msgs_per_s": 20_000, "latency_p99_ms": 3.2}


def publish_with_confirms(connection: pika.SelectConnection | None, port: int, queue: str, count: int) -> float:
    """Publish ``count`` messages keeping ``CONFIRM_WINDOW`` unconfirmed; return messages/s."""
    parameters = pika.ConnectionParameters("127.0.0.1", port)
    state = {"sent": 0, "confirmed": 0, "started": 0.0, "elapsed": 0.0}
    body = b"x" * BODY_BYTES

    def on_open(connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=on_channel)

    def on_channel(channel: pika.channel.Channel) -> None:
        channel.queue_declare(queue, durable=True, callback=lambda _: channel.confirm_delivery(
            lambda frame: on_confirm(channel, frame), callback=lambda _: start(channel)))

    def start(channel: pika.channel.Channel) -> None:
        state["started"] = time.perf_counter()
        fill(channel)

    def fill(channel: pika.channel.Channel) -> None:
        while state["sent"] < count and state["sent"] - state["confirmed"] < CONFIRM_WINDOW:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
            state["sent"] += 1

    def on_confirm(channel: pika.channel.Channel, frame: pika.frame.Method) -> None:
        method = frame.method
        assert isinstance(method, pika.spec.Basic.Ack), method
        state["confirmed"] = method.delivery_tag if method.multiple else state["confirmed"] + 1
        if state["confirmed"] >= count:
            state["elapsed"] = time.perf_counter() - state["started"]
            channel.connection.close()
        else:
            fill(channel)

    select = pika.SelectConnection(parameters, on_open_callback=on_open)
    select.ioloop.call_later(0, lambda: None)
    select.add_on_close_callback(lambda *_: select.ioloop.stop())
    select.ioloop.start()
    return count / state["elapsed"]


def consume(port: int, queue: str, count: int) -> float:
    """Consume ``count`` messages with prefetch ``PREFETCH``, acking every 100 with multiple; return messages/s."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=PREFETCH)
    received = 0
    started = time.perf_counter()
    for method, _, _ in channel.consume(queue, inactivity_timeout=10):
        assert method is not None, f"only {received} of {count} messages arrived"
        received += 1
        if received % 100 == 0 or received == count:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if received == count:
            break
    elapsed = time.perf_counter() - started
    channel.cancel()
    connection.close()
    return count / elapsed


def latency(port: int, queue: str, rate_per_s: int, seconds: float) -> list[float]:
    """End-to-end latencies (ms) of messages published at ``rate_per_s`` and consumed with auto-ack off."""
    publisher = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    publish_channel, consume_channel = publisher.channel(), consumer.channel()
    publish_channel.queue_declare(queue, durable=True)
    consume_channel.basic_qos(prefetch_count=PREFETCH)
    latencies: list[float] = []

    def on_message(channel: pika.channel.Channel, method: pika.spec.Basic.Deliver, _: object, body: bytes) -> None:
        latencies.append((time.perf_counter() - struct.unpack_from(">d", body)[0]) * 1000)
        channel.basic_ack(method.delivery_tag)

    consume_channel.basic_consume(queue, on_message)
    padding = b"x" * (BODY_BYTES - 8)
    total = int(rate_per_s * seconds)
    started = time.perf_counter()
    for index in range(total):
        due = started + index / rate_per_s
        while time.perf_counter() < due:
            consumer.process_data_events(time_limit=0)
        publish_channel.basic_publish("", queue, struct.pack(">d", time.perf_counter()) + padding)
        if index % 50 == 0:
            publisher.process_data_events(time_limit=0)
    deadline = time.perf_counter() + 10
    while len(latencies) < total and time.perf_counter() < deadline:
        consumer.process_data_events(time_limit=0.1)
    publisher.close()
    consumer.close()
    return sorted(latencies)


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The value below which ``fraction`` of the values lie."""
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def main() -> None:
    """Run the three measurements and print them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=5672)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--latency-rate", type=int, default=5_000)
    parser.add_argument("--latency-seconds", type=float, default=4.0)
    options = parser.parse_args()
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    publish_rate = publish_with_confirms(None, options.port, queue, options.messages)
    print(f"publish with confirms (window {CONFIRM_WINDOW}): {publish_rate:,.0f} msg/s, "
          f"{publish_rate * BODY_BYTES / 1e6:.2f} MB/s")
    consume_rate = consume(options.port, queue, options.messages)
    print(f"consume (prefetch {PREFETCH}, multiple acks): {consume_rate:,.0f} msg/s, "
          f"{consume_rate * BODY_BYTES / 1e6:.2f} MB/s")
    latencies = latency(options.port, f"{queue}-latency", options.latency_rate, options.latency_seconds)
    print(f"end-to-end latency at {options.latency_rate} msg/s: {len(latencies)} messages, "
          f"p50 {percentile(latencies, 0.5):.2f} ms, p99 {percentile(latencies, 0.99):.2f} ms")
    print(f"reference (RabbitMQ 3.10, this machine, from the issue): {RABBITMQ_REFERENCE}")


if __name__ == "__main__":
    main()
