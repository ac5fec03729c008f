"""Python calls the broker makes per AMQP message consumed, for source trees side by side: a deterministic count.

Run ``python benchmarks/amqp_consume_calls.py TREE [TREE ...] [--messages 10000] [--rounds 2] [--top 25]``, trees
as for ``amqp_cpu_ab.py``. Issue 24: consuming with pika (``amqp_bench``'s consumer: prefetch 1,000, a multiple ack
every 100) is bound by the CPU of a shared 2-core machine, where CPU per message moves with the load; a call count
does not. Each tree's broker runs under ``cProfile`` switched by signal (``paced_calls_ab.PROFILED_TWISTD``); per
round it consumes a queue of ``--messages`` and one of three times as many (both published beforehand, unprofiled,
after a warm-up), and the difference of the two profiles over the difference of their messages is the calls per
consumed message, without the start-up, the consumer's joining and the profiler switch. ``--top N`` lists the N
functions called most per message (with the share fetches per 1,000 messages: how the refills are batched).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import pathlib
import pstats
import signal
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # amqp_bench imports cputime as a sibling

from benchmarks.amqp_bench import consume, mqbroker_process, publish_with_confirms  # noqa: E402
from benchmarks.paced_calls_ab import PROFILED_TWISTD  # noqa: E402

WARM_UP_MESSAGES = 2_000


def profiled(pid: int, path: pathlib.Path, run: collections.abc.Callable[[], object]) -> collections.Counter[str]:
    """``run()`` with the broker's profiler on; calls per function (``file:line(name)``)."""
    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    time.sleep(0.3)
    run()
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not path.exists() or path.stat().st_size == 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the broker wrote no profile to {path}")
        time.sleep(0.2)
    time.sleep(0.5)  # written whole
    calls: collections.Counter[str] = collections.Counter()
    for (file_name, line, name), (_, total_calls, *_) in pstats.Stats(str(path)).stats.items():  # type: ignore[attr-defined]
        calls[f"{file_name.rpartition('site-packages/')[2].rpartition('mqbroker/')[2]}:{line}({name})"] += total_calls
    return calls


def one_round(pid: int, path: pathlib.Path, port: int, messages: int) -> collections.Counter[str]:
    """Calls per consumed message by function: a consume of ``3 * messages`` less one of ``messages``."""
    short, long = f"calls-{uuid.uuid4().hex[:8]}", f"calls-{uuid.uuid4().hex[:8]}"
    for queue, count in ((short, messages), (long, 3 * messages)):
        publish_with_confirms(port, queue, count)
    difference = profiled(pid, path, lambda: consume(port, long, 3 * messages))
    difference.subtract(profiled(pid, path, lambda: consume(port, short, messages)))
    return collections.Counter({name: calls / (2 * messages) for name, calls in difference.items()})


def main() -> None:
    """One profiled broker per tree, rounds alternated; print calls per consumed message and the top functions."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--messages", type=int, default=10_000, help="the shorter consume's messages (the longer: 3×)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--top", type=int, default=25, metavar="N")
    arguments = parser.parse_args()
    totals: dict[str, list[float]] = {tree: [] for tree in arguments.trees}
    functions: dict[str, collections.Counter[str]] = {tree: collections.Counter() for tree in arguments.trees}
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        work = pathlib.Path(directory)
        brokers = {}
        for number, tree in enumerate(arguments.trees):
            path = work / f"tree-{number}.prof"
            os.environ["PACED_PROFILE"] = str(path)  # the broker's environment, copied when it starts
            port, pid = stack.enter_context(mqbroker_process(work, tree=tree, name=f"tree-{number}",
                                                             launcher=PROFILED_TWISTD))
            brokers[tree] = port, pid, path
            publish_with_confirms(port, "warm-up", WARM_UP_MESSAGES)
            consume(port, "warm-up", WARM_UP_MESSAGES)
        for round_number in range(arguments.rounds):
            for tree in arguments.trees if round_number % 2 == 0 else reversed(arguments.trees):
                port, pid, path = brokers[tree]
                calls = one_round(pid, path, port, arguments.messages)
                totals[tree].append(sum(calls.values()))
                for name, count in calls.items():
                    functions[tree][name] += count / arguments.rounds
                print(f"-- round {round_number + 1} {tree}: {totals[tree][-1]:.1f} calls per consumed message",
                      file=sys.stderr, flush=True)
    first = statistics.median(totals[arguments.trees[0]])
    print(f"broker Python calls per consumed AMQP message (pika, prefetch 1,000, a multiple ack every 100), medians of "
          f"{arguments.rounds} round(s), load average {os.getloadavg()[0]:.1f} at the end ({time.strftime('%H:%M')})")
    for tree in arguments.trees:
        median = statistics.median(totals[tree])
        print(f"{tree:40} {median:8.2f}  ratio {median / first:.3f}  (rounds: "
              f"{', '.join(f'{count:.2f}' for count in totals[tree])})")
        for name, count in functions[tree].most_common(arguments.top):
            print(f"    {count:8.3f}  {name}")


if __name__ == "__main__":
    main()
