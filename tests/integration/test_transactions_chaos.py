"""Transactions under chaos on a real three-broker cluster (the nemesis of ``test_replication_chaos``).

RF 3, min.insync.replicas=2. While the nemesis kills -9, pauses (SIGSTOP), restarts, cuts off brokers and
steps a wall clock, three kinds of client run:

* two transactional producers write 9 unique values over the three partitions of ``direct`` per
  transaction and abort every fourth transaction on purpose; a failure mid-transaction makes a new
  producer with the same transactional id (which fences the old one and aborts what it left open);
* a consume-transform-produce worker reads ``input`` (filled meanwhile by an idempotent producer)
  read_committed and writes ``out-`` + each value to ``output``, committing its input offsets in the
  same transaction; on any error it starts over (new consumer and producer, same ids);
* a read_committed reader follows ``direct`` and ``output`` all along.

The checker, at the end (every broker back, every client stopped), reports and requires 0 of each:
aborted reads (a value of a transaction aborted on purpose, or whose commit failed and that the final
read does not hold, seen by a read_committed reader), lost committed writes (a committed value, or an
acknowledged input's ``out-`` copy, missing from the final read_committed read), duplicates,
non-monotonic reads (offsets going back within one reader session), inconsistent offsets (one offset
holding two values across the reads) and hanging transactions (a partition whose last stable offset
stays below its high watermark longer than the transaction timeout after the clients stopped).
"""

from __future__ import annotations

import os
import pathlib
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable

import pytest

from mqbroker.client import Admin, Consumer, Message, Producer
from mqbroker.client.group_admin import GroupAdmin
from mqbroker.errors import BrokerError
from tests.integration.clusterprocess import retrying
from tests.integration.faultproxy import start_partitionable_cluster
from tests.integration.test_replication_chaos import RESUME_S_MAX, SKEWED_NODE, WallClock, run_nemesis, stop_all

DIRECT, INPUT, OUTPUT, GROUP = "direct", "input", "output", "ctp"
PARTITIONS = 3
TRANSACTIONAL_PRODUCERS = 2
RECORDS_PER_TRANSACTION = 9
ABORT_EVERY = 4
TRANSACTION_TIMEOUT_MS = 10_000
#: After the faults, the worker copies the rest of ``input`` within this long.
DRAIN_S_MAX = 120.0


class TxnHistory:
    """What the clients saw; ``lock`` and ``last_acknowledged_at`` are what the nemesis reads for liveness."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last_acknowledged_at = 0.0
        self.committed: set[bytes] = set()  # commit_transaction returned
        self.aborted: set[bytes] = set()  # abort_transaction returned
        self.uncertain: set[bytes] = set()  # the transaction failed: committed or aborted, unknown
        self.inputs: set[bytes] = set()  # acknowledged input values
        self.reads: dict[tuple[str, int, int], set[bytes]] = defaultdict(set)
        self.read_values: set[bytes] = set()
        self.non_monotonic = 0
        self.transactions = Counter[str]()

    def acknowledged(self) -> None:
        """A transaction committed (the nemesis waits for one after each heal)."""
        self.last_acknowledged_at = time.monotonic()


def _transactional_producer(bootstraps: list[str], number: int, history: TxnHistory, stop: threading.Event) -> None:
    transaction = 0
    while not stop.is_set():
        producer = None
        try:
            producer = Producer(bootstraps, transactional_id=f"chaos-{number}", linger_ms=2, max_block_ms=30_000,
                                transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, delivery_timeout_ms=30_000)
            producer.init_transactions()
            while not stop.is_set():
                values = [b"t%d-%d-%d" % (number, transaction, index) for index in range(RECORDS_PER_TRANSACTION)]
                transaction += 1
                abort = transaction % ABORT_EVERY == 0
                with history.lock:
                    history.uncertain.update(values)
                producer.begin_transaction()
                for index, value in enumerate(values):
                    producer.send(DIRECT, value=value, partition=index % PARTITIONS)
                (producer.abort_transaction if abort else producer.commit_transaction)()
                with history.lock:
                    history.uncertain.difference_update(values)
                    (history.aborted if abort else history.committed).update(values)
                    history.transactions["aborted" if abort else "committed"] += 1
                    history.acknowledged()
        except Exception:  # the transaction's outcome is unknown: a new incarnation fences this one
            with history.lock:
                history.transactions["failed"] += 1
            time.sleep(0.5)
        finally:
            if producer is not None:
                producer.close(timeout=1)


def _input_producer(bootstraps: list[str], history: TxnHistory, stop: threading.Event) -> None:
    with Producer(bootstraps, acks="all", linger_ms=5, delivery_timeout_ms=60_000) as producer:
        sequence = 0
        while not stop.is_set():
            futures = [(b"i%d" % number, producer.send(INPUT, value=b"i%d" % number, partition=number % PARTITIONS))
                       for number in range(sequence, sequence + 10)]
            sequence += 10
            for value, future in futures:
                try:
                    future.result(90)
                except Exception:  # may or may not be in the log: its copy may appear, at most once
                    continue
                with history.lock:
                    history.inputs.add(value)
            time.sleep(0.02)


def _transform_worker(bootstraps: list[str], history: TxnHistory, stop: threading.Event) -> None:
    while not stop.is_set():
        consumer = producer = None
        try:
            consumer = Consumer(bootstraps, group_id=GROUP, group_instance_id="worker", topics=[INPUT],
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                isolation_level="read_committed", session_timeout_ms=6_000,
                                heartbeat_interval_ms=500, fetch_max_wait_ms=100)
            producer = Producer(bootstraps, transactional_id="worker", linger_ms=2, max_block_ms=30_000,
                                transaction_timeout_ms=TRANSACTION_TIMEOUT_MS, delivery_timeout_ms=30_000)
            producer.init_transactions()
            while not stop.is_set():
                messages = consumer.poll(timeout=0.5)
                if not messages:
                    continue
                producer.begin_transaction()
                offsets: dict[tuple[str, int], int] = {}
                for message in messages:
                    producer.send(OUTPUT, value=b"out-" + (message.value or b""), partition=message.partition)
                    offsets[message.topic, message.partition] = message.offset + 1
                producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                producer.commit_transaction()
                with history.lock:
                    history.transactions["copied"] += 1
        except Exception:  # start over from the committed offsets; the new producer fences the old one
            with history.lock:
                history.transactions["worker restarts"] += 1
            time.sleep(0.5)
        finally:
            for client in (producer, consumer):
                if client is not None:
                    try:
                        client.close(timeout=1) if client is producer else client.close()
                    except Exception:
                        pass  # a client of a dead cluster: abandoned


def _assigned_reader(bootstraps: list[str]) -> Consumer:
    consumer = Consumer(bootstraps, auto_offset_reset="earliest", isolation_level="read_committed", fetch_max_wait_ms=200)
    consumer.assign([(topic, partition) for topic in (DIRECT, OUTPUT) for partition in range(PARTITIONS)])
    return consumer


def _record(history: TxnHistory, messages: Iterable[Message], last: dict[tuple[str, int], int]) -> None:
    with history.lock:
        for message in messages:
            key = (message.topic, message.partition)
            history.non_monotonic += message.offset <= last.get(key, -1)
            last[key] = message.offset
            history.reads[key + (message.offset,)].add(message.value or b"")
            history.read_values.add(message.value or b"")


def _reader(bootstraps: list[str], history: TxnHistory, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            with _assigned_reader(bootstraps) as consumer:
                last: dict[tuple[str, int], int] = {}  # one session: offsets only go up
                while not stop.is_set():
                    _record(history, consumer.poll(timeout=0.5), last)
        except Exception:  # a broker died under the reader: a new session reads from the beginning
            time.sleep(0.2)


def _stable_ends(admin: Admin) -> dict[tuple[str, int], tuple[int, int]]:
    return {(topic, partition): (admin.list_offset(topic, partition, -1, isolation_level="read_committed"),
                                 admin.list_offset(topic, partition, -1))
            for topic in (DIRECT, OUTPUT) for partition in range(PARTITIONS)}


def _hanging(bootstrap: str) -> dict[tuple[str, int], tuple[int, int]]:
    """Partitions whose last stable offset is still below the high watermark a transaction timeout (and some
    slack for a coordinator that just moved) after every client stopped."""
    deadline = time.monotonic() + TRANSACTION_TIMEOUT_MS / 1000 + 30
    while True:
        with Admin(bootstrap) as admin:
            ends = retrying(lambda: _stable_ends(admin))
        hanging = {key: value for key, value in ends.items() if value[0] < value[1]}
        if not hanging or time.monotonic() > deadline:
            return hanging
        time.sleep(0.5)


def _final_read(bootstraps: list[str], history: TxnHistory, ends: dict[tuple[str, int], tuple[int, int]]) -> list[Message]:
    found: list[Message] = []
    with _assigned_reader(bootstraps) as consumer:
        deadline, last = time.monotonic() + 60, {}
        while time.monotonic() < deadline and any(consumer.position(key) < stable for key, (stable, _) in ends.items()):
            messages = consumer.poll(timeout=0.5)
            _record(history, messages, last)
            found += messages
        found += consumer.poll(timeout=1.0)
    return found


def _drain(bootstrap: str, history: TxnHistory) -> None:
    """Wait until the worker has copied every acknowledged input (its committed offsets reach the input's end)."""
    with Admin(bootstrap) as admin:
        ends = {(INPUT, partition): admin.list_offset(INPUT, partition, -1) for partition in range(PARTITIONS)}
    deadline = time.monotonic() + DRAIN_S_MAX
    while time.monotonic() < deadline:
        try:
            with GroupAdmin(bootstrap) as groups:
                committed = groups.committed_offsets(GROUP, require_stable=True)
        except BrokerError:  # a transaction's offsets are being decided, or the coordinator moves
            committed = {}
        if all(committed.get(key, 0) >= end for key, end in ends.items()):
            return
        time.sleep(1)
    raise AssertionError(f"the worker did not copy all of {INPUT} within {DRAIN_S_MAX} s")


def _run(root: pathlib.Path, duration_s: float, seed: int) -> None:
    print(f"\ntransactions chaos seed {seed} (CHAOS_SEED={seed} repeats it)")
    clock = WallClock(root / "faketime-offset")
    cluster, network, proxied = start_partitionable_cluster(
        root, extra_args=["--set", "replica_lag_time_max_ms=1500"], environments={SKEWED_NODE: clock.environment()})
    bootstraps = [proxied(broker) for broker in cluster]
    try:
        with Admin(bootstraps[0]) as admin:
            retrying(lambda: admin.create_topics([DIRECT, INPUT, OUTPUT], partitions=PARTITIONS, replication_factor=3,
                                                 configs={"min.insync.replicas": "2"}))
        history, stop, stop_input = TxnHistory(), threading.Event(), threading.Event()
        workers = [threading.Thread(target=_transactional_producer, args=(bootstraps, number, history, stop))
                   for number in range(TRANSACTIONAL_PRODUCERS)]
        workers += [threading.Thread(target=_transform_worker, args=(bootstraps, history, stop)),
                    threading.Thread(target=_reader, args=(bootstraps, history, stop))]
        feeder = threading.Thread(target=_input_producer, args=(bootstraps, history, stop_input))
        for thread in [feeder, *workers]:
            thread.start()
        outcomes = run_nemesis(cluster, network, clock, history, duration_s, seed)  # type: ignore[arg-type]
        stop_input.set()
        feeder.join(120)
        _drain(bootstraps[0], history)
        stop.set()
        for thread in workers:
            thread.join(120)
        hanging = _hanging(bootstraps[0])
        with Admin(bootstraps[0]) as admin:
            ends = _stable_ends(admin)
        final = _final_read(bootstraps, history, ends)
    finally:
        stop_all(cluster, network)
    _check(history, final, hanging, outcomes, seed)


def _check(history: TxnHistory, final: list[Message], hanging: dict[tuple[str, int], tuple[int, int]],
           outcomes: list[tuple[str, float | None]], seed: int) -> None:
    final_values = Counter(message.value or b"" for message in final)
    final_at = {(message.topic, message.partition, message.offset): message.value or b"" for message in final}
    never_committed = history.aborted | (history.uncertain - set(final_values))
    aborted_reads = sorted(history.read_values & never_committed)
    lost = sorted((history.committed | {b"out-" + value for value in history.inputs}) - set(final_values))
    duplicated = sorted(value for value, count in final_values.items() if count > 1)
    inconsistent = sorted(key for key, values in history.reads.items()
                          if len(values) > 1 or (key in final_at and final_at[key] not in values))
    stalled = [description for description, resumed_s in outcomes if resumed_s is None]
    print(f"\ntransactions chaos seed {seed}: {len(outcomes)} faults")
    for description, resumed_s in outcomes:
        print(f"  {description}: commits resumed {'never' if resumed_s is None else f'{resumed_s:.2f} s'} after the heal")
    print(f"transactions {dict(history.transactions)}, committed values {len(history.committed)}, aborted "
          f"{len(history.aborted)}, uncertain {len(history.uncertain)}, inputs {len(history.inputs)}; aborted reads "
          f"{len(aborted_reads)}, lost {len(lost)}, duplicated {len(duplicated)}, non-monotonic "
          f"{history.non_monotonic}, inconsistent offsets {len(inconsistent)}, hanging {len(hanging)}")
    assert history.transactions["committed"] and history.transactions["aborted"] and history.inputs
    assert (len(aborted_reads), len(lost), len(duplicated), history.non_monotonic, len(inconsistent), len(hanging)) == (
        0, 0, 0, 0, 0, 0), (aborted_reads[:5], lost[:5], duplicated[:5], inconsistent[:5], hanging)
    assert not stalled, f"no transaction committed within {RESUME_S_MAX} s after: {stalled}"


@pytest.mark.slow
def test_transactions_under_chaos_are_exactly_once_and_never_read_aborted(tmp_path: pathlib.Path) -> None:
    """Concurrent transactional producers and a consume-transform-produce worker through kill -9, SIGSTOP and cuts."""
    _run(tmp_path, duration_s=float(os.environ.get("CHAOS_DURATION_S", "30")),
         seed=int(os.environ.get("CHAOS_SEED", str(random.randrange(1 << 16)))))
