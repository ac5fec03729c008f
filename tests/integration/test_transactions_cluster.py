"""Exactly once on a real three-broker cluster: consume-transform-produce through kill -9 of worker and coordinator.

A worker process (``txn_worker_child``) reads ``input`` read_committed, writes a transformed copy
of each record to ``output`` and commits its input offsets in the same transaction. The test
kills it with SIGKILL mid-stream and starts a successor (same transactional id: it fences the
zombie and aborts its open transaction), then kills -9 the broker coordinating that transactional
id (the leader of its ``__transaction_state`` partition) and restarts it; a worker that exits (fenced
because its transaction timed out during the failover) is restarted, as a supervisor would. A read_committed reader
follows ``output`` all along. At the end every input value is in ``output`` exactly once (read
committed), the follower saw no value twice and nothing that is not in the final output (no
aborted read), and the aborted copies are really in the log (the faults did hit open transactions).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.transactions.log_records import TRANSACTION_STATE_TOPIC, transaction_state_partition
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import retrying, start_cluster, wait_for

INPUT, OUTPUT, GROUP, TRANSACTIONAL_ID = "input", "output", "etl", "etl-worker"
PARTITIONS = 3
RECORDS = 3_000
#: How long the worker holds each transaction open (flushed) before committing: kills land inside one.
HOLD_S = 0.3
#: The run must finish within this long after the last fault (elections, a new coordinator, timeouts).
FINISH_S_MAX = 120.0


class Follower(threading.Thread):
    """A read_committed reader of ``output`` for the whole run: every value it saw, in order."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.seen: list[bytes] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Consumer(self.bootstrap, topics=[OUTPUT], auto_offset_reset="earliest",
                          isolation_level="read_committed", fetch_max_wait_ms=200) as consumer:
                while not self.stopping.is_set():
                    self.seen += [message.value for message in consumer.poll(0.2) if message.value is not None]
        except BaseException as error:  # reported by the test
            self.error = error


def _bootstrap(brokers: list[BrokerProcess]) -> str:
    return ",".join(broker.bootstrap for broker in brokers)


def _start_worker(bootstrap: str, log: pathlib.Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.txn_worker_child", bootstrap, INPUT, OUTPUT, GROUP, TRANSACTIONAL_ID,
         str(HOLD_S)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT,
    )


def _progress(log: pathlib.Path) -> tuple[int, bool]:
    """Records the workers committed so far, and whether the last one is holding a transaction open now."""
    count, holding = 0, False
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            said = json.loads(line)
            count += said.get("committed", 0)
            holding = "holding" in said
    return count, holding


def _holding_after(log: pathlib.Path, committed: int) -> Callable[[], bool]:
    """True once ``committed`` records are committed and the worker holds its next transaction open."""
    def check() -> bool:
        count, holding = _progress(log)
        return count >= committed and holding
    return check


def _read_all(bootstrap: str, isolation_level: str, expected: int, timeout_s: float) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    with Consumer(bootstrap, topics=[OUTPUT], auto_offset_reset="earliest", isolation_level=isolation_level) as consumer:
        while len(values) < expected and time.monotonic() < deadline:
            values += [message.value for message in consumer.poll(0.5) if message.value is not None]
        values += [message.value for message in consumer.poll(1.0) if message.value is not None]
    return values


def _coordinator(brokers: list[BrokerProcess], bootstrap: str) -> BrokerProcess:
    """The broker leading the transactional id's ``__transaction_state`` partition."""
    with Admin(bootstrap) as admin:
        metadata = retrying(lambda: admin.metadata([TRANSACTION_STATE_TOPIC]))
    (topic,) = metadata.topics
    partition = transaction_state_partition(TRANSACTIONAL_ID, len(topic.partitions))
    leader = next(p.leader_id for p in topic.partitions if p.partition_index == partition)
    return brokers[leader - 1]


def test_consume_transform_produce_is_exactly_once_through_kill_9(tmp_path: pathlib.Path) -> None:
    brokers = start_cluster(tmp_path, 3, ["--kafka-tls-port", "0"])
    worker: subprocess.Popen[bytes] | None = None
    follower: Follower | None = None
    try:
        bootstrap = _bootstrap(brokers)
        with Admin(bootstrap) as admin:
            for topic in (INPUT, OUTPUT):
                retrying(lambda topic=topic: admin.create_topics([topic], partitions=PARTITIONS, replication_factor=3,
                                                                 configs={"min.insync.replicas": "2"}))
        with Producer(bootstrap, acks="all") as seeder:
            for number in range(RECORDS):
                seeder.send(INPUT, value=b"%05d" % number, partition=number % PARTITIONS)
            assert seeder.flush(60) == 0
        follower = Follower(bootstrap)
        follower.start()
        log = tmp_path / "worker.log"
        worker = _start_worker(bootstrap, log)
        wait_for(_holding_after(log, RECORDS // 5), 120, "the first worker committing")
        worker.kill()  # kill -9 mid-stream: its open transaction must be aborted by its successor
        worker.wait()
        worker = _start_worker(bootstrap, log)
        wait_for(_holding_after(log, RECORDS // 2), 120, "the successor committing")
        coordinator = _coordinator(brokers, bootstrap)
        coordinator.kill()  # kill -9 the transaction coordinator (and leader of whatever it led)
        time.sleep(2.0)
        coordinator.start(timeout_s=60)
        workers = [worker]

        def transformed_all() -> bool:
            if workers[-1].poll() is not None:  # fenced (its transaction timed out during the failover): restart it
                workers.append(_start_worker(bootstrap, log))
            return len(set(_read_all(bootstrap, "read_committed", RECORDS, 5.0))) >= RECORDS

        wait_for(transformed_all, FINISH_S_MAX, "every input transformed")
        worker = workers[-1]
        worker.kill()
        worker.wait()
        worker = None
        follower.stopping.set()
        follower.join(10)
        committed = Counter(_read_all(bootstrap, "read_committed", RECORDS, 30.0))
        expected = {b"out-%05d" % number for number in range(RECORDS)}
        duplicates = {value: count for value, count in committed.items() if count > 1}
        assert not duplicates, f"{len(duplicates)} values committed more than once, e.g. {list(duplicates)[:5]}"
        assert set(committed) == expected, f"missing {len(expected - set(committed))}, foreign {set(committed) - expected}"
        assert follower.error is None, follower.error
        seen = Counter(follower.seen)
        assert all(count == 1 for count in seen.values()), "the read_committed follower saw a value twice"
        assert set(seen) <= expected, "the read_committed follower saw a value that is not committed"
        everything = _read_all(bootstrap, "read_uncommitted", RECORDS + 1, 30.0)
        assert len(everything) > RECORDS, "no fault hit an open transaction with data in the log"
        print(f"committed {len(committed)}, in the log {len(everything)} (aborted copies "
              f"{len(everything) - len(committed)}); worker log: {log.read_text().count('aborted')} aborts")
    finally:
        if follower is not None:
            follower.stopping.set()
        if worker is not None:
            worker.kill()
            worker.wait()
        for broker in brokers:
            broker.kill()
