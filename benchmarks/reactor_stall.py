"""How long the reactor is held per group-commit round, and how late it runs its timers, under a full-rate load.

Run ``python benchmarks/reactor_stall.py [--rounds N] [--partitions P] [--messages M] [--fsync-engine E] TREE [TREE ...]``
where each TREE is a source checkout with its C extensions built. For each round and tree (the order reverses every
round) it starts that tree's broker through wrappers installed before ``twistd`` runs, then ``mqbroker bench produce``
(acks=all, ``--partitions`` partitions, as fast as one client goes; each tree's own client) against it, and prints the
medians over the rounds of:

* the hand-over: wall time the reactor spends inside ``Flusher._start_round`` for each round it starts (capturing each
  log's descriptors and handing them to the fsync engine: with ``aio`` that is the ``io_submit``, which can block in
  the kernel), p50 / p99 / max, its sum, and the reactor thread's CPU time inside it (wall minus CPU: blocked);
* the stall probe: a timer asked every 1 ms on the reactor; each firing's lateness (how long after its due time it
  ran: whatever held the reactor), p50 / p99 / max, and the time lost to firings later than 5 ms;
* the produce rate (acknowledged messages/s) and the broker's CPU per message.

Only what happens while the producer runs counts. ``--fsync-engine`` sets every broker's ``fsync_engine`` (default:
each tree's own default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from broker_tree_ab import TreeBroker, cli_bench

#: The stall probe's period.
PROBE_S = 0.001
#: A probe firing later than this is counted as a stall.
STALL_NS = 5_000_000


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the broker child: wrappers, then twistd --------------------------------------------------------------

def run_probed_broker(out_path: str) -> None:
    """Time each round's start, run the 1-ms probe, run ``twistd`` (arguments after ours); dump as it stops."""
    from twisted.internet import reactor

    from mqbroker import service
    from mqbroker.durability import flusher

    now, cpu = time.monotonic_ns, time.thread_time_ns
    hand_overs: list[tuple[int, int, int]] = []  # (started at, wall ns, reactor thread CPU ns)
    lateness: list[tuple[int, int]] = []  # (due at, ns late)
    start_round = flusher.Flusher._start_round

    def timed_start_round(self: Any, *args: Any, **kwargs: Any) -> None:
        rounds, started, started_cpu = self.rounds, now(), cpu()
        start_round(self, *args, **kwargs)
        if self.rounds != rounds:
            hand_overs.append((started, now() - started, cpu() - started_cpu))

    flusher.Flusher._start_round = timed_start_round  # type: ignore[method-assign]
    period_ns = int(PROBE_S * 1e9)

    def tick(due: int) -> None:
        at = now()
        lateness.append((due, at - due))
        reactor.callLater(PROBE_S, tick, at + period_ns)

    reactor.callWhenRunning(lambda: reactor.callLater(PROBE_S, tick, now() + period_ns))
    stop_service = service.BrokerService.stopService

    def dump(self: Any) -> Any:
        Path(out_path).write_text(json.dumps({"hand_overs": hand_overs, "lateness": lateness}))
        return stop_service(self)

    service.BrokerService.stopService = dump  # type: ignore[method-assign]
    from twisted.scripts.twistd import run

    sys.argv = ["twistd", *sys.argv[3:]]
    run()


# -- the parent ---------------------------------------------------------------------------------------------

def at(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def measure(tree: Path, arguments: argparse.Namespace) -> dict[str, float]:
    """One broker of ``tree`` under one ``bench produce``: its hand-overs, probe lateness, rate and CPU."""
    events_path = Path(f"/tmp/reactor-stall-{os.getpid()}-{time.time_ns()}.json")
    settings = (f"fsync_engine={arguments.fsync_engine}",) if arguments.fsync_engine else ()
    broker = TreeBroker(tree, launcher=(str(Path(__file__).resolve()), "--broker-child", str(events_path)),
                        settings=settings)
    try:
        topic = f"stall-{os.getpid()}-{time.time_ns()}"
        cpu_before, began = broker.cpu_s(), time.monotonic_ns()
        result = cli_bench(tree, broker.bootstrap, ["produce", "--topic", topic, "--partitions", str(arguments.partitions),
                                                    "--acks", "all", "--messages", str(arguments.messages),
                                                    "--batch-size", "16384", "--linger-ms", "1"])
        ended, cpu_s = time.monotonic_ns(), broker.cpu_s() - cpu_before
    finally:
        broker.stop()
    events = json.loads(events_path.read_text())
    events_path.unlink()
    inside = [(wall, cpu_ns) for started, wall, cpu_ns in events["hand_overs"] if began <= started <= ended]
    walls = sorted(wall / 1e3 for wall, _ in inside)
    late = sorted(late / 1e3 for due, late in events["lateness"] if began <= due <= ended)
    return {"produce msg/s": result["messages_per_s"], "broker CPU µs/msg": cpu_s / arguments.messages * 1e6,
            "rounds": len(inside), "hand-over p50 µs": at(walls, 0.5), "hand-over p99 µs": at(walls, 0.99),
            "hand-over max µs": at(walls, 1.0), "hand-over sum ms": sum(walls) / 1e3,
            "hand-over blocked ms": sum(wall - cpu_ns for wall, cpu_ns in inside) / 1e6,
            "probe late p50 µs": at(late, 0.5), "probe late p99 µs": at(late, 0.99), "probe late max µs": at(late, 1.0),
            "probe stalls > 5 ms, ms": sum(value for value in late if value * 1e3 > STALL_NS) / 1e3}


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--broker-child":
        run_probed_broker(sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=Path, help="source trees; ratios are to the first")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the order of the trees")
    parser.add_argument("--partitions", type=int, default=64, help="partitions of the produced topic [default: 64]")
    parser.add_argument("--messages", type=int, default=200_000, help="acks=all messages per run [default: 200000]")
    parser.add_argument("--fsync-engine", help="every broker's fsync_engine [default: each tree's default]")
    parser.add_argument("--json", action="store_true", help="print every round as JSON instead of the table")
    arguments = parser.parse_args()
    trees = [tree.resolve() for tree in arguments.trees]
    rounds: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    for number in range(arguments.rounds):
        for tree in trees if number % 2 == 0 else trees[::-1]:
            progress(f"-- round {number + 1}: {tree}")
            rounds[tree].append(measure(tree, arguments))
    if arguments.json:
        print(json.dumps({str(tree): runs for tree, runs in rounds.items()}))
        return 0
    print(f"medians of {arguments.rounds} round(s); {arguments.messages:,} acks=all messages over {arguments.partitions} "
          f"partitions; fsync_engine {arguments.fsync_engine or 'default'}; load average {os.getloadavg()[0]:.1f} at the "
          f"end; ratio to {trees[0]}")
    print(f"{'':28}" + "".join(f"{tree.name[-14:]:>16}{'ratio':>8}" for tree in trees))
    for label in rounds[trees[0]][0]:
        medians = [statistics.median(run[label] for run in rounds[tree]) for tree in trees]
        print(f"{label:28}" + "".join(f"{value:16,.1f}{value / (medians[0] or 1):8.2f}" for value in medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
