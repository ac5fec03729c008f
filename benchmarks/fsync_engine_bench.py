"""The fsync engines (Linux AIO, a Python thread, a C thread) compared through a real broker: end-to-end latency, acks=all rate, CPU.

Run ``python benchmarks/fsync_engine_bench.py [--runs N] [--messages N] [--produce-messages N] [--consumer process|thread] [--json]``.

Each run starts one broker per engine (``twistd mqbroker --set fsync_engine=aio|thread|worker`` on
free ports, a fresh data directory, through the tests' ``BrokerProcess``), alternating which engine goes first, and runs the CLI
benchmarks against it:

* ``mqbroker bench e2e`` (5,000 msg/s, acks=all, 100 B, the ``sync`` flush policy): latency
  percentiles from send to receipt, and the broker's CPU time per message (from /proc); its consumer in a
  process of its own (``--consumer process``, the default) or on a thread of the producer's process;
* ``mqbroker bench produce --acks all`` (100 B, linger 5 ms): acknowledged messages/s and MB/s.

Failed sends and the fraction of e2e messages received are printed with the figures; an e2e
percentile that falls on a lost message shows as ``inf``.

The engines differ only in where a round's fsyncs run; what that changes is how the broker's
threads share two CPUs with the client's, so only a whole broker under a real client shows it
(in a process of its own, the thread is the faster by the AIO workqueue's ~40 µs hop). Progress
goes to stderr; the table (or one JSON object with ``--json``) to stdout; figures are medians
over the runs, every run is in ``per_run``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from cputime import process_tree_cpu_s

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for tests.integration

from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

ENGINES = ("aio", "thread", "worker")
E2E_KEYS = ("p50", "p90", "p99", "p999")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cli_bench(bootstrap: str, mode: str, arguments: list[str]) -> dict[str, Any]:
    """One ``mqbroker bench`` run; its JSON summary."""
    command = [sys.executable, "-c", "import sys; from mqbroker.cli import main; sys.exit(main())", "bench", mode, "-b", bootstrap, "--json", *arguments]
    output = subprocess.run(command, capture_output=True, text=True, check=True, timeout=600).stdout
    return json.loads(output.strip().splitlines()[-1])


def measure(engine: str, work: Path, arguments: argparse.Namespace) -> dict[str, float]:
    broker = BrokerProcess(data_dir=work / "data", extra_args=["--mqtt-port", "0", "--amqp-port", "0",
                                                              "--set", f"fsync_engine={engine}"])
    broker.start()
    try:
        pid = broker.process.pid
        cpu_before = process_tree_cpu_s(pid)
        e2e = cli_bench(broker.bootstrap, "e2e", ["--messages", str(arguments.messages), "--consumer", arguments.consumer])
        cpu_s = process_tree_cpu_s(pid) - cpu_before
        produce = cli_bench(broker.bootstrap, "produce", ["--acks", "all", "--messages", str(arguments.produce_messages)])
    finally:
        broker.kill()
    lost = float("inf")  # bench reports a percentile that falls on a lost message as None
    figures = {f"e2e_{key}_ms": lost if e2e["latency_ms"][key] is None else e2e["latency_ms"][key] for key in E2E_KEYS}
    figures["e2e_received_fraction"] = e2e["messages"] / e2e["sent"]
    figures["broker_cpu_us_per_message"] = cpu_s / max(e2e["messages"], 1) * 1e6
    figures["produce_all_messages_per_s"] = produce["messages_per_s"]  # acknowledged messages only
    figures["produce_all_mb_per_s"] = produce["mb_per_s"]
    figures["sends_failed"] = e2e["failed"] + produce["failed"]
    return figures


def run_all(arguments: argparse.Namespace) -> dict[str, Any]:
    per_run: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory(prefix="fsync-engine-bench-") as root:
        for number in range(arguments.runs):
            order = ENGINES if number % 2 == 0 else tuple(reversed(ENGINES))
            run: dict[str, dict[str, float]] = {}
            for engine in order:
                progress(f"run {number + 1}/{arguments.runs}: broker with fsync_engine={engine} ...")
                work = Path(root) / f"run{number}-{engine}"
                work.mkdir()
                run[engine] = measure(engine, work, arguments)
                progress(f"  e2e p50 {run[engine]['e2e_p50_ms']:.3f} ms, "
                         f"acks=all produce {run[engine]['produce_all_messages_per_s']:,.0f} msg/s")
            per_run.append(run)
    medians = {engine: {key: statistics.median(run[engine][key] for run in per_run) for key in per_run[0][engine]}
               for engine in ENGINES}
    p50_ratio = statistics.median(run["aio"]["e2e_p50_ms"] / run["thread"]["e2e_p50_ms"] for run in per_run)
    return {"messages": arguments.messages, "produce_messages": arguments.produce_messages,
            "consumer": arguments.consumer, "medians": medians,
            "e2e_p50_aio_to_thread_ratio": p50_ratio, "per_run": per_run}


def _decimals(key: str) -> int:
    return 3 if key.endswith("_ms") else 0 if key.endswith("messages_per_s") else 1


def print_table(result: dict[str, Any]) -> None:
    columns = [("e2e p50 ms", "e2e_p50_ms"), ("p90 ms", "e2e_p90_ms"), ("p99 ms", "e2e_p99_ms"),
               ("p99.9 ms", "e2e_p999_ms"), ("broker µs/msg", "broker_cpu_us_per_message"),
               ("acks=all msg/s", "produce_all_messages_per_s"), ("MB/s", "produce_all_mb_per_s")]
    print(f"e2e: {result['messages']:,} messages at 5,000/s, acks=all; produce: {result['produce_messages']:,} "
          f"messages, acks=all (other settings: bench defaults, 100 B, linger 5 ms); e2e consumer: "
          f"{result['consumer']}; medians of "
          f"{len(result['per_run'])} runs; rates count acknowledged messages, percentiles every message sent")
    print(f"{'engine':<8}" + "".join(f"{title:>16}" for title, _ in columns))
    for engine in ENGINES:
        figures = result["medians"][engine]
        print(f"{engine:<8}" + "".join(f"{figures[key]:>16,.{_decimals(key)}f}" for _, key in columns))
    print(f"e2e p50, aio / thread (median of per-run ratios): {result['e2e_p50_aio_to_thread_ratio']:.2f}")
    for engine in ENGINES:
        runs = [run[engine] for run in result["per_run"]]
        print(f"{engine}: sends failed {sum(run['sends_failed'] for run in runs):.0f}, e2e received "
              f"{min(run['e2e_received_fraction'] for run in runs):.2%} at worst")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="runs, alternating which engine goes first")
    parser.add_argument("--messages", type=int, default=30_000, help="messages of each e2e run (at 5,000/s)")
    parser.add_argument("--produce-messages", type=int, default=300_000, help="messages of each acks=all produce run")
    parser.add_argument("--consumer", default="process", choices=["process", "thread"],
                        help="where bench e2e's consumer runs [default: a process of its own]")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    arguments = parser.parse_args()
    result = run_all(arguments)
    if arguments.json:
        print(json.dumps(result))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
