"""Broker CPU per MQTT PUBLISH (or message drained) for source trees side by side in one run (paho, process CPU).

Run ``python benchmarks/mqtt_cpu_ab.py TREE [TREE ...] [--messages 20000] [--trials 5] [--qos 1]
[--puback durable|written] [--mosquitto] [--drain] [--latency RATE]``, with trees made by e.g. ``git archive HEAD~1 | tar -x -C
/tmp/before``; a tree may name broker settings after ``::`` (``/work/main::fsync_engine=worker::mqtt_log_partitions=2``),
so that one run compares settings of one tree too. One broker per tree (``PYTHONPATH`` = the tree), and with ``--mosquitto`` Debian's
Mosquitto (``mqtt_bench``'s configuration) as one more; each trial publishes ``--messages`` 100-byte
messages from one paho 3.1.1 client (``mqtt_bench``'s: 1,000 in flight) to each broker in turn,
alternating, and reads the CPU time of the broker's threads (``/proc/<pid>/task/*/schedstat``)
before and after the last PUBACK. Per broker it prints the median and range of µs per message, the
median ratio to the first tree, and the broker's idle CPU (measured before the trials) times each
trial's duration per message: the share of the figure no message caused, which a slow client on a
loaded machine raises. With ``--drain`` a trial queues ``--messages`` QoS 1 messages for an offline
persistent session (``mqtt_bench.queue_for_offline_session``) and measures its drain instead: the
broker's CPU from the session's CONNECT until the last message arrived, the drain rate, and the paho client's CPU
per message and the share of the drain it ran ("busy": its socket holds the broker's whole window of 1,000 nearly
throughout, so below 1 its thread was waiting for a core, not for the broker). With ``--latency RATE``
a trial is ``mqtt_bench``'s QoS 1 latency run at RATE msg/s (p50, p99, medians over the trials). CPU time
per message holds on a loaded machine where rates do not, and the ratio of variants alternated in one
run holds best.
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks.mqtt_bench import (  # noqa: E402
    LATENCY_SECONDS,
    PAYLOAD_BYTES,
    connected_client,
    drain_session,
    latency,
    mosquitto_process,
    queue_for_offline_session,
)
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

WARM_UP_MESSAGES = 2_000
IDLE_SECONDS = 5.0


def process_cpu_s(pid: int) -> float:
    """CPU seconds of every thread of ``pid`` (``schedstat``: nanoseconds, where ``stat`` counts 10 ms ticks)."""
    total_ns = 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total_ns += int((task / "schedstat").read_text().split()[0])
    return total_ns / 1e9


def publish_cpu_us(port: int, pid: int, qos: int, count: int, client_id: str) -> tuple[float, float]:
    """Broker CPU µs per message while one paho client publishes ``count`` messages and sees them acknowledged,
    and the seconds that took."""
    publisher = connected_client(port, client_id)
    payload = b"p" * PAYLOAD_BYTES
    try:
        before, started = process_cpu_s(pid), time.monotonic()
        infos = [publisher.publish("bench/cpu", payload, qos=qos) for _ in range(count)]
        marker = publisher.publish("bench/cpu", payload, qos=1)
        marker.wait_for_publish(timeout=120)
        for info in infos[-1:]:
            info.wait_for_publish(timeout=120)
        after, elapsed_s = process_cpu_s(pid), time.monotonic() - started
    finally:
        publisher.disconnect()
        publisher.loop_stop()
    return (after - before) / (count + 1) * 1e6, elapsed_s


def drain_cpu_us(port: int, pid: int, count: int) -> tuple[float, float, float]:
    """Broker CPU µs per message while a persistent session drains ``count`` QoS 1 messages queued while it was
    offline, the seconds the drain took, and the paho client's CPU µs per message (this process's: its network
    thread does the work, the main thread waits)."""
    client_id, expected = queue_for_offline_session(port, count)
    before, client_before = process_cpu_s(pid), time.process_time()
    drained = drain_session(port, client_id, expected)
    client_s = time.process_time() - client_before
    assert drained["delivered_fraction"] >= 1, f"drained {drained['delivered_fraction']:.3f} of the messages"
    return (process_cpu_s(pid) - before) / expected * 1e6, drained["seconds"], client_s / expected * 1e6


def idle_cpu_ms_per_s(pid: int, seconds: float = IDLE_SECONDS) -> float:
    """The broker's CPU use with no client busy (timers, long polls): part of every message's figure."""
    before = process_cpu_s(pid)
    time.sleep(seconds)
    return (process_cpu_s(pid) - before) / seconds * 1e3


def main() -> None:
    """Start one broker per tree, alternate trials, print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", help="source trees (PYTHONPATH of each broker), each with optional ::KEY=VALUE settings")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--qos", type=int, choices=[0, 1, 2], default=1)
    parser.add_argument("--puback", choices=["durable", "written"], default="durable")
    parser.add_argument("--mosquitto", action="store_true", help="Debian's mosquitto as one more broker, alternated")
    parser.add_argument("--drain", action="store_true", help="measure an offline session's QoS 1 drain, not publishing")
    parser.add_argument("--latency", type=int, metavar="RATE", default=0,
                        help="measure mqtt_bench's QoS 1 publish-to-delivery latency at RATE msg/s instead (p50/p99)")
    arguments = parser.parse_args()
    names = [f"{number}:{tree}" for number, tree in enumerate(arguments.trees)]
    samples: dict[str, list[float]] = {name: [] for name in names}
    rates: dict[str, list[float]] = {name: [] for name in names}
    idle_shares: dict[str, list[float]] = {name: [] for name in names}
    idle_rates: dict[str, float] = {}
    client_us: dict[str, list[float]] = {name: [] for name in names}  # --drain: paho's CPU per message
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        targets: dict[str, tuple[int, int]] = {}  # name -> (MQTT port, pid)
        for number, (name, tree) in enumerate(zip(names, arguments.trees)):
            data_dir = pathlib.Path(directory) / f"broker-{number}"
            data_dir.mkdir()
            tree, *settings = tree.split("::")
            broker = BrokerProcess(data_dir=data_dir, environment={"PYTHONPATH": str(pathlib.Path(tree).resolve())},
                                   extra_args=[argument for setting in [f"mqtt_puback={arguments.puback}", *settings]
                                               for argument in ("--set", setting)])
            broker.start(timeout_s=60)
            stack.callback(broker.kill)
            assert broker.process is not None
            targets[name] = broker.ports["mqtt"], broker.process.pid
        if arguments.mosquitto:
            targets["mosquitto"] = stack.enter_context(mosquitto_process(pathlib.Path(directory)))
            samples["mosquitto"], idle_shares["mosquitto"], rates["mosquitto"] = [], [], []
            client_us["mosquitto"] = []
        for name, (port, pid) in targets.items():
            publish_cpu_us(port, pid, arguments.qos, WARM_UP_MESSAGES, "warm-up")
        for name, (port, pid) in targets.items():
            idle_rates[name] = idle_cpu_ms_per_s(pid)
        if arguments.latency:
            _latency_trials(targets, arguments)
            return
        for trial in range(arguments.trials):
            for name, (port, pid) in targets.items():
                if arguments.drain:
                    cpu_us, elapsed_s, paho_us = drain_cpu_us(port, pid, arguments.messages)
                    client_us[name].append(paho_us)
                else:
                    cpu_us, elapsed_s = publish_cpu_us(port, pid, arguments.qos, arguments.messages, f"ab-{trial}")
                samples[name].append(cpu_us)
                rates[name].append(arguments.messages / elapsed_s)
                idle_shares[name].append(idle_rates[name] * elapsed_s / arguments.messages * 1e3)
                print(f"-- trial {trial + 1} {name}: {cpu_us:.2f} us/msg", file=sys.stderr)
    first = samples[names[0]]
    what = "message drained from an offline session (QoS 1)" if arguments.drain else f"QoS {arguments.qos} message"
    print(f"broker CPU per {what}, mqtt_puback={arguments.puback}, {arguments.messages} messages "
          f"x {arguments.trials} trials, load average {os.getloadavg()[0]:.1f} at the end ({time.strftime('%H:%M')})")
    for name, values in samples.items():
        ratio = statistics.median(value / reference for value, reference in zip(values, first))
        print(f"{name:40} median {statistics.median(values):6.2f} us  range {min(values):6.2f}-{max(values):6.2f}"
              f"  ratio {ratio:5.2f}  {statistics.median(rates[name]):9,.0f} msg/s"
              f"  (idle {idle_rates[name]:.1f} ms/s: ~{statistics.median(idle_shares[name]):.2f} us"
              " of each message's figure)")
        if client_us[name]:  # paho's loop has a full socket to read: "busy" below 1 is the machine's share of it
            busy = statistics.median(us * rate / 1e6 for us, rate in zip(client_us[name], rates[name]))
            print(f"{'':40} paho client CPU median {statistics.median(client_us[name]):6.2f} us/msg, busy {busy:.2f}")


def _latency_trials(targets: dict[str, tuple[int, int]], arguments: argparse.Namespace) -> None:
    """``--latency``: mqtt_bench's paced QoS 1 latency run on each broker in turn, ``--trials`` times; medians."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
    for trial in range(arguments.trials):
        for name, (port, pid) in targets.items():
            before = process_cpu_s(pid)
            run = latency(port, arguments.latency)
            run["broker_cpu_us"] = (process_cpu_s(pid) - before) / (arguments.latency * LATENCY_SECONDS) * 1e6
            runs[name].append(run)
            print(f"-- trial {trial + 1} {name}: {run}", file=sys.stderr)
    print(f"QoS 1 publish-to-delivery latency at {arguments.latency} msg/s, mqtt_puback={arguments.puback}, "
          f"{arguments.trials} trials, load average {os.getloadavg()[0]:.1f} at the end ({time.strftime('%H:%M')})")
    for name, measured in runs.items():
        medians = {figure: statistics.median(run[figure] for run in measured) for figure in measured[0]}
        per_trial = ", ".join(f"{run['p50_ms']:.2f}" for run in measured)
        print(f"{name:40} p50 {medians['p50_ms']:8.2f} ms  p99 {medians['p99_ms']:8.2f} ms  delivered "
              f"{medians['delivered_fraction']:.3f}  (p50 per trial: {per_trial})")
        print(f"{'':40} CPU µs per message: broker {medians['broker_cpu_us']:.1f}, publisher "
              f"{medians['publisher_cpu_us']:.1f}, subscriber {medians['subscriber_cpu_us']:.1f}")


if __name__ == "__main__":
    main()
