"""Brokers built from several source trees, measured by the same client, alternating: did a change cost anything?

Run ``python benchmarks/broker_tree_ab.py [--rounds N] [--client TREE] TREE [TREE ...]`` where each TREE is a
source checkout (e.g. ``git archive <commit> | tar -x -C /tmp/old``; build the C record decoder in it with
``python setup.py -q build_ext --inplace`` where it has one). For each round and tree (the order reverses every
round) it starts that tree's broker (``twistd -n mqbroker`` with the tree first on ``PYTHONPATH``, free ports, a
fresh data directory) and runs ``mqbroker bench`` from the client tree (default: each tree's own client) against it:

* ``bench produce`` (1,000,000 × 100 B, acks=1) and ``bench consume`` of what it wrote: messages/s;
* ``bench e2e`` (5,000 msg/s unless ``--e2e-rate``, acks=all, fsync before ack): latency percentiles from send to receipt, once with
  the consumer in a process of its own and once on a thread of the producer's process (issue 24: the second
  adds the client's own interpreter-lock hand-overs; a client tree without ``--consumer`` runs only that one);
* the broker's CPU time per message in each (from /proc, process and threads), and in the e2e runs per
  native produce or fetch request (from /metrics) with the messages per produce request: a busy machine
  makes the producer batch more, which cuts the CPU per message while the broker does the same work.

``--e2e-only`` skips produce and consume. A TREE written ``TREE::name=value[,name=value]`` runs its broker with
those settings (``--set``), so one tree can be compared with itself, e.g. ``<tree> <tree>::fsync_engine=worker``.

Pinning ``--client`` to one tree isolates the broker; leaving it out compares whole releases. The table gives
medians over the rounds and the ratio of each tree to the first, then each figure's rounds in order (the spread a
median hides: a p99 over 10,000 messages moves from round to round); ``--json`` prints every round instead.
This is how the layout change (issue 16) was checked against the tree before it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from cputime import process_tree_cpu_s

LISTENERS = ("native", "mqtt", "amqp", "http")
#: Where ``bench e2e``'s consumer runs: a process of its own (as deployed), or a thread of the producer's process
#: (the method before issue 24; clients without ``--consumer`` have only that one).
E2E_CONSUMERS = ("process", "thread")
FIGURES = (
    ("produce msg/s", "produce", "messages_per_s"),
    ("produce broker CPU µs/msg", "produce", "broker_cpu_us"),
    ("consume msg/s", "consume", "messages_per_s"),
    *((f"e2e {method} {label}", f"e2e-{method}", key)
      for method in E2E_CONSUMERS
      for label, key in (("p50 ms", "p50"), ("p99 ms", "p99"), ("p99.9 ms", "p999"), ("broker CPU µs/msg", "broker_cpu_us"),
                         ("messages/produce request", "messages_per_produce"),
                         ("broker CPU µs/request", "broker_cpu_us_per_request"))),
)
#: Native requests counted for "broker CPU µs/request": on a busy machine the e2e producer batches more
#: messages per request, which lowers the CPU per message without any change to the broker.
COUNTED_APIS = ("produce", "fetch")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class TreeBroker:
    """One broker run from a source tree, on free ports with a fresh data directory."""

    def __init__(self, tree: Path, launcher: tuple[str, ...] = ("-c", "from twisted.scripts.twistd import run; run()"),
                 settings: tuple[str, ...] = ()) -> None:
        """Start the broker: ``python <launcher> <twistd arguments>`` (a benchmark may launch twistd its own way),
        with ``--set`` of each ``name=value`` of ``settings``."""
        self.tree = tree
        self.work = Path(tempfile.mkdtemp(prefix="tree-ab-"))
        self.ports = {name: free_port() for name in LISTENERS}
        command = [sys.executable, *launcher, "-n", "--pidfile=",
                   "mqbroker", "--data-dir", str(self.work / "data"), "--controller-port", "0"]
        command += [argument for setting in settings for argument in ("--set", setting)]
        command += [argument for name, port in self.ports.items() for argument in (f"--{name}-port", str(port))]
        if "kafka_port" in (tree / "mqbroker" / "config.py").read_text():  # trees from before the Kafka front end
            command += ["--kafka-port", "0"]
        self.process = subprocess.Popen(command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                                        stdout=(self.work / "broker.log").open("w"), stderr=subprocess.STDOUT)
        self._wait_ready()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports['native']}"

    def _wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['http']}/ready", timeout=1) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"broker of {self.tree} not ready:\n{(self.work / 'broker.log').read_text()[-2000:]}")

    def cpu_s(self) -> float:
        return process_tree_cpu_s(self.process.pid)

    def requests(self) -> dict[str, float]:
        """Native requests answered so far, per API of ``COUNTED_APIS`` (from the broker's /metrics)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['http']}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        counts = dict.fromkeys(COUNTED_APIS, 0.0)
        for line in text.splitlines():
            if line.startswith("mqbroker_request_latency_seconds_count{") and 'protocol="native"' in line:
                api = line.split('api="', 1)[1].split('"', 1)[0]
                if api in counts:
                    counts[api] = float(line.rsplit(" ", 1)[1])
        return counts

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)
        shutil.rmtree(self.work, ignore_errors=True)


def cli_bench(client: Path, bootstrap: str, arguments: list[str]) -> dict[str, Any]:
    """One ``mqbroker bench`` run from the client tree; its JSON summary."""
    command = [sys.executable, "-c", "import sys; from mqbroker.cli import main; sys.exit(main())", "bench",
               *arguments, "-b", bootstrap, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=client, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(client)})
    if done.returncode:
        raise RuntimeError(f"bench {' '.join(arguments)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def e2e_runs(client: Path, e2e_messages: int, methods: list[str], rate: int) -> list[tuple[str, list[str], int]]:
    """``bench e2e`` at ``rate`` messages/s once per consumer placement of ``methods`` the client offers."""
    arguments = ["e2e", "--messages", str(e2e_messages), "--rate", str(rate)]
    if "--consumer" not in (client / "mqbroker" / "cli" / "bench.py").read_text():
        return [("e2e-thread", arguments, e2e_messages)] if "thread" in methods else []
    return [(f"e2e-{method}", [*arguments, "--consumer", method], e2e_messages) for method in methods]


def measure(tree: Path, client: Path, e2e_messages: int, throughput: bool,
            e2e_methods: list[str], e2e_rate: int, settings: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """One round on one tree: produce and consume (with ``throughput``), then e2e against a fresh broker."""
    broker = TreeBroker(tree, settings=settings)
    try:
        figures: dict[str, dict[str, float]] = {}
        topic = f"tree-ab-{os.getpid()}-{time.time_ns()}"
        runs = [
            ("produce", ["produce", "--topic", topic, "--messages", "1000000"], 1_000_000),
            ("consume", ["consume", "--topic", topic, "--messages", "1000000"], 1_000_000),
        ] if throughput else []
        for mode, arguments, messages in runs + e2e_runs(client, e2e_messages, e2e_methods, e2e_rate):
            requests_before, before = broker.requests(), broker.cpu_s()
            result = cli_bench(client, broker.bootstrap, arguments)
            cpu_s = broker.cpu_s() - before
            requests = {api: count - requests_before[api] for api, count in broker.requests().items()}
            figures[mode] = {"messages_per_s": result["messages_per_s"],
                             "broker_cpu_us": cpu_s / messages * 1e6,
                             "messages_per_produce": messages / max(1.0, requests["produce"]),
                             "broker_cpu_us_per_request": cpu_s / max(1.0, sum(requests.values())) * 1e6,
                             **result.get("latency_ms", {})}
        return figures
    finally:
        broker.stop()


def name(tree: str) -> str:
    """A tree argument as the table names it: the directory's name, and its settings."""
    path, _, settings = tree.partition("::")
    return Path(path).name + (f"+{settings}" if settings else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", help="source trees (TREE::name=value,... adds broker settings); ratios are "
                                                 "to the first")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the order of the trees")
    parser.add_argument("--client", type=Path, help="run every bench with this tree's client [default: each tree's own]")
    parser.add_argument("--e2e-messages", type=int, default=30_000, help="messages of each e2e run (at 5,000/s)")
    parser.add_argument("--e2e-rate", type=int, default=5_000,
                        help="e2e messages/s; at ~1,000 or less each produce request carries about one message, so the "
                             "broker CPU per message hardly depends on how busy the machine is [default: 5000]")
    parser.add_argument("--e2e-only", action="store_true", help="skip the produce and consume runs")
    parser.add_argument("--e2e-consumer", choices=E2E_CONSUMERS, action="append",
                        help="run e2e with only this consumer placement (repeatable) [default: both]")
    parser.add_argument("--json", action="store_true", help="print every round as JSON instead of the table")
    arguments = parser.parse_args()
    variants = {argument: (Path(argument.partition("::")[0]).resolve(),
                           tuple(filter(None, argument.partition("::")[2].split(","))))
                for argument in arguments.trees}
    trees = list(variants)
    rounds: dict[str, list[dict[str, dict[str, float]]]] = {tree: [] for tree in trees}
    for number in range(arguments.rounds):
        for tree in trees if number % 2 == 0 else trees[::-1]:
            progress(f"-- round {number + 1}: {tree}")
            source, settings = variants[tree]
            rounds[tree].append(measure(source, (arguments.client or source).resolve(), arguments.e2e_messages,
                                        throughput=not arguments.e2e_only,
                                        e2e_methods=arguments.e2e_consumer or list(E2E_CONSUMERS),
                                        e2e_rate=arguments.e2e_rate, settings=settings))
    if arguments.json:
        print(json.dumps(rounds))
        return 0
    load = os.getloadavg()[0]
    print(f"medians of {arguments.rounds} round(s); load average {load:.1f} at the end; ratio to {trees[0]}")
    print(f"{'':32}" + "".join(f"{name(tree)[-14:]:>16}{'ratio':>8}" for tree in trees))
    for label, mode, key in FIGURES:
        if any(mode not in run or run[mode].get(key) is None for tree in trees for run in rounds[tree]):
            continue  # not measured (a client without that e2e method, --e2e-only) or lost messages
        medians = [statistics.median(run[mode][key] for run in rounds[tree]) for tree in trees]
        print(f"{label:32}" + "".join(f"{value:16,.3f}{value / medians[0]:8.2f}" for value in medians))
    print("each round, in order (the trees alternate which goes first):")
    for label, mode, key in FIGURES:
        if any(mode not in run or run[mode].get(key) is None for tree in trees for run in rounds[tree]):
            continue
        print(f"{label:40}" + "   ".join(f"{name(tree)[-14:]}: " + " ".join(f"{run[mode][key]:,.3g}" for run in rounds[tree])
                                         for tree in trees))
    return 0


if __name__ == "__main__":
    sys.exit(main())
