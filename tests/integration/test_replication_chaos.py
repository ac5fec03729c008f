"""Chaos on a real three-broker cluster: RF 3, min.insync.replicas=2, acks=all, idempotent producers.

A nemesis kills (SIGKILL), pauses (SIGSTOP/SIGCONT), restarts and cuts off (every connection to
and from it through fault-injecting proxies: controller, replica fetches, clients) random brokers
every few seconds while producers write unique values to several partitions and a consumer reads. At the end,
with every broker back: no acknowledged value is missing, no offset holds two values (across the
reads and across the replicas' logs on disk), per-producer acknowledgement order matches offset
order per partition, and no value appears twice. The CI variant runs ~30 s with inter-broker authentication
on (the controller handshake and replica-fetch logins on every reconnection); the slow one 90 s without.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
import struct
import threading
import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.records import batch as records
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import retrying
from tests.integration.faultproxy import Network, replica_source, start_partitionable_cluster

TOPIC = "chaos"
PARTITIONS = 3
PRODUCERS = 2


class History:
    """What the clients saw: acknowledged (partition, offset, value) per producer, reads, failed sends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acknowledged: dict[int, list[tuple[int, int, bytes]]] = defaultdict(list)
        self.reads: dict[tuple[int, int], set[bytes]] = defaultdict(set)
        self.failed = 0


def _produce(bootstraps: list[str], producer_number: int, history: History, stop: threading.Event) -> None:
    with Producer(bootstraps, acks="all", linger_ms=2, delivery_timeout_ms=60_000) as producer:
        sequence = 0
        while not stop.is_set():
            futures = []
            for _ in range(10):
                value = b"p%d-%d" % (producer_number, sequence)
                futures.append((value, producer.send(TOPIC, value=value, partition=sequence % PARTITIONS)))
                sequence += 1
            for value, future in futures:
                try:
                    metadata = future.result(90)
                except Exception:  # a send that failed for good: its value may or may not be in the log
                    with history.lock:
                        history.failed += 1
                    continue
                with history.lock:
                    history.acknowledged[producer_number].append((metadata.partition, metadata.offset, value))
            time.sleep(0.01)


def _consume(bootstraps: list[str], history: History, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with Consumer(bootstraps, auto_offset_reset="earliest") as consumer:
                consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
                while not stop.is_set():
                    for message in consumer.poll(timeout=0.5):
                        with history.lock:
                            history.reads[(message.partition, message.offset)].add(message.value)
        except Exception:  # a broker died under the consumer: open a new one (reads restart from the beginning)
            time.sleep(0.2)


def _nemesis(cluster: list[BrokerProcess], network: Network, duration_s: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    actions = []
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(2.0, 4.0))
        victim = rng.choice(cluster)
        assert victim.process is not None
        action = rng.choice(["kill", "pause", "restart", "cut"])
        actions.append(f"{action} broker {cluster.index(victim) + 1}")
        if action == "kill":
            victim.kill()
            time.sleep(rng.uniform(1.0, 3.0))
            victim.start(timeout_s=60)
        elif action == "pause":
            os.kill(victim.process.pid, signal.SIGSTOP)
            time.sleep(rng.uniform(1.0, 4.0))
            os.kill(victim.process.pid, signal.SIGCONT)
        elif action == "cut":
            network.cut(cluster.index(victim) + 1)
            time.sleep(rng.uniform(2.0, 5.0))
            network.heal(cluster.index(victim) + 1)
        else:
            victim.stop()
            victim.start(timeout_s=60)
    return actions


def _final_read(bootstraps: list[str], ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    found: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    with Consumer(bootstraps, auto_offset_reset="earliest") as consumer:
        consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while any(len(found[p]) < ends[p] for p in range(PARTITIONS)) and time.monotonic() < deadline:
            for message in consumer.poll(timeout=0.5):
                found[message.partition].append((message.offset, message.value))
    return found


def _replica_values(data_dir: pathlib.Path, partition: int) -> dict[int, bytes]:
    directory = data_dir / f"{TOPIC}-{partition}"
    if not directory.exists():
        return {}
    log = PartitionLog.open(str(directory), LogConfig(), 0, clean_shutdown=False)
    values, offset = {}, log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        if not data:
            break
        for position, header in records.iter_batches(data):
            for record in records.decode_records(data[position : position + header.size_bytes]):
                values[record.offset] = record.value
            offset = header.next_offset
    log.close()
    return values


def _run_chaos(root: pathlib.Path, duration_s: float, seed: int, inter_broker_authentication: bool = False) -> None:
    extra_args = ["--set", "replica_lag_time_max_ms=1500"]
    if inter_broker_authentication:  # controller handshakes and replica-fetch logins as Broker:N, every reconnect
        password_file = root / "inter-broker-password"
        password_file.write_text("chaos-inter-broker-password\n")
        extra_args += ["--set", f'security.inter_broker_password_file="{password_file}"']
    cluster, network, proxied = start_partitionable_cluster(root, extra_args=extra_args)
    bootstraps = [proxied(broker) for broker in cluster]
    try:
        with Admin(bootstraps[0]) as admin:
            retrying(lambda: admin.create_topics([TOPIC], partitions=PARTITIONS, replication_factor=3,
                                                 configs={"min.insync.replicas": "2"}))
        history, stop = History(), threading.Event()
        workers = [threading.Thread(target=_produce, args=(bootstraps, n, history, stop)) for n in range(PRODUCERS)]
        workers.append(threading.Thread(target=_consume, args=(bootstraps, history, stop)))
        for worker in workers:
            worker.start()
        actions = _nemesis(cluster, network, duration_s, seed)
        time.sleep(3)
        stop.set()
        for worker in workers:
            worker.join(120)
        acknowledged = [entry for entries in history.acknowledged.values() for entry in entries]
        ends = {partition: max([offset + 1 for p, offset, _ in acknowledged if p == partition], default=0)
                for partition in range(PARTITIONS)}
        final = _final_read(bootstraps, ends)
        _wait_for_full_isr(bootstraps[0])
    finally:
        for broker in cluster:
            if broker.process is not None and broker.process.poll() is None:
                os.kill(broker.process.pid, signal.SIGCONT)
                broker.stop()
        network.stop()
    _check(history, final, [broker.data_dir for broker in cluster], actions, seed)


def _wait_for_full_isr(bootstrap: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with Admin(bootstrap) as admin:
            [topic] = [t for t in admin.metadata([TOPIC]).topics if t.name == TOPIC]
            if all(sorted(p.isr_nodes) == [1, 2, 3] for p in topic.partitions):
                return
        time.sleep(0.5)
    raise AssertionError("the followers that were down did not rejoin the ISR")


def _check(history: History, final: dict[int, list[tuple[int, bytes]]], data_dirs: list[pathlib.Path],
           actions: list[str], seed: int) -> None:
    acknowledged = [entry for entries in history.acknowledged.values() for entry in entries]
    final_values = {(p, offset): value for p, entries in final.items() for offset, value in entries}
    read_values = Counter(value for entries in final.values() for _, value in entries)
    lost = [entry for entry in acknowledged if final_values.get((entry[0], entry[1])) != entry[2]]
    duplicated = [value for value, count in read_values.items() if count > 1]
    reordered = 0
    for entries in history.acknowledged.values():
        last: dict[int, int] = {}
        for partition, offset, _ in entries:
            reordered += offset <= last.get(partition, -1)
            last[partition] = offset
    divergent = {key for key, values in history.reads.items() if len(values) > 1}
    divergent |= {key for key, values in history.reads.items() if key in final_values and final_values[key] not in values}
    for partition in range(PARTITIONS):
        replicas = [_replica_values(data_dir, partition) for data_dir in data_dirs]
        for offset in set().union(*replicas):
            held = {replica[offset] for replica in replicas if offset in replica}
            if len(held) > 1 or ((partition, offset) in final_values and final_values[(partition, offset)] not in held):
                divergent.add((partition, offset))
    print(f"\nchaos seed {seed}: {len(actions)} faults ({', '.join(actions)})")
    print(f"acknowledged {len(acknowledged)}, read {len(final_values)}, failed sends {history.failed}, "
          f"lost {len(lost)}, duplicated {len(duplicated)}, reordered {reordered}, divergent {len(divergent)}")
    assert acknowledged, "nothing was acknowledged"
    assert (len(lost), len(duplicated), reordered, len(divergent)) == (0, 0, 0, 0), (lost[:5], duplicated[:5],
                                                                                     sorted(divergent)[:5])


def test_chaos_kills_pauses_restarts_lose_nothing_acknowledged(tmp_path: pathlib.Path) -> None:
    """With inter-broker authentication on: the brokers prove who they are on every (re)connection."""
    _run_chaos(tmp_path, duration_s=30, seed=int(os.environ.get("CHAOS_SEED", "8")), inter_broker_authentication=True)


@pytest.mark.slow
def test_chaos_long_run(tmp_path: pathlib.Path) -> None:
    _run_chaos(tmp_path, duration_s=90, seed=int(os.environ.get("CHAOS_SEED", "88")))


def test_replica_fetch_connections_are_told_apart_by_client_id() -> None:
    header = struct.pack(">hhi", 1, 12, 7)
    assert replica_source(struct.pack(">i", 30) + header + struct.pack(">h", 9) + b"replica-3") == 3
    assert replica_source(struct.pack(">i", 30) + header + struct.pack(">h", 6) + b"client") is None
    assert replica_source(struct.pack(">i", 30) + header + struct.pack(">h", 9) + b"repl") is False


def test_a_cut_broker_loses_its_leaderships_and_rejoins_after_the_heal(tmp_path: pathlib.Path) -> None:
    cluster, network, proxied = start_partitionable_cluster(
        tmp_path, extra_args=["--set", "replica_lag_time_max_ms=1500", "--set", "broker_session_timeout_ms=1500",
                              "--set", "broker_heartbeat_interval_ms=250"])
    try:
        with Admin(proxied(cluster[0])) as admin:
            retrying(lambda: admin.create_topics([TOPIC], partitions=PARTITIONS, replication_factor=3,
                                                 configs={"min.insync.replicas": "2"}))
        with Producer([proxied(b) for b in cluster], acks="all") as producer:
            for partition in range(PARTITIONS):
                producer.send(TOPIC, value=b"before", partition=partition).result(30)
        network.cut(1)
        survivor = proxied(cluster[1])
        deadline = time.monotonic() + 20
        while not all(p.leader_id != 1 and 1 not in p.isr_nodes for p in _partitions(survivor)):
            assert time.monotonic() < deadline, "broker 1 kept leaderships or ISR places while cut off"
            time.sleep(0.2)
        with Producer([proxied(b) for b in cluster[1:]], acks="all") as producer:
            for partition in range(PARTITIONS):
                producer.send(TOPIC, value=b"during", partition=partition).result(30)
        network.heal(1)
        _wait_for_full_isr(survivor)
    finally:
        for broker in cluster:
            broker.stop()
        network.stop()


def _partitions(bootstrap: str) -> list[Any]:
    with Admin(bootstrap) as admin:
        [topic] = [t for t in admin.metadata([TOPIC]).topics if t.name == TOPIC]
        return list(topic.partitions)
