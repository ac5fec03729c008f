"""The Python client against a real broker: round trips per acks level, ordering, seek/position.

The tests share one broker (starting one per test cost seconds each); each writes its own topics.
"""

from __future__ import annotations

import threading
import time

import pytest

from mqbroker.client import Admin, Consumer, Message, Producer
from mqbroker.client.backoff import _JITTER_FRACTION, Backoff
from mqbroker.errors import NotEnoughReplicasError
from tests.integration.brokerprocess import BrokerProcess


def _consume(broker: BrokerProcess, topic: str, expected: int, timeout_s: float = 20.0) -> list[Message]:
    messages: list[Message] = []
    with Consumer(broker.bootstrap, topics=[topic], auto_offset_reset="earliest") as consumer:
        for _ in range(int(timeout_s / 0.5)):
            messages += consumer.poll(timeout=0.5)
            if len(messages) >= expected:
                break
    return messages


@pytest.mark.parametrize("linger_ms", [0, 5])  # 0: each record goes at once; 5: records batch up
@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_records_round_trip_for_every_acks_level(shared_broker: BrokerProcess, acks: int | str, linger_ms: int) -> None:
    topic = f"events-acks-{acks}-linger-{linger_ms}"  # the module's broker is shared: a topic per case
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=1)
    with Producer(shared_broker.bootstrap, acks=acks, linger_ms=linger_ms) as producer:
        futures = [
            producer.send(topic, value=b"value-%d" % number, key=b"key", headers=[("n", b"%d" % number)])
            for number in range(200)
        ]
        producer.flush()
        offsets = [future.result(10).offset for future in futures]
    assert offsets == ([-1] * 200 if acks == 0 else list(range(200)))
    messages = _consume(shared_broker, topic, 200)
    assert [message.value for message in messages] == [b"value-%d" % number for number in range(200)]
    assert messages[7].headers == (("n", b"7"),) and messages[7].key == b"key"


def test_a_record_keeps_an_old_timestamp_given_to_send(shared_broker: BrokerProcess) -> None:
    """The record's timestamp is not the batch's age: a days-old one must not count against delivery_timeout_ms."""
    three_days_ago_ms = int(time.time() * 1000) - 3 * 24 * 3600 * 1000
    with Producer(shared_broker.bootstrap, acks="all", delivery_timeout_ms=5_000) as producer:
        sent = producer.send("replayed", value=b"late", timestamp_ms=three_days_ago_ms).result(10)
    assert sent.timestamp == three_days_ago_ms
    [message] = _consume(shared_broker, "replayed", 1)
    assert (message.value, message.timestamp) == (b"late", three_days_ago_ms)


def test_delivery_timeout_counts_from_send_not_from_the_records_timestamp(shared_broker: BrokerProcess) -> None:
    """A retriable refusal (too few in-sync replicas) is retried for delivery_timeout_ms, old timestamp or not."""
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topics(["needs-two-replicas"], partitions=1, configs={"min.insync.replicas": "2"})
    three_days_ago_ms = int(time.time() * 1000) - 3 * 24 * 3600 * 1000
    with Producer(shared_broker.bootstrap, acks="all", delivery_timeout_ms=3_000) as producer:
        started = time.monotonic()
        future = producer.send("needs-two-replicas", value=b"late", timestamp_ms=three_days_ago_ms)
        with pytest.raises(NotEnoughReplicasError):
            future.result(10)
        # It gives up once the next retry would land past the timeout: at most one (jittered) backoff early.
        backoff_max_s = Backoff().max_ms * (1 + _JITTER_FRACTION) / 1000
        assert time.monotonic() - started >= 3.0 - backoff_max_s, "failed at once instead of retrying"


def test_order_holds_per_partition_under_concurrent_producers(shared_broker: BrokerProcess) -> None:
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topics(["orders"], partitions=3)

    def produce(name: bytes) -> None:
        with Producer(shared_broker.bootstrap, acks="all", linger_ms=1) as producer:
            for number in range(300):
                producer.send("orders", value=b"%d" % number, key=name)

    threads = [threading.Thread(target=produce, args=(b"producer-%d" % index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    messages = _consume(shared_broker, "orders", 900)
    assert len(messages) == 900
    per_key: dict[bytes | None, list[int]] = {}
    for message in messages:
        per_key.setdefault(message.key, []).append(int(message.value or b"-1"))
    assert all(values == list(range(300)) for values in per_key.values())


def test_seek_and_position_move_the_read_point(shared_broker: BrokerProcess) -> None:
    with Producer(shared_broker.bootstrap) as producer:
        for number in range(50):
            producer.send("log", value=b"%d" % number, partition=0)
    with Consumer(shared_broker.bootstrap, auto_offset_reset="latest") as consumer:
        consumer.assign([("log", 0)])
        assert consumer.position(("log", 0)) == 50
        consumer.seek(("log", 0), 45)
        messages = consumer.poll(timeout=5)
        assert [message.offset for message in messages] == [45, 46, 47, 48, 49]
        consumer.seek_to_beginning()
        assert consumer.position(("log", 0)) == 0
        consumer.seek_to_timestamp(("log", 0), 0)
        assert consumer.position(("log", 0)) == 0


def test_send_many_writes_every_value_in_order_and_counts_the_outcomes(shared_broker: BrokerProcess) -> None:
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topics(["bulk"], partitions=1)
        admin.create_topics(["bulk-spread"], partitions=3)
        admin.create_topics(["bulk-small"], partitions=1, configs={"max.message.bytes": "2000"})
    values = [b"value-%05d" % number for number in range(20_000)]
    with Producer(shared_broker.bootstrap, acks="all", batch_size=16_384) as producer:
        in_order = producer.send_many("bulk", values[:10_000], partition=0)
        producer.send("bulk", b"between", partition=0)
        after = producer.send_many("bulk", values[10_000:], partition=0)
        spread = producer.send_many("bulk-spread", values)  # the sticky partition moves as batches fill
        refused = producer.send_many("bulk-small", [b"x" * 3_000] * 5)
        producer.flush()
        assert in_order.counts(10) == (10_000, 0) and after.counts(10) == (10_000, 0)
        assert [metadata.offset for metadata in in_order.result(10)] == list(range(10_000))
        assert after.result(10)[0].offset == 10_001
        assert spread.counts(10) == (20_000, 0)
        assert {metadata.partition for metadata in spread.result(10)} == {0, 1, 2}
        assert refused.counts(10) == (0, 5) and refused.exception(10) is not None
        with pytest.raises(Exception, match="(?i)too large|max.message.bytes"):
            refused.result(10)
    messages = _consume(shared_broker, "bulk", 20_001)
    assert [message.value for message in messages] == values[:10_000] + [b"between"] + values[10_000:]
    assert {message.key for message in messages} == {None}


def test_a_send_refused_for_its_value_leaves_the_producer_working(shared_broker: BrokerProcess) -> None:
    """Before, the refused record's new batch stayed open, empty: the I/O thread, woken by a send to another
    partition, died building it, and no record was sent again."""
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topics(["refused-value", "after-refused-value"], partitions=1)
    with Producer(shared_broker.bootstrap, acks=1, linger_ms=0) as producer:
        with pytest.raises(TypeError):
            producer.send("refused-value", value="text, not bytes")  # type: ignore[arg-type]
        assert producer.send("after-refused-value", value=b"bytes").result(10).offset == 0
        assert producer.send("refused-value", value=b"bytes").result(10).offset == 0
