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

``--baseline-source DIR`` compares against other code (e.g. ``git archive main | tar -x -C DIR``): a
second broker runs with ``PYTHONPATH=DIR`` beside this tree's, and every producer measurement runs in a
child process whose client comes from the same tree as its broker (client and broker change together);
every round and every batch of commits alternates between the two, and the report adds the baseline's
figures and this tree's speed-up.

Run: ``python benchmarks/transactions_bench.py [--records N] [--rounds R] [--commits C] [--baseline-source DIR]
[--json]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

THIS_SOURCE = str(pathlib.Path(__file__).resolve().parents[1])
#: A child measuring with another tree's client (``--child``) imports that tree first.
sys.path.insert(0, os.environ.get("MQBROKER_BENCH_SOURCE", THIS_SOURCE))

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


#: Commits timed against one broker before the other takes its turn (``--baseline-source``).
COMMITS_PER_TURN = 50


def _measure(source: str | None, kind: str, bootstrap: str, topic: str, count: int, per_transaction: int = 0) -> Any:
    """One producer measurement, in this process (``source`` None) or in a child using ``source``'s client."""
    if source is None:
        if kind == "idempotent":
            return idempotent_rate(bootstrap, topic, count)
        if kind == "transactional":
            return transactional_rate(bootstrap, topic, count, per_transaction)
        return commit_latencies_ms(bootstrap, topic, count)
    command = [sys.executable, __file__, "--child", kind, bootstrap, topic, str(count), str(per_transaction)]
    child = subprocess.run(command, env={**os.environ, "MQBROKER_BENCH_SOURCE": source}, capture_output=True,
                           text=True, check=True, timeout=600)
    return json.loads(child.stdout)


def _summary(variants: dict[str, list[float]], latencies: list[float]) -> dict[str, Any]:
    medians = {name: statistics.median(rates) for name, rates in variants.items()}
    return {
        "records_per_s": {name: round(rate) for name, rate in medians.items()},
        "rounds_records_per_s": {name: [round(rate) for rate in rates] for name, rates in variants.items()},
        "ratio_to_idempotent": {name: round(rate / medians["idempotent"], 3) for name, rate in medians.items()},
        "commit_ms": {"p50": round(_percentile(latencies, 0.50), 2), "p99": round(_percentile(latencies, 0.99), 2),
                      "commits": len(latencies)},
    }


def run(records: int, rounds: int, commits: int, baseline_source: str | None = None) -> dict[str, Any]:
    """Every measurement against one broker (two with ``baseline_source``); variants and brokers alternate."""
    sources = {"this": None if baseline_source is None else THIS_SOURCE, "baseline": baseline_source}
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as directory:
        brokers = {"this": BrokerProcess(data_dir=pathlib.Path(directory) / "data")}
        if baseline_source is not None:
            brokers["baseline"] = BrokerProcess(data_dir=pathlib.Path(directory) / "baseline",
                                                environment={"PYTHONPATH": str(pathlib.Path(baseline_source))})
        try:
            for broker in brokers.values():
                broker.start()
            variants = {name: {"idempotent": [], "txn-10": [], "txn-100": [], "txn-1000": []} for name in brokers}
            latencies: dict[str, list[float]] = {name: [] for name in brokers}
            filled = ""
            admins = {name: Admin(broker.bootstrap) for name, broker in brokers.items()}
            try:
                for _ in range(rounds):
                    for name, broker in brokers.items():
                        bootstrap, admin, rates, source = broker.bootstrap, admins[name], variants[name], sources[name]
                        rates["idempotent"].append(_measure(source, "idempotent", bootstrap, _topic(admin, "idem"),
                                                            records))
                        for size in (10, 100, 1000):
                            topic = _topic(admin, f"txn{size}")
                            rates[f"txn-{size}"].append(_measure(source, "transactional", bootstrap, topic, records,
                                                                 size))
                            if size == 1000 and name == "this":
                                filled = topic
                topics = {name: _topic(admins[name], "latency") for name in brokers}
                for turn in range(0, commits, COMMITS_PER_TURN):
                    for name, broker in brokers.items():
                        latencies[name] += _measure(sources[name], "commits", broker.bootstrap, topics[name],
                                                    min(COMMITS_PER_TURN, commits - turn))
            finally:
                for admin in admins.values():
                    admin.close()
            bootstrap = brokers["this"].bootstrap
            expected = records + 1  # the warm-up transaction's record
            committed_reads = read_rate(bootstrap, filled, expected, "read_committed")
            uncommitted_reads = read_rate(bootstrap, filled, expected, "read_uncommitted")
        finally:
            for broker in brokers.values():
                broker.kill()
    result: dict[str, Any] = {
        "records": records, "rounds": rounds, **_summary(variants["this"], latencies["this"]),
        "read_records_per_s": {"read_committed": round(committed_reads), "read_uncommitted": round(uncommitted_reads)},
    }
    if baseline_source is not None:
        baseline = _summary(variants["baseline"], latencies["baseline"])
        result["baseline"] = {"source": baseline_source, **baseline}
        result["speedup_vs_baseline"] = {
            name: round(rate / baseline["records_per_s"][name], 3) for name, rate in result["records_per_s"].items()}
    return result


def main() -> None:
    """Parse the options, run, print a table or JSON."""
    if sys.argv[1:2] == ["--child"]:  # one measurement for a parent comparing trees: its result as JSON
        kind, bootstrap, topic, count, per_transaction = sys.argv[2:7]
        print(json.dumps(_measure(None, kind, bootstrap, topic, int(count), int(per_transaction))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000, help="records per producer variant and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=300, help="commits timed for the latency")
    parser.add_argument("--baseline-source", metavar="DIR", help="also run a broker from this source tree, alternating")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    result = run(options.records, options.rounds, options.commits, options.baseline_source)
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
    if "baseline" in result:
        baseline = result["baseline"]
        print(f"baseline ({baseline['source']}):")
        for name, rate in baseline["records_per_s"].items():
            print(f"{name:<12} {rate:>10} {baseline['ratio_to_idempotent'][name]:>14.2f}  "
                  f"this tree x{result['speedup_vs_baseline'][name]:.2f}")
        print(f"commit latency: p50 {baseline['commit_ms']['p50']} ms, p99 {baseline['commit_ms']['p99']} ms")


if __name__ == "__main__":
    main()
