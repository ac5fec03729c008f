"""Consumer-group benchmark: failover time, rebalance gap for unaffected members, throughput.

Starts a broker (``twistd mqbroker`` on free ports, temporary data directory), then:

* rebalance gap: 10 members over 100 partitions under a steady produce load (nine consumer
  threads here, one member in its own process); an 11th member joins; the longest pause
  between messages seen by any of the nine (target: no longer than one heartbeat interval);
* failover: the member process is killed (SIGKILL: no leave, no last commit) and we time
  until each of its partitions is read again by another member (target: session timeout + 1 s);
* throughput: messages/s consumed by a group of 1 member vs 3 members (separate processes),
  timed from the moment every member has its assignment and its first record (so process
  start-up and the joins are not counted) until the whole topic is read. What counts is distinct
  (partition, offset) pairs: each member reports its position in each partition it reads, and a
  partition's progress is the furthest any member got, so a record read again after a rebalance
  is not counted twice. The topic is filled with acknowledged sends (a failed one fails the run).

Settings that differ from the defaults: the broker's ``group_initial_rebalance_delay_ms=0`` and
``group_min_session_timeout_ms=500``; members' session timeout 3 s, heartbeats 500 ms, fetch wait 100 ms.

Run: ``python benchmarks/groups_bench.py [--json]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.cli.bench import produce_acknowledged  # noqa: E402
from mqbroker.client import Admin, Consumer, Producer  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

SESSION_TIMEOUT_MS = 3_000
HEARTBEAT_INTERVAL_MS = 500
MEMBERS = 10
PARTITIONS = 100
THROUGHPUT_MESSAGES = 600_000
THROUGHPUT_PARTITIONS = 6


class ChildMember:
    """A member in its own process (``--child``); a thread follows what it reports."""

    def __init__(self, bootstrap: str, group: str, topic: str, offset_reset: str) -> None:
        self.process = subprocess.Popen([sys.executable, __file__, "--child", bootstrap, group, topic, offset_reset],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.partitions: set[int] = set()
        self.positions: dict[int, int] = {}  # partition → the next offset this member will read
        self.first_record_at: float | None = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            self.partitions = set(event["partitions"])
            self.positions.update({int(p): position for p, position in event["positions"].items()})
            if any(self.positions.values()) and self.first_record_at is None:
                self.first_record_at = time.monotonic()

    def go(self) -> None:
        """Start reading past the first record (the member holds its partitions until then)."""
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        """SIGKILL: no leave, no last commit; the broker notices only when its session times out."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()


class Member:
    """A consumer thread that records when it received something from which partition."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.consumer = Consumer(bootstrap, group_id=group, topics=[topic], client_id=name, auto_offset_reset="latest",
                                 session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                                 fetch_max_wait_ms=100)
        self.times: list[float] = []
        self.first_after: dict[int, float] = {}
        self.alive = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.alive:
            for message in self.consumer.poll(0.1):
                now = time.monotonic()
                self.times.append(now)
                self.first_after.setdefault(message.partition, now)

    def close(self) -> None:
        self.alive = False
        self.thread.join()
        self.consumer.close()


def _steady_producer(bootstrap: str, topic: str, stop: threading.Event) -> None:
    with Producer(bootstrap, linger_ms=2, acks=1) as producer:
        number = 0
        while not stop.is_set():
            producer.send(topic, b"x", partition=number % PARTITIONS)
            number += 1
            if number % 100 == 0:
                time.sleep(0.01)


def _max_gap(times: list[float], start: float, end: float) -> float:
    window = [t for t in times if start <= t <= end]
    return max((b - a for a, b in zip(window, window[1:], strict=False)), default=end - start)


def rebalance_and_failover(bootstrap: str) -> dict[str, float]:
    """The rebalance gap seen by unaffected members and the takeover time of a killed member's partitions."""
    with Admin(bootstrap) as admin:
        admin.create_topics(["groups-bench"], partitions=PARTITIONS)
    stop = threading.Event()
    producer = threading.Thread(target=_steady_producer, args=(bootstrap, "groups-bench", stop), daemon=True)
    producer.start()
    victim = ChildMember(bootstrap, "bench", "groups-bench", "latest")
    victim.go()  # reads freely from the start
    members = [Member(bootstrap, "bench", "groups-bench", f"m{n}") for n in range(MEMBERS - 1)]

    def assigned(everyone: list[Member]) -> int:
        return sum(len(m.consumer.assignment()) for m in everyone) + len(victim.partitions)

    _wait(lambda: assigned(members) == PARTITIONS and all(m.consumer.assignment() for m in members)
          and bool(victim.partitions), 60)
    time.sleep(2)
    joined = time.monotonic()
    newcomer = Member(bootstrap, "bench", "groups-bench", "m-new")
    _wait(lambda: bool(newcomer.consumer.assignment()) and assigned(members + [newcomer]) == PARTITIONS, 60)
    time.sleep(2)
    settled = time.monotonic()
    gap_s = max(_max_gap(m.times, joined, settled) for m in members)
    survivors = members + [newcomer]
    lost = set(victim.partitions)
    for member in survivors:
        member.first_after = {}
    victim.kill()
    died = time.monotonic()
    _wait(lambda: lost <= set().union(*(m.first_after for m in survivors)), 60)
    takeover_s = max(min(m.first_after[p] for m in survivors if p in m.first_after) for p in lost) - died
    stop.set()
    producer.join()
    for member in survivors:
        member.close()
    return {"rebalance_gap_max_s": round(gap_s, 3), "takeover_s": round(takeover_s, 3),
            "session_timeout_s": SESSION_TIMEOUT_MS / 1000, "heartbeat_interval_s": HEARTBEAT_INTERVAL_MS / 1000}


def _wait(condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        time.sleep(0.05)


def throughput(bootstrap: str, members: int) -> float:
    """Messages/s for a fresh group of ``members`` processes reading the whole throughput topic.

    Each member pauses its partitions after its first record until told to go; the clock starts
    when every member has its assignment and first record and the group covers every partition.
    Records read before that are not counted.
    """
    children = [ChildMember(bootstrap, f"tput-{members}", "groups-tput", "earliest") for _ in range(members)]
    try:
        _wait(lambda: all(c.first_record_at is not None for c in children)
              and sum(len(c.partitions) for c in children) == THROUGHPUT_PARTITIONS, 120)
        time.sleep(0.5)  # the last reports of held partitions
        started, read_before = time.monotonic(), distinct_read(children)
        for child in children:
            child.go()
        _wait(lambda: distinct_read(children) >= THROUGHPUT_MESSAGES, 600)
        elapsed = time.monotonic() - started
    finally:
        for child in children:
            child.kill()
    return (THROUGHPUT_MESSAGES - read_before) / elapsed


def distinct_read(children: list[ChildMember]) -> int:
    """Distinct (partition, offset) pairs the group has read: per partition, the furthest position of any member
    (the topic's offsets start at 0 and are dense; a member reads a partition in offset order)."""
    return sum(max(child.positions.get(partition, 0) for child in children) for partition in range(THROUGHPUT_PARTITIONS))


def child(bootstrap: str, group: str, topic: str, offset_reset: str) -> None:
    """A member process: after each poll, prints its partitions and running message count as JSON."""
    consumer = Consumer(bootstrap, group_id=group, topics=[topic], auto_offset_reset=offset_reset,
                        session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                        fetch_max_wait_ms=100)
    told_to_go = threading.Event()
    threading.Thread(target=lambda: sys.stdin.readline() and told_to_go.set(), daemon=True).start()
    read_any = False
    while True:
        read_any = bool(consumer.poll(0.1)) or read_any
        if read_any and not told_to_go.is_set():  # hold what we have until every member is ready
            consumer.pause(*consumer.assignment())
        elif told_to_go.is_set() and consumer.paused():
            consumer.resume(*consumer.paused())
        assignment = sorted(consumer.assignment())
        positions = {p: consumer.position((t, p)) for t, p in assignment} if read_any else {}
        print(json.dumps({"partitions": [p for _, p in assignment], "positions": positions}), flush=True)


def main() -> None:
    """Run every measurement and print a table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--child", nargs=4, metavar=("BOOTSTRAP", "GROUP", "TOPIC", "RESET"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        child(*arguments.child)
        return
    with tempfile.TemporaryDirectory() as work:
        broker = BrokerProcess(data_dir=pathlib.Path(work) / "data",
                               extra_args=["--set", "group_initial_rebalance_delay_ms=0",
                                           "--set", "group_min_session_timeout_ms=500"])
        broker.start()
        try:
            figures: dict[str, float] = rebalance_and_failover(broker.bootstrap)
            with Admin(broker.bootstrap) as admin:
                admin.create_topics(["groups-tput"], partitions=THROUGHPUT_PARTITIONS)
            with Producer(broker.bootstrap, linger_ms=20, acks=1) as producer:
                for partition in range(THROUGHPUT_PARTITIONS):
                    filled = produce_acknowledged(producer, "groups-tput", b"v" * 100,
                                                  THROUGHPUT_MESSAGES // THROUGHPUT_PARTITIONS, partition=partition)
                    assert not filled.failed, f"{filled.failed} sends filling the topic failed: {filled.first_error}"
            figures["throughput_1_member_msgs_per_s"] = round(throughput(broker.bootstrap, 1))
            figures["throughput_3_members_msgs_per_s"] = round(throughput(broker.bootstrap, 3))
        finally:
            broker.kill()
    if arguments.json:
        print(json.dumps(figures, indent=2))
        return
    width = max(len(name) for name in figures)
    for name, value in figures.items():
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
