"""``mqbroker bench produce|consume|e2e``: throughput and latency against a running broker.

Progress is shown on stderr while a benchmark runs; the summary is a table on stdout, or one
JSON object with ``--json``. Every rate counts only what was acknowledged (``produce``: the producer's
count of acknowledged records once it has flushed; failures are counted and printed) or
received (``consume``, ``e2e``). Latencies: ``produce`` samples the acknowledgement time of one
record in every ``SAMPLE_EVERY``; ``e2e`` measures every message from send to receipt, and its
percentiles are over every message sent: one that never arrived counts as an infinite latency
(shown as ``lost``), not as a missing sample. The settings of the run come with the figures.
"""

from __future__ import annotations

import argparse
import array
import functools
import gc
import itertools
import json
import math
import multiprocessing
import os
import queue
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from mqbroker.cli.common import add_client_options, client_security, reporting_errors
from mqbroker.client.producer_batch import DeliveryCounts

SAMPLE_EVERY = 997
#: The send time an e2e message carries at the start of its value (``time.monotonic_ns()``).
SEND_TIME = struct.Struct(">q")
#: Seconds the e2e consumer may take to find its starting position, and to receive the last messages after the flush.
_RECEIVER_READY_S = 30.0
_RECEIVER_DRAIN_S = 30.0


@dataclass
class BenchResult:
    """What a benchmark measured; ``messages`` counts only acknowledged (or received) ones."""

    mode: str
    messages: int
    message_bytes: int
    seconds: float
    messages_per_s: float
    mb_per_s: float
    sent: int = 0
    failed: int = 0
    first_error: str | None = None
    latency_ms: dict[str, float | None] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    #: This process's CPU time (every thread) per counted message while it sent or received them (``produce``,
    #: ``consume``): on a shared machine a steadier figure of the client's cost than its rate.
    client_cpu_us_per_message: float | None = None


@dataclass
class SendOutcomes:
    """How the sends of a run ended: acknowledged, failed (with the first error), and how long until the flush."""

    seconds: float
    acknowledged: int
    failed: int
    first_error: str | None
    #: This process's CPU time over those ``seconds``.
    cpu_seconds: float = 0.0


def percentiles_ms(samples_s: Sequence[float], total: int | None = None) -> dict[str, float | None]:
    """p50, p90, p99, p99.9 and max of latency samples (seconds in, milliseconds out).

    With ``total`` (messages sent) above ``len(samples_s)`` the missing ones count as lost: an
    infinite latency, reported as None ("lost"), so a percentile is never computed over survivors only.
    """
    ordered = sorted(samples_s) + [math.inf] * max(0, (total or 0) - len(samples_s))
    if not ordered:
        return {}

    def milliseconds(value: float) -> float | None:
        return None if math.isinf(value) else round(value * 1000, 3)

    def at(fraction: float) -> float | None:
        return milliseconds(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))])

    return {"p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "p999": at(0.999), "max": milliseconds(ordered[-1])}


def outcomes_between(before: DeliveryCounts, after: DeliveryCounts, seconds: float,
                     cpu_seconds: float = 0.0) -> SendOutcomes:
    """The outcomes of the records a producer finished between two of its ``delivery_counts``."""
    failed = after.failed - before.failed
    error = after.first_error if failed else None
    return SendOutcomes(seconds, after.acknowledged - before.acknowledged, failed,
                        None if error is None else f"{type(error).__name__}: {error}", cpu_seconds)


def produce_acknowledged(producer: Any, topic: str, value: bytes, count: int,
                         on_sample: Callable[[int, Any], None] | None = None, values_per_call: int = 1,
                         **send_options: Any) -> SendOutcomes:
    """Send ``count`` copies of ``value`` as fast as ``producer`` takes them, flush, and count every outcome.

    ``seconds`` runs from the first send to the end of the flush, when every record is acknowledged or
    failed. The outcomes are the change in the producer's ``delivery_counts`` (every record's outcome, as
    Kafka's ``record-send-total``/``record-error-total``), so no future is kept per record: keeping a
    million of them cost the benchmark a fifth of its rate, a cost of the bookkeeping, not the producer.
    ``on_sample(index, future)`` is called for one send in every ``SAMPLE_EVERY`` (latency samples, progress).
    With ``values_per_call`` above 1 the records go ``values_per_call`` at a time through ``send_many``.
    """
    before = producer.delivery_counts()
    started, cpu_started = time.perf_counter(), time.process_time()
    if values_per_call > 1:
        calls = [[value] * values_per_call] * (count // values_per_call)
        calls += [[value] * (count % values_per_call)] if count % values_per_call else []
        send_many = functools.partial(producer.send_many, **send_options)
        sample_every = max(1, SAMPLE_EVERY // values_per_call)
        for index, values in enumerate(calls):
            future = send_many(topic, values)
            if on_sample is not None and index % sample_every == 0:
                on_sample(index * values_per_call, future)
    else:
        send = functools.partial(producer.send, **send_options) if send_options else producer.send
        for index in range(count):
            future = send(topic, value)
            if on_sample is not None and index % SAMPLE_EVERY == 0:
                on_sample(index, future)
    producer.flush()
    return outcomes_between(before, producer.delivery_counts(), time.perf_counter() - started,
                            time.process_time() - cpu_started)


def add_parser(commands: Any) -> None:
    """Register ``bench`` and its three modes."""
    bench = commands.add_parser("bench", help="measure throughput and latency against a running broker",
                                description="Benchmark a running broker with one client process.")
    modes = bench.add_subparsers(dest="mode", metavar="MODE", required=True)
    for mode, help_text in (("produce", "producer throughput and acknowledgement latency"),
                            ("consume", "consumer throughput (fills the topic first if needed)"),
                            ("e2e", "end-to-end latency at a fixed rate")):
        parser = modes.add_parser(mode, help=help_text, description=help_text.capitalize() + ".")
        add_client_options(parser)
        parser.add_argument("--topic", help="topic to use [default: a new topic per run]")
        parser.add_argument("--messages", type=int, default=1_000_000 if mode != "e2e" else 50_000)
        parser.add_argument("--size", type=int, default=100, help="message value bytes [default: 100]")
        parser.add_argument("--partitions", type=int, default=1, help="partitions of a new topic [default: 1]")
        parser.add_argument("--acks", default="1" if mode != "e2e" else "all", choices=["0", "1", "all"])
        parser.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
        parser.add_argument("--batch-size", type=int, default=1_000_000, help="producer batch bytes [default: 1000000]")
        parser.add_argument("--linger-ms", type=int, default=5 if mode != "e2e" else 0)
        if mode != "e2e":
            parser.add_argument("--send-many", type=int, default=1, metavar="N",
                                help="send N values per call with Producer.send_many [default: 1, one send per record]")
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
        if mode == "consume":
            parser.add_argument("--raw-values", action="store_true",
                                help="read with Consumer.poll_values (the values only, no Message per record)")
        if mode == "e2e":
            parser.add_argument("--rate", type=int, default=5000, help="messages per second [default: 5000]")
            parser.add_argument("--consumer", default="process", choices=["process", "thread"],
                                help="receive in a process of its own, as deployed, or on a thread of the producer's "
                                     "process (the method before issue 24) [default: process]")
        parser.set_defaults(run=reporting_errors(_run))


def _run(arguments: argparse.Namespace) -> int:
    from mqbroker.client import Admin

    topic = arguments.topic or f"bench-{arguments.mode}-{os.getpid()}-{int(time.time())}"
    with Admin(arguments.bootstrap, security=client_security(arguments)) as admin:
        if topic not in admin.list_topics():
            admin.create_topics([topic], arguments.partitions)
    runner: Callable[[argparse.Namespace, str, Progress], BenchResult] = {
        "produce": _bench_produce, "consume": _bench_consume, "e2e": _bench_e2e,
    }[arguments.mode]
    with _progress(arguments.json) as progress:
        result = runner(arguments, topic, progress)
    result.settings.update(topic=topic, acks=arguments.acks, size=arguments.size, compression=arguments.compression,
                           batch_size=arguments.batch_size, linger_ms=arguments.linger_ms,
                           send_many=getattr(arguments, "send_many", 1))
    if arguments.mode == "e2e":
        result.settings.update(rate=arguments.rate, consumer=arguments.consumer)
    if arguments.mode == "consume":
        result.settings.update(raw_values=arguments.raw_values)
    if arguments.json:
        print(json.dumps(asdict(result)))
    else:
        _print_table(result)
    return 0


def _progress(quiet: bool) -> Progress:
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(), console=Console(stderr=True), disable=quiet or not sys.stderr.isatty(),
        transient=True,
    )


def _producer(arguments: argparse.Namespace) -> Any:
    from mqbroker.client import Producer

    return Producer(arguments.bootstrap, security=client_security(arguments), acks=arguments.acks, linger_ms=arguments.linger_ms,
                    batch_size=arguments.batch_size, compression=arguments.compression)


def _produce_messages(arguments: argparse.Namespace, topic: str, count: int, progress: Progress,
                      label: str) -> tuple[SendOutcomes, list[float]]:
    """Send ``count`` messages as fast as the producer takes them; return their outcomes and sampled ack latencies."""
    producer = _producer(arguments)
    value = os.urandom(arguments.size)
    samples: list[float] = []
    pending: queue.SimpleQueue[tuple[float, Any] | None] = queue.SimpleQueue()

    def await_samples() -> None:
        while (item := pending.get()) is not None:
            sent_at, future = item
            if future.exception() is None:  # a failed send has no acknowledgement latency
                samples.append(time.perf_counter() - sent_at)

    sampler = threading.Thread(target=await_samples, name="bench-ack-sampler", daemon=True)
    sampler.start()
    task = progress.add_task(label, total=count, rate="")
    started = time.perf_counter()

    def on_sample(index: int, future: Any) -> None:
        pending.put((time.perf_counter(), future))
        progress.update(task, completed=index, rate=_rate(index, started))

    try:
        outcomes = produce_acknowledged(producer, topic, value, count, on_sample, arguments.send_many)
    finally:
        pending.put(None)
        sampler.join()
        producer.close()
    progress.update(task, completed=count)
    return outcomes, samples


def _rate(count: int, started: float) -> str:
    elapsed = time.perf_counter() - started
    return f"{count / elapsed:,.0f} msg/s" if elapsed > 0 else ""


def _bench_produce(arguments: argparse.Namespace, topic: str, progress: Progress) -> BenchResult:
    outcomes, samples = _produce_messages(arguments, topic, arguments.messages, progress, "producing")
    return _result("produce", arguments, outcomes.acknowledged, outcomes.seconds, percentiles_ms(samples),
                   sent=arguments.messages, failed=outcomes.failed, first_error=outcomes.first_error,
                   client_cpu_us_per_message=_per_message_us(outcomes.cpu_seconds, outcomes.acknowledged))


def _bench_consume(arguments: argparse.Namespace, topic: str, progress: Progress) -> BenchResult:
    from mqbroker.client import Admin, Consumer

    with Admin(arguments.bootstrap, security=client_security(arguments)) as admin:
        partitions = admin.describe_topics([topic])[topic]
        stored = sum(admin.list_offset(topic, p, -1) - admin.list_offset(topic, p, -2) for p in range(partitions))
    if stored < arguments.messages:
        filled, _ = _produce_messages(arguments, topic, arguments.messages - stored, progress, "filling the topic")
        if filled.failed:
            raise RuntimeError(f"{filled.failed} of the sends filling {topic} failed ({filled.first_error}); "
                               "the topic holds fewer messages than --messages")
    consumer = Consumer(arguments.bootstrap, security=client_security(arguments), topics=[topic], auto_offset_reset="earliest")
    task = progress.add_task("consuming", total=arguments.messages, rate="")
    received = 0
    poll_latencies: list[float] = []
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        while received < arguments.messages:
            polled_at = time.perf_counter()
            # held until the next poll returns, as an application holds what it works on (freeing each poll's
            # records at once measured 0.06 us more per message)
            if arguments.raw_values:
                fetched = consumer.poll_values(timeout=1.0)
                poll_latencies.append(time.perf_counter() - polled_at)
                received += sum(len(values) for *_, values in fetched)
            else:
                messages = consumer.poll(timeout=1.0)
                poll_latencies.append(time.perf_counter() - polled_at)
                received += len(messages)
            progress.update(task, completed=received, rate=_rate(received, started))
        elapsed, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    finally:
        consumer.close()
    return _result("consume", arguments, received, elapsed, percentiles_ms(poll_latencies),
                   client_cpu_us_per_message=_per_message_us(cpu_seconds, received))


def _per_message_us(cpu_seconds: float, messages: int) -> float | None:
    return round(cpu_seconds / messages * 1e6, 3) if messages else None


def _bench_e2e(arguments: argparse.Namespace, topic: str, progress: Progress) -> BenchResult:
    """Send at ``--rate`` from this process to a consumer in a process of its own (``--consumer process``, as
    deployed) or on a thread of this one (``--consumer thread``: the producer's send loop, its I/O thread and the
    consumer share one interpreter lock; the benchmark's only method before issue 24)."""
    security_options = argparse.Namespace(**{name: value for name, value in vars(arguments).items() if name != "run"})
    receiver = start_receiver(arguments.consumer, arguments.bootstrap, security_options, topic, arguments.messages)
    if not receiver.ready.wait(_RECEIVER_READY_S):
        receiver.finish(0)
        raise RuntimeError(f"the e2e consumer did not find its starting position within {_RECEIVER_READY_S:.0f} s")
    producer = _producer(arguments)
    padding = os.urandom(max(0, arguments.size - SEND_TIME.size))
    interval_s = 1.0 / arguments.rate
    task = progress.add_task("end to end", total=arguments.messages, rate="")
    before = producer.delivery_counts()
    settle_collector()
    started = time.perf_counter()
    try:
        for index in range(arguments.messages):
            due = started + index * interval_s
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            producer.send(topic, SEND_TIME.pack(time.monotonic_ns()) + padding)
            if index % 500 == 0:
                progress.update(task, completed=index, rate=_rate(index, started))
        producer.flush()
        receipts = receiver.finish(_RECEIVER_DRAIN_S)
        latencies = [(received_ns - sent_ns) / 1e9 for _, sent_ns, received_ns in receipts]
        elapsed = time.perf_counter() - started
        counts = producer.delivery_counts()
    finally:
        receiver.finish(0)
        producer.close()
    outcomes = outcomes_between(before, counts, elapsed)
    return _result("e2e", arguments, len(latencies), elapsed, percentiles_ms(latencies, total=arguments.messages),
                   sent=arguments.messages, failed=outcomes.failed, first_error=outcomes.first_error)


def settle_collector() -> None:
    """Run now the full garbage collection a new process owes for what it imported, before latencies are measured.

    A fresh interpreter with the client imported tracks ~46,000 objects and has never run a full (generation 2)
    collection, so its first falls a few seconds in, inside a short run: 35-80 ms on the 2-core benchmark machine
    with the interpreter lock held. In the e2e consumer that was the longest gap between two fetches, the records
    produced meanwhile waiting for it (p99 of a 20,000-message run; issue 24). A running application paid it long ago.
    """
    gc.collect()


#: What the e2e consumer keeps of each message: its offset, its send time (stamped in its value) and its receipt
#: time, in ns of ``time.monotonic_ns()``: CLOCK_MONOTONIC on Linux, one clock for every process of the machine.
Receipt = tuple[int, int, int]


def receive_stamped(bootstrap: str, security_options: argparse.Namespace | None, topic: str, count: int,
                    ready: Any, stop: Any, receipts: list[Receipt]) -> None:
    """Consume ``topic`` from its end (``ready`` once the position is known) until ``count`` messages arrived or
    ``stop``; append a ``Receipt`` per message. ``security_options``: the common client options (TLS, SASL)."""
    from mqbroker.client import Consumer

    security = None if security_options is None else client_security(security_options)
    consumer = Consumer(bootstrap, security=security, topics=[topic], auto_offset_reset="latest",
                        fetch_max_wait_ms=100)
    try:
        consumer.poll(timeout=0.2)  # resolve the starting position before the first send
        settle_collector()
        ready.set()
        while len(receipts) < count and not stop.is_set():
            for message in consumer.poll(timeout=0.5):
                receipts.append((message.offset, SEND_TIME.unpack_from(message.value)[0], time.monotonic_ns()))
    finally:
        consumer.close()


class ThreadReceiver:
    """``receive_stamped`` on a thread of this process."""

    def __init__(self, bootstrap: str, security_options: argparse.Namespace | None, topic: str, count: int) -> None:
        self.ready, self._stop = threading.Event(), threading.Event()
        self._receipts: list[Receipt] = []
        self._thread = threading.Thread(target=receive_stamped, name="bench-e2e-receiver", daemon=True,
                                        args=(bootstrap, security_options, topic, count, self.ready, self._stop,
                                              self._receipts))
        self._thread.start()

    def finish(self, timeout_s: float) -> list[Receipt]:
        """Wait up to ``timeout_s`` for every message, stop, and return the receipts."""
        self._thread.join(timeout_s)
        self._stop.set()
        self._thread.join(5)
        return list(self._receipts)


class ProcessReceiver:
    """``receive_stamped`` in a process of its own (spawned: no state of this process is inherited)."""

    def __init__(self, bootstrap: str, security_options: argparse.Namespace | None, topic: str, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.ready, self._stop = context.Event(), context.Event()
        self._from_child, to_parent = context.Pipe(duplex=False)
        self._process = context.Process(target=_receive_in_process, name="bench-e2e-receiver", daemon=True,
                                        args=(bootstrap, security_options, topic, count, self.ready, self._stop,
                                              to_parent))
        self._process.start()
        to_parent.close()
        self._receipts: list[Receipt] | None = None

    def finish(self, timeout_s: float) -> list[Receipt]:
        """Wait up to ``timeout_s`` for every message, stop, and return the receipts."""
        if self._receipts is None:
            if not self._from_child.poll(timeout_s):
                self._stop.set()
            try:
                values = array.array("q", self._from_child.recv_bytes()) if self._from_child.poll(5) else []
            except EOFError:  # the consumer process died without reporting (its error is on stderr)
                values = []
            self._receipts = list(zip(*[iter(values)] * 3))
            self._process.join(5)
        return self._receipts


def start_receiver(
    method: str, bootstrap: str, security_options: argparse.Namespace | None, topic: str, count: int
) -> ThreadReceiver | ProcessReceiver:
    """The e2e consumer, on a thread of this process (``method`` "thread") or in a process of its own ("process")."""
    kind = ThreadReceiver if method == "thread" else ProcessReceiver
    return kind(bootstrap, security_options, topic, count)


def _receive_in_process(bootstrap: str, security_options: argparse.Namespace | None, topic: str, count: int,
                        ready: Any, stop: Any, to_parent: Any) -> None:
    """The e2e consumer process: its receipts go back through ``to_parent`` as packed 64-bit integers."""
    receipts: list[Receipt] = []
    try:
        receive_stamped(bootstrap, security_options, topic, count, ready, stop, receipts)
    finally:
        to_parent.send_bytes(array.array("q", itertools.chain.from_iterable(receipts)).tobytes())


def _result(mode: str, arguments: argparse.Namespace, count: int, seconds: float, latency_ms: dict[str, float | None],
            **outcomes: Any) -> BenchResult:
    return BenchResult(
        mode=mode, messages=count, message_bytes=arguments.size, seconds=round(seconds, 3),
        messages_per_s=round(count / seconds, 1), mb_per_s=round(count * arguments.size / seconds / 1e6, 2),
        latency_ms=latency_ms, **outcomes,
    )


def _print_table(result: BenchResult) -> None:
    latency_kind = {"produce": "ack latency (sampled)", "consume": "poll call", "e2e": "send → receive"}[result.mode]
    counted = {"produce": "messages acknowledged", "consume": "messages received", "e2e": "messages received"}
    table = Table(title=f"mqbroker bench {result.mode}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    if result.sent:
        table.add_row("messages sent", f"{result.sent:,}")
        table.add_row("sends failed", f"{result.failed:,}" + (f" (first: {result.first_error})" if result.first_error else ""))
    table.add_row(counted[result.mode], f"{result.messages:,}")
    table.add_row("message bytes", str(result.message_bytes))
    table.add_row("seconds", f"{result.seconds:.2f}")
    table.add_row("messages/s", f"{result.messages_per_s:,.0f}")
    table.add_row("MB/s", f"{result.mb_per_s:.1f}")
    if result.client_cpu_us_per_message is not None:
        table.add_row("client CPU per message", f"{result.client_cpu_us_per_message:.3f} µs")
    for name, value in result.latency_ms.items():
        table.add_row(f"{latency_kind} {name}", "lost" if value is None else f"{value:.3f} ms")
    table.add_row("settings", ", ".join(f"{name}={value}" for name, value in result.settings.items()))
    Console().print(table)
