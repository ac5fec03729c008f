"""Python calls the broker makes per paced message, for source trees side by side: a deterministic count.

Run ``python benchmarks/paced_calls_ab.py TREE [TREE ...] [--rounds N] [--rate 500] [--messages 1000] [--mqtt]
[--by-file N]``, trees as for ``broker_tree_ab.py`` (``git archive`` copies with their C extensions). Issue 24: a
paced message (alone in its reactor turn) costs the broker CPU in proportion to the Python it runs, and on the
shared 2-core machine the CPU figures of ``broker_tree_ab.py --e2e-only`` and ``mqtt_cpu_ab.py --latency`` move
more with the load than with a change of a few percent; a call count does not.

Each tree's broker runs under ``cProfile``, switched on by SIGUSR1 and written out by SIGUSR2 (``twistd`` started by
``PROFILED_TWISTD``). Per tree and round, two runs of ``--messages`` and three times as many, each after a warm-up:
the difference of their call counts over the difference of their messages is the calls per message, without the
start-up, the connections and the profiler switch. Native (default): ``mqbroker bench e2e`` at ``--rate`` (acks=all,
fsync before ack, the consumer in a process of its own) from the first tree's client; the produce and fetch requests
per message are printed too (1.00 and 1.00 when every message went alone). ``--mqtt``: a paho QoS 1 publisher paced
at ``--rate`` and a QoS 1 subscriber, ``mqtt_puback = written``. ``--by-file N``: the N source files whose functions
make the most calls per message (as callers), per tree.
"""

from __future__ import annotations

import argparse
import collections
import os
import pstats
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from broker_tree_ab import TreeBroker, cli_bench

#: ``twistd`` with ``cProfile`` started by SIGUSR1 and dumped to ``$PACED_PROFILE`` by SIGUSR2.
PROFILED_TWISTD = (
    "-c",
    "import cProfile, os, signal, sys\n"
    "profiles = []\n"
    "def start(*_):\n"
    "    profiles.append(cProfile.Profile()); profiles[-1].enable()\n"
    "def stop(*_):\n"
    "    profiles[-1].disable(); profiles[-1].dump_stats(os.environ['PACED_PROFILE'])\n"
    "signal.signal(signal.SIGUSR1, start); signal.signal(signal.SIGUSR2, stop)\n"
    "from twisted.scripts.twistd import run\n"
    "sys.argv = ['twistd', *sys.argv[1:]]\n"
    "run()\n",
)
WARM_UP_MESSAGES = 300


def profiled(broker: TreeBroker, path: Path, run: Any) -> pstats.Stats:
    """``run()`` with the broker's profiler on; its statistics."""
    broker.process.send_signal(signal.SIGUSR1)
    time.sleep(0.3)
    run()
    broker.process.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not path.exists() or path.stat().st_size == 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the broker wrote no profile to {path}")
        time.sleep(0.2)
    time.sleep(0.5)  # written whole
    return pstats.Stats(str(path))


def native_run(broker: TreeBroker, client: Path, messages: int, rate: int) -> dict[str, float]:
    """One ``bench e2e`` of ``messages``; the produce and fetch requests it took."""
    before = broker.requests()
    cli_bench(client, broker.bootstrap, ["e2e", "--messages", str(messages), "--rate", str(rate), "--consumer", "process"])
    return {api: count - before[api] for api, count in broker.requests().items()}


class PacedMqtt:
    """A paho QoS 1 subscriber and publisher of one broker; ``publish(n)`` paces n messages and waits for them."""

    def __init__(self, port: int, rate: int) -> None:
        import paho.mqtt.client as mqtt

        self.rate, self.received, self._arrived = rate, 0, threading.Condition()
        tag = time.time_ns()
        self.subscriber = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"paced-s-{tag}")
        self.subscriber.on_message = self._on_message
        self.subscriber.connect("127.0.0.1", port)
        self.subscriber.subscribe("paced/calls", 1)
        self.subscriber.loop_start()
        self.publisher = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"paced-p-{tag}")
        self.publisher.connect("127.0.0.1", port)
        self.publisher.loop_start()
        time.sleep(0.5)

    def _on_message(self, *_: Any) -> None:
        with self._arrived:
            self.received += 1
            self._arrived.notify_all()

    def publish(self, messages: int) -> None:
        expected = self.received + messages
        started = time.perf_counter()
        for index in range(messages):
            delay = started + index / self.rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            self.publisher.publish("paced/calls", b"x" * 100, qos=1)
        with self._arrived:
            if not self._arrived.wait_for(lambda: self.received >= expected, timeout=60):
                raise RuntimeError(f"{expected - self.received} messages were not delivered")

    def close(self) -> None:
        for client in (self.publisher, self.subscriber):
            client.loop_stop()
            client.disconnect()


def one_count(tree: Path, client: Path, messages: int, rate: int, mqtt: bool, work: Path) -> tuple[pstats.Stats, dict]:
    """A fresh broker of ``tree``: its profile over ``messages`` paced messages, and the requests they took."""
    path = work / f"{tree.name}-{messages}.prof"
    path.unlink(missing_ok=True)
    os.environ["PACED_PROFILE"] = str(path)  # the broker's environment, copied when it starts
    broker = TreeBroker(tree, launcher=PROFILED_TWISTD, settings=("mqtt_puback=written",) if mqtt else ())
    requests: dict[str, float] = {}
    try:
        if mqtt:
            clients = PacedMqtt(broker.ports["mqtt"], rate)
            try:
                clients.publish(WARM_UP_MESSAGES)
                stats = profiled(broker, path, lambda: clients.publish(messages))
            finally:
                clients.close()
        else:
            native_run(broker, client, WARM_UP_MESSAGES, rate)
            stats = profiled(broker, path, lambda: requests.update(native_run(broker, client, messages, rate)))
    finally:
        broker.stop()
    return stats, requests


def calls_by_file(stats: pstats.Stats) -> collections.Counter[str]:
    """Calls made by each source file's functions (a call to a builtin counts for its caller's file)."""
    made: collections.Counter[str] = collections.Counter()
    for _, (_, _, _, _, callers) in stats.stats.items():  # type: ignore[attr-defined]
        for (file_name, _, _), (calls, *_) in callers.items():
            made[file_name] += calls
    return made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=int, default=500, help="messages/s [default: 500: every message alone]")
    parser.add_argument("--messages", type=int, default=1000, help="the shorter run's messages (the longer: 3×)")
    parser.add_argument("--mqtt", action="store_true", help="paho QoS 1, mqtt_puback=written, instead of native e2e")
    parser.add_argument("--by-file", type=int, default=0, metavar="N")
    arguments = parser.parse_args()
    client, work = arguments.trees[0], Path(tempfile.mkdtemp(prefix="paced-calls-"))
    counts: dict[Path, list[float]] = {tree: [] for tree in arguments.trees}
    files: dict[Path, collections.Counter[str]] = {tree: collections.Counter() for tree in arguments.trees}
    for round_number in range(arguments.rounds):
        for tree in arguments.trees if round_number % 2 == 0 else reversed(arguments.trees):
            short, _ = one_count(tree, client, arguments.messages, arguments.rate, arguments.mqtt, work)
            long, requests = one_count(tree, client, 3 * arguments.messages, arguments.rate, arguments.mqtt, work)
            extra = 2 * arguments.messages
            per_message = (long.total_calls - short.total_calls) / extra  # type: ignore[attr-defined]
            counts[tree].append(per_message)
            difference = calls_by_file(long)
            difference.subtract(calls_by_file(short))
            for name, calls in difference.items():
                files[tree][name] += calls / extra / arguments.rounds
            per_request = " ".join(f"{api} {count / (3 * arguments.messages):.2f}" for api, count in requests.items())
            print(f"-- round {round_number + 1} {tree}: {per_message:.1f} calls per message"
                  + (f" (requests per message: {per_request})" if per_request else ""), file=sys.stderr, flush=True)
    load = os.getloadavg()[0]
    first = statistics.median(counts[arguments.trees[0]])
    print(f"broker Python calls per paced {'MQTT QoS 1' if arguments.mqtt else 'native acks=all'} message at "
          f"{arguments.rate} msg/s, medians of {arguments.rounds} round(s), load average {load:.1f} at the end")
    for tree in arguments.trees:
        median = statistics.median(counts[tree])
        print(f"{str(tree):40} {median:8.1f}  ratio {median / first:.3f}  (rounds: "
              f"{', '.join(f'{count:.1f}' for count in counts[tree])})")
        for name, calls in files[tree].most_common(arguments.by_file):
            print(f"    {calls:7.1f}  {name.replace(str(tree) + '/', '').rpartition('site-packages/')[2]}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
