"""Many idle MQTT connections on one broker: memory per connection, time to connect them, and publish latency meanwhile.

Run ``python benchmarks/mqtt_idle_bench.py [--connections 18000] [--probe-messages 2000] [--probe-rate 500] [--json]``.

mqbroker (``twistd -n mqbroker``, its connection budgets raised to fit) and Debian's Mosquitto
side by side, one after the other with the same client (the brokers of ``mqtt_bench.py``). For each,
a child process opens ``--connections`` raw MQTT 3.1.1 connections
(CONNECT with keep-alive 0, CONNACK awaited; source addresses 127.0.0.2, .3, ... so no address
runs out of ephemeral ports) and holds them idle. Then, with all of them connected:

* ``connect_s`` and connections/s: from the first CONNECT to the last CONNACK;
* broker RSS before and after, ``kib_per_connection`` (the delta over the count) and what that
  projects for 100,000 connections;
* publish-to-delivery latency of ``--probe-messages`` QoS 1 messages (paho publisher and
  subscriber, paced at ``--probe-rate`` msg/s, 100-byte payloads) over every message sent: one
  never delivered counts as lost (``inf``), and the fraction delivered is printed; msg/s and MB/s
  delivered.

The descriptor limit bounds the count: the broker and the child each hold one descriptor per
connection, and neither may exceed the hard ``RLIMIT_NOFILE`` (printed; 20,000 on the machine
these figures were first taken on, so 100,000 cannot run there).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import pathlib
import resource
import selectors
import socket
import struct
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqtt_bench import mosquitto_process, mqbroker_process, rss_kib  # noqa: E402

#: Connections per source address (below the ~28,000 ephemeral ports of one address and port pair).
PER_SOURCE_ADDRESS = 20_000
#: Descriptors each process keeps for itself beyond the connections (the broker's logs, sockets, ...).
DESCRIPTOR_MARGIN = 1_000
#: Linux's IP_BIND_ADDRESS_NO_PORT (not in Python's socket module).
IP_BIND_ADDRESS_NO_PORT = 24
PROBE_TOPIC = "idle/probe"
PAYLOAD_BYTES = 100


def connect_packet(client_id: bytes) -> bytes:
    """An MQTT 3.1.1 CONNECT: clean session, keep-alive 0 (the broker never times it out)."""
    body = b"\x00\x04MQTT\x04\x02\x00\x00" + struct.pack(">H", len(client_id)) + client_id
    return bytes([0x10, len(body)]) + body


def hold_idle_connections(port: int, count: int, report: Connection) -> None:
    """Child process: open ``count`` connections, report (connected, seconds), hold them until told to stop."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    selector = selectors.DefaultSelector()
    sockets = []
    answered = 0

    def drain(timeout_s: float) -> None:
        nonlocal answered
        for key, _ in selector.select(timeout_s):
            if key.fileobj.recv(4):  # CONNACK (4 bytes)
                answered += 1
            selector.unregister(key.fileobj)

    started = time.perf_counter()
    for number in range(count):
        source = f"127.0.0.{2 + number // PER_SOURCE_ADDRESS}"
        connection = socket.socket()
        # Bind the source address but let connect() pick the port: a bind to port 0 would search the
        # ephemeral range on every call and slow down with each connection held.
        connection.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
        connection.bind((source, 0))
        connection.connect(("127.0.0.1", port))
        connection.sendall(connect_packet(f"idle-{number}".encode()))
        connection.setblocking(False)
        selector.register(connection, selectors.EVENT_READ)
        sockets.append(connection)
        drain(0)
    deadline = time.monotonic() + 120
    while answered < count and time.monotonic() < deadline:
        drain(1)
    report.send((answered, time.perf_counter() - started))
    report.recv()  # the parent has measured: close them all
    for connection in sockets:
        connection.close()


def percentile(ordered: list[float], fraction: float) -> float:
    """The ``fraction`` percentile of sorted latencies in ms (``inf`` when it falls on a lost message)."""
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def probe_latency(port: int, messages: int, rate: int) -> dict[str, Any]:
    """QoS 1 publish-to-delivery latency through the broker while the idle connections are held."""
    received: dict[int, float] = {}
    subscribed = threading.Event()
    subscriber = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="idle-probe-sub")
    subscriber.on_subscribe = lambda *_: subscribed.set()
    subscriber.on_message = lambda _c, _u, message: received.setdefault(
        int.from_bytes(message.payload[:4], "big"), time.perf_counter())
    subscriber.connect("127.0.0.1", port)
    subscriber.subscribe(PROBE_TOPIC, qos=1)
    subscriber.loop_start()
    publisher = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="idle-probe-pub")
    publisher.connect("127.0.0.1", port)
    publisher.loop_start()
    assert subscribed.wait(30), "the probe subscriber got no SUBACK"
    sent_at: dict[int, float] = {}
    started = time.perf_counter()
    for number in range(messages):
        while time.perf_counter() < started + number / rate:
            time.sleep(0.0005)
        sent_at[number] = time.perf_counter()
        publisher.publish(PROBE_TOPIC, number.to_bytes(4, "big") + bytes(PAYLOAD_BYTES - 4), qos=1)
    deadline = time.monotonic() + 30
    while len(received) < messages and time.monotonic() < deadline:
        time.sleep(0.05)
    elapsed = max(received.values(), default=time.perf_counter()) - started
    for client in (publisher, subscriber):
        client.disconnect()
        client.loop_stop()
    latencies = sorted((received[n] - sent_at[n]) * 1000 if n in received else math.inf for n in sent_at)
    return {"probe_p50_ms": percentile(latencies, 0.50), "probe_p99_ms": percentile(latencies, 0.99),
            "probe_delivered_fraction": len(received) / messages, "probe_msg_s": len(received) / elapsed,
            "probe_mb_s": len(received) * PAYLOAD_BYTES / elapsed / 1e6}


def measure(port: int, pid: int, connections: int, probe_messages: int, probe_rate: int) -> dict[str, Any]:
    """Every figure, on the broker listening on ``port`` (process ``pid``)."""
    figures: dict[str, Any] = {}
    parent_end, child_end = multiprocessing.Pipe()
    holder = multiprocessing.Process(target=hold_idle_connections, args=(port, connections, child_end))
    try:
        time.sleep(1.0)
        before = rss_kib(pid)
        holder.start()
        connected, connect_s = parent_end.recv()
        time.sleep(1.0)
        after = rss_kib(pid)
        figures.update(connections=connected, connect_s=connect_s, connections_per_s=connected / connect_s,
                       rss_before_mib=before / 1024, rss_after_mib=after / 1024,
                       kib_per_connection=(after - before) / max(connected, 1))
        figures["projected_rss_100k_mib"] = (before + figures["kib_per_connection"] * 100_000) / 1024
        figures.update(probe_latency(port, probe_messages, probe_rate))
    finally:
        if holder.is_alive():
            parent_end.send("stop")
        holder.join(60)
    return figures


def print_report(name: str, figures: dict[str, Any], options: argparse.Namespace) -> None:
    """A broker's figures, three lines."""
    print(f"{name}: {figures['connections']:,} of {options.connections:,} idle connections in "
          f"{figures['connect_s']:.1f} s ({figures['connections_per_s']:,.0f}/s); RSS {figures['rss_before_mib']:.0f} MiB "
          f"before, {figures['rss_after_mib']:.0f} MiB after: {figures['kib_per_connection']:.1f} KiB per connection, "
          f"projected {figures['projected_rss_100k_mib']:,.0f} MiB at 100,000")
    print(f"  QoS 1 probe meanwhile ({options.probe_messages:,} msgs at {options.probe_rate}/s, {PAYLOAD_BYTES} B): "
          f"p50 {figures['probe_p50_ms']:.2f} ms, p99 {figures['probe_p99_ms']:.2f} ms, delivered "
          f"{figures['probe_delivered_fraction']:.4f}, {figures['probe_msg_s']:,.0f} msg/s, {figures['probe_mb_s']:.3f} MB/s")


def main() -> None:
    """Parse the options, check them against the descriptor limit, measure, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=18_000, help="idle connections to hold [default: 18000]")
    parser.add_argument("--probe-messages", type=int, default=2_000)
    parser.add_argument("--probe-rate", type=int, default=500, help="probe messages per second [default: 500]")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if options.connections + DESCRIPTOR_MARGIN > hard:
        parser.error(f"{options.connections:,} connections need more descriptors than this machine's hard "
                     f"RLIMIT_NOFILE ({hard:,}) allows a process (broker and holder each need one per connection)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the brokers inherit it
    results: dict[str, Any] = {"rlimit_nofile_hard": hard, "connections_asked": options.connections}
    with tempfile.TemporaryDirectory(prefix="mqtt-idle-") as work:
        for name, broker in (("mqbroker", mqbroker_process(pathlib.Path(work), options.connections)),
                             ("mosquitto", mosquitto_process(pathlib.Path(work)))):
            print(f"-- {name}", file=sys.stderr, flush=True)
            with broker as (port, pid):
                results[name] = measure(port, pid, options.connections, options.probe_messages, options.probe_rate)
    if options.json:
        print(json.dumps(results, indent=2))
        return
    print(f"hard RLIMIT_NOFILE {hard:,}; mqbroker with quotas.connections_max and connections_per_ip_max raised to "
          f"{options.connections + 100:,}")
    for name in ("mqbroker", "mosquitto"):
        print_report(name, results[name], options)


if __name__ == "__main__":
    main()
