"""fsync calls per request, rate and latency of one-record acks=1 produces: two source trees side by side in one run.

Run ``python benchmarks/fsync_rounds_ab.py BEFORE_TREE AFTER_TREE [--requests N] [--trials N] [--engine aio|thread]``,
with trees made by e.g. ``git archive 3b1521a | tar -x -C /tmp/before`` and ``git archive 4aeca2b | tar -x -C
/tmp/after`` (the commits before and after "no empty fsync rounds"). Needs ``perf`` (Linux perf events on syscalls).

The workload is the issue's strace case: one producer sends one 100-byte record per request, acks=1,
and waits for each acknowledgement before the next (fsync before ack, the default flush policy).
Per tree and trial: requests/s, p50/p99 round trip, and the fsync system calls the broker made
(``fsync`` + ``io_submit``, counted by ``perf stat`` on its pid) per request. The trees alternate,
and the medians and their after/before ratios are printed.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.client import Admin, Producer  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

SYSCALLS = ("fsync", "io_submit", "fdatasync")
WARM_UP_REQUESTS = 200
FIGURES = ("req_s", "p50_ms", "p99_ms", "sync_calls_per_req", "sync_calls_per_s")


def count_syscalls(pid: int) -> subprocess.Popen[str]:
    """Start ``perf stat`` counting the fsync system calls of ``pid`` (stop it with SIGINT)."""
    events = ",".join(f"syscalls:sys_enter_{name}" for name in SYSCALLS)
    return subprocess.Popen(["perf", "stat", "-x", ",", "-e", events, "-p", str(pid)], stderr=subprocess.PIPE, text=True)


def syscalls_counted(counter: subprocess.Popen[str]) -> int:
    """Stop ``counter`` and return the calls it counted."""
    counter.send_signal(signal.SIGINT)
    output = counter.communicate()[1]
    fields = [line.split(",") for line in output.splitlines()]
    return sum(int(field[0]) for field in fields if len(field) > 2 and field[0].isdigit())


def trial(tree: str, root: pathlib.Path, requests: int, engine: str) -> dict[str, float]:
    """One broker running ``tree``'s code; ``requests`` sequential one-record produces measured."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    broker = BrokerProcess(data_dir=root / "data", environment={"PYTHONPATH": tree},
                           extra_args=["--set", f"fsync_engine={engine}"])
    broker.data_dir.mkdir()
    broker.start(timeout_s=60)
    assert broker.process is not None
    try:
        with Admin(broker.bootstrap) as admin:
            admin.create_topics(["rounds"], partitions=1)
        with Producer(broker.bootstrap, acks=1, linger_ms=0) as producer:
            for _ in range(WARM_UP_REQUESTS):
                producer.send("rounds", b"w" * 100, partition=0).result(10)
            counter = count_syscalls(broker.process.pid)
            time.sleep(0.3)  # perf attaches
            round_trips_ms = []
            started = time.perf_counter()
            for _ in range(requests):
                sent = time.perf_counter()
                producer.send("rounds", b"v" * 100, partition=0).result(10)
                round_trips_ms.append((time.perf_counter() - sent) * 1000)
            seconds = time.perf_counter() - started
            calls = syscalls_counted(counter)
    finally:
        broker.stop()
    round_trips_ms.sort()
    return {"req_s": requests / seconds, "p50_ms": round_trips_ms[len(round_trips_ms) // 2],
            "p99_ms": round_trips_ms[int(len(round_trips_ms) * 0.99)],
            "sync_calls_per_req": calls / requests, "sync_calls_per_s": calls / seconds}


def main() -> None:
    """Alternate the two trees, print every trial, then the medians and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--engine", default="aio", choices=["aio", "thread"])
    options = parser.parse_args()
    trees = {"before": options.before, "after": options.after}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    root = pathlib.Path(tempfile.mkdtemp(prefix="fsync-rounds-ab-"))
    try:
        for number in range(options.trials):
            order = list(trees) if number % 2 == 0 else list(trees)[::-1]
            for name in order:
                results[name].append(trial(trees[name], root, options.requests, options.engine))
                print(name, json.dumps(results[name][-1]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    medians = {name: {key: statistics.median(run[key] for run in runs) for key in FIGURES}
               for name, runs in results.items()}
    print(f"{options.trials} alternating trials of {options.requests} one-record acks=1 requests, fsync_engine={options.engine}")
    for key in FIGURES:
        before, after = medians["before"][key], medians["after"][key]
        print(f"{key:<20} before {before:10.2f}  after {after:10.2f}  after/before {after / before:.2f}")


if __name__ == "__main__":
    main()
