"""Chaos on a real three-broker cluster: RF 3, min.insync.replicas=2, acks=all, idempotent producers.

A nemesis injects one fault at a time, holds it, heals it, and then waits until the producers'
acknowledgements resume (liveness: within ``RESUME_S_MAX`` of every heal) before a quiet pause
and the next fault. Faults: kill -9 and restart; SIGSTOP/SIGCONT; graceful restart; cutting a
broker off (every connection to and from it through fault-injecting proxies: controller, replica
fetches, clients); two brokers paused at once; one cut off while another is killed -9 (both lose
the quorum until the heal); and a wall-clock step of ``CLOCK_STEP_S`` forward then back on one
broker (libfaketime; its monotonic clock keeps running: an NTP step). Twisted's timers run on the
wall clock, so a step fires or delays heartbeats, session and election timers at once: that is
where skew matters here. Producers write unique values to several partitions while a consumer reads.

At the end, with every broker back: no acknowledged value is missing, no offset holds two values
(across the reads), per-producer acknowledgement order matches offset order, no value appears
twice, failed sends are at most ``FAILED_RATIO_MAX`` of acknowledged ones (both reported), and
every replica's log, read with the storage library, holds exactly the leader's records below the
high watermark (record by record). The CI variant runs ~30 s of faults with inter-broker
authentication on (the controller handshake and replica-fetch logins on every reconnection); the
slow one 120 s without.
"""

from __future__ import annotations

import glob
import os
import pathlib
import random
import signal
import struct
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pytest

from mqbroker.client import Admin, Consumer, Producer
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import retrying
from tests.integration.faultproxy import Network, replica_source, start_partitionable_cluster
from tests.integration.replicas import leader_records, replica_records

TOPIC = "chaos"
PARTITIONS = 3
PRODUCERS = 2
#: After a heal, acknowledgements resume within this long: the killed broker is back and ready when
#: the heal ends, so what is left is a controller election, sessions (3 s), an ISR rejoin and the
#: producers' retries; the bound leaves a loaded 2-core machine room.
RESUME_S_MAX = 45.0
#: Failed sends (delivery timeout, non-retriable errors) per acknowledged one, at most.
FAILED_RATIO_MAX = 0.05
#: How far a broker's wall clock steps forward (and then back).
CLOCK_STEP_S = 20
#: The broker whose wall clock the nemesis steps.
SKEWED_NODE = 3
FAULTS = ("kill", "pause", "restart", "cut", "pause-two", "cut-and-kill", "clock-step")
FAKETIME_LIBRARIES = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")


class History:
    """What the clients saw: acknowledged (partition, offset, value) per producer, when, reads, failed sends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acknowledged: dict[int, list[tuple[int, int, bytes]]] = defaultdict(list)
        self.last_acknowledged_at = 0.0  # time.monotonic() of the newest acknowledgement
        self.reads: dict[tuple[int, int], set[bytes]] = defaultdict(set)
        self.failed = 0
        self.first_failure = ""


class WallClock:
    """One broker's wall clock, stepped through a libfaketime offset file (its monotonic clock is left alone)."""

    def __init__(self, path: pathlib.Path) -> None:
        assert FAKETIME_LIBRARIES, "libfaketime is not installed (Debian: libfaketime; scripts/test.sh installs it)"
        self.path = path
        self.step(0)

    def environment(self) -> dict[str, str]:
        """What the broker's process needs to read its offset from ``path``."""
        return {"LD_PRELOAD": FAKETIME_LIBRARIES[0], "FAKETIME_TIMESTAMP_FILE": str(self.path),
                "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}

    def step(self, offset_s: int) -> None:
        """Set the clock ``offset_s`` seconds from the real time (read within a second)."""
        self.path.write_text(f"{offset_s:+d}\n")


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
                except Exception as error:  # a send that failed for good: its value may or may not be in the log
                    with history.lock:
                        history.failed += 1
                        history.first_failure = history.first_failure or f"{type(error).__name__}: {error}"
                    continue
                with history.lock:
                    history.acknowledged[producer_number].append((metadata.partition, metadata.offset, value))
                    history.last_acknowledged_at = time.monotonic()
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


def _inject(action: str, cluster: list[BrokerProcess], network: Network, clock: WallClock,
            rng: random.Random) -> tuple[str, Callable[[], None]]:
    """Start one fault; return what it was and the call that heals it."""
    first, second = rng.sample(range(len(cluster)), 2)
    victim, other = cluster[first], cluster[second]
    assert victim.process is not None and other.process is not None
    if action == "kill":
        victim.kill()
        return f"kill -9 broker {first + 1}", lambda: victim.start(timeout_s=60)
    if action == "pause":
        os.kill(victim.process.pid, signal.SIGSTOP)
        return f"pause broker {first + 1}", lambda: os.kill(victim.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
    if action == "restart":
        victim.stop()
        return f"graceful restart of broker {first + 1}", lambda: victim.start(timeout_s=60)
    if action == "cut":
        network.cut(first + 1)
        return f"cut broker {first + 1} off", lambda: network.heal(first + 1)
    if action == "pause-two":
        for broker in (victim, other):
            os.kill(broker.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        return (f"pause brokers {first + 1} and {second + 1}",
                lambda: [os.kill(broker.process.pid, signal.SIGCONT) for broker in (victim, other)])  # type: ignore[union-attr]
    if action == "cut-and-kill":
        network.cut(first + 1)
        other.kill()

        def heal() -> None:
            network.heal(first + 1)
            other.start(timeout_s=60)

        return f"cut broker {first + 1} off and kill -9 broker {second + 1}", heal
    assert action == "clock-step"
    clock.step(CLOCK_STEP_S)
    return f"step broker {SKEWED_NODE}'s clock {CLOCK_STEP_S} s forward (then back)", lambda: clock.step(0)


def _resumed_within(history: History, healed_at: float, timeout_s: float) -> float | None:
    """Seconds from ``healed_at`` to the first acknowledgement after it (None: none within ``timeout_s``)."""
    deadline = healed_at + timeout_s
    while time.monotonic() < deadline:
        with history.lock:
            if history.last_acknowledged_at > healed_at:
                return history.last_acknowledged_at - healed_at
        time.sleep(0.05)
    return None


def run_nemesis(cluster: list[BrokerProcess], network: Network, clock: WallClock, history: History,
             duration_s: float, seed: int) -> list[tuple[str, float | None]]:
    """Faults one after another until ``duration_s`` is over and every kind ran; (fault, seconds until acks
    resumed after its heal)."""
    rng = random.Random(seed)
    faults = list(FAULTS)
    rng.shuffle(faults)  # each kind once before any repeats, in a seeded order
    outcomes: list[tuple[str, float | None]] = []
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline or len(outcomes) < len(FAULTS):  # every kind at least once
        time.sleep(rng.uniform(1.0, 2.0))
        action = faults[len(outcomes)] if len(outcomes) < len(faults) else rng.choice(FAULTS)
        description, heal = _inject(action, cluster, network, clock, rng)
        time.sleep(rng.uniform(1.0, 4.0))
        heal()
        outcomes.append((description, _resumed_within(history, time.monotonic(), RESUME_S_MAX)))
    return outcomes


def stop_all(cluster: list[BrokerProcess], network: Network) -> None:
    """End a chaos run: wake paused brokers and stop every broker still running, then the network proxies."""
    for broker in cluster:
        if broker.process is not None and broker.process.poll() is None:
            os.kill(broker.process.pid, signal.SIGCONT)
            broker.stop()
    network.stop()


def _run_chaos(root: pathlib.Path, duration_s: float, seed: int, inter_broker_authentication: bool = False) -> None:
    clock = WallClock(root / "faketime-offset")
    extra_args = ["--set", "replica_lag_time_max_ms=1500"]
    if inter_broker_authentication:  # controller handshakes and replica-fetch logins as Broker:N, every reconnect
        password_file = root / "inter-broker-password"
        password_file.write_text("chaos-inter-broker-password\n")
        extra_args += ["--set", f'security.inter_broker_password_file="{password_file}"']
    cluster, network, proxied = start_partitionable_cluster(
        root, extra_args=extra_args, environments={SKEWED_NODE: clock.environment()})
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
        outcomes = run_nemesis(cluster, network, clock, history, duration_s, seed)
        time.sleep(3)
        stop.set()
        for worker in workers:
            worker.join(120)
        acknowledged = [entry for entries in history.acknowledged.values() for entry in entries]
        ends = {partition: max([offset + 1 for p, offset, _ in acknowledged if p == partition], default=0)
                for partition in range(PARTITIONS)}
        final = _final_read(bootstraps, ends)
        _wait_for_full_isr(bootstraps[0])
        leaders = {partition: leader_records(bootstraps[0], TOPIC, partition) for partition in range(PARTITIONS)}
    finally:
        stop_all(cluster, network)
    _check(history, final, leaders, [broker.data_dir for broker in cluster], outcomes, seed)


def _final_read(bootstraps: list[str], ends: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    found: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    with Consumer(bootstraps, auto_offset_reset="earliest") as consumer:
        consumer.assign([(TOPIC, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        while any(len(found[p]) < ends[p] for p in range(PARTITIONS)) and time.monotonic() < deadline:
            for message in consumer.poll(timeout=0.5):
                found[message.partition].append((message.offset, message.value))
    return found


def _wait_for_full_isr(bootstrap: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with Admin(bootstrap) as admin:
            [topic] = [t for t in admin.metadata([TOPIC]).topics if t.name == TOPIC]
            if all(sorted(p.isr_nodes) == [1, 2, 3] for p in topic.partitions):
                return
        time.sleep(0.5)
    raise AssertionError("the followers that were down did not rejoin the ISR")


def _check(history: History, final: dict[int, list[tuple[int, bytes]]], leaders: dict[int, Any],
           data_dirs: list[pathlib.Path], outcomes: list[tuple[str, float | None]], seed: int) -> None:
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
    replica_mismatches = []
    for partition, (expected, start, high_watermark) in leaders.items():
        for number, data_dir in enumerate(data_dirs, start=1):
            held = replica_records(data_dir, TOPIC, partition)
            below = {offset: record for offset, record in held.items() if start <= offset < high_watermark}
            if below != expected:
                differing = sorted(o for o in set(expected) | set(below) if expected.get(o) != below.get(o))
                replica_mismatches.append(f"broker {number} {TOPIC}-{partition}: offsets {differing[:5]}")
    failed_ratio = history.failed / max(len(acknowledged), 1)
    stalled = [description for description, resumed_s in outcomes if resumed_s is None]
    print(f"\nchaos seed {seed}: {len(outcomes)} faults")
    for description, resumed_s in outcomes:
        print(f"  {description}: acks resumed {'never' if resumed_s is None else f'{resumed_s:.2f} s'} after the heal")
    print(f"acknowledged {len(acknowledged)}, read {len(final_values)}, failed sends {history.failed} "
          f"({failed_ratio:.2%} of acknowledged; first: {history.first_failure or 'none'}), lost {len(lost)}, "
          f"duplicated {len(duplicated)}, reordered {reordered}, divergent {len(divergent)}, "
          f"replicas differing from the leader {len(replica_mismatches)}")
    assert acknowledged, "nothing was acknowledged"
    assert (len(lost), len(duplicated), reordered, len(divergent)) == (0, 0, 0, 0), (lost[:5], duplicated[:5],
                                                                                     sorted(divergent)[:5])
    assert not replica_mismatches, replica_mismatches
    assert not stalled, f"acknowledgements did not resume within {RESUME_S_MAX} s after: {stalled}"
    assert failed_ratio <= FAILED_RATIO_MAX, f"{history.failed} failed sends for {len(acknowledged)} acknowledged"


def test_chaos_faults_lose_nothing_acknowledged_and_acks_resume_after_each_heal(tmp_path: pathlib.Path) -> None:
    """With inter-broker authentication on: the brokers prove who they are on every (re)connection."""
    _run_chaos(tmp_path, duration_s=30, seed=int(os.environ.get("CHAOS_SEED", "8")), inter_broker_authentication=True)


@pytest.mark.slow
def test_chaos_long_run(tmp_path: pathlib.Path) -> None:
    _run_chaos(tmp_path, duration_s=120, seed=int(os.environ.get("CHAOS_SEED", "88")))


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
