"""Broker CPU per AMQP message consumed (and published with confirms) for source trees side by side in one run.

Run ``python benchmarks/amqp_cpu_ab.py TREE [TREE ...] [--messages 20000] [--trials 5]``, with trees made by
e.g. ``git worktree add /tmp/before main``. One broker per tree (``PYTHONPATH`` = the tree); each trial, on
each broker in turn, publishes ``--messages`` 100-byte messages with confirms into a fresh durable queue
(the default type, a share queue) and consumes them with ``amqp_bench``'s pika consumer (prefetch 1,000, a
multiple ack every 100), reading the CPU time of the broker's threads around each phase. Per broker it
prints the medians and ranges of µs per message and of the rates, and the median ratio to the first tree:
CPU per message holds on a loaded machine where rates do not, and variants alternated in one run compare best.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # amqp_bench imports cputime as a sibling

from benchmarks.amqp_bench import consume, publish_with_confirms  # noqa: E402
from benchmarks.mqtt_cpu_ab import process_cpu_s  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

PHASES = ("publish", "consume")


def trial(port: int, pid: int, count: int) -> dict[str, tuple[float, float]]:
    """(broker CPU µs per message, messages/s) of publishing ``count`` messages with confirms, then consuming them."""
    queue = f"ab-{uuid.uuid4().hex[:8]}"
    before = process_cpu_s(pid)
    published, nacked = publish_with_confirms(port, queue, count)
    assert not nacked, f"{nacked} messages nacked"
    middle = process_cpu_s(pid)
    consumed = consume(port, queue, count)
    after = process_cpu_s(pid)
    return {"publish": ((middle - before) / count * 1e6, published), "consume": ((after - middle) / count * 1e6, consumed)}


def main() -> None:
    """Start one broker per tree, alternate trials, print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="source trees (PYTHONPATH of each broker)")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--trials", type=int, default=5)
    arguments = parser.parse_args()
    names = [f"{number}:{tree}" for number, tree in enumerate(arguments.trees)]
    samples: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        targets: dict[str, tuple[int, int]] = {}  # name -> (AMQP port, pid)
        for number, (name, tree) in enumerate(zip(names, arguments.trees)):
            broker = BrokerProcess(data_dir=pathlib.Path(directory) / f"broker-{number}",
                                   environment={"PYTHONPATH": str(pathlib.Path(tree).resolve())})
            broker.data_dir.mkdir()
            broker.start(timeout_s=60)
            stack.callback(broker.kill)
            assert broker.process is not None
            targets[name] = broker.ports["amqp"], broker.process.pid
            trial(*targets[name], 2_000)  # warm up
        for number in range(arguments.trials):
            for name, (port, pid) in targets.items():
                samples[name].append(trial(port, pid, arguments.messages))
                print(f"-- trial {number + 1} {name}: {samples[name][-1]}", file=sys.stderr)
    print(f"broker CPU per AMQP message, {arguments.messages} messages x {arguments.trials} trials, load average "
          f"{os.getloadavg()[0]:.1f} at the end ({time.strftime('%H:%M')})")
    first = samples[names[0]]
    for phase in PHASES:
        for name, trials in samples.items():
            cpu = [figures[phase][0] for figures in trials]
            rates = [figures[phase][1] for figures in trials]
            ratio = statistics.median(figures[phase][0] / reference[phase][0] for figures, reference in zip(trials, first))
            print(f"{phase:8} {name:36} median {statistics.median(cpu):6.2f} us  range {min(cpu):6.2f}-{max(cpu):6.2f}"
                  f"  ratio {ratio:5.2f}  {statistics.median(rates):9,.0f} msg/s ({min(rates):,.0f}-{max(rates):,.0f})")


if __name__ == "__main__":
    main()
