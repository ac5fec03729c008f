"""The sink's transactional option: a Spark driver killed with kill -9 mid-stream and restarted from its checkpoint
leaves each input row exactly once for read_committed readers; replays of committed batches write nothing; an
older attempt of a task is fenced."""

from __future__ import annotations

import collections
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from mqbroker.client import Admin, Consumer, Message, Producer
from mqbroker.errors import BrokerError
from mqbroker_spark.transactional import transactional_id_for, write_transaction
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.spark_support import produce, spark_broker  # noqa: F401 (fixtures)

RECORDS = 6_000
RECORDS_PER_TRIGGER = 2_000
DRIVER_RUN_S = 300


def _read_committed(bootstrap: str, topic: str, expected: int, timeout_s: float) -> list[Message]:
    """Everything committed in ``topic``: waits for ``expected`` records, then a little longer for extras."""
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    with Consumer(bootstrap, topics=[topic], auto_offset_reset="earliest", isolation_level="read_committed") as consumer:
        while len(messages) < expected and time.monotonic() < deadline:
            messages += consumer.poll(timeout=0.5)
        messages += consumer.poll(timeout=1.0)  # duplicates would show up here
    return messages


def _log_end(bootstrap: str, topic: str) -> int:
    """Offsets used in ``topic`` (records, aborted ones and markers included); 0 before it exists."""
    try:
        with Admin(bootstrap) as admin:
            return sum(admin.list_offset(topic, partition, -1) for partition in range(admin.describe_topics([topic])[topic]))
    except BrokerError:
        return 0


def _start_driver(bootstrap: str, checkpoint: pathlib.Path, log: pathlib.Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.integration.spark_sink_driver_child", bootstrap, "txn-spark-in",
               "txn-spark-out", str(checkpoint), str(RECORDS_PER_TRIGGER)]
    with log.open("ab") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True)


def _batch_ids(checkpoint: pathlib.Path, log_name: str) -> set[int]:
    directory = checkpoint / log_name
    return {int(entry.name) for entry in directory.iterdir() if entry.name.isdigit()} if directory.exists() else set()


def test_a_driver_killed_mid_stream_and_restarted_writes_each_row_once_for_read_committed(
    spark_broker: BrokerProcess, tmp_path: pathlib.Path
) -> None:
    bootstrap = spark_broker.bootstrap
    values = [b"%06d" % index + b"t" * 94 for index in range(RECORDS)]
    produce(bootstrap, "txn-spark-in", values, partitions=2)
    with Admin(bootstrap) as admin:
        admin.create_topics(["txn-spark-out"], partitions=3)
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "driver.log"

    driver = _start_driver(bootstrap, checkpoint, log)
    deadline = time.monotonic() + DRIVER_RUN_S
    while _log_end(bootstrap, "txn-spark-out") == 0:  # kill at the first micro-batch's first transaction
        assert driver.poll() is None, f"the driver ended before it was killed:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"no output within {DRIVER_RUN_S}s:\n{log.read_text()[-3000:]}"
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver: the Python process, its JVM and the Python workers
    driver.wait()
    written_at_kill = _log_end(bootstrap, "txn-spark-out")
    planned, committed = _batch_ids(checkpoint, "offsets"), _batch_ids(checkpoint, "commits")
    assert written_at_kill < RECORDS, "the driver was killed after it had written everything"
    assert planned and max(planned) > max(committed, default=-1), (planned, committed)  # a batch was in flight

    restarted = _start_driver(bootstrap, checkpoint, log)
    assert restarted.wait(DRIVER_RUN_S) == 0, log.read_text()[-3000:]

    messages = _read_committed(bootstrap, "txn-spark-out", RECORDS, timeout_s=60)
    counts = collections.Counter(message.value for message in messages)
    duplicated = [value[:6] for value, count in counts.items() if count > 1]
    assert not duplicated and set(counts) == set(values), (
        f"{len(messages)} records for {RECORDS} rows; duplicated: {duplicated[:5]}; "
        f"missing: {[value[:6] for value in set(values) - set(counts)][:5]}"
    )


def test_a_replayed_batch_that_was_committed_is_not_written_again(spark_broker: BrokerProcess) -> None:
    bootstrap = spark_broker.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topics(["txn-replay"], partitions=2)
    rows = {("txn-replay", 0): [(b"k", b"a", ())], ("txn-replay", 1): [(None, b"b", (("h", b"1"),))]}
    for attempt in range(2):  # the first run, then Spark's replay of the same batch id
        assert write_transaction(bootstrap, "query-r", 3, 7, rows, 10_000) == 2
    assert write_transaction(bootstrap, "query-r", 3, 8, {("txn-replay", 0): [(b"k", b"c", ())]}, 10_000) == 1
    values = sorted(message.value for message in _read_committed(bootstrap, "txn-replay", 3, timeout_s=20))
    assert values == [b"a", b"b", b"c"]


def test_an_older_attempt_of_a_task_is_fenced_and_its_open_transaction_never_read(spark_broker: BrokerProcess) -> None:
    bootstrap = spark_broker.bootstrap
    with Admin(bootstrap) as admin:
        admin.create_topics(["txn-zombie"], partitions=1)
    zombie = Producer(bootstrap, transactional_id=transactional_id_for("query-z", 0), acks="all")
    zombie.init_transactions()
    zombie.begin_transaction()
    zombie.send("txn-zombie", value=b"zombie", partition=0)
    zombie.flush()  # in the log, in an open transaction
    assert write_transaction(bootstrap, "query-z", 0, 0, {("txn-zombie", 0): [(None, b"retry", ())]}, 10_000) == 1
    with pytest.raises(BrokerError):
        zombie.commit_transaction()
    zombie.close()
    assert [message.value for message in _read_committed(bootstrap, "txn-zombie", 1, timeout_s=20)] == [b"retry"]
