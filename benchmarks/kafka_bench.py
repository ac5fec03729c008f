"""Kafka clients against Apache Kafka and mqbroker in one run: produce, consume, end-to-end latency, broker CPU.

Run ``python benchmarks/kafka_bench.py [--clients confluent,kafka-python] [--messages N] [--e2e-seconds S]
[--json]`` after ``tests/kafka_reference/kafka_reference.sh install``.

For each client library (confluent-kafka, then kafka-python) the same workloads run against four brokers,
one at a time (the others stopped), alternating Kafka and mqbroker at each durability setting:

* ``kafka``: Apache Kafka 4.1 with its defaults (the OS flushes; an acknowledged record may be lost
  if every replica's machine fails before it does);
* ``mqbroker-interval``: mqbroker with ``log.flush.policy=interval`` (the same bargain);
* ``kafka-fsync``: Apache Kafka with ``flush.messages=1`` (an fsync per append);
* ``mqbroker``: mqbroker's default ``sync`` policy (fsync, shared by concurrent appends, before acking).

Workloads per broker: produce ``--messages`` records of 100 B and of 1 KiB at acks=1 and acks=all
(acknowledged records/s and MB/s: a send the broker did not acknowledge does not count, and is
reported as failed), consume them all (records/s, MB/s), and end-to-end latency at 5,000 records/s
for ``--e2e-seconds`` after a warm-up pass on the same topic (acks=all, 100 B; p50 and p99 from send to receipt). The broker's CPU time per
acknowledged record comes from /proc over the produce workloads. One partition, replication factor
1, both brokers on loopback, the client in this process. Progress goes to stderr; the figures and
then mqbroker's ratios to Kafka at equal durability (interval vs default, sync vs ``flush.messages=1``)
go to stdout as tables (or one JSON object with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cputime import process_tree_cpu_s

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for tests.integration

from tests.integration.kafka_support import (  # noqa: E402
    kafka_bootstrap,
    running_apache_kafka,
    start_kafka_broker,
)

BROKERS = ("kafka", "mqbroker-interval", "kafka-fsync", "mqbroker")
SIZES = (100, 1024)
E2E_RATE = 5000
#: Seconds of e2e traffic thrown away before the measured pass (see ``run_broker``).
E2E_WARM_UP_S = 15.0


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def broker(name: str, work: Path) -> Iterator[tuple[str, int]]:
    """One broker variant, started fresh; yields (bootstrap, pid) and stops it afterwards."""
    directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work))
    if name.startswith("kafka"):
        settings = ("flush.messages=1",) if name == "kafka-fsync" else ()
        for kafka in running_apache_kafka(directory, *settings):
            yield kafka.bootstrap, kafka.pid()
    else:
        extra = ("--set", "log.flush.policy=interval") if name == "mqbroker-interval" else ()
        for process in start_kafka_broker(directory, *extra):
            assert process.process is not None
            yield kafka_bootstrap(process), process.process.pid


# -- the clients -----------------------------------------------------------------------------------------


class ConfluentClient:
    """librdkafka through confluent-kafka."""

    name = "confluent-kafka"

    def produce(self, bootstrap: str, topic: str, count: int, size: int, acks: str) -> int:
        """Send ``count`` records; returns how many the broker acknowledged (delivery reports without an error)."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                             "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
        acked = [0]

        def delivered(error: Any, message: Any) -> None:
            if error is None:
                acked[0] += 1

        value = b"x" * size
        for _ in range(count):
            while True:
                try:
                    producer.produce(topic, value, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
        assert producer.flush(120) == 0
        return acked[0]

    def consume(self, bootstrap: str, topic: str, count: int) -> None:
        from confluent_kafka import Consumer, TopicPartition

        # fetch.queue.backoff.ms: librdkafka stops fetching for that long (1 s by default) once its local queue
        # holds queued.min.messages (100,000); whether a run hits it is a race, and one hit cost ~950 ms of a
        # 200,000-record read (7x swings between runs, whichever broker). Both brokers get the same setting.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time_ns()}",
                             "enable.auto.commit": False, "fetch.max.bytes": 50_000_000, "fetch.queue.backoff.ms": 1})
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = 0
        while read < count:
            read += len(consumer.consume(10_000, 1.0))
        consumer.close()

    def e2e(self, bootstrap: str, topic: str, seconds: float) -> list[float]:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
        return _measure_e2e(self.name, bootstrap, topic, seconds,
                            lambda payload: (producer.produce(topic, payload), producer.poll(0)),
                            lambda: producer.flush(10))

    @staticmethod
    def receive_forever(bootstrap: str, topic: str, report: Any) -> None:
        """The e2e consumer (in a process of its own): stamp every record's arrival."""
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{time.time_ns()}",
                             "fetch.wait.max.ms": 100, "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, OFFSET_END)])  # only what is sent from now on
        while True:
            messages = consumer.consume(1000, 0.005)  # returns at 1,000 or 5 ms: a record is stamped at most 5 ms late
            now = time.time_ns()
            report([now - int(m.value()[:20]) for m in messages if m.error() is None and m.value()[:1].isdigit()])


class KafkaPythonClient:
    """kafka-python (pure Python)."""

    name = "kafka-python"

    def produce(self, bootstrap: str, topic: str, count: int, size: int, acks: str) -> int:
        """Send ``count`` records; returns how many the broker acknowledged (futures that succeeded)."""
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1 if acks == "1" else "all", linger_ms=5,
                                 batch_size=1_000_000)
        value = b"x" * size
        futures = [producer.send(topic, value) for _ in range(count)]
        producer.flush(120)
        producer.close()
        return sum(1 for future in futures if future.succeeded())

    def consume(self, bootstrap: str, topic: str, count: int) -> None:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                                 fetch_max_bytes=50_000_000, max_partition_fetch_bytes=10_000_000)
        consumer.assign([TopicPartition(topic, 0)])
        read = 0
        while read < count:
            read += sum(len(records) for records in consumer.poll(timeout_ms=1000, max_records=100_000).values())
        consumer.close()

    def e2e(self, bootstrap: str, topic: str, seconds: float) -> list[float]:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        return _measure_e2e(self.name, bootstrap, topic, seconds, lambda payload: producer.send(topic, payload),
                            lambda: (producer.flush(10), producer.close()))

    @staticmethod
    def receive_forever(bootstrap: str, topic: str, report: Any) -> None:
        """The e2e consumer (in a process of its own): stamp every record's arrival."""
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=100)
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_end()  # only what is sent from now on
        while True:
            records = [r.value for batch in consumer.poll(timeout_ms=50).values() for r in batch]
            now = time.time_ns()
            report([now - int(value[:20]) for value in records if value[:1].isdigit()])


def _receiver(client_name: str, bootstrap: str, topic: str, latencies: Any) -> None:
    client = {ConfluentClient.name: ConfluentClient, KafkaPythonClient.name: KafkaPythonClient}[client_name]
    client.receive_forever(bootstrap, topic, lambda found: latencies.put(found))


def _measure_e2e(client_name: str, bootstrap: str, topic: str, seconds: float, send: Callable[[bytes], Any],
                 close: Callable[[], Any]) -> list[float]:
    """Send 100 B payloads stamped with the wall-clock send time at ``E2E_RATE``/s; a consumer in another
    process (so that neither waits for the other's interpreter lock) stamps their arrival. Milliseconds."""
    found: multiprocessing.Queue[list[int]] = multiprocessing.Queue()
    receiver = multiprocessing.Process(target=_receiver, args=(client_name, bootstrap, topic, found), daemon=True)
    receiver.start()
    time.sleep(2.0)  # the consumer connects and starts fetching
    started = time.perf_counter()
    sent = 0
    while time.perf_counter() - started < seconds:
        due = started + sent / E2E_RATE
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send(b"%020d" % time.time_ns() + b"p" * 80)
        sent += 1
    close()
    time.sleep(1.0)  # the last records arrive
    receiver.terminate()
    latencies: list[float] = []
    while not found.empty():
        latencies.extend(nanoseconds / 1e6 for nanoseconds in found.get())
    return latencies[len(latencies) // 5:]  # the first fifth warms the connections up


# -- one broker, every workload ----------------------------------------------------------------------------


def run_broker(client: Any, name: str, work: Path, messages: int, e2e_seconds: float) -> dict[str, Any]:
    """Every workload against one fresh broker."""
    figures: dict[str, Any] = {}
    with broker(name, work) as (bootstrap, pid):
        produce_cpu_s = 0.0
        produced = 0
        for size in SIZES:
            for acks in ("1", "all"):
                topic = f"bench-{size}-{acks}-{time.time_ns()}"
                # Creates the topic and warms up (a fresh JVM's JIT needs far more than a few records).
                client.produce(bootstrap, topic, max(100, messages // 5), size, acks)
                cpu_before, started = process_tree_cpu_s(pid), time.perf_counter()
                acked = client.produce(bootstrap, topic, messages, size, acks)
                elapsed = time.perf_counter() - started
                produce_cpu_s += process_tree_cpu_s(pid) - cpu_before
                produced += acked
                # Only acknowledged records count: a failed send is not throughput.
                figures[f"produce_{size}B_acks{acks}_msgs_per_s"] = round(acked / elapsed)
                figures[f"produce_{size}B_acks{acks}_MB_per_s"] = round(acked * size / elapsed / 1e6, 1)
                if acked < messages:
                    figures[f"produce_{size}B_acks{acks}_failed"] = messages - acked
                if size == 100 and acks == "1":
                    started = time.perf_counter()
                    stored = messages + max(100, messages // 5)
                    client.consume(bootstrap, topic, stored)
                    consumed_s = time.perf_counter() - started
                    figures["consume_100B_msgs_per_s"] = round(stored / consumed_s)
                    figures["consume_100B_MB_per_s"] = round(stored * 100 / consumed_s / 1e6, 1)
                progress(f"  {name} {size} B acks={acks}: {figures[f'produce_{size}B_acks{acks}_msgs_per_s']} msg/s")
        figures["broker_cpu_us_per_produced_msg"] = round(produce_cpu_s / produced * 1e6, 1) if produced else None
        topic = f"e2e-{time.time_ns()}"
        client.produce(bootstrap, topic, 10, 100, "all")
        # A first pass on the new topic is thrown away, so neither broker's first seconds on a topic count: a
        # fresh Kafka's e2e path needs about 15 s of this traffic to warm up (p50 1.6 s, 0.4 s, 0.3 s, then 4 ms
        # in 4 s passes), its throughput workloads do not warm it. The measured pass starts at the log's end.
        client.e2e(bootstrap, topic, E2E_WARM_UP_S)
        latencies = sorted(client.e2e(bootstrap, topic, e2e_seconds))
        figures["e2e_p50_ms"] = round(latencies[len(latencies) // 2], 2) if latencies else None
        figures["e2e_p99_ms"] = round(latencies[int(len(latencies) * 0.99)], 2) if latencies else None
        figures["e2e_received"] = len(latencies)
        progress(f"  {name} e2e p50 {figures['e2e_p50_ms']} ms, p99 {figures['e2e_p99_ms']} ms")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="confluent,kafka-python")
    parser.add_argument("--messages", type=int, default=200_000, help="records per produce workload (confluent)")
    parser.add_argument("--python-messages", type=int, default=50_000, help="records per produce workload (kafka-python)")
    parser.add_argument("--e2e-seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    clients = {"confluent": (ConfluentClient(), options.messages),
               "kafka-python": (KafkaPythonClient(), options.python_messages)}
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kafka-bench-") as work:
        for key in options.clients.split(","):
            client, messages = clients[key]
            progress(f"{client.name}:")
            for name in BROKERS:
                results[f"{client.name}/{name}"] = run_broker(client, name, Path(work), messages, options.e2e_seconds)
    ratios = _ratios(results)
    if options.json:
        print(json.dumps({"figures": results, "ratios_mqbroker_over_kafka": ratios}, indent=2))
        return 0
    _table(results)
    print()
    _table(ratios)
    return 0


#: mqbroker variant -> the Kafka variant at the same durability (the OS flushes; or an fsync before the ack).
PAIRS = {"mqbroker-interval": "kafka", "mqbroker": "kafka-fsync"}


def _ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """mqbroker's figure over Kafka's at equal durability, per client and metric (above 1: mqbroker higher)."""
    ratios: dict[str, dict[str, Any]] = {}
    for key, figures in results.items():
        client, name = key.split("/")
        if name not in PAIRS:
            continue
        reference = results.get(f"{client}/{PAIRS[name]}", {})
        ratios[f"{client}/{name} vs {PAIRS[name]}"] = {
            metric: round(value / reference[metric], 2) for metric, value in figures.items()
            if isinstance(value, (int, float)) and isinstance(reference.get(metric), (int, float)) and reference[metric]
        }
    return ratios


def _table(columns: dict[str, dict[str, Any]]) -> None:
    metrics = sorted({metric for figures in columns.values() for metric in figures})
    print("| metric | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for metric in metrics:
        print(f"| {metric} | " + " | ".join(str(figures.get(metric, "")) for figures in columns.values()) + " |")


if __name__ == "__main__":
    sys.exit(main())
