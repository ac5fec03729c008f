"""Where pika waits while consuming from an AMQP share queue: each stall taken apart by the broker's refill.

``python benchmarks/amqp_consume_stalls.py TREE [TREE ...] [--rounds 3] [--messages 20000]`` starts mqbroker from each
source TREE with time stamps around the share queue's consume path (``ShareGroupMembers._fetch_now``, ``_fetched``
and ``settle``, and ``StateWriter``'s writes), publishes ``--messages`` with confirms and consumes them as
``amqp_bench`` does (prefetch 1,000, a multiple ack every 100), timing each ``epoll`` wait of pika. A stall is a
wait over 2 ms; the refill that ended it (the last fetch answered before pika woke) is split into: from pika's
stall to the broker starting that fetch (pika's acks reaching the broker, the broker's turn), the fetch's lease write
(``StateWriter``: an fsync, maybe behind the write in flight), decoding and writing the deliveries, and pika waking.
Stamps use CLOCK_MONOTONIC in both processes. Trees and rounds alternate; the broker's stamps are fetched with SIGUSR2.
"""

from __future__ import annotations

import sys

if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "--broker-child":
    import json
    import signal
    import time
    from typing import Any

    TRACE_PATH, EVENTS = sys.argv[2], []  # type: ignore[var-annotated]

    def _install_tracing() -> None:
        """Wrap the consume path's methods to stamp (kind, time, figures) events."""
        from mqbroker.protocols.amqp import share_consumers
        from mqbroker.shares import writer
        members, state_writer = share_consumers.ShareGroupMembers, writer.StateWriter
        fetch_now, fetched, settle = members._fetch_now, members._fetched, members.settle
        write, written, request = state_writer._write, state_writer._written, state_writer.request

        def traced_fetch_now(self: Any, member: Any) -> None:
            before = member.fetches
            fetch_now(self, member)
            stamp = time.monotonic()
            EVENTS.extend(("fetch", stamp, member.requested_records) for _ in range(member.fetches - before))

        def traced_fetched(self: Any, answer: Any, member: Any) -> None:
            records = sum(run.last - run.first + 1 for partition in answer.partitions for run in partition.acquired)
            EVENTS.append(("answered", time.monotonic(), records))
            fetched(self, answer, member)
            EVENTS.append(("sent", time.monotonic(), records))

        def traced_settle(self: Any, offsets: list[Any], outcome: Any) -> None:
            EVENTS.append(("ack", time.monotonic(), len(offsets)))
            settle(self, offsets, outcome)

        def traced_request(self: Any) -> Any:
            EVENTS.append(("request", time.monotonic(), int(self._writing)))
            return request(self)

        def traced_write(self: Any) -> None:
            EVENTS.append(("write", time.monotonic(), 0))
            write(self)

        def traced_written(self: Any, result: object, waiters: list[Any]) -> None:
            EVENTS.append(("written", time.monotonic(), len(waiters)))
            written(self, result, waiters)

        members._fetch_now, members._fetched, members.settle = traced_fetch_now, traced_fetched, traced_settle
        state_writer.request, state_writer._write, state_writer._written = traced_request, traced_write, traced_written

    def _dump(*_: object) -> None:
        with open(TRACE_PATH + ".part", "w") as output:
            json.dump(EVENTS, output)
        EVENTS.clear()
        import os
        os.replace(TRACE_PATH + ".part", TRACE_PATH)

    _install_tracing()
    signal.signal(signal.SIGUSR2, _dump)
    sys.argv = ["twistd", *sys.argv[3:]]
    from twisted.scripts.twistd import run
    run()
    sys.exit(0)

import argparse
import contextlib
import json
import os
import pathlib
import signal
import statistics
import tempfile
import time
import uuid
from typing import Any

from pika.adapters import blocking_connection, select_connection

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # amqp_bench imports cputime as a sibling

from benchmarks.amqp_bench import consume, mqbroker_process, publish_with_confirms  # noqa: E402
from benchmarks.cputime import process_tree_cpu_s  # noqa: E402

#: pika's ``epoll`` waits (start, end) and ``basic_ack`` calls since the last clear.
WAITS: list[tuple[float, float]] = []
ACKS: list[float] = []
STALL_S = 0.002


class _StampedPoller:
    """An ``epoll`` object recording each wait's start and end."""

    def __init__(self, poller: Any) -> None:
        self._poller = poller

    def poll(self, timeout: float = -1) -> list[tuple[int, int]]:
        """``epoll.poll``, stamped."""
        started = time.monotonic()
        try:
            return self._poller.poll(timeout)  # type: ignore[no-any-return]
        finally:
            WAITS.append((started, time.monotonic()))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._poller, name)


def stamp_pika() -> None:
    """Stamp pika's ``epoll`` waits and ``BlockingChannel.basic_ack`` calls."""
    create_poller = select_connection.EPollPoller._create_poller
    select_connection.EPollPoller._create_poller = staticmethod(lambda: _StampedPoller(create_poller()))
    basic_ack = blocking_connection.BlockingChannel.basic_ack

    def stamped_ack(channel: Any, *arguments: Any, **keywords: Any) -> None:
        ACKS.append(time.monotonic())
        basic_ack(channel, *arguments, **keywords)

    blocking_connection.BlockingChannel.basic_ack = stamped_ack


def broker_events(pid: int, trace: pathlib.Path) -> list[tuple[str, float, int]]:
    """The broker child's stamps since the last call."""
    with contextlib.suppress(FileNotFoundError):
        trace.unlink()
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 10
    while not trace.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the broker child wrote no trace")
        time.sleep(0.05)
    return [tuple(event) for event in json.loads(trace.read_text())]  # type: ignore[misc]


def _median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}" if values else "-"


def analyse(events: list[tuple[str, float, int]], started: float, ended: float) -> dict[str, Any]:
    """One consume's figures: pika's idle time and stalls, and each stall's refill taken apart."""
    waits = [(start, end) for start, end in WAITS if started <= start <= ended]
    stalls = [(start, end) for start, end in waits if end - start > STALL_S]
    events = [event for event in events if started <= event[1] <= ended]
    times = {kind: [event[1] for event in events if event[0] == kind] for kind in
             ("fetch", "answered", "sent", "ack", "request", "write", "written")}
    # Fetches are answered in the order they were asked (the state writer's waiters fire in order).
    refills = list(zip(times["fetch"], times["answered"], times["sent"]))
    parts: dict[str, list[float]] = {"to fetch": [], "lease write": [], "decode+send": [], "pika wakes": []}
    under_way = 0
    for start, end in stalls:
        ending = [refill for refill in refills if start < refill[1] <= end]  # pika may wake on its first bytes
        if not ending:
            continue
        fetch, answered, sent = ending[-1]
        if fetch <= start:
            under_way += 1  # the refill began before pika ran dry
        parts["to fetch"].append(max(0.0, fetch - start))
        parts["lease write"].append(answered - max(fetch, start))
        parts["decode+send"].append(sent - answered)
        parts["pika wakes"].append(max(0.0, end - sent))
    requests = [event for event in events if event[0] == "request"]
    writes = [end - start for start, end in zip(times["write"], times["written"])]
    return {
        "idle ms": sum(end - start for start, end in waits) * 1000,
        "stalls": len(stalls), "stall ms": sum(end - start for start, end in stalls) * 1000,
        "explained": len(parts["to fetch"]),
        "under way": under_way, "parts": {name: _median_ms(values) for name, values in parts.items()},
        "fetches": len(refills), "records/fetch": statistics.median([event[2] for event in events
                                                                     if event[0] == "answered"] or [0]),
        "write ms p50": _median_ms(writes),
        "requests behind a write": f"{sum(event[2] for event in requests)}/{len(requests)}",
    }


def main() -> None:
    """Alternate the trees, rounds times."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="mqbroker source trees")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    arguments = parser.parse_args()
    stamp_pika()
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        work = pathlib.Path(directory)
        brokers = {}
        for number, tree in enumerate(arguments.trees):
            trace = work / f"trace-{number}.json"
            brokers[tree] = (*stack.enter_context(mqbroker_process(
                work, tree=tree, name=f"broker-{number}",
                launcher=(str(pathlib.Path(__file__).resolve()), "--broker-child", str(trace)))), trace)
        for number in range(arguments.rounds):
            for tree, (port, pid, trace) in brokers.items():
                queue = f"stalls-{uuid.uuid4().hex[:8]}"
                publish_with_confirms(port, queue, arguments.messages)
                broker_events(pid, trace)  # drop the publish's stamps
                WAITS.clear()
                ACKS.clear()
                cpu_before, started = process_tree_cpu_s(pid), time.monotonic()
                rate = consume(port, queue, arguments.messages)
                ended = time.monotonic()
                broker_us = (process_tree_cpu_s(pid) - cpu_before) * 1e6 / arguments.messages
                figures = analyse(broker_events(pid, trace), started, ended)
                print(f"round {number + 1} {tree} ({time.strftime('%H:%M:%S')}, load {os.getloadavg()[0]:.1f}): "
                      f"{rate:,.0f} msg/s, broker {broker_us:.1f} µs/msg, pika idle {figures['idle ms']:.0f} ms, "
                      f"{figures['stalls']} stalls > 2 ms = {figures['stall ms']:.0f} ms\n"
                      f"    stall medians ms (ended by a refill: {figures['explained']}, begun before the stall: "
                      f"{figures['under way']}): " + ", ".join(f"{name} {value}" for name, value in
                                                                figures["parts"].items()) +
                      f"\n    fetches {figures['fetches']}, records per answer p50 {figures['records/fetch']}, "
                      f"state writes p50 {figures['write ms p50']} ms, write requests made while one was in flight "
                      f"{figures['requests behind a write']}", flush=True)


if __name__ == "__main__":
    main()
