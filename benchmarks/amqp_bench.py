"""AMQP benchmark with pika: confirmed publish, prefetched consume with multiple acks, e2e latency.

``python benchmarks/amqp_bench.py`` starts mqbroker and a RabbitMQ (Debian's ``rabbitmq-server``,
which must be installed: ``apt-get install rabbitmq-server``; without it the run fails unless
``--no-rabbitmq`` says to measure mqbroker alone) on free ports, runs the same client with the same settings against each
(100-byte bodies, a durable queue) and prints both side by side, with the CPU each broker
process spent per message (the client shares the machine's cores, so CPU per message is the
figure that noise disturbs least). ``--port`` measures an already running broker instead.
Publish rates count confirmed (basic.ack) messages only; a nack is counted and printed as a
failure. Latency percentiles are over every message sent: one never delivered counts as lost.

Both brokers run side by side and every round measures one and then the other; the report
shows medians over ``--rounds`` rounds, and the confirms ratio is the median of the per-round
ratios (a shared 2-core machine's load swings within a minute, so one run of each compares
different machines). The broker not being measured is stopped (SIGSTOP) meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pika
from cputime import process_tree_cpu_s

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository, for tests.integration

from tests.integration.brokerprocess import free_port  # noqa: E402

BODY_BYTES = 100
CONFIRM_WINDOW = 1_000
PREFETCH = 1_000
RABBITMQ_SERVER = pathlib.Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


def publish_with_confirms(port: int, queue: str, count: int) -> tuple[float, int]:
    """Publish ``count`` messages keeping ``CONFIRM_WINDOW`` unconfirmed; return (acked messages/s, nacked)."""
    parameters = pika.ConnectionParameters("127.0.0.1", port)
    state = {"sent": 0, "confirmed": 0, "nacked": 0, "started": 0.0, "elapsed": 0.0}
    body = b"x" * BODY_BYTES

    def on_open(connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=on_channel)

    def on_channel(channel: pika.channel.Channel) -> None:
        channel.queue_declare(queue, durable=True, callback=lambda _: channel.confirm_delivery(
            lambda frame: on_confirm(channel, frame), callback=lambda _: start(channel)))

    def start(channel: pika.channel.Channel) -> None:
        state["started"] = time.perf_counter()
        fill(channel)

    def fill(channel: pika.channel.Channel) -> None:
        while state["sent"] < count and state["sent"] - state["confirmed"] < CONFIRM_WINDOW:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
            state["sent"] += 1

    def on_confirm(channel: pika.channel.Channel, frame: pika.frame.Method) -> None:
        method = frame.method
        settled = method.delivery_tag - state["confirmed"] if method.multiple else 1
        if isinstance(method, pika.spec.Basic.Nack):
            state["nacked"] += settled
        state["confirmed"] = method.delivery_tag if method.multiple else state["confirmed"] + 1
        if state["confirmed"] >= count:
            state["elapsed"] = time.perf_counter() - state["started"]
            channel.connection.close()
        else:
            fill(channel)

    select = pika.SelectConnection(parameters, on_open_callback=on_open)
    select.ioloop.call_later(0, lambda: None)
    select.add_on_close_callback(lambda *_: select.ioloop.stop())
    select.ioloop.start()
    return (count - state["nacked"]) / state["elapsed"], int(state["nacked"])


def consume(port: int, queue: str, count: int) -> float:
    """Consume ``count`` messages with prefetch ``PREFETCH``, acking every 100 with multiple; return messages/s."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=PREFETCH)
    received = 0
    started = time.perf_counter()
    for method, _, _ in channel.consume(queue, inactivity_timeout=10):
        assert method is not None, f"only {received} of {count} messages arrived"
        received += 1
        if received % 100 == 0 or received == count:
            channel.basic_ack(method.delivery_tag, multiple=True)
        if received == count:
            break
    elapsed = time.perf_counter() - started
    channel.cancel()
    connection.close()
    return count / elapsed


def latency(port: int, queue: str, rate_per_s: int, seconds: float) -> list[float]:
    """End-to-end latencies (ms) of messages published at ``rate_per_s`` and consumed with auto-ack off."""
    publisher = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    publish_channel, consume_channel = publisher.channel(), consumer.channel()
    publish_channel.queue_declare(queue, durable=True)
    consume_channel.basic_qos(prefetch_count=PREFETCH)
    latencies: list[float] = []

    def on_message(channel: pika.channel.Channel, method: pika.spec.Basic.Deliver, _: object, body: bytes) -> None:
        latencies.append((time.perf_counter() - struct.unpack_from(">d", body)[0]) * 1000)
        channel.basic_ack(method.delivery_tag)

    consume_channel.basic_consume(queue, on_message)
    padding = b"x" * (BODY_BYTES - 8)
    total = int(rate_per_s * seconds)
    started = time.perf_counter()
    for index in range(total):
        due = started + index / rate_per_s
        while time.perf_counter() < due:
            consumer.process_data_events(time_limit=0)
        publish_channel.basic_publish("", queue, struct.pack(">d", time.perf_counter()) + padding)
        if index % 50 == 0:
            publisher.process_data_events(time_limit=0)
    deadline = time.perf_counter() + 10
    while len(latencies) < total and time.perf_counter() < deadline:
        consumer.process_data_events(time_limit=0.1)
    publisher.close()
    consumer.close()
    return sorted(latencies) + [math.inf] * (total - len(latencies))  # a lost message: infinitely late


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The value below which ``fraction`` of the values lie (inf: it falls on a lost message)."""
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


# --- broker processes ----------------------------------------------------------------------------


def wait_for_amqp(port: int, process: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    """Wait until an AMQP connection to ``port`` opens."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}")
        try:
            pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, connection_attempts=1)).close()
            return
        except pika.exceptions.AMQPError:
            time.sleep(0.3)
    raise RuntimeError(f"nothing answers AMQP on port {port}")


@contextlib.contextmanager
def mqbroker_process(work: pathlib.Path, settings: tuple[str, ...] = (), tree: str | None = None,
                     name: str = "", launcher: tuple[str, ...] = ("-c", "from twisted.scripts.twistd import run; run()"),
                     ) -> Iterator[tuple[int, int]]:
    """mqbroker on free ports (``settings``: ``KEY=VALUE`` configuration overrides; ``tree``: the source tree it runs
    from, else the one on the path; ``launcher``: the interpreter's arguments that run twistd, given twistd's after
    them); yields (AMQP port, pid)."""
    ports = {name: free_port() for name in ("native", "amqp", "http")}
    name = name or "-".join(settings).replace("=", "-") or "mqbroker"
    command = [
        sys.executable, *launcher, "-n", "--pidfile=",
        f"--logfile={work / f'{name}.log'}", "mqbroker", "--data-dir", str(work / name), "--host", "127.0.0.1",
        "--native-port", str(ports["native"]), "--amqp-port", str(ports["amqp"]), "--http-port", str(ports["http"]),
        "--mqtt-port", "0", "--kafka-port", "0", "--controller-port", "0",
        *(argument for setting in settings for argument in ("--set", setting)),
    ]
    environment = None if tree is None else {**os.environ, "PYTHONPATH": str(pathlib.Path(tree).resolve())}
    process = subprocess.Popen(command, cwd=work, env=environment)
    try:
        wait_for_amqp(ports["amqp"], process)
        yield ports["amqp"], process.pid
    finally:
        process.kill()
        process.wait()


@contextlib.contextmanager
def rabbitmq_process(work: pathlib.Path) -> Iterator[tuple[int, int]]:
    """Debian's RabbitMQ with a private node name, data directory and ports; yields (AMQP port, pid)."""
    port, home = free_port(), work / "rabbitmq"
    home.mkdir()
    (home / "enabled_plugins").write_text("[].\n")
    environment = {
        **os.environ, "HOME": str(home), "RABBITMQ_NODE_PORT": str(port), "RABBITMQ_DIST_PORT": str(free_port()),
        "RABBITMQ_NODENAME": f"amqp-bench-{port}@localhost", "RABBITMQ_MNESIA_BASE": str(home / "mnesia"),
        "RABBITMQ_LOG_BASE": str(home / "log"), "RABBITMQ_ENABLED_PLUGINS_FILE": str(home / "enabled_plugins"),
        "RABBITMQ_CONFIG_FILE": str(home / "rabbitmq"),
    }
    process = subprocess.Popen([str(RABBITMQ_SERVER)], env=environment, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for_amqp(port, process)
        yield port, process.pid
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # its own session: the shell, beam and erl_child_setup
        process.wait()


# --- measuring -----------------------------------------------------------------------------------


def phase(pid: int | None, messages: int, run: Callable[[], Any]) -> tuple[Any, float | None, float]:
    """Run one measurement; return its result and the broker's and the client's CPU µs per message."""
    before, client_before = process_tree_cpu_s(pid) if pid is not None else 0.0, time.process_time()
    result = run()
    client_us = (time.process_time() - client_before) * 1e6 / messages
    spent_s = process_tree_cpu_s(pid) - before if pid is not None else None
    return result, None if spent_s is None else spent_s * 1e6 / messages, client_us


Figures = list[tuple[str, float | None]]


def measure(port: int, pid: int | None, options: argparse.Namespace) -> Figures:
    """Every figure for one broker."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    count = options.messages
    (publish_rate, nacked), publish_cpu, publish_client = phase(pid, count, lambda: publish_with_confirms(port, queue, count))
    consume_rate, consume_cpu, consume_client = phase(pid, count, lambda: consume(port, queue, count))
    latency_count = int(options.latency_rate * options.latency_seconds)
    latencies, latency_cpu, latency_client = phase(pid, latency_count, lambda: latency(
        port, f"{queue}-latency", options.latency_rate, options.latency_seconds))
    return [
        ("publish with confirms msg/s", publish_rate), ("  nacked", float(nacked)), ("  broker CPU µs/msg", publish_cpu),
        ("  pika client CPU µs/msg", publish_client),
        ("consume msg/s", consume_rate), ("  broker CPU µs/msg", consume_cpu), ("  pika client CPU µs/msg", consume_client),
        ("latency delivered fraction", sum(1 for value in latencies if math.isfinite(value)) / latency_count),
        ("latency p50 ms", percentile(latencies, 0.5)), ("latency p99 ms", percentile(latencies, 0.99)),
        ("  broker CPU µs/msg", latency_cpu), ("  pika client CPU µs/msg", latency_client),
    ]


def report(rounds: dict[str, list[Figures]]) -> None:
    """Print the brokers' medians side by side, and the median per-round confirms ratio."""
    names = list(rounds)
    count = len(rounds[names[0]])
    print(f"medians of {count} round(s); load average {os.getloadavg()[0]:.1f} at the end ({time.strftime('%H:%M')})")
    widths = [max(14, len(name) + 2) for name in names]
    print(f"{'':30}" + "".join(f"{name:>{width}}" for name, width in zip(names, widths)))
    for row, (label, _) in enumerate(rounds[names[0]][0]):
        cells = []
        for name in names:
            values = [figures[row][1] for figures in rounds[name] if figures[row][1] is not None]
            median = statistics.median(values) if values else None
            cells.append("-" if median is None else "lost" if math.isinf(median) else f"{median:,.3f}" if median < 10
                         else f"{median:,.1f}")
        print(f"{label:30}" + "".join(f"{cell:>{width}}" for cell, width in zip(cells, widths)))
    if "share" in rounds:
        ratios = [share[0][1] / classic[0][1] for share, classic in zip(rounds["share"], rounds["classic"])]
        consume = [share[4][1] / classic[4][1] for share, classic in zip(rounds["share"], rounds["classic"])]
        print(f"share / classic queue: publish with confirms {statistics.median(ratios):.2f} (per round: "
              f"{', '.join(f'{ratio:.2f}' for ratio in ratios)}); consume {statistics.median(consume):.2f} "
              f"(per round: {', '.join(f'{ratio:.2f}' for ratio in consume)})")
    if "rabbitmq" in rounds:
        for row, name, target in ((0, "publish with confirms", 3.0), (4, "consume", 1.5)):
            ratios = [ours[row][1] / theirs[row][1] for ours, theirs in zip(rounds["mqbroker"], rounds["rabbitmq"])]
            print(f"{name}: mqbroker / RabbitMQ = {statistics.median(ratios):.2f} (target >= {target}; "
                  f"per round: {', '.join(f'{ratio:.2f}' for ratio in ratios)})")
    for tree in [name for name in names if name.startswith("tree:")]:
        for row, name in ((0, "publish with confirms"), (2, "  broker CPU"), (4, "consume"), (5, "  broker CPU")):
            ratios = [ours[row][1] / theirs[row][1] for ours, theirs in zip(rounds["mqbroker"], rounds[tree])
                      if ours[row][1] is not None and theirs[row][1]]
            print(f"{name}: mqbroker / {tree} = {statistics.median(ratios):.2f} (per round: "
                  f"{', '.join(f'{ratio:.2f}' for ratio in ratios)})")
    print("publish rates count confirmed messages; latency percentiles are over every message sent ('lost': it "
          "falls on an undelivered one); both brokers run with their default settings")


def main() -> None:
    """Run the three measurements against mqbroker and a local RabbitMQ (or one running broker)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, help="measure the broker already listening here instead")
    parser.add_argument("--pid", type=int, help="with --port: the broker's pid, to report its CPU per message")
    parser.add_argument("--no-rabbitmq", action="store_true", help="measure mqbroker only")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--latency-rate", type=int, default=5_000)
    parser.add_argument("--latency-seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each broker, alternating [default: 3]")
    parser.add_argument("--also-tree", action="append", default=[], metavar="TREE",
                        help="also measure mqbroker run from this source tree (e.g. `git worktree add /tmp/main main`), "
                             "named tree:TREE, in the same rounds; ratios to it are printed")
    parser.add_argument("--queue-types", action="store_true",
                        help="compare mqbroker's plain durable queue as a classic and as a share queue "
                             "(amqp_default_queue_type), no RabbitMQ")
    options = parser.parse_args()
    rounds: dict[str, list[Figures]] = {}
    with contextlib.ExitStack() as stack:
        if options.port is not None:
            brokers = {"broker": (options.port, options.pid)}
        else:
            work = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
            if options.queue_types:
                brokers = {kind: stack.enter_context(mqbroker_process(work, (f"amqp_default_queue_type={kind}",)))
                           for kind in ("classic", "share")}
            else:
                brokers = {"mqbroker": stack.enter_context(mqbroker_process(work))}
                for tree in options.also_tree:
                    brokers[f"tree:{tree}"] = stack.enter_context(mqbroker_process(
                        work, tree=tree, name=f"tree-{len(brokers)}"))
            if not options.no_rabbitmq and not options.queue_types:
                if not RABBITMQ_SERVER.exists():
                    parser.error(f"{RABBITMQ_SERVER} is missing: install rabbitmq-server (Debian) to compare, "
                                 "or pass --no-rabbitmq to measure mqbroker alone")
                brokers["rabbitmq"] = stack.enter_context(rabbitmq_process(work))
        for number in range(options.rounds):
            for name, (port, pid) in brokers.items():
                print(f"-- round {number + 1}: {name}", file=sys.stderr)
                others = [other_pid for other, (_, other_pid) in brokers.items() if other != name and other_pid]
                with stopped(others):
                    rounds.setdefault(name, []).append(measure(port, pid, options))
                figures = rounds[name][-1]
                print(f"   {name}: publish {figures[0][1]:,.0f} msg/s, consume {figures[4][1]:,.0f} msg/s (load "
                      f"{os.getloadavg()[0]:.1f})", file=sys.stderr)
    report(rounds)


@contextlib.contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    """SIGSTOP the other brokers while one is measured: an idle RabbitMQ's schedulers still spin
    and would take CPU from the broker under test on a 2-core machine."""
    for pid in pids:
        signal_broker(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            signal_broker(pid, signal.SIGCONT)


def signal_broker(pid: int, number: int) -> None:
    """Signal a broker: its whole process group when it leads one (RabbitMQ's shell and beam), else the process."""
    if os.getpgid(pid) == pid:
        os.killpg(pid, number)
    else:
        os.kill(pid, number)


if __name__ == "__main__":
    main()
