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

Then it attributes the slowest 1% of messages (total at or past its p99): the median of each step over them, which
step was each one's largest, and what the broker's reactor ran in each one's broker window (from the publisher's
socket write to the write to the subscriber's socket) against the same for every message: a garbage collection (by
generation), timed calls (``runUntilCurrent``) or an I/O callback (a connection's read, the fsync completion) that
took ``--work-us`` or more, and the session-state writes. And the broker's threads' wait for a core
(``schedstat``'s run-queue time) over the run: a reactor that waits there is not the broker's code; and the reactor's
own CPU per message by kind of callback (thread CPU time, which a wait for a core does not inflate): a read of the
publisher or the subscriber, the fsync completion (``AioSync``), timed calls.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import multiprocessing
import os
import pathlib
import queue
import shutil
import signal
import socket
import statistics
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

    _stamp_reactor_work(wrap, events, now)
    if os.environ.get("TIMELINE_GC_FREEZE"):  # ``--gc-freeze``: the start-up heap out of the collector's walks
        import gc

        wrap(server.MqttConnection, "connection_made", before=lambda self, *_, **__: gc.get_freeze_count() or gc.freeze())
    wrap(server.MqttConnection, "_write_session", before=lambda self, *_, **__: now(),
         after=lambda self, result, started, *_, **__: events.append(("store", started, now())))
    wrap(service.BrokerService, "stopService", before=dump)
    from twisted.scripts.twistd import run

    sys.argv = ["twistd", *twistd_arguments]
    run()


def _stamp_reactor_work(wrap: Any, events: list[Any], now: Any) -> None:
    """Stamp each callback the reactor runs ("work": start, end, its CPU ns, what) and each collection of the cyclic
    garbage collector ("gc": start, end, generation)."""
    import gc

    from twisted.internet import base, posixbase

    collecting = [0]

    def on_collection(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collecting[0] = now()
        else:
            events.append(("gc", collecting[0], now(), info["generation"]))

    gc.callbacks.append(on_collection)

    def what_read(selectable: Any, *_: Any) -> str:
        protocol = getattr(selectable, "protocol", None)
        protocol = getattr(protocol, "wrappedProtocol", protocol)  # under the listener's connection limit
        client_id = getattr(getattr(protocol, "session", None), "client_id", None)
        if client_id in (PUBLISHER, SUBSCRIBER):
            return f"read of {client_id}"
        return f"I/O {type(protocol).__name__ if protocol is not None else type(selectable).__name__}"

    cpu = time.thread_time_ns  # the reactor's own CPU: a callback's wall time includes waits for a core

    def stamped(what: Any) -> Any:
        def after(self: Any, result: Any, started: tuple[int, int], *arguments: Any, **keywords: Any) -> None:
            events.append(("work", started[0], now(), cpu() - started[1],
                           what(*arguments) if callable(what) else what))
        return after

    wrap(base.ReactorBase, "runUntilCurrent", before=lambda self, *_, **__: (now(), cpu()),
         after=stamped("timed calls"))
    wrap(posixbase._PollLikeMixin, "_doReadOrWrite", before=lambda self, *_, **__: (now(), cpu()),
         after=stamped(what_read))


def runqueue_wait_s(pid: int) -> float:
    """Seconds the threads of ``pid`` have waited on a run queue for a core (``schedstat``'s second field)."""
    total_ns = 0
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            total_ns += int((task / "schedstat").read_text().split()[1])
    return total_ns / 1e9


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
                nodelay: bool = False) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]], float, float]:
    """Publish ``total`` stamped QoS 1 messages at ``rate``: (number, sent ns, received ns) of each one received, and
    the publisher's socket writes (ns after each, PUBLISHes written so far: every one has the same length), and the
    broker's CPU seconds and run-queue seconds from the first publish until the subscriber had them all."""
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
        broker_cpu_s, broker_wait_s = process_tree_cpu_s(broker_pid), runqueue_wait_s(broker_pid)
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
        broker_wait_s = runqueue_wait_s(broker_pid) - broker_wait_s
        client.disconnect()
        client.loop_stop()
    finally:
        receiver.join(30)
        if receiver.is_alive():
            receiver.kill()
    return received, socket_writes, broker_cpu_s, broker_wait_s


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


#: The steps a message's delivery passes through, one after the other, by ``mqtt_puback``.
PATH_STEPS = {
    "written": ("send → socket", "socket → rx", "rx → appended", "appended → offered", "offered → written",
                "written → recv"),
    "durable": ("send → socket", "socket → rx", "rx → appended", "appended → durable", "durable → offered",
                "offered → written", "written → recv"),
}


def message_times(events: list[Any], received: list[tuple[int, int, int]], socket_writes: list[tuple[int, int]],
                  puback: str) -> list[tuple[dict[str, float], int, int]]:
    """Each message's time in each step (ms), and its broker window (ns: from the publisher's socket write, or the
    broker's read, to the write to the subscriber's socket). Message n is offset n: a step's event covers the offsets
    below its end."""
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
    messages = []
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
        steps: dict[str, float] = {}
        window_start = read_at
        if socket < len(socket_writes):
            window_start = socket_writes[socket][0]
            steps["send → socket"] = (window_start - sent) / 1e6
            steps["socket → rx"] = (read_at - window_start) / 1e6
        steps["rx → appended"] = (appended_at - read_at) / 1e6
        durable_at = durable_times[synced] if synced < len(durable_times) else None
        if durable_at is not None:
            steps["appended → durable"] = (durable_at - appended_at) / 1e6
        if offered_at is not None:
            steps["appended → offered"] = (offered_at - appended_at) / 1e6
            if durable_at is not None and puback == "durable":
                steps["durable → offered"] = (offered_at - durable_at) / 1e6
            steps["offered → written"] = (write_at - offered_at) / 1e6
        steps["written → recv"] = (arrived - write_at) / 1e6
        steps["total"] = (arrived - sent) / 1e6
        messages.append((steps, window_start, write_at))
    return messages


def step_times_ms(messages: list[tuple[dict[str, float], int, int]]) -> dict[str, list[float]]:
    """Each step's times over the messages (``message_times``)."""
    steps: dict[str, list[float]] = {step: [] for step in STEPS}
    for times, _, _ in messages:
        for step, value in times.items():
            steps[step].append(value)
    return steps


def broker_work(events: list[Any], work_ns_min: int) -> dict[str, list[tuple[int, int]]]:
    """The broker's stamped work by kind (``_stamp_reactor_work``; "gc N", a reactor callback's of ``work_ns_min`` or
    more, "session store"): (start, end) ns, by start."""
    work: dict[str, list[tuple[int, int]]] = {}
    for event in events:
        if event[0] == "gc":
            work.setdefault(f"gc gen {event[3]}", []).append((event[1], event[2]))
        elif event[0] == "work" and event[2] - event[1] >= work_ns_min:
            work.setdefault(event[4], []).append((event[1], event[2]))
        elif event[0] == "store":
            work.setdefault("session store", []).append((event[1], event[2]))
    return {kind: sorted(intervals) for kind, intervals in work.items()}


def reactor_cpu_us(events: list[Any], messages: list[tuple[dict[str, float], int, int]]) -> dict[str, tuple[float, int]]:
    """The reactor's CPU µs per message by kind of callback between the first message's broker window and the last
    one's, and how many callbacks of the kind ran per 1,000 messages: where a message's broker CPU goes."""
    if not messages:
        return {}
    first, last = min(window for _, window, _ in messages), max(end for _, _, end in messages)
    spent: dict[str, list[int]] = {}
    for event in events:
        if event[0] == "work" and first <= event[1] <= last:
            spent.setdefault(event[4], []).append(event[3])
    return {kind: (round(sum(cpu_ns) / 1e3 / len(messages), 1), round(1000 * len(cpu_ns) / len(messages)))
            for kind, cpu_ns in sorted(spent.items(), key=lambda item: -sum(item[1]))}


def tail_attribution(messages: list[tuple[dict[str, float], int, int]], work: dict[str, list[tuple[int, int]]],
                     puback: str) -> dict[str, Any]:
    """The slowest 1% (total at or past the p99): each step's median over them, how often each step was the largest,
    and per kind of broker work the share of their broker windows it overlapped, against every message's windows."""
    if not messages:
        return {}
    totals = sorted(times["total"] for times, _, _ in messages)
    threshold = totals[int(0.99 * len(totals))]
    slow = [message for message in messages if message[0]["total"] >= threshold]
    path = PATH_STEPS[puback]
    largest: dict[str, int] = {}
    for times, _, _ in slow:
        step = max((step for step in path if step in times), key=times.__getitem__)
        largest[step] = largest.get(step, 0) + 1

    def overlapped(group: list[tuple[dict[str, float], int, int]], intervals: list[tuple[int, int]]) -> float:
        starts = [start for start, _ in intervals]
        longest = max(end - start for start, end in intervals)
        hits = 0
        for _, window_start, window_end in group:
            first = bisect.bisect_left(starts, window_start - longest)
            last = bisect.bisect_left(starts, window_end)
            hits += any(end > window_start for _, end in intervals[first:last])
        return round(hits / len(group), 3)

    return {
        "threshold_ms": round(threshold, 3), "messages": len(slow),
        "step_medians_ms": {step: round(statistics.median(times[step] for times, _, _ in slow if step in times), 3)
                            for step in path if any(step in times for times, _, _ in slow)},
        "largest_step": {step: round(count / len(slow), 3) for step, count in sorted(largest.items(),
                                                                                      key=lambda item: -item[1])},
        "overlapped": {kind: (overlapped(slow, intervals), overlapped(messages, intervals),
                              round(statistics.median(end - start for start, end in intervals) / 1e3, 1), len(intervals))
                       for kind, intervals in sorted(work.items())},
    }


def summary(steps: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    def at(ordered: list[float], fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 3)

    return {step: {name: at(sorted(values), fraction) for name, fraction in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
            for step, values in steps.items() if values}


def measure(puback: str, rate: int, seconds: float, fsync_engine: str, nodelay: bool = False,
            work_us: int = 100) -> dict[str, Any]:
    """One run: a traced broker, the paced clients, the join."""
    work = pathlib.Path(tempfile.mkdtemp(prefix="mqtt-timeline-"))
    process, port, events_path = start_broker(work, puback, fsync_engine)
    total = int(rate * seconds)
    try:
        received, socket_writes, broker_cpu_s, broker_wait_s = run_clients(port, rate, total, process.pid, nodelay)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    events = json.loads(events_path.read_text())
    shutil.rmtree(work, ignore_errors=True)
    messages = message_times(events, received, socket_writes, puback)
    steps = step_times_ms(messages)
    offers = [event for event in events if event[0] == "offer"]
    fell_behind = sum(1 for index, event in enumerate(offers)  # an offer that queued no PUBLISH by the next one
                      if index + 1 < len(offers) and offers[index + 1][3] == event[3])
    hand_overs = sorted((event[2] - event[1]) / 1e3 for event in events if event[0] == "handed")
    return {"puback": puback, "fsync_engine": fsync_engine, "broker_cpu_us": round(broker_cpu_s / total * 1e6, 1),
            "broker_runqueue_ms": round(broker_wait_s * 1e3, 1),
            "tail": tail_attribution(messages, broker_work(events, work_us * 1000), puback),
            "reactor_cpu_us": reactor_cpu_us(events, messages),
            # each full collection: its ms, and when it began, in s from the first message's broker window
            "gc_gen2": [(round((event[2] - event[1]) / 1e6, 1),
                         round((event[1] - min(window for _, window, _ in messages)) / 1e9, 2) if messages else None)
                        for event in events if event[0] == "gc" and event[3] == 2],
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
    parser.add_argument("--work-us", type=int, default=100,
                        help="the tail's broker work: reactor callbacks that took this long or longer [default: 100]")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() in the broker at its first MQTT connection (the start-up heap left out of "
                             "every collection after)")
    parser.add_argument("--json", action="store_true", help="print every run as JSON instead of tables")
    arguments = parser.parse_args()
    if arguments.gc_freeze:
        os.environ["TIMELINE_GC_FREEZE"] = "1"  # the broker child's
    modes = ["durable", "written"] if arguments.puback == "both" else [arguments.puback]
    runs = []
    for number in range(arguments.runs):
        for puback in modes:
            progress(f"run {number + 1}/{arguments.runs}, puback {puback} ...")
            runs.append(measure(puback, arguments.rate, arguments.seconds, arguments.fsync_engine,
                                arguments.client_nodelay, arguments.work_us))
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
        print_tail(run["tail"], run["broker_runqueue_ms"])
        print("  full collections (ms, at s from the first message): " + ", ".join(
            f"{duration_ms:,.1f} at {at_s}" for duration_ms, at_s in run["gc_gen2"]))
        print("  the reactor's CPU per message by callback (µs; callbacks per 1,000 messages): " + ", ".join(
            f"{kind} {us:.1f} ({count:,})" for kind, (us, count) in run["reactor_cpu_us"].items()))


def print_tail(tail: dict[str, Any], runqueue_ms: float) -> None:
    """``tail_attribution``'s figures, and the broker's wait for a core over the run."""
    print(f"  the broker's threads waited {runqueue_ms:,.1f} ms on a run queue for a core during the run")
    if not tail:
        return
    print(f"  slowest 1% ({tail['messages']} messages, total >= {tail['threshold_ms']:.3f} ms): step medians "
          + ", ".join(f"{step} {value:.3f}" for step, value in tail["step_medians_ms"].items()) + " ms")
    print("    the largest step of each: " + ", ".join(f"{step} {share:.1%}" for step, share in
                                                      tail["largest_step"].items()))
    print(f"    {'broker work (stamped)':38} {'slowest 1%':>11} {'all':>6} {'median µs':>10} {'count':>7}")
    for kind, (slow, everyone, median_us, count) in tail["overlapped"].items():
        print(f"    {kind:38} {slow:11.1%} {everyone:6.1%} {median_us:10.1f} {count:7,}")


if __name__ == "__main__":
    main()
