"""Consumer-group benchmark: failover time, rebalance gap for unaffected members, throughput.

Starts a broker (``twistd mqbroker`` on free ports, temporary data directory), then:

* failover: 10 members over 100 partitions under a steady produce load; one member dies (its
  heartbeats stop, no leave, like a crash) and we time until each of its partitions is read
  again by another member (target: session timeout + 1 s);
* rebalance gap: an 11th member joins; the longest pause between messages seen by any of the
  10 members that kept partitions (target: no longer than one heartbeat interval);
* throughput: messages/s consumed by a group of 1 member vs 3 members (separate processes).

Run: ``python benchmarks/groups_bench.py [--json]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.client.blocking import Admin, Consumer, Producer  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402

SESSION_TIMEOUT_MS = 3_000
HEARTBEAT_INTERVAL_MS = 500
MEMBERS = 10
PARTITIONS = 100
THROUGHPUT_MESSAGES = 200_000


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

    def crash(self) -> None:
        """Stop polling and heartbeating without leaving the group (what a SIGKILL looks like to the broker)."""
        self.alive = False
        self.thread.join()
        membership = self.consumer._group
        assert membership is not None
        membership.close(leave=False)
        self.consumer._cluster.close()

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
    """The rebalance gap seen by unaffected members and the takeover time of a dead member's partitions."""
    with Admin(bootstrap) as admin:
        admin.create_topics(["groups-bench"], partitions=PARTITIONS)
    stop = threading.Event()
    producer = threading.Thread(target=_steady_producer, args=(bootstrap, "groups-bench", stop), daemon=True)
    producer.start()
    members = [Member(bootstrap, "bench", "groups-bench", f"m{n}") for n in range(MEMBERS)]
    _wait(lambda: sum(len(m.consumer.assignment()) for m in members) == PARTITIONS and
          all(m.consumer.assignment() for m in members), 60)
    time.sleep(2)
    joined = time.monotonic()
    newcomer = Member(bootstrap, "bench", "groups-bench", "m-new")
    _wait(lambda: bool(newcomer.consumer.assignment()) and
          sum(len(m.consumer.assignment()) for m in members + [newcomer]) == PARTITIONS, 60)
    time.sleep(2)
    settled = time.monotonic()
    gap_s = max(_max_gap(m.times, joined, settled) for m in members)
    victim = members.pop(0)
    lost = set(p for _, p in victim.consumer.assignment())
    victim.crash()
    died = time.monotonic()
    for member in members + [newcomer]:
        member.first_after = {}
    _wait(lambda: lost <= set().union(*(m.first_after for m in members + [newcomer])), 60)
    takeover_s = max(min(m.first_after[p] for m in members + [newcomer] if p in m.first_after) for p in lost) - died
    stop.set()
    producer.join()
    for member in members + [newcomer]:
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
    """Messages/s for a fresh group of ``members`` processes reading the whole throughput topic."""
    group = f"tput-{members}"
    started = time.monotonic()
    children = [subprocess.Popen([sys.executable, __file__, "--child", bootstrap, group], stdout=subprocess.PIPE, text=True)
                for _ in range(members)]
    counts = [0] * members
    readers = []

    def read(index: int, child: subprocess.Popen[str]) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            counts[index] = int(line)

    for index, child in enumerate(children):
        readers.append(threading.Thread(target=read, args=(index, child), daemon=True))
        readers[-1].start()
    _wait(lambda: sum(counts) >= THROUGHPUT_MESSAGES, 300)
    elapsed = time.monotonic() - started
    for child in children:
        child.kill()
        child.wait()
    return THROUGHPUT_MESSAGES / elapsed


def child(bootstrap: str, group: str) -> None:
    """A throughput member: prints its running message count."""
    consumer = Consumer(bootstrap, group_id=group, topics=["groups-tput"], auto_offset_reset="earliest",
                        session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
    count = 0
    while True:
        count += len(consumer.poll(0.2))
        print(count, flush=True)


def main() -> None:
    """Run every measurement and print a table (or JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--child", nargs=2, metavar=("BOOTSTRAP", "GROUP"), help=argparse.SUPPRESS)
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
                admin.create_topics(["groups-tput"], partitions=6)
            with Producer(broker.bootstrap, linger_ms=20, acks=1) as producer:
                payload = b"v" * 100
                for number in range(THROUGHPUT_MESSAGES):
                    producer.send("groups-tput", payload, partition=number % 6)
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
