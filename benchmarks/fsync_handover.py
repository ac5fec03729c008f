"""How long the caller is held handing a round's fsyncs over: the C worker's ``submit`` against ``io_submit``.

Run ``python benchmarks/fsync_handover.py [--files N] [--rounds R] [--directory DIR]`` (from a source tree with its C
extensions built, on ``PYTHONPATH``; Linux with python-libaio). Each round appends 100 bytes to each of ``N`` files in
``DIR`` (default: a new temporary directory), then hands their fsyncs over and waits for them all: once through
``FsyncWorker.submit`` (the ``worker`` engine: a queue append and a condition signal; its thread submits the fsyncs),
once through libaio's ``io_submit`` of one fsync block per file (the ``aio`` engine, on the reactor), alternating.
It prints, for each, the wall time of the hand-over call alone (p50 / p99 / max) and of the whole round.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
import shutil
import tempfile
import time
from collections.abc import Callable

from mqbroker.durability._fsync_worker import FsyncWorker


def percentiles(values_us: list[float]) -> str:
    ordered = sorted(values_us)
    return " / ".join(f"{ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]:,.0f}"
                      for fraction in (0.5, 0.99, 1.0))


def worker_round(worker: FsyncWorker, handles: list[int]) -> tuple[Callable[[], None], Callable[[], None]]:
    def hand_over() -> None:
        worker.submit(handles)

    def wait() -> None:
        done = 0
        while done < len(handles):
            select.select([worker.fileno()], [], [])
            done += len(worker.completed())

    return hand_over, wait


def aio_round(handles: list[int]) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    from libaio import libaio

    context = libaio.io_context_t()
    libaio.io_queue_init(len(handles), ctypes.byref(context))
    blocks = (libaio.iocb_p * len(handles))()
    for index, handle in enumerate(handles):
        block = libaio.iocb()
        libaio.io_prep_fsync(block, handle)
        blocks[index] = ctypes.pointer(block)
    events = (libaio.io_event * len(handles))()

    def hand_over() -> None:
        libaio.io_submit(context, len(handles), blocks)

    def wait() -> None:
        done = 0
        while done < len(handles):
            done += libaio.io_getevents(context, 1, len(handles), events, None)

    return hand_over, wait, lambda: libaio.io_queue_release(context)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--directory", help="where the files go [default: a new temporary directory]")
    arguments = parser.parse_args()
    directory = arguments.directory or tempfile.mkdtemp(prefix="fsync-handover-")
    handles = [os.open(os.path.join(directory, f"file-{index}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
               for index in range(arguments.files)]
    worker = FsyncWorker()
    aio_hand_over, aio_wait, aio_release = aio_round(handles)
    ways = {"worker submit": worker_round(worker, handles), "aio io_submit": (aio_hand_over, aio_wait)}
    held: dict[str, list[float]] = {name: [] for name in ways}
    whole: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for number in range(arguments.rounds):
            for name in ways if number % 2 == 0 else reversed(ways):
                hand_over, wait = ways[name]
                for handle in handles:
                    os.write(handle, b"x" * 100)
                started = time.perf_counter_ns()
                hand_over()
                handed = time.perf_counter_ns()
                wait()
                held[name].append((handed - started) / 1e3)
                whole[name].append((time.perf_counter_ns() - started) / 1e3)
    finally:
        worker.close()
        aio_release()
        for handle in handles:
            os.close(handle)
        if not arguments.directory:
            shutil.rmtree(directory, ignore_errors=True)
    print(f"{arguments.rounds} rounds of {arguments.files} fsyncs, alternating; load average {os.getloadavg()[0]:.1f}; "
          "p50 / p99 / max µs")
    for name in ways:
        print(f"  {name:14} hand-over {percentiles(held[name]):>24}   whole round {percentiles(whole[name]):>24}")


if __name__ == "__main__":
    main()
