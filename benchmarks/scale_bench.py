"""Per-broker scale limits: one broker with 1,000 to 10,000 partitions, with fewer descriptors than partitions.

Run ``python benchmarks/scale_bench.py [--partitions 1000,5000,10000] [--records-per-partition N]
[--files-max 1024] [--json]``.

For each partition count N it starts one real broker (``twistd -n mqbroker``) under ``ulimit -n``
``--files-max`` (default 1,024, below 2 × N: one descriptor per partition, let alone two, cannot
fit) with the default ``segment_files_open_max``, and measures:

* ``create_s``: creating one topic of N partitions until every partition takes a write;
* produce: ``--records-per-partition`` 100-byte records in every partition (acks=all, fsync
  before the acknowledgement), spread round-robin, from one client process — msg/s and MB/s;
* ``produce_p50_ms`` / ``produce_p99_ms``: one acks=all record at a time, each to a partition
  drawn at random from all N (most of them have had their segment file closed since), round trip;
* ``fetch_p50_ms`` / ``fetch_p99_ms``: a fetch of one random partition from offset 0, the same way;
* ``kill9_ready_s``: kill -9 right after the produce, then time from start to ``/ready`` (the
  logs recover); then ``fetch``: every acknowledged record read back (checked: all N × records
  present), msg/s and MB/s, from one client process;
* ``stop_s`` and ``clean_ready_s``: a graceful stop (SIGTERM to exit), then time from start to ``/ready``;
* ``files_open_max`` and ``rss_mib``: the most descriptors the broker held (sampled every 50 ms
  over the whole run) and its resident memory after the clean restart.

Timings of one run on a shared machine are noisy; the partition counts run one after another in
the same run so their relation holds even where the absolute figures move.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker import limits  # noqa: E402
from mqbroker.client import Admin, Consumer, Producer  # noqa: E402
from mqbroker.errors import TopicAlreadyExistsError  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

TOPIC = "scale"
VALUE = b"v" * 100
#: Single-record round trips sampled for the latency percentiles.
LATENCY_SAMPLES = 1_000
#: Longest wait for a broker to become ready (10,000 partitions after kill -9 on a loaded machine).
READY_TIMEOUT_S = 600.0
MIB = 1024 * 1024


class DescriptorWatch:
    """Samples a process's open descriptors every 50 ms in a thread; keeps the peak."""

    def __init__(self) -> None:
        self.peak = 0
        self.pid: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            if self.pid is not None:
                try:
                    self.peak = max(self.peak, len(os.listdir(f"/proc/{self.pid}/fd")))
                except OSError:
                    pass  # between a kill and the restart

    def close(self) -> None:
        """Stop sampling."""
        self._stop.set()
        self._thread.join()


def timed_start(broker: BrokerProcess, watch: DescriptorWatch) -> float:
    """Start ``broker`` and return the seconds until ``/ready`` answers."""
    started = time.perf_counter()
    broker.start(timeout_s=READY_TIMEOUT_S)
    assert broker.process is not None
    watch.pid = broker.process.pid
    return time.perf_counter() - started


def create_topic(bootstrap: str, partitions: int) -> float:
    """Seconds to create the topic and see one acknowledged write land in its last partition."""
    started = time.perf_counter()
    with Admin(bootstrap, request_timeout_ms=int(READY_TIMEOUT_S * 1000)) as admin:
        try:
            admin.create_topics([TOPIC], partitions=partitions)
        except TopicAlreadyExistsError:
            pass  # a retry of a creation the broker answered late (REQUEST_TIMED_OUT) while finishing it
    with Producer(bootstrap, acks="all") as producer:
        producer.send(TOPIC, VALUE, partition=partitions - 1).result(READY_TIMEOUT_S)
    return time.perf_counter() - started


def produce_all(bootstrap: str, partitions: int, per_partition: int) -> dict[str, float]:
    """Write ``per_partition`` records into every partition, round-robin; msg/s and MB/s."""
    count = partitions * per_partition
    with Producer(bootstrap, acks="all", linger_ms=5, batch_size=16 * 1024) as producer:
        send = producer.send
        started = time.perf_counter()
        futures = [send(TOPIC, VALUE, partition=number % partitions) for number in range(count)]
        producer.flush()
        seconds = time.perf_counter() - started
    failed = sum(1 for future in futures if future.exception(0) is not None)
    assert failed == 0, f"{failed} of {count} sends failed"
    return {"produce_msg_s": count / seconds, "produce_mb_s": count * len(VALUE) / seconds / 1e6}


def single_round_trips(bootstrap: str, partitions: int, seed: int) -> dict[str, float]:
    """p50/p99 ms of one acks=all record, and of one fetch from offset 0, each to a random partition."""
    chooser = random.Random(seed)
    produce_ms, fetch_ms = [], []
    with Producer(bootstrap, acks="all", linger_ms=0) as producer:
        for _ in range(LATENCY_SAMPLES):
            partition = chooser.randrange(partitions)
            started = time.perf_counter()
            producer.send(TOPIC, VALUE, partition=partition).result(60)
            produce_ms.append((time.perf_counter() - started) * 1000)
    with Consumer(bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=0) as consumer:
        for _ in range(LATENCY_SAMPLES // 4):
            partition = chooser.randrange(partitions)
            consumer.assign([(TOPIC, partition)])
            consumer.seek((TOPIC, partition), 0)
            started = time.perf_counter()
            while not consumer.poll(timeout=5.0):
                pass
            fetch_ms.append((time.perf_counter() - started) * 1000)
    return {**_percentiles("produce", produce_ms), **_percentiles("fetch", fetch_ms)}


def _percentiles(name: str, samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {f"{name}_p50_ms": statistics.median(ordered), f"{name}_p99_ms": ordered[int(len(ordered) * 0.99)]}


def fetch_all(bootstrap: str, partitions: int, expected: int) -> dict[str, float]:
    """Read every partition from its start with one consumer; msg/s and MB/s; every record must be there."""
    received = 0
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(TOPIC, partition) for partition in range(partitions)])
        started = time.perf_counter()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while received < expected and time.monotonic() < deadline:
            received += len(consumer.poll(timeout=1.0))
        seconds = time.perf_counter() - started
    assert received == expected, f"read back {received} of {expected} acknowledged records"
    return {"fetch_msg_s": received / seconds, "fetch_mb_s": received * len(VALUE) / seconds / 1e6}


def broker_rss_mib(broker: BrokerProcess) -> float:
    """Resident memory of the broker process."""
    assert broker.process is not None
    with open(f"/proc/{broker.process.pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def measure(root: pathlib.Path, partitions: int, per_partition: int, seed: int) -> dict[str, Any]:
    """Every figure for one partition count (one broker, started three times)."""
    broker = BrokerProcess(data_dir=root / f"p{partitions}")
    broker.data_dir.mkdir(parents=True)
    watch = DescriptorWatch()
    figures: dict[str, Any] = {"partitions": partitions}
    try:
        figures["empty_ready_s"] = timed_start(broker, watch)
        figures["create_s"] = create_topic(broker.bootstrap, partitions)
        figures.update(produce_all(broker.bootstrap, partitions, per_partition))
        figures.update(single_round_trips(broker.bootstrap, partitions, seed))
        acknowledged = 1 + partitions * per_partition + LATENCY_SAMPLES
        broker.kill()
        figures["kill9_ready_s"] = timed_start(broker, watch)
        figures.update(fetch_all(broker.bootstrap, partitions, acknowledged))
        stopping = time.perf_counter()
        broker.stop(timeout_s=READY_TIMEOUT_S)
        figures["stop_s"] = time.perf_counter() - stopping
        figures["clean_ready_s"] = timed_start(broker, watch)
        figures["rss_mib"] = broker_rss_mib(broker)
        figures["data_mib"] = sum(path.stat().st_size for path in broker.data_dir.rglob("*") if path.is_file()) / MIB
    finally:
        broker.stop(timeout_s=READY_TIMEOUT_S)
        watch.close()
        shutil.rmtree(broker.data_dir, ignore_errors=True)
    figures["files_open_max"] = watch.peak
    return figures


COLUMNS = [
    ("partitions", "partitions", "{:,}"),
    ("create_s", "create s", "{:.1f}"),
    ("produce_msg_s", "produce msg/s", "{:,.0f}"),
    ("produce_mb_s", "MB/s", "{:.1f}"),
    ("produce_p50_ms", "p50 ms", "{:.2f}"),
    ("produce_p99_ms", "p99 ms", "{:.2f}"),
    ("fetch_msg_s", "fetch msg/s", "{:,.0f}"),
    ("fetch_mb_s", "MB/s", "{:.1f}"),
    ("fetch_p50_ms", "p50 ms", "{:.2f}"),
    ("fetch_p99_ms", "p99 ms", "{:.2f}"),
    ("kill9_ready_s", "kill -9 ready s", "{:.1f}"),
    ("stop_s", "stop s", "{:.1f}"),
    ("clean_ready_s", "clean ready s", "{:.1f}"),
    ("files_open_max", "open files max", "{:,}"),
    ("rss_mib", "RSS MiB", "{:.0f}"),
]


def print_table(results: list[dict[str, Any]]) -> None:
    """One row per partition count."""
    cells = [[template.format(row[key]) for key, _, template in COLUMNS] for row in results]
    widths = [max(len(title), *(len(line[column]) for line in cells)) for column, (_, title, _) in enumerate(COLUMNS)]
    print("  ".join(title.rjust(width) for (_, title, _), width in zip(COLUMNS, widths)))
    for line in cells:
        print("  ".join(cell.rjust(width) for cell, width in zip(line, widths)))


def main() -> None:
    """Parse the options, lower the descriptor limit, run each partition count, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="1000,5000,10000", help="comma-separated partition counts")
    parser.add_argument("--records-per-partition", type=int, default=20)
    parser.add_argument("--files-max", type=int, default=1024, help="ulimit -n of the brokers (and this process)")
    parser.add_argument("--directory", default=None, help="where the brokers keep their data (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    counts = [int(count) for count in options.partitions.split(",")]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (options.files_max, hard))  # the brokers inherit it
    root = pathlib.Path(tempfile.mkdtemp(prefix="scale-bench-", dir=options.directory))
    results = []
    try:
        for count in counts:
            print(f"{count:,} partitions ...", file=sys.stderr, flush=True)
            results.append(measure(root, count, options.records_per_partition, options.seed))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if options.json:
        print(json.dumps(results, indent=2))
        return
    print(f"one broker, ulimit -n {options.files_max}, segment_files_open_max {limits.segment_files_open_max}, "
          f"{options.records_per_partition} x 100-byte records per partition, acks=all")
    print_table(results)


if __name__ == "__main__":
    main()
