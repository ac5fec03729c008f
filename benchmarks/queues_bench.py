"""Queue benchmark: share-group consume-and-acknowledge throughput and latency, beside RabbitMQ.

``python benchmarks/queues_bench.py`` starts mqbroker (``twistd mqbroker`` on free ports, a
temporary data directory) and, unless ``--no-rabbitmq``, Debian's ``rabbitmq-server``, and
measures in alternating rounds (the broker not measured is SIGSTOPped, as in ``amqp_bench``):

* **share group, native client** (the queue built on the log): a one-partition topic filled with
  ``--messages`` acknowledged records of ``--body-bytes``; then each count of ``--consumers``
  (1, 4 and 16) consumer processes (``ShareConsumer``, ``records_max`` 500, every record accepted
  and the verdicts stored before the next poll; with ``--ack-with-next-poll`` they travel with the next
  poll instead of a commit of their own) drain it. Timed from a start signal (every consumer
  has joined) until the last acknowledgement the broker confirmed: msg/s and MB/s.
* **latency**: records produced at ``--latency-rate`` per second for ``--latency-seconds`` while one
  consumer acknowledges; each record's latency runs from just before ``send`` to the return of the
  ``poll`` that delivered it (p50/p99; a record never delivered counts as infinitely late).
* **push**: a push subscription (batching off, ``--push-outstanding`` POSTs in flight) over a topic
  filled with ``--push-messages`` records, to a local endpoint (``push_endpoint.py``, asyncio,
  answering 204 at once): records/s from creating the subscription to the last POST's arrival;
  then push latency from just before ``send`` to the POST's arrival at ``--latency-rate``.
* **lease-expiry redelivery**: one consumer leases ``--lease-records`` records for ``--lease-ms`` and never
  settles them (a stuck worker that still heartbeats); a second consumer receives them once the leases end:
  p50/p99 of arrival minus the end of the lease (the start of the poll that leased them plus ``--lease-ms``,
  so a little late rather than early), and the fraction redelivered.
* **deliver-at lateness**: ``--scheduled`` records with ``x-deliver-at`` times spread evenly over
  ``--schedule-seconds`` (the first due 3 s + 0.5 ms per record after producing starts), one consumer acknowledging:
  p50/p99 of arrival minus deliver-at (negative: early, counted apart).
* **RabbitMQ with pika** (the queue case, for comparison): the same message count and body size
  published with confirms into a fresh durable queue, then drained by the same counts of pika
  consumer processes (prefetch 1,000, acknowledging every 100 with ``multiple``; an acknowledgement
  counts when sent, as AMQP confirms none), and pika's latency at the same rate (``amqp_bench``).
  RabbitMQ has no push, so its push rows show ``-``. ``--pika-on-mqbroker`` adds the same pika run
  against mqbroker's own (classic) AMQP queues, ``--pika-on-share-queues`` against its AMQP share
  queues (``x-queue-type: share``: the AMQP consumers are share-group members).

Figures are medians over ``--rounds`` rounds; compare ratios within one run, not across runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import amqp_bench  # noqa: E402  (benchmarks/ is the script's directory)
import cputime  # noqa: E402
import pika  # noqa: E402
import push_endpoint as push_endpoint_module  # noqa: E402

from mqbroker.cli.bench import produce_acknowledged  # noqa: E402
from mqbroker.client import Admin, Producer, ShareConsumer  # noqa: E402
from mqbroker.client.share_admin import ShareGroupAdmin  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

RECORDS_PER_POLL = 500


# --- the consumer processes ------------------------------------------------------------------------


def consumer_child(bootstrap: str, group: str, topic: str, idle_s: float, with_next_poll: bool = False) -> None:
    """Join, say so, wait for ``go`` on stdin, then poll and acknowledge until ``idle_s`` pass without records;
    print how many records the broker confirmed acknowledged and when the last confirmation came (epoch s).
    ``with_next_poll``: the verdicts travel with the next poll (one round trip per poll, as KafkaShareConsumer
    does) instead of a commit of their own before it."""
    acked = [0, 0.0]

    def confirmed(outcomes: list[Any]) -> None:
        for outcome in outcomes:
            if outcome.error is None:
                acked[0] += outcome.last_offset - outcome.first_offset + 1
                acked[1] = time.time()

    with ShareConsumer(bootstrap, group_id=group, topics=[topic], records_max=RECORDS_PER_POLL, fetch_wait_ms=100,
                       on_acknowledged=confirmed) as consumer:
        assert consumer.wait_joined(60), "the consumer did not join its group within 60 s"
        print("ready", flush=True)
        sys.stdin.readline()
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < idle_s:
            messages = consumer.poll(0.2)
            if messages:
                consumer.acknowledge(messages)
                if not with_next_poll:
                    consumer.commit()
                quiet_since = time.monotonic()
        consumer.commit()
    print(json.dumps({"acked": acked[0], "last_ack_s": acked[1]}), flush=True)


def pika_consumer_child(port: int, queue: str, idle_s: float) -> None:
    """``consumer_child`` for RabbitMQ: prefetch ``amqp_bench.PREFETCH``, acknowledging every 100 (multiple) and
    the rest once ``idle_s`` pass without a message; the time of an acknowledgement is when its last message came
    (AMQP confirms no acknowledgement)."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=amqp_bench.PREFETCH)
    print("ready", flush=True)
    sys.stdin.readline()
    acked, unacked, last_ack_s, last_tag = 0, 0, 0.0, 0
    for method, _, _ in channel.consume(queue, inactivity_timeout=idle_s):
        if method is None:
            break
        unacked, last_tag, received_s = unacked + 1, method.delivery_tag, time.time()
        if unacked == 100:
            channel.basic_ack(last_tag, multiple=True)
            acked, unacked, last_ack_s = acked + unacked, 0, received_s
    if unacked:
        channel.basic_ack(last_tag, multiple=True)
        acked, last_ack_s = acked + unacked, received_s
    channel.cancel()
    connection.close()
    print(json.dumps({"acked": acked, "last_ack_s": last_ack_s}), flush=True)


def run_children(commands: list[list[str]], options: argparse.Namespace) -> tuple[float, float]:
    """Start the consumer processes, wait for each to be ready, start them together; (acknowledged msg/s, MB/s)."""
    children = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for command in commands]
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    started = time.time()
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    results = [json.loads(child.communicate(timeout=600)[0].strip().splitlines()[-1]) for child in children]
    acked = sum(result["acked"] for result in results)
    assert acked >= options.messages, f"only {acked} of {options.messages} acknowledged"
    seconds = max(result["last_ack_s"] for result in results) - started
    return options.messages / seconds, options.messages * options.body_bytes / seconds / 1e6


def share_group_on_new_topic(broker: BrokerProcess, prefix: str) -> tuple[str, str]:
    """A fresh one-partition topic and a share group on it reading from the earliest record: (topic, group)."""
    topic, group = f"{prefix}-{uuid.uuid4().hex[:8]}", f"{prefix}-group-{uuid.uuid4().hex[:8]}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=1)
    with ShareGroupAdmin(broker.bootstrap) as admin:
        admin.create(group, [topic], {"auto.offset.reset": "earliest"})
    return topic, group


def drain(broker: BrokerProcess, consumers: int, options: argparse.Namespace) -> tuple[float, float, float]:
    """Fill a fresh one-partition topic, let ``consumers`` processes drain it; (acknowledged msg/s, MB/s, broker CPU
    µs per acknowledged record)."""
    topic, group = share_group_on_new_topic(broker, "queue")
    with Producer(broker.bootstrap, acks="all", linger_ms=5) as producer:
        outcome = produce_acknowledged(producer, topic, b"x" * options.body_bytes, options.messages)
    assert outcome.failed == 0, outcome
    mode = ["with-next-poll"] if options.ack_with_next_poll else []
    assert broker.process is not None
    cpu_before_s = cputime.process_tree_cpu_s(broker.process.pid)
    rate, megabytes = run_children(
        [[sys.executable, __file__, "--child", broker.bootstrap, group, topic, *mode]] * consumers, options)
    cpu_us = (cputime.process_tree_cpu_s(broker.process.pid) - cpu_before_s) * 1e6 / options.messages
    return rate, megabytes, cpu_us


def pika_drain(port: int, consumers: int, options: argparse.Namespace, arguments: dict[str, Any]) -> tuple[float, float]:
    """``drain`` for RabbitMQ: publish with confirms into a fresh durable queue (declared with ``arguments``),
    ``consumers`` pika processes drain it."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    declare(port, queue, arguments)
    amqp_bench.publish_with_confirms(port, queue, options.messages)
    return run_children([[sys.executable, __file__, "--pika-child", str(port), queue]] * consumers, options)


def push_throughput(broker: BrokerProcess, options: argparse.Namespace) -> tuple[float, float, float]:
    """A push subscription (batching off) over a filled one-partition topic, to a local endpoint; (records/s, MB/s,
    broker CPU µs per record) from creating the subscription to the endpoint receiving the last record (answered 204
    at once)."""
    topic, name = f"pushed-{uuid.uuid4().hex[:8]}", f"push-{uuid.uuid4().hex[:8]}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=1)
    with Producer(broker.bootstrap, acks="all", linger_ms=5) as producer:
        outcome = produce_acknowledged(producer, topic, b"x" * options.body_bytes, options.push_messages)
    assert outcome.failed == 0, outcome
    assert broker.process is not None
    with push_endpoint(idle_s=2.0) as (port, tally):
        cpu_before_s = cputime.process_tree_cpu_s(broker.process.pid)
        started = time.time()
        with ShareGroupAdmin(broker.bootstrap) as admin:
            admin.create_subscription(name, topic, endpoint=f"http://127.0.0.1:{port}/push", start="earliest",
                                      max_outstanding=options.push_outstanding)
        result = tally()
        cpu_us = (cputime.process_tree_cpu_s(broker.process.pid) - cpu_before_s) * 1e6 / options.push_messages
    assert result["records"] >= options.push_messages, f"only {result['records']} of {options.push_messages} pushed"
    seconds = result["last_s"] - started
    return options.push_messages / seconds, options.push_messages * options.body_bytes / seconds / 1e6, cpu_us


def push_latency(broker: BrokerProcess, options: argparse.Namespace) -> list[float]:
    """Per-record latency (ms) from just before ``send`` to the endpoint receiving the POST, at ``--latency-rate``."""
    topic, name = f"pushlat-{uuid.uuid4().hex[:8]}", f"pushlat-{uuid.uuid4().hex[:8]}"
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=1)
    total = int(options.latency_rate * options.latency_seconds)
    with push_endpoint(idle_s=3.0) as (port, tally):
        with ShareGroupAdmin(broker.bootstrap) as admin:
            admin.create_subscription(name, topic, endpoint=f"http://127.0.0.1:{port}/push", start="earliest",
                                      max_outstanding=options.push_outstanding)
        with Producer(broker.bootstrap, acks="all", linger_ms=0) as producer:
            started = time.perf_counter()
            for index in range(total):
                while (wait := started + index / options.latency_rate - time.perf_counter()) > 0:
                    time.sleep(wait)
                producer.send(topic, push_endpoint_module.latency_value(options.body_bytes))
        latencies = sorted(tally()["latencies_ms"])
    return latencies + [math.inf] * (total - len(latencies))


@contextlib.contextmanager
def push_endpoint(idle_s: float) -> Iterator[tuple[int, Any]]:
    """``push_endpoint.py`` in a child process: (its port, a function waiting for its tally)."""
    child = subprocess.Popen([sys.executable, push_endpoint_module.__file__, str(idle_s)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        yield port, lambda: json.loads(child.communicate(timeout=600)[0].strip().splitlines()[-1])
    finally:
        if child.poll() is None:
            child.kill()


def share_latency(broker: BrokerProcess, options: argparse.Namespace) -> list[float]:
    """Per-record latency (ms) from send to the poll that delivered it, one consumer acknowledging."""
    topic, group = share_group_on_new_topic(broker, "latency")
    total = int(options.latency_rate * options.latency_seconds)
    sent_at: dict[int, float] = {}
    latencies: list[float] = []
    with ShareConsumer(broker.bootstrap, group_id=group, topics=[topic], records_max=RECORDS_PER_POLL,
                       fetch_wait_ms=100) as consumer:
        assert consumer.wait_joined(60), "the consumer did not join its group within 60 s"
        producing = threading.Thread(target=_produce_paced, args=(broker.bootstrap, topic, total, options, sent_at))
        producing.start()
        deadline = time.perf_counter() + options.latency_seconds + 10
        while len(latencies) < total and time.perf_counter() < deadline:
            messages = consumer.poll(0.2)
            now = time.perf_counter()
            latencies += [(now - sent_at[int(m.value[:12])]) * 1000 for m in messages if int(m.value[:12]) in sent_at]
            consumer.acknowledge(messages)
        producing.join()
    return sorted(latencies) + [math.inf] * (total - len(latencies))


def _produce_paced(bootstrap: str, topic: str, total: int, options: argparse.Namespace,
                   sent_at: dict[int, float]) -> None:
    padding = b"x" * max(0, options.body_bytes - 12)
    with Producer(bootstrap, acks="all", linger_ms=0) as producer:
        started = time.perf_counter()
        for index in range(total):
            due = started + index / options.latency_rate
            while (wait := due - time.perf_counter()) > 0:
                time.sleep(wait)
            sent_at[index] = time.perf_counter()
            producer.send(topic, b"%012d" % index + padding)


def lease_redelivery(broker: BrokerProcess, options: argparse.Namespace) -> list[float]:
    """Lateness (ms) of each record's redelivery after a stuck consumer's lease on it ended."""
    topic, group = share_group_on_new_topic(broker, "lease")
    count = options.lease_records
    with Producer(broker.bootstrap, acks="all", linger_ms=5) as producer:
        outcome = produce_acknowledged(producer, topic, b"x" * options.body_bytes, count)
    assert outcome.failed == 0, outcome
    lease_ends_ms: dict[int, float] = {}
    lateness: list[float] = []
    with ShareConsumer(broker.bootstrap, group_id=group, topics=[topic], records_max=RECORDS_PER_POLL,
                       fetch_wait_ms=100, lease_ms=options.lease_ms) as stuck:
        assert stuck.wait_joined(60), "the stuck consumer did not join its group within 60 s"
        deadline = time.monotonic() + 60
        while len(lease_ends_ms) < count and time.monotonic() < deadline:
            started_ms = time.time() * 1000
            for message in stuck.poll(0.2):
                lease_ends_ms[message.offset] = started_ms + options.lease_ms
        with ShareConsumer(broker.bootstrap, group_id=group, topics=[topic], records_max=RECORDS_PER_POLL,
                           fetch_wait_ms=100) as other:
            deadline = time.monotonic() + options.lease_ms / 1000 + 30
            while len(lateness) < len(lease_ends_ms) and time.monotonic() < deadline:
                messages = other.poll(0.2)
                now_ms = time.time() * 1000
                lateness += [now_ms - lease_ends_ms[m.offset] for m in messages if m.offset in lease_ends_ms]
                other.acknowledge(messages)
            other.commit()
    return sorted(lateness) + [math.inf] * (count - len(lateness))


def delayed_lateness(broker: BrokerProcess, options: argparse.Namespace) -> list[float]:
    """Lateness (ms) of ``--scheduled`` records whose deliver-at times are spread over ``--schedule-seconds``,
    starting 3 s after they were all produced: arrival at the consumer minus the deliver-at time."""
    topic, group = share_group_on_new_topic(broker, "delayed")
    count = options.scheduled
    with Producer(broker.bootstrap, acks="all", linger_ms=5) as producer:
        first_ms = int(time.time() * 1000) + 3_000 + count // 2  # room to produce them all (at 2,000/s or faster)
        spacing_ms = options.schedule_seconds * 1000 / count
        futures = []
        for index in range(count):
            at = str(first_ms + int(index * spacing_ms)).encode()
            futures.append(producer.send(topic, at, headers=[("x-deliver-at", at)]))
        producer.flush()
        assert time.time() * 1000 < first_ms, "producing took longer than the head start: lower --scheduled"
        for future in futures:
            future.result(0)  # raises if a send failed
    lateness: list[float] = []
    with ShareConsumer(broker.bootstrap, group_id=group, topics=[topic], records_max=RECORDS_PER_POLL,
                       fetch_wait_ms=100) as consumer:
        deadline = time.monotonic() + (first_ms / 1000 - time.time()) + options.schedule_seconds + 30
        while len(lateness) < count and time.monotonic() < deadline:
            messages = consumer.poll(0.2)
            now_ms = time.time() * 1000
            lateness += [now_ms - int(m.value) for m in messages]
            consumer.acknowledge(messages)
    return sorted(lateness) + [math.inf] * (count - len(lateness))


# --- rounds ------------------------------------------------------------------------------------


Figures = list[tuple[str, float | None]]


def measure_mqbroker(broker: BrokerProcess, options: argparse.Namespace) -> Figures:
    """The share-group figures."""
    figures: Figures = []
    for consumers in options.consumers:
        rate, megabytes, cpu_us = drain(broker, consumers, options)
        figures += [(f"consume+ack, {consumers} consumer(s) msg/s", rate), (f"  {consumers} consumer(s) MB/s", megabytes),
                    (f"  {consumers} consumer(s) broker CPU µs/msg", cpu_us)]
    latencies = share_latency(broker, options)
    figures += [("latency p50 ms", amqp_bench.percentile(latencies, 0.5)),
                ("latency p99 ms", amqp_bench.percentile(latencies, 0.99))]
    if options.push_messages:
        rate, megabytes, cpu_us = push_throughput(broker, options)
        latencies = push_latency(broker, options)
        figures += [("push to HTTP endpoint msg/s", rate), ("  push MB/s", megabytes),
                    ("  push broker CPU µs/msg (incl. its idle wait)", cpu_us),
                    ("push latency p50 ms", amqp_bench.percentile(latencies, 0.5)),
                    ("push latency p99 ms", amqp_bench.percentile(latencies, 0.99))]
    if options.lease_records:
        lateness = lease_redelivery(broker, options)
        figures += [(f"lease-expiry redelivery p50 ms ({options.lease_records:,} leased for {options.lease_ms} ms)",
                     amqp_bench.percentile(lateness, 0.5)),
                    ("lease-expiry redelivery p99 ms", amqp_bench.percentile(lateness, 0.99)),
                    ("  redelivered fraction", sum(1 for value in lateness if value != math.inf) / len(lateness))]
    if options.scheduled:
        lateness = delayed_lateness(broker, options)
        figures += [(f"deliver-at lateness p50 ms ({options.scheduled:,} scheduled)", amqp_bench.percentile(lateness, 0.5)),
                    ("deliver-at lateness p99 ms", amqp_bench.percentile(lateness, 0.99)),
                    ("  early deliveries", float(sum(1 for value in lateness if value < 0)))]
    return figures


def declare(port: int, queue: str, arguments: dict[str, Any]) -> None:
    """Declare a durable queue with ``arguments`` (the pika functions declare it again, plainly: mqbroker keeps the
    first declaration's type)."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    connection.channel().queue_declare(queue, durable=True, arguments=arguments)
    connection.close()


def measure_pika(port: int, options: argparse.Namespace, arguments: dict[str, Any] | None = None) -> Figures:
    """pika publishing with confirms, then 1..N consumer processes acknowledging, then latency at the same rate;
    queues declared with ``arguments`` (``x-queue-type: share`` for mqbroker's share queues)."""
    amqp_bench.BODY_BYTES = options.body_bytes
    figures: Figures = []
    for consumers in options.consumers:
        rate, megabytes = pika_drain(port, consumers, options, arguments or {})
        figures += [(f"consume+ack, {consumers} consumer(s) msg/s", rate), (f"  {consumers} consumer(s) MB/s", megabytes)]
    latency_queue = f"latency-{uuid.uuid4().hex[:8]}"
    declare(port, latency_queue, arguments or {})
    latencies = amqp_bench.latency(port, latency_queue, options.latency_rate, options.latency_seconds)
    return figures + [("latency p50 ms", amqp_bench.percentile(latencies, 0.5)),
                      ("latency p99 ms", amqp_bench.percentile(latencies, 0.99))]


@contextlib.contextmanager
def mqbroker(work: pathlib.Path) -> Iterator[BrokerProcess]:
    """mqbroker with its native and AMQP listeners."""
    broker = BrokerProcess(data_dir=work / "mqbroker", extra_args=["--mqtt-port", "0", "--kafka-port", "0",
                                                                      "--kafka-tls-port", "0"])
    broker.start(timeout_s=120)
    try:
        yield broker
    finally:
        broker.kill()


def report(rounds: dict[str, list[Figures]], as_json: bool) -> None:
    """Medians per figure, the brokers side by side (``-``: the broker has no such figure)."""
    medians = {name: {label: _median([dict(figures).get(label) for figures in results]) for label, _ in results[0]}
               for name, results in rounds.items()}
    if as_json:
        print(json.dumps({"command": sys.argv, "medians": medians}, indent=2))
        return
    labels = list(dict.fromkeys(label for figures in medians.values() for label in figures))
    print(f"medians of {len(next(iter(rounds.values())))} round(s): {' '.join(sys.argv)}")
    print(f"{'':44}" + "".join(f"{name:>30}" for name in medians))
    for label in labels:
        print(f"{label:44}" + "".join(f"{_shown(figures.get(label)):>30}" for figures in medians.values()))


def _shown(value: float | None) -> str:
    return "-" if value is None else "lost" if math.isinf(value) else f"{value:,.1f}" if value >= 10 else f"{value:,.3f}"


def _median(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def main() -> None:
    """Measure mqbroker's share groups (and pika against RabbitMQ and mqbroker's AMQP) in alternating rounds."""
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        consumer_child(sys.argv[2], sys.argv[3], sys.argv[4], idle_s=2.0, with_next_poll="with-next-poll" in sys.argv)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--pika-child":
        pika_consumer_child(int(sys.argv[2]), sys.argv[3], idle_s=2.0)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--consumers", type=lambda text: sorted({int(n) for n in text.split(",")}), default=[1, 4, 16],
                        help="consumer processes of each drain, comma-separated [1,4,16]")
    parser.add_argument("--ack-with-next-poll", action="store_true",
                        help="share consumers send each poll's verdicts with the next poll, not a commit of their own")
    parser.add_argument("--push-messages", type=int, default=20_000, help="records pushed to the local endpoint "
                                                                          "(0: skip push) [20,000]")
    parser.add_argument("--push-outstanding", type=int, default=100, help="the subscription's push.max.outstanding")
    parser.add_argument("--latency-rate", type=int, default=1_000)
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--lease-records", type=int, default=1_000, help="records a stuck consumer leases for the "
                                                                         "redelivery figure (0: skip it) [1,000]")
    parser.add_argument("--lease-ms", type=int, default=2_000, help="the stuck consumer's lease [2,000]")
    parser.add_argument("--scheduled", type=int, default=20_000, help="delayed records for the lateness figure "
                                                                      "(0: skip it) [20,000]")
    parser.add_argument("--schedule-seconds", type=float, default=10.0, help="their deliver-at times' spread [10]")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-rabbitmq", action="store_true", help="measure mqbroker only")
    parser.add_argument("--pika-on-mqbroker", action="store_true", help="also run pika against mqbroker's AMQP queues")
    parser.add_argument("--pika-on-share-queues", action="store_true",
                        help="also run pika against mqbroker's AMQP share queues (x-queue-type share)")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    rounds: dict[str, list[Figures]] = {}
    with contextlib.ExitStack() as stack:
        work = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        broker = stack.enter_context(mqbroker(work))
        assert broker.process is not None
        pids = {"mqbroker share groups": broker.process.pid}
        if options.pika_on_mqbroker:
            pids["mqbroker AMQP (pika)"] = broker.process.pid
        if options.pika_on_share_queues:
            pids["mqbroker share queue (pika)"] = broker.process.pid
        rabbit: tuple[int, int] | None = None
        if not options.no_rabbitmq:
            if not amqp_bench.RABBITMQ_SERVER.exists():
                parser.error(f"{amqp_bench.RABBITMQ_SERVER} is missing: install rabbitmq-server or pass --no-rabbitmq")
            rabbit = stack.enter_context(amqp_bench.rabbitmq_process(work))
            pids["RabbitMQ (pika)"] = rabbit[1]
        for number in range(options.rounds):
            for name, pid in pids.items():
                print(f"-- round {number + 1}: {name}", file=sys.stderr)
                with amqp_bench.stopped(sorted({other for other in pids.values() if other != pid})):
                    if name == "mqbroker share groups":
                        figures = measure_mqbroker(broker, options)
                    elif name == "mqbroker AMQP (pika)":
                        figures = measure_pika(broker.ports["amqp"], options)
                    elif name == "mqbroker share queue (pika)":
                        figures = measure_pika(broker.ports["amqp"], options, {"x-queue-type": "share"})
                    else:
                        assert rabbit is not None
                        figures = measure_pika(rabbit[0], options)
                rounds.setdefault(name, []).append(figures)
    report(rounds, options.json)


if __name__ == "__main__":
    main()
