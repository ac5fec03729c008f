"""Transactions benchmark: transactional vs idempotent producer throughput, commit latency, read_committed reads.

Starts a broker (``twistd mqbroker`` on free ports, temporary data directory; the default flush
policy, fsync before acknowledging), creates a 3-partition topic per variant, then in one run:

* throughput of 100-byte records from one blocking producer: idempotent (no transactions), and
  transactional with 10, 100 and 1,000 records per transaction (each transaction writes to all
  three partitions and commits; the time includes the commits). The variants alternate over
  ``--rounds`` rounds and each reports its median, so the ratios compare like with like;
* commit latency: ``commit_transaction`` of small transactions (10 records over 3 partitions),
  p50 and p99 over ``--commits`` commits (the flush of the records is outside the timing);
* read_committed consumer throughput over the topic the 1,000-record transactions filled,
  against read_uncommitted over the same data.

Targets (issue 18): transactional at 1,000 records per transaction >= 70% of idempotent; commit p99 <= 20 ms.

Run: ``python benchmarks/transactions_bench.py [--records N] [--rounds R] [--commits C] [--json]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.client import Admin, Consumer, Producer  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

PARTITIONS = 3
VALUE = b"x" * 100
_names = itertools.count()


def _topic(admin: Admin, prefix: str) -> str:
    name = f"{prefix}-{next(_names)}"
    admin.create_topics([name], partitions=PARTITIONS)
    return name


def idempotent_rate(bootstrap: str, topic: str, records: int) -> float:
    """Records per second of an idempotent producer (acks=all), all acknowledged."""
    with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        producer.send(topic, value=VALUE, partition=0).result(10)  # connections and metadata outside the timing
        started = time.perf_counter()
        for number in range(records):
            producer.send(topic, value=VALUE, partition=number % PARTITIONS)
        assert producer.flush() == 0
        return records / (time.perf_counter() - started)


def transactional_rate(bootstrap: str, topic: str, records: int, per_transaction: int) -> float:
    """Records per second of a transactional producer committing every ``per_transaction`` records."""
    with Producer(bootstrap, transactional_id=f"bench-{topic}", linger_ms=5) as producer:
        producer.init_transactions()
        with producer.transaction():
            producer.send(topic, value=VALUE, partition=0)
        started = time.perf_counter()
        sent = 0
        while sent < records:
            producer.begin_transaction()
            for number in range(min(per_transaction, records - sent)):
                producer.send(topic, value=VALUE, partition=(sent + number) % PARTITIONS)
            sent += min(per_transaction, records - sent)
            producer.commit_transaction()
        return records / (time.perf_counter() - started)


def commit_latencies_ms(bootstrap: str, topic: str, commits: int) -> list[float]:
    """How long each ``commit_transaction`` of a 10-record, 3-partition transaction took (records flushed first)."""
    latencies = []
    with Producer(bootstrap, transactional_id=f"latency-{topic}", linger_ms=0) as producer:
        producer.init_transactions()
        for _ in range(commits):
            producer.begin_transaction()
            for number in range(10):
                producer.send(topic, value=VALUE, partition=number % PARTITIONS)
            producer.flush()
            started = time.perf_counter()
            producer.commit_transaction()
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def read_rate(bootstrap: str, topic: str, expected: int, isolation_level: str) -> float:
    """Records per second read from the beginning of ``topic`` at ``isolation_level``."""
    with Consumer(bootstrap, topics=[topic], auto_offset_reset="earliest", isolation_level=isolation_level,
                  partition_max_bytes=256 * 1024) as consumer:
        started = time.perf_counter()  # from the first fetch on: the whole topic is read inside the timing
        read = 0
        while read < expected:
            batch = consumer.poll(5.0)
            if not batch:
                raise RuntimeError(f"read {read} of {expected} records, then nothing for 5 s")
            read += len(batch)
        return read / (time.perf_counter() - started)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run(records: int, rounds: int, commits: int) -> dict[str, Any]:
    """Every measurement against one broker; the producer variants alternate round by round."""
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as directory:
        broker = BrokerProcess(data_dir=pathlib.Path(directory) / "data")
        broker.start()
        try:
            bootstrap = broker.bootstrap
            variants: dict[str, list[float]] = {"idempotent": [], "txn-10": [], "txn-100": [], "txn-1000": []}
            filled = ""
            with Admin(bootstrap) as admin:
                for _ in range(rounds):
                    variants["idempotent"].append(idempotent_rate(bootstrap, _topic(admin, "idem"), records))
                    for size in (10, 100, 1000):
                        topic = _topic(admin, f"txn{size}")
                        variants[f"txn-{size}"].append(transactional_rate(bootstrap, topic, records, size))
                        if size == 1000:
                            filled = topic
                latencies = commit_latencies_ms(bootstrap, _topic(admin, "latency"), commits)
            expected = records + 1  # the warm-up transaction's record
            committed_reads = read_rate(bootstrap, filled, expected, "read_committed")
            uncommitted_reads = read_rate(bootstrap, filled, expected, "read_uncommitted")
        finally:
            broker.kill()
    medians = {name: statistics.median(rates) for name, rates in variants.items()}
    return {
        "records": records, "rounds": rounds,
        "records_per_s": {name: round(rate) for name, rate in medians.items()},
        "ratio_to_idempotent": {name: round(rate / medians["idempotent"], 3) for name, rate in medians.items()},
        "commit_ms": {"p50": round(_percentile(latencies, 0.50), 2), "p99": round(_percentile(latencies, 0.99), 2),
                      "commits": commits},
        "read_records_per_s": {"read_committed": round(committed_reads), "read_uncommitted": round(uncommitted_reads)},
    }


def main() -> None:
    """Parse the options, run, print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000, help="records per producer variant and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=300, help="commits timed for the latency")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    result = run(options.records, options.rounds, options.commits)
    if options.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'variant':<12} {'records/s':>10} {'vs idempotent':>14}")
    for name, rate in result["records_per_s"].items():
        print(f"{name:<12} {rate:>10} {result['ratio_to_idempotent'][name]:>14.2f}")
    print(f"commit latency: p50 {result['commit_ms']['p50']} ms, p99 {result['commit_ms']['p99']} ms "
          f"({result['commit_ms']['commits']} commits of 10 records over {PARTITIONS} partitions)")
    reads = result["read_records_per_s"]
    print(f"reads: read_committed {reads['read_committed']}/s, read_uncommitted {reads['read_uncommitted']}/s")


if __name__ == "__main__":
    main()
