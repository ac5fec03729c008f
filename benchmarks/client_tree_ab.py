"""Native client trees measured against one broker, alternating: throughput and CPU per message of each client.

Run ``nice -n 10 python benchmarks/client_tree_ab.py TREE [TREE ...] [--broker TREE] [--rounds N]`` where each
TREE is a source checkout with its C extensions built (``python setup.py -q build_ext --inplace``). One broker
(``--broker``, default the first tree) serves every run; per round each client tree (the order reverses every
round) runs, against it, 1,000,000 100-byte records (``--messages``) at acks=1:

* ``send-loop``: a loop of ``Producer.send`` in one process (``SEND_LOOP``): the sending thread's CPU per send
  (``time.thread_time``: the per-record cost of ``send`` itself), the process's CPU per acknowledged record (the
  I/O thread included) and the loop's rate, flush included;
* ``twisted-send-loop``: the same with ``TwistedProducer.send`` (``TWISTED_SEND_LOOP``), where one thread sends and
  does the I/O;
* ``send``, ``send-many``: ``mqbroker bench produce`` with one ``send`` per record, and with ``--send-many 1000``;
* ``consume``: ``mqbroker bench consume`` of a topic filled once before the first round.

For the ``mqbroker bench`` runs the CPU per message is the whole command's (start-up included, from the child's
rusage), so trees without the bench's own ``client_cpu_us_per_message`` compare alike. The rates follow the
machine's load; the CPU figures much less. The table gives medians and the ratio of each tree to the first.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from broker_tree_ab import TreeBroker, cli_bench, progress

MODES = ("send-loop", "twisted-send-loop", "send", "send-many", "consume")
#: The ``send-loop`` child: prints "<thread ns per send> <process ns per record> <records/s>".
SEND_LOOP = """
import sys, time
from mqbroker.client import Admin, Producer
bootstrap, count = sys.argv[1], int(sys.argv[2])
topic = f"send-loop-{time.time_ns()}"
with Admin(bootstrap) as admin:
    admin.create_topics([topic], 1)
with Producer(bootstrap, acks=1, linger_ms=5, batch_size=1_000_000) as producer:
    send, value = producer.send, b"x" * 100
    for _ in range(10_000):
        send(topic, value)
    producer.flush()
    thread, process, wall = time.thread_time(), time.process_time(), time.perf_counter()
    for _ in range(count):
        send(topic, value)
    thread = time.thread_time() - thread
    producer.flush()
    process, wall = time.process_time() - process, time.perf_counter() - wall
    assert producer.delivery_counts().acknowledged == 10_000 + count
print(thread / count * 1e9, process / count * 1e9, count / wall)
"""
#: The ``twisted-send-loop`` child: ``TwistedProducer.send`` in runs of 10,000 (the Deferreds dropped, as a caller that
#: only counts deliveries does, but each run's last), the reactor turning between runs and the loop waiting for a
#: run's last record once five runs are out (without it the backlog grows to nearly every record, and the garbage
#: collector's full passes over it cost more than the sends); the same three figures, one thread doing it all.
TWISTED_SEND_LOOP = """
import sys, time
from twisted.internet import defer, task
from mqbroker.client import Admin
from mqbroker.client.twisted import TwistedProducer
bootstrap, count = sys.argv[1], int(sys.argv[2])
topic = f"twisted-send-loop-{time.time_ns()}"
with Admin(bootstrap) as admin:
    admin.create_topics([topic], 1)
async def run(reactor):
    producer = TwistedProducer(reactor, bootstrap, acks=1, linger_ms=5, batch_size=1_000_000)
    send, value = producer.send, b"x" * 100
    await send(topic, value)  # (the topic's metadata first: older trees sent a Metadata request per waiting send)
    await defer.gatherResults([send(topic, value) for _ in range(10_000)])
    thread, process, wall = 0.0, time.process_time(), time.perf_counter()
    runs = []
    for _ in range(count // 10_000):
        started = time.thread_time()
        for _ in range(10_000):
            last = send(topic, value)
        thread += time.thread_time() - started
        runs.append(last)
        await (runs.pop(0) if len(runs) > 4 else task.deferLater(reactor, 0, lambda: None))
    await producer.flush()
    process, wall = time.process_time() - process, time.perf_counter() - wall
    assert producer.delivery_counts().acknowledged == 10_001 + count // 10_000 * 10_000
    await producer.close()
    print(thread / count * 1e9, process / count * 1e9, count / wall)
task.react(lambda reactor: defer.ensureDeferred(run(reactor)))
"""
FIGURES = (
    *(figure for loop in ("send-loop", "twisted-send-loop") for figure in (
        (f"{loop}: thread CPU ns/send", loop, "thread_ns"),
        (f"{loop}: process CPU ns/record", loop, "process_ns"),
        (f"{loop}: records/s", loop, "rate"))),
    *((f"{mode}: msg/s", mode, "rate") for mode in MODES[2:]),
    *((f"{mode}: command CPU µs/msg", mode, "command_cpu_us") for mode in MODES[2:]),
)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(tree: Path, bootstrap: str, mode: str, messages: int) -> dict[str, float]:
    """One run of ``mode`` from the client ``tree``."""
    before = _children_cpu_s()
    if mode.endswith("send-loop"):
        loop = SEND_LOOP if mode == "send-loop" else TWISTED_SEND_LOOP
        done = subprocess.run([sys.executable, "-c", loop, bootstrap, str(messages)], capture_output=True,
                              text=True, cwd=tree, timeout=900, env={**os.environ, "PYTHONPATH": str(tree)})
        if done.returncode:
            raise RuntimeError(f"the send loop of {tree} failed:\n{done.stderr[-2000:]}")
        thread_ns, process_ns, rate = map(float, done.stdout.split())
        return {"thread_ns": thread_ns, "process_ns": process_ns, "rate": rate}
    arguments = ["consume", "--topic", "client-tree-ab-filled"] if mode == "consume" else ["produce"]
    arguments += ["--send-many", "1000"] if mode == "send-many" else []
    result = cli_bench(tree, bootstrap, [*arguments, "--messages", str(messages)])
    if result["messages"] != messages:
        raise RuntimeError(f"{mode} from {tree} counted {result['messages']} of {messages} messages")
    return {"rate": result["messages_per_s"], "command_cpu_us": (_children_cpu_s() - before) / messages * 1e6}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=Path, help="client source trees; ratios are to the first")
    parser.add_argument("--broker", type=Path, help="the broker's tree [default: the first client tree]")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the order of the trees")
    parser.add_argument("--messages", type=int, default=1_000_000, help="records per run [default: 1000000]")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    arguments = parser.parse_args()
    trees = [tree.resolve() for tree in arguments.trees]
    modes = arguments.modes.split(",")
    broker = TreeBroker((arguments.broker or trees[0]).resolve())
    runs: dict[tuple[Path, str], list[dict[str, float]]] = {}
    try:
        if "consume" in modes:
            cli_bench(trees[0], broker.bootstrap, ["produce", "--topic", "client-tree-ab-filled", "--send-many",
                                                   "1000", "--messages", str(arguments.messages)])
        for number in range(arguments.rounds):
            for tree in trees if number % 2 == 0 else trees[::-1]:
                for mode in modes:
                    figures = measure(tree, broker.bootstrap, mode, arguments.messages)
                    runs.setdefault((tree, mode), []).append(figures)
                    progress(f"round {number + 1} {tree} {mode}: " + ", ".join(
                        f"{name} {value:,.3f}" for name, value in figures.items()) + f" (load {os.getloadavg()[0]:.1f})")
    finally:
        broker.stop()
    print(f"medians of {arguments.rounds} round(s); load average {os.getloadavg()[0]:.1f} at the end; "
          f"ratio to {trees[0]}")
    print(f"{'':42}" + "".join(f"{tree.name[-14:]:>16}{'ratio':>8}" for tree in trees))
    for label, mode, key in FIGURES:
        if mode not in modes:
            continue
        medians = [statistics.median(run[key] for run in runs[tree, mode]) for tree in trees]
        print(f"{label:42}" + "".join(f"{value:16,.3f}{value / medians[0]:8.2f}" for value in medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
