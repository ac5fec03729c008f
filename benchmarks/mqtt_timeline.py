"""Where an MQTT QoS 1 message's publish → delivery time goes: broker time stamps joined with the clients', by message.

Run ``python benchmarks/mqtt_timeline.py [--puback durable|written|both] [--rate 5000] [--seconds 4] [--runs 1]``
(from a source tree, with it on ``PYTHONPATH``). Each run starts a broker (``twistd mqbroker`` on free ports, a fresh
data directory) whose MQTT path is time-stamped by wrappers installed in its own process before it starts
(CLOCK_MONOTONIC, the clock the clients stamp with), then runs ``mqtt_bench.py``'s latency measurement: a paho QoS 1
publisher paced at ``--rate`` (no window) and a paho QoS 1 subscriber in a process of its own. The n-th message
published is offset n of the log and the n-th PUBLISH the subscriber's connection writes. Each message's time is split
into:

* ``send → socket``: the publisher's ``publish`` call to paho's socket write that carried it (paho's network thread);
* ``socket → rx``: that write to the broker's read of the bytes that completed the PUBLISH (loopback, the reactor's
  turn to read: what else the reactor runs meanwhile);
* ``rx → appended``: its batch is in the log (``PartitionLog.append`` returned);
* ``appended → durable``: the group-commit round covering it is done (``Flusher._round_done``); with
  ``--puback written`` this step is off the delivery path and printed for reference only;
* ``appended|durable → offered``: the hub offers it to the subscriber's connection (``offer_live``, or
  ``offer_live_many`` for a run: from memory on append with ``written``, from the shared reader's fetch once durable
  with ``durable``) — or, with its window full,
  the session falls behind and reads the log itself (counted as ``fell behind``);
* ``offered → written``: the PUBLISH is written to the subscriber's socket (the connection's ``flush``);
* ``written → recv``: paho's ``on_message`` in the subscriber.

It prints p50/p90/p99 per step over the messages of each run, with the broker's CPU per message (its process from the
first publish until the subscriber had every message), how long the reactor spent inside each fsync round's
hand-over to the engine, and how many offers queued no PUBLISH at once (the subscriber's window full). The wrappers cost the broker some CPU: compare steps,
not totals, with ``mqtt_bench.py``.
"""

from __future__ import annotations

import argparse
import bisect
import json
import multiprocessing
import os
import pathlib
import queue
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[0]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from cputime import process_tree_cpu_s  # noqa: E402
from mqtt_bench import (PAYLOAD_BYTES, connected_client, subscribe,  # noqa: E402
                        wait_for_port)
from mqbroker.config import FSYNC_ENGINES  # noqa: E402
from tests.integration.brokerprocess import free_port  # noqa: E402

TOPIC = "bench/timeline"
PUBLISHER, SUBSCRIBER = "timeline-pub", "timeline-sub"
#: The payload's head: the publisher's send time (ns) and the message's number.
STAMP = struct.Struct(">qq")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the broker child: wrappers, then twistd --------------------------------------------------------------

def run_traced_broker(out_path: str, twistd_arguments: list[str]) -> None:
    """Install the time-stamping wrappers, run ``twistd``, write the events to ``out_path`` as it stops."""
    from mqbroker import service
    from mqbroker.durability import flusher, sync_engines
    from mqbroker.protocols.mqtt import server
    from mqbroker.storage import log as storage_log

    now = time.monotonic_ns
    events: list[Any] = []
    last_read = [0]
    sent = [0]  # PUBLISHes queued for the subscriber's socket so far

    def client_log(partition_log: Any) -> bool:
        return not os.path.basename(partition_log.directory).startswith("__")

    def wrap(owner: Any, name: str, before: Any = None, after: Any = None) -> None:
        original = getattr(owner, name)

        def wrapper(self: Any, *arguments: Any, **keywords: Any) -> Any:
            state = None if before is None else before(self, *arguments, **keywords)
            result = original(self, *arguments, **keywords)
            if after is not None:
                after(self, result, state, *arguments, **keywords)
            return result

        setattr(owner, name, wrapper)

    def publisher(connection: Any) -> bool:
        return connection.client_id == PUBLISHER

    def subscriber(connection: Any) -> bool:
        return connection.client_id == SUBSCRIBER

    wrap(server.MqttConnection, "data_received",
         before=lambda self, data: publisher(self) and last_read.__setitem__(0, now()))
    wrap(storage_log.PartitionLog, "append", after=lambda self, result, state, *_, **__: client_log(self) and events.append(
        ("append", last_read[0], now(), result.last_offset)))
    for engine in (sync_engines.AioSync, sync_engines.ThreadSync, sync_engines.WorkerSync):
        wrap(engine, "sync", before=lambda self, *_, **__: now(),
             after=lambda self, result, started, *_, **__: events.append(("handed", started, now())))
    wrap(flusher.Flusher, "_round_done", before=lambda self, synced: events.append(
        ("durable", now(), [log.durable_end_offset for log, _ in synced if client_log(log)])))

    def offered(self: Any, partition_key: Any, offset: int, *_: Any, **__: Any) -> tuple[int, int] | None:
        return (now(), offset) if subscriber(self) else None

    def offer_done(self: Any, result: Any, state: tuple[int, int] | None, *_: Any, **__: Any) -> None:
        if state is not None:
            events.append(("offer", state[0], state[1], sent[0]))

    wrap(server.MqttConnection, "offer_live", before=offered, after=offer_done)

    def offered_many(self: Any, *_: Any, **__: Any) -> tuple[int, int] | None:
        return (now(), sent[0]) if subscriber(self) else None

    def offers_done(self: Any, result: Any, state: tuple[int, int] | None, partition_key: Any, offers: Any,
                    *_: Any, **__: Any) -> None:
        if state is not None:  # a run offered at once: each counted as sent in order, as far as the run sent
            for index, (offset, *_rest) in enumerate(offers):
                events.append(("offer", state[0], offset, min(state[1] + index + 1, sent[0])))

    wrap(server.MqttConnection, "offer_live_many", before=offered_many, after=offers_done)
    wrap(server.MqttConnection, "_send_publishes", before=lambda self, count, *_, **__: (
        subscriber(self) and self._connection is not None and sent.__setitem__(0, sent[0] + count)))
    wrap(server.MqttConnection, "flush", before=lambda self, *_, **__: subscriber(self) and bool(self._outgoing),
         after=lambda self, result, had, *_, **__: had and not self._outgoing and events.append(
             ("write", now(), sent[0])))

    def dump(self: Any) -> None:
        pathlib.Path(out_path).write_text(json.dumps(events))

    wrap(service.BrokerService, "stopService", before=dump)
    from twisted.scripts.twistd import run

    sys.argv = ["twistd", *twistd_arguments]
    run()


def start_broker(work: pathlib.Path, puback: str,
                 fsync_engine: str) -> tuple[subprocess.Popen[bytes], int, pathlib.Path]:
    """A traced broker on free ports with ``mqtt_puback = puback`` and ``fsync_engine``: (process, MQTT port, where its
    events go)."""
    ports = {name: free_port() for name in ("native", "mqtt", "http")}
    events = work / "events.json"
    command = [
        sys.executable, __file__, "--broker-child", str(events), "-n", "--pidfile=", f"--logfile={work / 'broker.log'}",
        "mqbroker", "--data-dir", str(work / "data"), "--host", "127.0.0.1", "--native-port", str(ports["native"]),
        "--mqtt-port", str(ports["mqtt"]), "--http-port", str(ports["http"]), "--amqp-port", "0", "--kafka-port", "0",
        "--controller-port", "0", "--set", f"mqtt_puback={puback}",
        "--set", f"fsync_engine={fsync_engine}",
    ]
    process = subprocess.Popen(command, cwd=work)
    try:
        wait_for_port(ports["mqtt"], process)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return process, ports["mqtt"], events


# -- the clients ------------------------------------------------------------------------------------------

def run_clients(port: int, rate: int, total: int, broker_pid: int,
                nodelay: bool = False) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]], float]:
    """Publish ``total`` stamped QoS 1 messages at ``rate``: (number, sent ns, received ns) of each one received, and
    the publisher's socket writes (ns after each, PUBLISHes written so far: every one has the same length), and the
    broker's CPU seconds from the first publish until the subscriber had them all."""
    processes = multiprocessing.get_context("spawn")
    ready, results = processes.Event(), processes.Queue()
    receiver = processes.Process(target=_subscriber, args=(port, total, ready, results, nodelay))
    receiver.start()
    try:
        if not ready.wait(30):
            raise TimeoutError("the subscriber did not subscribe")
        client = connected_client(port, PUBLISHER, inflight_max=0)
        if nodelay:
            client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        padding = b"t" * (PAYLOAD_BYTES - STAMP.size)
        packet_bytes = 1 + 1 + 2 + len(TOPIC) + 2 + PAYLOAD_BYTES  # remaining length < 128: one byte
        written, socket_writes = [0], []
        send = client._sock_send

        def timed_send(buffer: bytes | bytearray, *arguments: Any, **keywords: Any) -> int:
            count = send(buffer, *arguments, **keywords)
            written[0] += count
            socket_writes.append((time.monotonic_ns(), written[0] // packet_bytes))
            return count

        client._sock_send = timed_send  # type: ignore[method-assign]
        broker_cpu_s = process_tree_cpu_s(broker_pid)
        started = time.perf_counter()
        for number in range(total):
            wait_s = started + number / rate - time.perf_counter()
            if wait_s > 0:
                time.sleep(wait_s)
            client.publish(TOPIC, STAMP.pack(time.perf_counter_ns(), number) + padding, qos=1)
        try:
            received = results.get(timeout=40)
        except queue.Empty:
            received = []
        broker_cpu_s = process_tree_cpu_s(broker_pid) - broker_cpu_s
        client.disconnect()
        client.loop_stop()
    finally:
        receiver.join(30)
        if receiver.is_alive():
            receiver.kill()
    return received, socket_writes, broker_cpu_s


def _subscriber(port: int, total: int, ready: Any, results: Any, nodelay: bool) -> None:
    received: list[tuple[int, int, int]] = []
    arrived = threading.Event()

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        at = time.perf_counter_ns()
        sent, number = STAMP.unpack_from(message.payload)
        received.append((number, sent, at))
        if len(received) >= total:
            arrived.set()

    client = connected_client(port, SUBSCRIBER, on_message)
    if nodelay:
        client.socket().setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    subscribe(client, TOPIC, 1)
    ready.set()
    arrived.wait(35)
    client.disconnect()
    client.loop_stop()
    results.put(received)


# -- the join ----------------------------------------------------------------------------------------------

STEPS = ("send → socket", "socket → rx", "rx → appended", "appended → durable", "appended → offered", "durable → offered",
         "offered → written", "written → recv", "total")


def step_times_ms(events: list[Any], received: list[tuple[int, int, int]], socket_writes: list[tuple[int, int]],
                  puback: str) -> dict[str, list[float]]:
    """Each message's time in each step (message n is offset n: a step's event covers the offsets below its end)."""
    publisher_ends = [count for _, count in socket_writes]
    appends = sorted((event[3], event[1], event[2]) for event in events if event[0] == "append")
    append_ends = [last for last, _, _ in appends]
    durable = sorted((event[1], max(event[2])) for event in events if event[0] == "durable" and event[2])
    durable_times, durable_ends = [at for at, _ in durable], [end for _, end in durable]
    offers: dict[int, int] = {}
    for event in events:
        if event[0] == "offer":
            offers.setdefault(event[2], event[1])
    writes = sorted((event[2], event[1]) for event in events if event[0] == "write")
    write_ends = [count for count, _ in writes]
    steps: dict[str, list[float]] = {step: [] for step in STEPS}
    for number, sent, arrived in received:
        index = bisect.bisect_left(append_ends, number)
        synced = bisect.bisect_right(durable_ends, number)
        written = bisect.bisect_right(write_ends, number)
        if index == len(appends) or written == len(writes):
            continue
        _, read_at, appended_at = appends[index]
        write_at = writes[written][1]
        offered_at = offers.get(number)
        socket = bisect.bisect_right(publisher_ends, number)
        if socket < len(socket_writes):
            steps["send → socket"].append((socket_writes[socket][0] - sent) / 1e6)
            steps["socket → rx"].append((read_at - socket_writes[socket][0]) / 1e6)
        steps["rx → appended"].append((appended_at - read_at) / 1e6)
        durable_at = durable_times[synced] if synced < len(durable_times) else None
        if durable_at is not None:
            steps["appended → durable"].append((durable_at - appended_at) / 1e6)
        if offered_at is not None:
            steps["appended → offered"].append((offered_at - appended_at) / 1e6)
            if durable_at is not None and puback == "durable":
                steps["durable → offered"].append((offered_at - durable_at) / 1e6)
            steps["offered → written"].append((write_at - offered_at) / 1e6)
        steps["written → recv"].append((arrived - write_at) / 1e6)
        steps["total"].append((arrived - sent) / 1e6)
    return steps


def summary(steps: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    def at(ordered: list[float], fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 3)

    return {step: {name: at(sorted(values), fraction) for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
            for step, values in steps.items() if values}


def measure(puback: str, rate: int, seconds: float, fsync_engine: str, nodelay: bool = False) -> dict[str, Any]:
    """One run: a traced broker, the paced clients, the join."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="mqtt-timeline-"))
    process, port, events_path = start_broker(work, puback, fsync_engine)
    total = int(rate * seconds)
    try:
        received, socket_writes, broker_cpu_s = run_clients(port, rate, total, process.pid, nodelay)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    events = json.loads(events_path.read_text())
    shutil.rmtree(work, ignore_errors=True)
    steps = step_times_ms(events, received, socket_writes, puback)
    offers = [event for event in events if event[0] == "offer"]
    fell_behind = sum(1 for index, event in enumerate(offers)  # an offer that queued no PUBLISH by the next one
                      if index + 1 < len(offers) and offers[index + 1][3] == event[3])
    hand_overs = sorted((event[2] - event[1]) / 1e3 for event in events if event[0] == "handed")
    return {"puback": puback, "fsync_engine": fsync_engine, "broker_cpu_us": round(broker_cpu_s / total * 1e6, 1),
            "hand_over_us": {name: round(hand_overs[min(len(hand_overs) - 1, int(fraction * len(hand_overs)))], 1)
                             for name, fraction in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))} if hand_overs else {}, "sent": total, "received": len(received), "joined": len(steps["total"]),
            "appends": sum(1 for event in events if event[0] == "append"),
            "rounds": sum(1 for event in events if event[0] == "durable"),
            "offers": len(offers), "offers_not_sent": fell_behind,
            "socket_writes": sum(1 for event in events if event[0] == "write"),
            "steps_ms": summary(steps), "load_average": os.getloadavg()[0]}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--broker-child":
        run_traced_broker(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puback", default="both", choices=["durable", "written", "both"])
    parser.add_argument("--rate", type=int, default=5_000, help="messages per second [default: 5000]")
    parser.add_argument("--seconds", type=float, default=4.0, help="of publishing per run [default: 4]")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--fsync-engine", default="auto", choices=FSYNC_ENGINES,
                        help="the broker's fsync_engine [default: auto]")
    parser.add_argument("--client-nodelay", action="store_true",
                        help="set TCP_NODELAY on the paho clients' sockets (paho leaves Nagle on)")
    parser.add_argument("--json", action="store_true", help="print every run as JSON instead of tables")
    arguments = parser.parse_args()
    modes = ["durable", "written"] if arguments.puback == "both" else [arguments.puback]
    runs = []
    for number in range(arguments.runs):
        for puback in modes:
            progress(f"run {number + 1}/{arguments.runs}, puback {puback} ...")
            runs.append(measure(puback, arguments.rate, arguments.seconds, arguments.fsync_engine,
                                arguments.client_nodelay))
    if arguments.json:
        print(json.dumps(runs))
        return
    for run in runs:
        print(f"puback {run['puback']}: {run['received']:,} of {run['sent']:,} received, {run['joined']:,} joined, "
              f"{arguments.rate:,} msg/s, load average {run['load_average']:.1f}; broker CPU {run['broker_cpu_us']:.1f} "
              f"µs/msg (traced); {run['appends']:,} appends, "
              f"{run['rounds']:,} fsync rounds, {run['offers']:,} offers to the subscriber "
              f"({run['offers_not_sent']:,} queued no PUBLISH: window full or fell behind), "
              f"{run['socket_writes']:,} socket writes to it; fsync_engine {run['fsync_engine']}, the reactor inside "
              "a round's hand-over " + ", ".join(f"{name} {value:,.1f}" for name, value in run["hand_over_us"].items())
              + " µs")
        for step, figures in run["steps_ms"].items():
            print(f"  {step:20}" + "".join(f"{name} {value:8.3f}  " for name, value in figures.items()) + "ms")


if __name__ == "__main__":
    main()
