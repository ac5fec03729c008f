"""The fsync engines (Linux AIO, a Python thread, a C thread) compared through a real broker: end-to-end latency, acks=all rate, CPU.

Run ``python benchmarks/fsync_engine_bench.py [--runs N] [--messages N] [--produce-messages N] [--consumer process|thread] [--json]``,
or ``... --fsync-alone N [--alone-interval-us U] [--directory DIR]`` for the disk's own AIO fsync latency (below).

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

``--fsync-alone N``: no broker, the AIO fsync alone as the ``aio`` engine runs one round of one log: N times,
append 100 B to one file, ``io_submit`` an fsync of it whose completion is signalled on an eventfd, wait for
the eventfd in ``select`` and reap the event (``--alone-interval-us`` between a completion and the next append;
0: back to back, as rounds follow each other under load). It prints the distribution of submit → reaped, and of
the ``io_submit`` call alone: what an acks=all record's own round costs on this disk, whatever the broker does.
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


def fsync_alone(rounds: int, interval_us: int, directory: str | None) -> dict[str, dict[str, float]]:
    """``rounds`` single-file AIO fsync rounds (see the module docstring): percentiles of the round and of its submit, µs."""
    import ctypes
    import os
    import select
    import shutil
    import time

    from libaio import libaio

    where = directory or tempfile.mkdtemp(prefix="fsync-alone-")
    handle = os.open(os.path.join(where, "alone.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    eventfd = os.eventfd(0, os.EFD_NONBLOCK)
    context = libaio.io_context_t()
    libaio.io_queue_init(4, ctypes.byref(context))
    block = libaio.iocb()
    libaio.io_prep_fsync(block, handle)
    libaio.io_set_eventfd(block, eventfd)
    blocks = (libaio.iocb_p * 1)(ctypes.pointer(block))
    events = (libaio.io_event * 1)()
    no_wait = ctypes.byref(libaio.timespec(0, 0))
    whole: list[float] = []
    submit: list[float] = []
    try:
        for _ in range(rounds):
            os.write(handle, b"x" * 100)
            started = time.monotonic_ns()
            libaio.io_submit(context, 1, blocks)
            submitted = time.monotonic_ns()
            while True:
                select.select([eventfd], [], [])
                os.read(eventfd, 8)
                if libaio.io_getevents(context, 0, 1, events, no_wait):
                    break
            whole.append((time.monotonic_ns() - started) / 1e3)
            submit.append((submitted - started) / 1e3)
            if interval_us:
                time.sleep(interval_us / 1e6)
    finally:
        libaio.io_queue_release(context)
        os.close(eventfd)
        os.close(handle)
        if not directory:
            shutil.rmtree(where, ignore_errors=True)

    def percentiles(values: list[float]) -> dict[str, float]:
        ordered = sorted(values)
        return {name: round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 1)
                for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))}

    return {"round_us": percentiles(whole), "io_submit_us": percentiles(submit)}


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
    parser.add_argument("--fsync-alone", type=int, default=0, metavar="N",
                        help="instead: N single-file AIO fsync rounds without a broker (see above)")
    parser.add_argument("--alone-interval-us", type=int, default=0, help="with --fsync-alone: pause between rounds")
    parser.add_argument("--directory", help="with --fsync-alone: where the file goes [default: a temporary directory]")
    arguments = parser.parse_args()
    if arguments.fsync_alone:
        import os

        alone = fsync_alone(arguments.fsync_alone, arguments.alone_interval_us, arguments.directory)
        print(json.dumps(alone) if arguments.json else
              f"{arguments.fsync_alone:,} AIO fsync rounds of one file, {arguments.alone_interval_us} µs apart, load "
              f"average {os.getloadavg()[0]:.1f}:\n" + "\n".join(
                  f"  {name:13}" + "  ".join(f"{key} {value:8,.1f}" for key, value in figures.items()) + " µs"
                  for name, figures in alone.items()))
        return
    result = run_all(arguments)
    if arguments.json:
        print(json.dumps(result))
    else:
        print_table(result)


if __name__ == "__main__":
    main()
