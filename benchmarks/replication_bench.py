"""Replication benchmark on a three-broker loopback cluster (all processes on this machine).

* throughput: one producer sends 100-byte messages to one partition; a single broker at acks=1
  is the reference, then a three-broker cluster with replication factor 3 at acks=1 and
  acks=all (each figure is also given as a ratio to the single-broker one of the same run;
  target for acks=all: at least 40%);
* latency: end-to-end (send → a consumer polls it) at a paced 5,000 msg/s with acks=all,
  p50/p99 (target p99 ≤ 10 ms); the consumer runs in a child process (in the producer's
  process it competes with the producer for the interpreter and falls behind), the send time
  travels in the value (``CLOCK_MONOTONIC``, the same clock in every process);
* failover: the leader of an RF-3 partition is killed (SIGKILL) and we time until the first
  acks=all write succeeds on the new leader, several times (target ≤ 3 s). The cluster runs with
  a shortened broker session (``CLUSTER_SETTINGS``: 1.5 s instead of the default, heartbeats every
  250 ms) so the controller notices the dead leader sooner; the report says so with the figure.

Throughput counts acknowledged messages only: the producer counts every record's outcome; failures are
counted and printed. The latency consumer must see every paced message (a lost one fails the run).

Run: ``python benchmarks/replication_bench.py [--messages 200000] [--failovers 3] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import pathlib
import statistics
import struct
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.cli.bench import produce_acknowledged  # noqa: E402
from mqbroker.client import Admin, Consumer, Producer  # noqa: E402
from mqbroker.errors import BrokerError  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402
from tests.integration.clusterprocess import controller_leader, retrying, start_cluster  # noqa: E402

VALUE = b"x" * 100
LATENCY_RATE_PER_S = 5_000
LATENCY_SECONDS = 5
LATENCY_BURST = 10
#: Marks the paced messages (a send time follows); the warm-up message lacks it.
LATENCY_MARK = b"lat:"
#: A short session so that a killed leader is noticed quickly (the failover figure counts it).
CLUSTER_SETTINGS = ["--set", "broker_session_timeout_ms=1500", "--set", "broker_heartbeat_interval_ms=250"]


def throughput(bootstrap: str, topic: str, acks: str, messages: int, failures: dict[str, int]) -> float:
    """Acknowledged messages per second of one producer; its failed sends are added to ``failures[topic]``."""
    with Producer(bootstrap, acks=acks, linger_ms=5) as producer:
        producer.send(topic, value=VALUE, partition=0).result(30)  # connections and metadata outside the timing
        outcomes = produce_acknowledged(producer, topic, VALUE, messages, partition=0)
    failures[topic] = failures.get(topic, 0) + outcomes.failed
    return outcomes.acknowledged / outcomes.seconds


def _consume_latency(bootstrap: str, topic: str, total: int, ready: Any, results: multiprocessing.connection.Connection,
                     ) -> None:
    """Child process: read ``total`` paced messages and send back each one's delay in milliseconds."""
    delays: list[float] = []
    with Consumer(bootstrap, auto_offset_reset="latest") as consumer:
        consumer.assign([(topic, 0)])
        consumer.poll(timeout=0.5)
        ready.set()
        deadline = time.monotonic() + LATENCY_SECONDS + 60
        while len(delays) < total and time.monotonic() < deadline:
            for message in consumer.poll(timeout=0.1):
                if message.value[:len(LATENCY_MARK)] == LATENCY_MARK:
                    (sent_at,) = struct.unpack_from(">d", message.value, len(LATENCY_MARK))
                    delays.append((time.monotonic() - sent_at) * 1000)
    results.send(delays)


def latency(bootstrap: str, topic: str) -> tuple[float, float]:
    """(p50, p99) milliseconds from send to a consumer's poll (in another process) at a paced rate with acks=all."""
    total = LATENCY_RATE_PER_S * LATENCY_SECONDS
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    receiving, sending = context.Pipe(duplex=False)
    reader = context.Process(target=_consume_latency, args=(bootstrap, topic, total, ready, sending))
    reader.start()
    assert ready.wait(60), "the latency consumer did not start"
    padding = VALUE[len(LATENCY_MARK) + 8:]
    with Producer(bootstrap, acks="all", linger_ms=1) as producer:
        producer.send(topic, value=VALUE, partition=0).result(30)
        started = time.monotonic()
        for n in range(0, total, LATENCY_BURST):  # paced in small bursts: one sleep per message costs too much CPU
            pause = started + n / LATENCY_RATE_PER_S - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            for _ in range(LATENCY_BURST):
                value = LATENCY_MARK + struct.pack(">d", time.monotonic()) + padding
                producer.send(topic, value=value, partition=0)
        producer.flush()
    assert receiving.poll(LATENCY_SECONDS + 90), "the latency consumer sent no result"
    delays = sorted(receiving.recv())
    reader.join(30)
    assert len(delays) == total, f"the consumer saw {len(delays)} of {total} messages"
    return delays[len(delays) // 2], delays[int(len(delays) * 0.99)]


def leader_of(bootstrap: str, topic: str) -> int:
    """The partition's leader as one broker reports it (-1: none)."""
    with Admin(bootstrap, request_timeout_ms=5_000) as admin:
        [described] = [t for t in admin.metadata([topic]).topics if t.name == topic]
        return described.partitions[0].leader_id


def _watch_leader(bootstrap: str, topic: str, old_leader: int, since: float, seen: dict[str, float]) -> None:
    """Thread: note when ``bootstrap``'s metadata first names a leader other than ``old_leader``."""
    with Admin(bootstrap, request_timeout_ms=5_000) as admin:
        while time.monotonic() - since < 30:
            [described] = [t for t in admin.metadata([topic]).topics if t.name == topic]
            if described.partitions[0].leader_id not in (old_leader, -1):
                seen["metadata_s"] = time.monotonic() - since
                return
            time.sleep(0.005)


def failover(brokers: list[BrokerProcess], topic: str) -> dict[str, Any]:
    """Seconds from SIGKILL of the leader to the first acknowledged acks=all write on its successor.

    Also when a survivor's metadata first names the new leader (the rest is the client's part),
    and whether the killed broker led the controller quorum too (then a controller election
    comes first and the new controller gives every broker a fresh session).
    """
    leader_id = leader_of(brokers[0].bootstrap, topic)
    leader = brokers[leader_id - 1]
    survivors = [broker.bootstrap for broker in brokers if broker is not leader]
    controller_killed = controller_leader(brokers) == leader_id
    seen: dict[str, float] = {}
    with Producer(survivors, acks="all", linger_ms=0, request_timeout_ms=2_000, delivery_timeout_ms=30_000) as producer:
        producer.send(topic, value=VALUE, partition=0).result(30)  # connected to the survivors already
        killed_at = time.monotonic()
        watcher = threading.Thread(target=_watch_leader, args=(survivors[0], topic, leader_id, killed_at, seen))
        watcher.start()
        leader.kill()
        producer.send(topic, value=VALUE, partition=0).result(30)
        elapsed = time.monotonic() - killed_at
        watcher.join()
    leader.start(timeout_s=60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # back in the ISR before the next round
        try:
            with Admin(survivors[0]) as admin:
                [described] = [t for t in admin.metadata([topic]).topics if t.name == topic]
                if len(described.partitions[0].isr_nodes) == 3:
                    break
        except (BrokerError, OSError):
            pass
        time.sleep(0.2)
    return {"write_s": elapsed, "metadata_s": seen.get("metadata_s", float("nan")),
            "controller_killed": controller_killed}


def run(messages: int, failovers: int) -> dict[str, Any]:
    """Every measurement; brokers are started and stopped here."""
    figures: dict[str, Any] = {"messages": messages, "sends_failed": {}, "cluster_settings": " ".join(CLUSTER_SETTINGS)}
    with tempfile.TemporaryDirectory(prefix="replication-bench-") as root:
        if messages:
            _single_broker(pathlib.Path(root), messages, figures)
        brokers = start_cluster(pathlib.Path(root) / "cluster", extra_args=CLUSTER_SETTINGS)
        try:
            bootstrap = brokers[0].bootstrap
            with Admin(bootstrap) as admin:
                for name in ("rf3-acks1", "rf3-acksall", "latency", "failover"):
                    retrying(lambda name=name: admin.create_topics(
                        [name], partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"}))
            if messages:
                figures["rf3_acks1_msg_s"] = throughput(bootstrap, "rf3-acks1", "1", messages, figures["sends_failed"])
                figures["rf3_acksall_msg_s"] = throughput(bootstrap, "rf3-acksall", "all", messages,
                                                          figures["sends_failed"])
                figures["rf3_acks1_ratio"] = figures["rf3_acks1_msg_s"] / figures["single_acks1_msg_s"]
                figures["rf3_acksall_ratio"] = figures["rf3_acksall_msg_s"] / figures["single_acks1_msg_s"]
            figures["latency_p50_ms"], figures["latency_p99_ms"] = latency(bootstrap, "latency")
            rounds = [failover(brokers, "failover") for _ in range(failovers)]
            figures["failover_rounds"] = rounds
            times = [round_["write_s"] for round_ in rounds]
            figures["failover_p50_s"] = statistics.median(times)
            figures["failover_max_s"] = max(times)
        finally:
            for broker in brokers:
                if broker.process is not None and broker.process.poll() is None:
                    broker.stop()
    return figures


def _single_broker(root: pathlib.Path, messages: int, figures: dict[str, Any]) -> None:
    """The reference: one broker, acks=1."""
    single = BrokerProcess(data_dir=root / "single")
    single.data_dir.mkdir(parents=True)
    single.start(timeout_s=60)
    try:
        with Admin(single.bootstrap) as admin:
            admin.create_topics(["bench"], partitions=1)
        figures["single_acks1_msg_s"] = throughput(single.bootstrap, "bench", "1", messages, figures["sends_failed"])
    finally:
        single.stop()


def main() -> None:
    """Parse the options, run, print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per throughput run (0: skip them)")
    parser.add_argument("--failovers", type=int, default=3, help="leader kills to time")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    arguments = parser.parse_args()
    figures = run(arguments.messages, arguments.failovers)
    if arguments.json:
        print(json.dumps(figures, indent=2))
        return
    rows = [] if not arguments.messages else [
        ("single broker, acks=1", f"{figures['single_acks1_msg_s']:,.0f} msg/s", "100%", ""),
        ("RF 3, acks=1", f"{figures['rf3_acks1_msg_s']:,.0f} msg/s", f"{figures['rf3_acks1_ratio']:.0%}", ""),
        ("RF 3, acks=all", f"{figures['rf3_acksall_msg_s']:,.0f} msg/s", f"{figures['rf3_acksall_ratio']:.0%}",
         "target ≥ 40%"),
    ]
    rows += [
        ("e2e latency p50 at 5k msg/s, acks=all", f"{figures['latency_p50_ms']:.1f} ms", "", ""),
        ("e2e latency p99 at 5k msg/s, acks=all", f"{figures['latency_p99_ms']:.1f} ms", "", "target ≤ 10 ms"),
        ("failover to first acks=all write, p50", f"{figures['failover_p50_s']:.2f} s", "", ""),
        ("failover to first acks=all write, max", f"{figures['failover_max_s']:.2f} s", "", "target ≤ 3 s"),
    ]
    print(f"rates count acknowledged messages; failed sends per topic: {figures['sends_failed'] or 'none'}")
    print(f"the cluster runs with {figures['cluster_settings']} (the defaults: 3,000 ms session, 500 ms heartbeats), "
          "which shortens the failover figure")
    for name, value, ratio, target in rows:
        print(f"{name:<42} {value:>16} {ratio:>6}  {target}")
    for number, round_ in enumerate(figures["failover_rounds"], 1):
        print(f"failover {number}: new leader in a survivor's metadata after {round_['metadata_s']:.2f} s, "
              f"first acks=all write after {round_['write_s']:.2f} s"
              f"{' (the controller leader was killed too)' if round_['controller_killed'] else ''}")


if __name__ == "__main__":
    main()
