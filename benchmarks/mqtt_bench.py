"""MQTT benchmark with paho-mqtt against mqbroker and a local Mosquitto, in the same run.

Usage: ``python benchmarks/mqtt_bench.py [--messages 20000] [--connections 10000] [--rounds 3] [--json]
[--puback durable|written|both] [--measurements publish_qos0,publish_qos1,...] [--latency-rate 5000]``.
Starts mqbroker (``twistd mqbroker`` on free ports, a temporary data directory) and Debian's
``mosquitto`` (a temporary config on a free port), then measures for each, with 100-byte payloads:

* publish throughput at QoS 0 and QoS 1 from one publisher (QoS 0 ends with a QoS 1 marker whose
  PUBACK proves the broker took every message before it; at QoS 1 every PUBACK is checked and only
  acknowledged messages count, failures are printed);
* fan-out to 10 subscribers (deliveries/s until every subscriber has every message, with the
  fraction delivered);
* publish-to-delivery latency p50/p99 at QoS 1 with the publisher paced at 5,000 msg/s (the subscriber in a
  process of its own, the publisher with no paho in-flight window: ``LATENCY_INFLIGHT_MAX``), over every message
  sent, and the publisher's and the subscriber's CPU per message: one never delivered is a failure (an infinite latency,
  shown as ``lost``), not a missing sample; the fraction delivered is printed;
* offline-session drain at QoS 1: a persistent-session subscriber (clean session off) subscribes and
  disconnects, ``--messages`` QoS 1 messages are published (every PUBACK awaited), and the subscriber
  reconnects: messages/s from its CONNECT until every queued message arrived, with the fraction delivered;
* broker memory per idle connection: RSS delta (``/proc/<pid>/status``) over ``--connections``
  raw CONNECTs (mqbroker only, and Mosquitto for comparison).

Both brokers run side by side; each throughput and latency measurement runs on one and then the
other, ``--rounds`` times, and the report shows medians (a shared machine's load swings by 2x
within a minute, so single runs of one broker after the other compare different machines).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import pathlib
import queue
import resource
import selectors
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository, for tests.integration

from tests.integration.brokerprocess import free_port  # noqa: E402

PAYLOAD_BYTES = 100
FAN_OUT_SUBSCRIBERS = 10
LATENCY_RATE_PER_S = 5_000
LATENCY_SECONDS = 4.0
INFLIGHT_MAX = 1_000
#: paho's window for the paced latency publisher: none. With a window, paho scans every unacknowledged message on each
#: PUBACK (``Client._update_inflight``: about 0.25 µs each, 250 µs a PUBACK at 1,000 outstanding), so any pause of
#: the broker's PUBACKs made the publisher itself too slow for the pace and the run never recovered (its CPU per
#: message 188 µs against mqbroker, 152 against Mosquitto; 80 and 108 without a window). The pace bounds what is
#: outstanding; mqbroker's receive maximum still stops reading a client with 1,000 on their way to the log.
LATENCY_INFLIGHT_MAX = 0


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Wait until ``port`` accepts connections (and the broker's MQTT front end answers CONNECT)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}")
        try:
            client = connected_client(port, "probe")
            client.disconnect()
            client.loop_stop()
            return
        except (OSError, TimeoutError):
            time.sleep(0.2)
    raise RuntimeError(f"nothing answers MQTT on port {port}")


@contextmanager
def mqbroker_process(work: pathlib.Path, connections: int, puback: str = "durable") -> Iterator[tuple[int, int]]:
    """A broker on free ports that admits ``connections`` more from 127.0.0.1 than the default limits, with
    ``mqtt_puback = puback``; yields (MQTT port, pid)."""
    ports = {name: free_port() for name in ("native", "mqtt", "http")}
    work = work / f"mqbroker-{puback}"
    work.mkdir(exist_ok=True)
    command = [
        sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n", "--pidfile=",
        f"--logfile={work / 'mqbroker.log'}", "mqbroker", "--data-dir", str(work / "data"), "--host", "127.0.0.1",
        "--native-port", str(ports["native"]), "--mqtt-port", str(ports["mqtt"]), "--http-port", str(ports["http"]),
        "--amqp-port", "0", "--kafka-port", "0", "--controller-port", "0",
        "--set", f"quotas.connections_per_ip_max={connections + 100}", "--set", f"quotas.connections_max={connections + 100}",
        *(["--set", f"mqtt_puback={puback}"] if puback != "durable" else []),  # durable: the default
    ]
    process = subprocess.Popen(command, cwd=work)
    try:
        wait_for_port(ports["mqtt"], process)
        yield ports["mqtt"], process.pid
    finally:
        process.kill()
        process.wait()


@contextmanager
def mosquitto_process(work: pathlib.Path) -> Iterator[tuple[int, int]]:
    """Debian's mosquitto on a free port with a temporary config; yields (port, pid)."""
    port = free_port()
    config = work / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 1000000\n"
        "max_inflight_messages 1000\n"
    )
    process = subprocess.Popen(["mosquitto", "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield port, process.pid
    finally:
        process.kill()
        process.wait()


def connected_client(port: int, client_id: str, on_message: Any = None, clean_session: bool = True,
                     inflight_max: int = INFLIGHT_MAX) -> mqtt.Client:
    """A paho 3.1.1 client, connected, with its network loop running (``inflight_max`` 0: no window)."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv311,
                         clean_session=clean_session)
    client.max_inflight_messages_set(inflight_max)
    client.max_queued_messages_set(0)
    connected = threading.Event()
    client.on_connect = lambda *args: connected.set()
    if on_message is not None:
        client.on_message = on_message
    client.connect("127.0.0.1", port, keepalive=60)
    client.loop_start()
    if not connected.wait(10):
        client.loop_stop()
        raise TimeoutError("no CONNACK")
    return client


def subscribe(client: mqtt.Client, topic: str, qos: int) -> None:
    """Subscribe and wait for the SUBACK."""
    done = threading.Event()
    client.on_subscribe = lambda *args: done.set()
    client.subscribe(topic, qos)
    if not done.wait(10):
        raise TimeoutError("no SUBACK")


def publish_throughput(port: int, qos: int, count: int, topic: str | None = None) -> dict[str, float]:
    """Messages/s and MB/s publishing ``count`` messages from one client (to ``topic``, else one per QoS)."""
    publisher = connected_client(port, f"bench-pub-{qos}")
    payload = b"p" * PAYLOAD_BYTES
    topic = topic or f"bench/throughput/{qos}"
    started = time.perf_counter()
    infos = [publisher.publish(topic, payload, qos=qos) for _ in range(count)]
    marker = publisher.publish(topic, payload, qos=1)  # acknowledged after everything before it
    marker.wait_for_publish(timeout=120)
    for info in infos[-1:]:
        info.wait_for_publish(timeout=120)
    elapsed = time.perf_counter() - started
    publisher.disconnect()
    publisher.loop_stop()
    # QoS 1: each PUBACK; QoS 0 has none: a send that paho refused fails, the rest the marker's PUBACK covers.
    taken = sum(1 for info in infos if info.rc == mqtt.MQTT_ERR_SUCCESS and (qos == 0 or info.is_published()))
    if not marker.is_published():
        taken = 0 if qos == 0 else taken
    rate = taken / elapsed
    return {"messages_per_s": rate, "mb_per_s": rate * PAYLOAD_BYTES / 1e6, "failed": count - taken}


def fan_out(port: int, count: int) -> dict[str, float]:
    """Deliveries/s to ``FAN_OUT_SUBSCRIBERS`` subscribers of one topic, QoS 0."""
    topic = "bench/fanout"
    received = [0] * FAN_OUT_SUBSCRIBERS
    all_done = threading.Event()

    def counter(index: int) -> Any:
        def on_message(client: Any, userdata: Any, message: Any) -> None:
            received[index] += 1
            if received[index] == count and all(n >= count for n in received):
                all_done.set()
        return on_message

    subscribers = [connected_client(port, f"bench-fan-{i}", counter(i)) for i in range(FAN_OUT_SUBSCRIBERS)]
    for subscriber in subscribers:
        subscribe(subscriber, topic, 0)
    publisher = connected_client(port, "bench-fan-pub")
    payload = b"f" * PAYLOAD_BYTES
    started = time.perf_counter()
    for _ in range(count):
        publisher.publish(topic, payload, qos=0)
    all_done.wait(120)
    elapsed = time.perf_counter() - started
    for client in (*subscribers, publisher):
        client.disconnect()
        client.loop_stop()
    deliveries = sum(received)
    return {"deliveries_per_s": deliveries / elapsed, "delivered_fraction": deliveries / (count * FAN_OUT_SUBSCRIBERS)}


def offline_drain(port: int, count: int) -> dict[str, float]:
    """Messages/s delivered at QoS 1 to a persistent session that ``count`` messages were queued for while offline."""
    return drain_session(port, *queue_for_offline_session(port, count))


def queue_for_offline_session(port: int, count: int) -> tuple[str, int]:
    """Subscribe a persistent session at QoS 1, disconnect it, publish ``count`` QoS 1 messages to it;
    return its client id and the messages acknowledged (queued for it)."""
    topic, client_id = "bench/drain", f"bench-drain-{time.monotonic_ns()}"
    subscriber = connected_client(port, client_id, clean_session=False)
    subscribe(subscriber, topic, 1)
    subscriber.disconnect()
    subscriber.loop_stop()
    published = publish_throughput(port, 1, count, topic)
    return client_id, count + 1 - int(published["failed"])  # every acknowledged message, and the marker


def drain_session(port: int, client_id: str, expected: int) -> dict[str, float]:
    """Reconnect the persistent session ``client_id``; messages/s from its CONNECT until ``expected`` arrived."""
    received = [0]
    all_done = threading.Event()

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        received[0] += 1
        if received[0] >= expected:
            all_done.set()

    started = time.perf_counter()
    subscriber = connected_client(port, client_id, on_message, clean_session=False)
    all_done.wait(120)
    elapsed = time.perf_counter() - started
    subscriber.disconnect()
    subscriber.loop_stop()
    return {"messages_per_s": received[0] / elapsed, "delivered_fraction": received[0] / expected, "seconds": elapsed}


def latency(port: int, rate_per_s: int = LATENCY_RATE_PER_S) -> dict[str, float]:
    """Publish-to-delivery latency (ms) at QoS 1 with the publisher paced at ``rate_per_s``.

    The subscriber runs in a process of its own (``_latency_subscriber``): in the publisher's, the two paho
    network threads and the pacing loop share one GIL, and at 5,000 msg/s that client fell behind on every
    broker, Mosquitto too, so the figure was the client's backlog. Both processes stamp and read
    ``time.perf_counter_ns`` (CLOCK_MONOTONIC, one clock for the whole machine).
    """
    topic = "bench/latency"
    padding = b"l" * (PAYLOAD_BYTES - 8)
    total = int(rate_per_s * LATENCY_SECONDS)
    processes = multiprocessing.get_context("spawn")
    ready, stop, results = processes.Event(), processes.Event(), processes.Queue()
    subscriber = processes.Process(target=_latency_subscriber, args=(port, topic, total, ready, stop, results))
    subscriber.start()
    try:
        if not ready.wait(30):
            raise TimeoutError("the latency subscriber did not subscribe")
        publisher = connected_client(port, "bench-lat-pub", inflight_max=LATENCY_INFLIGHT_MAX)
        interval_s = 1.0 / rate_per_s
        publisher_cpu_s = time.process_time()
        started = time.perf_counter()
        for number in range(total):
            wait_s = started + number * interval_s - time.perf_counter()
            if wait_s > 0:
                time.sleep(wait_s)  # not a busy wait: that would hold the GIL the client's network thread needs
            publisher.publish(topic, struct.pack(">q", time.perf_counter_ns()) + padding, qos=1)
        try:  # the subscriber answers once every message arrived; what has not 10 s after the last publish is lost
            samples, subscriber_cpu_s = results.get(timeout=10)
        except queue.Empty:
            stop.set()
            samples, subscriber_cpu_s = results.get(timeout=30)
        publisher_cpu_s = time.process_time() - publisher_cpu_s
        publisher.disconnect()
        publisher.loop_stop()
    finally:
        stop.set()
        subscriber.join(30)
    ordered = sorted(samples) + [math.inf] * (total - len(samples))  # a lost message: infinitely late
    return {
        "p50_ms": ordered[int(total * 0.50)],
        "p99_ms": ordered[int(total * 0.99)],
        "delivered_fraction": len(samples) / total,
        "publisher_cpu_us": publisher_cpu_s / total * 1e6,
        "subscriber_cpu_us": subscriber_cpu_s / total * 1e6,
    }


def _latency_subscriber(port: int, topic: str, total: int, ready: Any, stop: Any, results: Any) -> None:
    """``latency``'s subscriber, in its own process: subscribe, then collect each message's latency (ms) until
    ``total`` arrived or ``stop`` is set, and put the list and the process's CPU seconds meanwhile on ``results``."""
    samples: list[float] = []
    arrived = threading.Event()

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        (sent_ns,) = struct.unpack_from(">q", message.payload)
        samples.append((time.perf_counter_ns() - sent_ns) / 1e6)
        if len(samples) >= total:
            arrived.set()

    subscriber = connected_client(port, "bench-lat-sub", on_message)
    subscribe(subscriber, topic, 1)
    cpu_s = time.process_time()
    ready.set()
    while not arrived.wait(0.05) and not stop.is_set():
        pass
    subscriber.disconnect()
    subscriber.loop_stop()
    results.put((list(samples), time.process_time() - cpu_s))


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def idle_connection_memory(port: int, pid: int, count: int) -> dict[str, float]:
    """RSS delta per idle connection over ``count`` raw CONNECTs (keep-alive 0, CONNACK awaited)."""
    before = rss_kib(pid)
    selector = selectors.DefaultSelector()
    sockets = []
    answered = 0
    for number in range(count):
        client_id = f"idle-{number}".encode()
        body = b"\x00\x04MQTT\x04\x02\x00\x00" + struct.pack(">H", len(client_id)) + client_id
        connection = socket.create_connection(("127.0.0.1", port))
        connection.sendall(bytes([0x10, len(body)]) + body)
        connection.setblocking(False)
        selector.register(connection, selectors.EVENT_READ)
        sockets.append(connection)
        while selector.select(0):  # drain CONNACKs as they come so no buffer fills
            for key, _ in selector.select(0):
                if key.fileobj.recv(4):
                    answered += 1
                selector.unregister(key.fileobj)
    deadline = time.monotonic() + 60
    while answered < count and time.monotonic() < deadline:
        for key, _ in selector.select(1):
            if key.fileobj.recv(4):
                answered += 1
            selector.unregister(key.fileobj)
    time.sleep(1.0)
    after = rss_kib(pid)
    for connection in sockets:
        connection.close()
    return {"connections": answered, "kib_per_connection": (after - before) / max(answered, 1)}


#: What is measured in every round, on both brokers back to back (so both see the same machine load).
ROUND_MEASUREMENTS: dict[str, Any] = {
    "publish_qos0": lambda port, arguments: publish_throughput(port, 0, arguments.messages),
    "publish_qos1": lambda port, arguments: publish_throughput(port, 1, arguments.messages),
    "fan_out_qos0": lambda port, arguments: fan_out(port, arguments.messages // FAN_OUT_SUBSCRIBERS),
    "latency_qos1": lambda port, arguments: latency(port, arguments.latency_rate),
    "offline_drain_qos1": lambda port, arguments: offline_drain(port, arguments.messages),
}
ROWS = [
    ("publish QoS 0 msg/s", "publish_qos0", "messages_per_s"),
    ("publish QoS 0 MB/s", "publish_qos0", "mb_per_s"),
    ("publish QoS 0 failed", "publish_qos0", "failed"),
    ("publish QoS 1 msg/s", "publish_qos1", "messages_per_s"),
    ("publish QoS 1 MB/s", "publish_qos1", "mb_per_s"),
    ("publish QoS 1 failed", "publish_qos1", "failed"),
    ("fan-out x10 deliveries/s", "fan_out_qos0", "deliveries_per_s"),
    ("fan-out x10 delivered fraction", "fan_out_qos0", "delivered_fraction"),
    ("latency QoS 1 p50 ms", "latency_qos1", "p50_ms"),
    ("latency QoS 1 p99 ms", "latency_qos1", "p99_ms"),
    ("latency QoS 1 delivered fraction", "latency_qos1", "delivered_fraction"),
    ("  publisher CPU µs/msg", "latency_qos1", "publisher_cpu_us"),
    ("  subscriber CPU µs/msg", "latency_qos1", "subscriber_cpu_us"),
    ("offline drain QoS 1 msg/s", "offline_drain_qos1", "messages_per_s"),
    ("offline drain delivered fraction", "offline_drain_qos1", "delivered_fraction"),
    ("KiB per idle connection", "idle_connection", "kib_per_connection"),
]


def measure_rounds(brokers: dict[str, tuple[int, int]], arguments: argparse.Namespace) -> dict[str, dict[str, list[Any]]]:
    """Every figure ``--rounds`` times, each measurement on every broker back to back; idle memory once."""
    samples: dict[str, dict[str, list[Any]]] = {name: {} for name in brokers}
    chosen = arguments.measurements
    for number in range(arguments.rounds):
        for measurement, run in ROUND_MEASUREMENTS.items():
            if measurement not in chosen:
                continue
            for name, (port, _) in brokers.items():
                print(f"-- round {number + 1}: {measurement} on {name}", file=sys.stderr)
                samples[name].setdefault(measurement, []).append(run(port, arguments))
    if "idle_connection" in chosen:
        for name, (port, pid) in brokers.items():
            print(f"-- idle connections on {name}", file=sys.stderr)
            samples[name]["idle_connection"] = [idle_connection_memory(port, pid, arguments.connections)]
    return samples


def report(samples: dict[str, dict[str, list[Any]]]) -> None:
    """Medians over the rounds side by side; each ratio is the median of the per-round mqbroker / mosquitto ratios."""
    theirs = samples["mosquitto"]
    ours = {name: measured for name, measured in samples.items() if name != "mosquitto"}
    rounds = max(len(measured) for measured in theirs.values())
    print(f"medians of {rounds} round(s); load average {os.getloadavg()[0]:.1f} at the end ({time.strftime('%H:%M')})")
    print(f"{'':34}" + "".join(f"{name:>18}" for name in ours) + f"{'mosquitto':>14}"
          + "".join(f"{'ratio ' + name.split()[-1]:>16}" for name in ours))
    for label, measurement, figure in ROWS:
        if measurement not in theirs:
            continue
        reference = [sample[figure] for sample in theirs[measurement]]
        cells, ratios = [], []
        for measured in ours.values():
            mine = [sample[figure] for sample in measured[measurement]]
            cells.append(_cell(statistics.median(mine), 18))
            per_round = [a / b if b and math.isfinite(a) and math.isfinite(b) else float("nan")
                         for a, b in zip(mine, reference)]
            ratios.append(f"{statistics.median(per_round):16.2f}")
        print(f"{label:34}{''.join(cells)}{_cell(statistics.median(reference), 14)}{''.join(ratios)}")
    print("rates count acknowledged (QoS 1) or marker-covered (QoS 0) messages; latency percentiles are over every "
          "message sent ('lost': it falls on an undelivered one); mosquitto runs with persistence false, "
          "max_queued_messages 1000000, max_inflight_messages 1000; mqbroker with raised connection quotas and "
          "mqtt_puback as named (durable: PUBACK after fsync, the default; written: after the append)")


def _cell(value: float, width: int) -> str:
    return f"{'lost':>{width}}" if math.isinf(value) else f"{value:{width}.2f}"


def main() -> None:
    """Run every measurement against both brokers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3, help="repetitions of the throughput and latency figures")
    parser.add_argument("--json", action="store_true", help="print every sample as JSON")
    parser.add_argument("--puback", choices=["durable", "written", "both"], default="both",
                        help="mqbroker's mqtt_puback: one broker per mode [default: both, side by side]")
    parser.add_argument("--latency-rate", type=int, default=LATENCY_RATE_PER_S,
                        help="messages/s of the latency run's paced publisher [default: %(default)s]")
    parser.add_argument("--measurements", default=",".join([*ROUND_MEASUREMENTS, "idle_connection"]),
                        help="comma-separated subset of: %(default)s")
    arguments = parser.parse_args()
    arguments.measurements = set(arguments.measurements.split(","))
    unknown = arguments.measurements - {*ROUND_MEASUREMENTS, "idle_connection"}
    if unknown:
        parser.error(f"unknown measurements {sorted(unknown)}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    arguments.connections = min(arguments.connections, hard - 200)
    with tempfile.TemporaryDirectory() as directory:
        work = pathlib.Path(directory)
        modes = ["durable", "written"] if arguments.puback == "both" else [arguments.puback]
        with contextlib.ExitStack() as stack:
            brokers = {f"mqbroker {mode}": stack.enter_context(mqbroker_process(work, arguments.connections, mode))
                       for mode in modes}
            brokers["mosquitto"] = stack.enter_context(mosquitto_process(work))
            samples = measure_rounds(brokers, arguments)
    if arguments.json:
        print(json.dumps(samples, indent=2))
    else:
        report(samples)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
