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

Beside each producer variant's rate it reports the CPU spent per record, by the producer's process (its
application and I/O threads) and by the broker, over the same timed span: on a shared machine CPU time holds
better than wall rates, and it shows which side a variant's extra cost is on.
Each transactional variant also reports, per transaction, its send loop and its commit (mean and median over the
round's transactions) and its slowest transaction: the rate is a mean, so a few slow transactions show as means
well above the medians.

Targets (issue 18): transactional at 1,000 records per transaction >= 70% of idempotent; commit p99 <= 20 ms.

``--baseline-source DIR`` compares against other code (e.g. ``git archive main | tar -x -C DIR``): a
second broker runs with ``PYTHONPATH=DIR`` beside this tree's, and every producer measurement runs in a
child process whose client comes from the same tree as its broker (client and broker change together);
every round and every batch of commits alternates between the two, and the report adds the baseline's
figures and this tree's speed-up.

``--fsync-engine`` sets every broker's ``fsync_engine``: the AIO engine (``auto``'s choice) submits each fsync round
with ``io_submit`` on the reactor, which now and then holds it for milliseconds, and the slowest transactions measured
were those (docs/transactions.md).

Run: ``python benchmarks/transactions_bench.py [--records N] [--rounds R] [--commits C] [--baseline-source DIR]
[--fsync-engine auto|aio|thread|worker] [--json]``.
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

from cputime import process_tree_cpu_s  # noqa: E402  (this script's directory)

from mqbroker.client import Admin, Consumer, Producer  # noqa: E402
from mqbroker.config import FSYNC_ENGINES  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

PARTITIONS = 3
VALUE = b"x" * 100
_names = itertools.count()


class Span:
    """The timed span of a producer measurement: wall time, this process's CPU, the broker's CPU.

    The broker's CPU is read by walking ``/proc`` (3-50 ms, by the machine's process count and load): the span's
    wall clock and this process's CPU start after that walk and stop before the closing one, so neither counts it.
    """

    def __init__(self, broker_pid: int) -> None:
        self._broker_pid = broker_pid
        self._broker_cpu_s = process_tree_cpu_s(broker_pid)
        self._process_cpu_s = time.process_time()
        self._started = time.perf_counter()

    def result(self, records: int) -> dict[str, float]:
        """Records per second, and microseconds of client and broker CPU per record, since the span began."""
        wall_s = time.perf_counter() - self._started
        client_s = time.process_time() - self._process_cpu_s
        broker_s = process_tree_cpu_s(self._broker_pid) - self._broker_cpu_s
        return {"rate": records / wall_s, "client_us": client_s * 1e6 / records, "broker_us": broker_s * 1e6 / records}


def _topic(admin: Admin, prefix: str) -> str:
    name = f"{prefix}-{next(_names)}"
    admin.create_topics([name], partitions=PARTITIONS)
    return name


def idempotent_rate(bootstrap: str, topic: str, records: int, broker_pid: int) -> dict[str, float]:
    """Records per second of an idempotent producer (acks=all), all acknowledged; CPU per record (``Span``)."""
    with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        producer.send(topic, value=VALUE, partition=0).result(10)  # connections and metadata outside the timing
        span = Span(broker_pid)
        for number in range(records):
            producer.send(topic, value=VALUE, partition=number % PARTITIONS)
        assert producer.flush() == 0
        return span.result(records)


def transactional_rate(
    bootstrap: str, topic: str, records: int, per_transaction: int, broker_pid: int
) -> dict[str, float]:
    """Records per second of a transactional producer committing every ``per_transaction`` records; CPU per
    record (``Span``)."""
    with Producer(bootstrap, transactional_id=f"bench-{topic}", linger_ms=5) as producer:
        producer.init_transactions()
        with producer.transaction():
            producer.send(topic, value=VALUE, partition=0)
        span = Span(broker_pid)
        sent = 0
        loops_ms, commits_ms = [], []
        while sent < records:
            began = time.perf_counter()
            producer.begin_transaction()
            for number in range(min(per_transaction, records - sent)):
                producer.send(topic, value=VALUE, partition=(sent + number) % PARTITIONS)
            sent += min(per_transaction, records - sent)
            sending_ended = time.perf_counter()
            producer.commit_transaction()
            loops_ms.append((sending_ended - began) * 1000)
            commits_ms.append((time.perf_counter() - sending_ended) * 1000)
        return {**span.result(records), **_phases(loops_ms, commits_ms)}


def _phases(loops_ms: list[float], commits_ms: list[float]) -> dict[str, float]:
    """Per transaction, in ms: the send loop (begin to last send) and the commit (flush and EndTxn), mean and median,
    and the slowest transaction. Means well above medians point at a few slow transactions, not a per-record cost."""
    totals = [loop + commit for loop, commit in zip(loops_ms, commits_ms)]
    return {"loop_mean_ms": statistics.fmean(loops_ms), "loop_p50_ms": statistics.median(loops_ms),
            "commit_mean_ms": statistics.fmean(commits_ms), "commit_p50_ms": statistics.median(commits_ms),
            "slowest_ms": max(totals)}


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


#: What ``_phases`` reports of each transactional variant (medians over the rounds).
PHASES = ("loop_mean_ms", "loop_p50_ms", "commit_mean_ms", "commit_p50_ms", "slowest_ms")
#: Commits timed against one broker before the other takes its turn (``--baseline-source``).
COMMITS_PER_TURN = 50


def _measure(
    source: str | None, kind: str, broker: BrokerProcess, topic: str, count: int, per_transaction: int = 0
) -> Any:
    """One producer measurement, in this process (``source`` None) or in a child using ``source``'s client."""
    assert broker.process is not None
    return _measure_here(source, kind, broker.bootstrap, broker.process.pid, topic, count, per_transaction)


def _measure_here(
    source: str | None, kind: str, bootstrap: str, broker_pid: int, topic: str, count: int, per_transaction: int
) -> Any:
    if source is None:
        if kind == "idempotent":
            return idempotent_rate(bootstrap, topic, count, broker_pid)
        if kind == "transactional":
            return transactional_rate(bootstrap, topic, count, per_transaction, broker_pid)
        return commit_latencies_ms(bootstrap, topic, count)
    command = [sys.executable, __file__, "--child", kind, bootstrap, str(broker_pid), topic, str(count),
               str(per_transaction)]
    child = subprocess.run(command, env={**os.environ, "MQBROKER_BENCH_SOURCE": source}, capture_output=True,
                           text=True, check=True, timeout=600)
    return json.loads(child.stdout)


def _summary(variants: dict[str, list[dict[str, float]]], latencies: list[float]) -> dict[str, Any]:
    medians = {name: statistics.median(span["rate"] for span in spans) for name, spans in variants.items()}
    cpu = {name: {side: round(statistics.median(span[f"{side}_us"] for span in spans), 2)
                  for side in ("client", "broker")} for name, spans in variants.items()}
    return {
        "records_per_s": {name: round(rate) for name, rate in medians.items()},
        "rounds_records_per_s": {name: [round(span["rate"]) for span in spans] for name, spans in variants.items()},
        "transaction_ms": {name: {phase: round(statistics.median(span[phase] for span in spans), 2) for phase in PHASES}
                           for name, spans in variants.items() if name != "idempotent"},
        "ratio_to_idempotent": {name: round(rate / medians["idempotent"], 3) for name, rate in medians.items()},
        "cpu_us_per_record": cpu,
        "commit_ms": {"p50": round(_percentile(latencies, 0.50), 2), "p99": round(_percentile(latencies, 0.99), 2),
                      "commits": len(latencies)},
    }


def run(records: int, rounds: int, commits: int, baseline_source: str | None = None,
        fsync_engine: str = "auto") -> dict[str, Any]:
    """Every measurement against one broker (two with ``baseline_source``); variants and brokers alternate."""
    sources = {"this": None if baseline_source is None else THIS_SOURCE, "baseline": baseline_source}
    engine = ["--set", f"fsync_engine={fsync_engine}"]
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as directory:
        brokers = {"this": BrokerProcess(data_dir=pathlib.Path(directory) / "data", extra_args=engine)}
        if baseline_source is not None:
            brokers["baseline"] = BrokerProcess(data_dir=pathlib.Path(directory) / "baseline", extra_args=engine,
                                                environment={"PYTHONPATH": str(pathlib.Path(baseline_source))})
        try:
            for broker in brokers.values():
                broker.start()
            variants: dict[str, dict[str, list[dict[str, float]]]] = {
                name: {"idempotent": [], "txn-10": [], "txn-100": [], "txn-1000": []} for name in brokers}
            latencies: dict[str, list[float]] = {name: [] for name in brokers}
            filled = ""
            admins = {name: Admin(broker.bootstrap) for name, broker in brokers.items()}
            try:
                for _ in range(rounds):
                    for name, broker in brokers.items():
                        admin, spans, source = admins[name], variants[name], sources[name]
                        spans["idempotent"].append(_measure(source, "idempotent", broker, _topic(admin, "idem"),
                                                            records))
                        for size in (10, 100, 1000):
                            topic = _topic(admin, f"txn{size}")
                            spans[f"txn-{size}"].append(_measure(source, "transactional", broker, topic, records,
                                                                 size))
                            if size == 1000 and name == "this":
                                filled = topic
                topics = {name: _topic(admins[name], "latency") for name in brokers}
                for turn in range(0, commits, COMMITS_PER_TURN):
                    for name, broker in brokers.items():
                        latencies[name] += _measure(sources[name], "commits", broker, topics[name],
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
        "records": records, "rounds": rounds, "fsync_engine": fsync_engine,
        **_summary(variants["this"], latencies["this"]),
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
        kind, bootstrap, broker_pid, topic, count, per_transaction = sys.argv[2:8]
        print(json.dumps(_measure_here(None, kind, bootstrap, int(broker_pid), topic, int(count),
                                       int(per_transaction))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=30_000, help="records per producer variant and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=300, help="commits timed for the latency")
    parser.add_argument("--baseline-source", metavar="DIR", help="also run a broker from this source tree, alternating")
    parser.add_argument("--fsync-engine", default="auto", choices=FSYNC_ENGINES,
                        help="every broker's fsync_engine [default: auto]")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    result = run(options.records, options.rounds, options.commits, options.baseline_source, options.fsync_engine)
    if options.json:
        print(json.dumps(result, indent=2))
        return
    print(f"fsync_engine {result['fsync_engine']}")
    print(f"{'variant':<12} {'records/s':>10} {'vs idempotent':>14} {'client us/rec':>14} {'broker us/rec':>14}")
    _print_variants(result)
    print(f"commit latency: p50 {result['commit_ms']['p50']} ms, p99 {result['commit_ms']['p99']} ms "
          f"({result['commit_ms']['commits']} commits of 10 records over {PARTITIONS} partitions)")
    reads = result["read_records_per_s"]
    print(f"reads: read_committed {reads['read_committed']}/s, read_uncommitted {reads['read_uncommitted']}/s")
    if "baseline" in result:
        baseline = result["baseline"]
        print(f"baseline ({baseline['source']}):")
        _print_variants(baseline, result["speedup_vs_baseline"])
        print(f"commit latency: p50 {baseline['commit_ms']['p50']} ms, p99 {baseline['commit_ms']['p99']} ms")


def _print_variants(summary: dict[str, Any], speedups: dict[str, float] | None = None) -> None:
    """One line per producer variant: rate, ratio to idempotent, CPU per record (and this tree's speed-up); then
    each transactional variant's phases per transaction."""
    for name, rate in summary["records_per_s"].items():
        cpu = summary["cpu_us_per_record"][name]
        line = (f"{name:<12} {rate:>10} {summary['ratio_to_idempotent'][name]:>14.2f} {cpu['client']:>14.2f} "
                f"{cpu['broker']:>14.2f}")
        print(line if speedups is None else f"{line}  this tree x{speedups[name]:.2f}")
    for name, phases in summary["transaction_ms"].items():
        print(f"  {name} per transaction: send loop mean {phases['loop_mean_ms']} / median {phases['loop_p50_ms']} ms, "
              f"commit mean {phases['commit_mean_ms']} / median {phases['commit_p50_ms']} ms, slowest "
              f"{phases['slowest_ms']} ms")


if __name__ == "__main__":
    main()
