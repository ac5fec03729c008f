"""What pika receives and sends per 1,000 AMQP messages, and its CPU, against one broker or several.

``python benchmarks/amqp_wire_counts.py TARGET [TARGET ...] [--messages 20000]`` where a TARGET is a
source tree (mqbroker started with it as ``PYTHONPATH``) or ``rabbitmq`` (Debian's ``rabbitmq-server``).
Against each it runs ``amqp_bench``'s confirmed publish and prefetched consume and prints, per 1,000
messages, the frames pika handled by kind (how many basic.ack confirms, with ``multiple`` or not), pika's
``recv`` calls (``short``: fewer bytes than asked, the socket drained) and ``send`` calls, the milliseconds
pika spent blocked in ``epoll`` waiting for the broker (``idle ms``), and the CPU µs per message of the
broker and of pika (user and system). pika's CPU per message depends on what the broker
sends and how it is cut into writes; these counts say which. The broker's own syscalls are counted with
``perf stat -e 'syscalls:sys_enter_sendto' -p PID`` alongside, if wanted.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import pathlib
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pika.connection
from pika.adapters import select_connection
from pika.adapters.utils import io_services_utils

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # amqp_bench imports cputime as a sibling

from benchmarks.amqp_bench import consume, mqbroker_process, publish_with_confirms, rabbitmq_process  # noqa: E402
from benchmarks.cputime import process_tree_cpu_s  # noqa: E402

#: What pika did since the last ``clear``: frames by kind, recv and send calls, ms blocked in ``epoll``.
COUNTS: collections.Counter[str] = collections.Counter()


class TimedPoller:
    """An ``epoll`` object whose ``poll`` adds the time it blocked to ``COUNTS["idle ms"]``: pika waiting for
    the broker, which the CPU figures do not show."""

    def __init__(self, poller: Any) -> None:
        self._poller = poller

    def poll(self, timeout: float = -1) -> list[tuple[int, int]]:
        """``epoll.poll``, timed."""
        started = time.perf_counter()
        try:
            return self._poller.poll(timeout)  # type: ignore[no-any-return]
        finally:
            COUNTS["idle ms"] += (time.perf_counter() - started) * 1000

    def __getattr__(self, name: str) -> Any:
        return getattr(self._poller, name)


def count_pika_io() -> None:
    """Wrap pika's socket reads, writes, frame dispatch and ``epoll`` waits (every connection of this process)
    to count them."""
    transport = io_services_utils._AsyncTransportBase
    recv, send = transport._sigint_safe_recv, transport._sigint_safe_send
    process_frame = pika.connection.Connection._process_frame

    def counted_recv(sock: Any, max_bytes: int) -> bytes:
        data = recv(sock, max_bytes)
        COUNTS["recv"] += 1
        COUNTS["recv short"] += len(data) < max_bytes
        return data

    def counted_send(sock: Any, data: bytes) -> int:
        COUNTS["send"] += 1
        return send(sock, data)

    def counted_frame(connection: Any, frame: Any) -> Any:
        method = getattr(frame, "method", None)
        COUNTS[f"frame {type(method or frame).__name__}"] += 1
        COUNTS["multiple"] += bool(getattr(method, "multiple", False))
        return process_frame(connection, frame)

    transport._sigint_safe_recv = staticmethod(counted_recv)
    transport._sigint_safe_send = staticmethod(counted_send)
    pika.connection.Connection._process_frame = counted_frame
    create_poller = select_connection.EPollPoller._create_poller
    select_connection.EPollPoller._create_poller = staticmethod(lambda: TimedPoller(create_poller()))


def broker(target: str, work: pathlib.Path) -> contextlib.AbstractContextManager[tuple[int, int]]:
    """The broker a TARGET names, as (AMQP port, pid)."""
    return rabbitmq_process(work) if target == "rabbitmq" else mqbroker_process(work, tree=target)


def measure(port: int, pid: int, messages: int) -> Iterator[str]:
    """One line per phase: rate, CPU per message and pika's counts per 1,000 messages."""
    queue = f"wire-{uuid.uuid4().hex[:8]}"
    publish_with_confirms(port, f"{queue}-warm", 2_000)
    consume(port, f"{queue}-warm", 2_000)
    phases: dict[str, Callable[[], Any]] = {
        "publish": lambda: publish_with_confirms(port, queue, messages)[0],
        "consume": lambda: consume(port, queue, messages),
    }
    for name, run in phases.items():
        COUNTS.clear()
        broker_before, client_before = process_tree_cpu_s(pid), os.times()
        rate = run()
        broker_us = (process_tree_cpu_s(pid) - broker_before) * 1e6 / messages
        client = os.times()
        user_us = (client.user - client_before.user) * 1e6 / messages
        system_us = (client.system - client_before.system) * 1e6 / messages
        counts = ", ".join(f"{key} {value * 1000 / messages:.1f}" for key, value in sorted(COUNTS.items())
                           if value * 1000 / messages >= 0.5)
        yield (f"  {name}: {rate:,.0f} msg/s, broker {broker_us:.1f} µs/msg, pika {user_us + system_us:.1f} µs/msg "
               f"(user {user_us:.1f}, system {system_us:.1f})\n    per 1,000 messages: {counts}")


def main() -> None:
    """Measure each target in turn."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", help="source trees, or rabbitmq")
    parser.add_argument("--messages", type=int, default=20_000)
    arguments = parser.parse_args()
    count_pika_io()
    with tempfile.TemporaryDirectory() as directory:
        for number, target in enumerate(arguments.targets):
            work = pathlib.Path(directory) / str(number)
            work.mkdir()
            with broker(target, work) as (port, pid):
                print(f"{target} ({time.strftime('%H:%M')}, load average {os.getloadavg()[0]:.1f})")
                for line in measure(port, pid, arguments.messages):
                    print(line, flush=True)


if __name__ == "__main__":
    main()
