"""Replication benchmark on a three-broker loopback cluster (all processes on this machine).

* throughput: one producer sends 100-byte messages to one partition; a single broker at acks=1
  is the reference, then a three-broker cluster with replication factor 3 at acks=1 and
  acks=all (each figure is also given as a ratio to the single-broker one of the same run;
  target for acks=all: at least 40%);
* latency: end-to-end (send → a consumer polls it) at a paced 5,000 msg/s with acks=all,
  p50/p99 (target p99 ≤ 10 ms);
* failover: the leader of an RF-3 partition is killed (SIGKILL) and we time until the first
  acks=all write succeeds on the new leader, several times (target ≤ 3 s).

Run: ``python benchmarks/replication_bench.py [--messages 200000] [--failovers 3] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from mqbroker.client.blocking import Admin, Consumer, Producer  # noqa: E402
from mqbroker.errors import BrokerError  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402
from tests.integration.clusterprocess import retrying, start_cluster  # noqa: E402

VALUE = b"x" * 100
LATENCY_RATE_PER_S = 5_000
LATENCY_SECONDS = 5
LATENCY_BURST = 10
#: A short session so that a killed leader is noticed quickly (the failover figure counts it).
CLUSTER_SETTINGS = ["--set", "broker_session_timeout_ms=1500", "--set", "broker_heartbeat_interval_ms=250"]


def throughput(bootstrap: str, topic: str, acks: str, messages: int) -> float:
    """Messages per second one producer gets acknowledged."""
    with Producer(bootstrap, acks=acks, linger_ms=5) as producer:
        producer.send(topic, value=VALUE, partition=0).result(30)  # connections and metadata outside the timing
        started = time.perf_counter()
        futures = [producer.send(topic, value=VALUE, partition=0) for _ in range(messages)]
        producer.flush()
        elapsed = time.perf_counter() - started
        assert all(future.result(30).offset >= 0 for future in futures[-100:])
    return messages / elapsed


def latency(bootstrap: str, topic: str) -> tuple[float, float]:
    """(p50, p99) milliseconds from send to a consumer's poll at a paced rate with acks=all."""
    sent_at: dict[bytes, float] = {}
    delays: list[float] = []
    total = LATENCY_RATE_PER_S * LATENCY_SECONDS
    done = threading.Event()

    def consume() -> None:
        with Consumer(bootstrap, auto_offset_reset="latest") as consumer:
            consumer.assign([(topic, 0)])
            consumer.poll(timeout=0.5)
            ready.set()
            while len(delays) < total and not done.is_set():
                for message in consumer.poll(timeout=0.1):
                    started = sent_at.get(message.value[:12])
                    if started is not None:
                        delays.append((time.perf_counter() - started) * 1000)

    ready = threading.Event()
    reader = threading.Thread(target=consume)
    reader.start()
    ready.wait(30)
    with Producer(bootstrap, acks="all", linger_ms=1) as producer:
        producer.send(topic, value=VALUE, partition=0).result(30)
        started = time.perf_counter()
        for n in range(0, total, LATENCY_BURST):  # paced in small bursts: one sleep per message costs too much CPU
            pause = started + n / LATENCY_RATE_PER_S - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            for k in range(n, n + LATENCY_BURST):
                key = b"%012d" % k
                sent_at[key] = time.perf_counter()
                producer.send(topic, value=key + VALUE[12:], partition=0)
        producer.flush()
    deadline = time.monotonic() + 30
    while len(delays) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    done.set()
    reader.join()
    delays.sort()
    return delays[len(delays) // 2], delays[int(len(delays) * 0.99)]


def leader_of(bootstrap: str, topic: str) -> int:
    """The partition's leader as one broker reports it (-1: none)."""
    with Admin(bootstrap, request_timeout_ms=5_000) as admin:
        [described] = [t for t in admin.metadata([topic]).topics if t.name == topic]
        return described.partitions[0].leader_id


def failover(brokers: list[BrokerProcess], topic: str) -> float:
    """Seconds from SIGKILL of the leader to the first acknowledged acks=all write on its successor."""
    leader = brokers[leader_of(brokers[0].bootstrap, topic) - 1]
    survivors = [broker.bootstrap for broker in brokers if broker is not leader]
    with Producer(survivors, acks="all", linger_ms=0, request_timeout_ms=2_000, delivery_timeout_ms=30_000) as producer:
        producer.send(topic, value=VALUE, partition=0).result(30)  # connected to the survivors already
        killed_at = time.perf_counter()
        leader.kill()
        producer.send(topic, value=VALUE, partition=0).result(30)
        elapsed = time.perf_counter() - killed_at
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
    return elapsed


def run(messages: int, failovers: int) -> dict[str, Any]:
    """Every measurement; brokers are started and stopped here."""
    figures: dict[str, Any] = {"messages": messages}
    with tempfile.TemporaryDirectory(prefix="replication-bench-") as root:
        single = BrokerProcess(data_dir=pathlib.Path(root) / "single")
        single.data_dir.mkdir(parents=True)
        single.start(timeout_s=60)
        try:
            with Admin(single.bootstrap) as admin:
                admin.create_topics(["bench"], partitions=1)
            figures["single_acks1_msg_s"] = throughput(single.bootstrap, "bench", "1", messages)
        finally:
            single.stop()
        brokers = start_cluster(pathlib.Path(root) / "cluster", extra_args=CLUSTER_SETTINGS)
        try:
            bootstrap = brokers[0].bootstrap
            with Admin(bootstrap) as admin:
                for name in ("rf3-acks1", "rf3-acksall", "latency", "failover"):
                    retrying(lambda name=name: admin.create_topics(
                        [name], partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"}))
            figures["rf3_acks1_msg_s"] = throughput(bootstrap, "rf3-acks1", "1", messages)
            figures["rf3_acksall_msg_s"] = throughput(bootstrap, "rf3-acksall", "all", messages)
            figures["latency_p50_ms"], figures["latency_p99_ms"] = latency(bootstrap, "latency")
            times = [failover(brokers, "failover") for _ in range(failovers)]
            figures["failover_s"] = times
            figures["failover_p50_s"] = statistics.median(times)
            figures["failover_max_s"] = max(times)
        finally:
            for broker in brokers:
                if broker.process is not None and broker.process.poll() is None:
                    broker.stop()
    figures["rf3_acks1_ratio"] = figures["rf3_acks1_msg_s"] / figures["single_acks1_msg_s"]
    figures["rf3_acksall_ratio"] = figures["rf3_acksall_msg_s"] / figures["single_acks1_msg_s"]
    return figures


def main() -> None:
    """Parse the options, run, print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per throughput run")
    parser.add_argument("--failovers", type=int, default=3, help="leader kills to time")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    arguments = parser.parse_args()
    figures = run(arguments.messages, arguments.failovers)
    if arguments.json:
        print(json.dumps(figures, indent=2))
        return
    rows = [
        ("single broker, acks=1", f"{figures['single_acks1_msg_s']:,.0f} msg/s", "100%", ""),
        ("RF 3, acks=1", f"{figures['rf3_acks1_msg_s']:,.0f} msg/s", f"{figures['rf3_acks1_ratio']:.0%}", ""),
        ("RF 3, acks=all", f"{figures['rf3_acksall_msg_s']:,.0f} msg/s", f"{figures['rf3_acksall_ratio']:.0%}",
         "target ≥ 40%"),
        ("e2e latency p50 at 5k msg/s, acks=all", f"{figures['latency_p50_ms']:.1f} ms", "", ""),
        ("e2e latency p99 at 5k msg/s, acks=all", f"{figures['latency_p99_ms']:.1f} ms", "", "target ≤ 10 ms"),
        ("failover to first acks=all write, p50", f"{figures['failover_p50_s']:.2f} s", "", ""),
        ("failover to first acks=all write, max", f"{figures['failover_max_s']:.2f} s", "", "target ≤ 3 s"),
    ]
    for name, value, ratio, target in rows:
        print(f"{name:<42} {value:>16} {ratio:>6}  {target}")


if __name__ == "__main__":
    main()
