"""The mqbroker sink in real PySpark: round trips, and exactly once across a killed task and a stopped query."""

from __future__ import annotations

import collections
import os
import pathlib
import signal
import threading
import time
from collections.abc import Callable

from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming import StreamingQuery

from mqbroker.client import Admin
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.spark_support import checkpoint, consume_all, produce, spark, spark_broker  # noqa: F401 (fixtures)

RECORDS = 20_000


def test_batch_write_delivers_each_row_once_with_key_headers_and_partition(spark: SparkSession, spark_broker: BrokerProcess) -> None:
    with Admin(spark_broker.bootstrap) as admin:
        admin.create_topics(["sink-a", "sink-b"], partitions=3)
    rows = [
        Row(key=b"k%d" % (index % 5), value=b"v%d" % index, topic="sink-a" if index % 2 else "sink-b",
            partition=2 if index % 10 == 0 else None, headers=[Row(key="n", value=b"%d" % index)])
        for index in range(400)
    ]
    schema = "key binary, value binary, topic string, partition int, headers array<struct<key: string, value: binary>>"
    spark.createDataFrame(rows, schema).repartition(3).write.format("mqbroker").option("bootstrap", spark_broker.bootstrap).mode("append").save()
    written = consume_all(spark_broker.bootstrap, "sink-a", 200) + consume_all(spark_broker.bootstrap, "sink-b", 200)
    assert sorted(message.value for message in written) == sorted(row.value for row in rows)
    for message in written:
        index = int(message.value[1:])
        assert message.headers == (("n", b"%d" % index),) and message.key == b"k%d" % (index % 5)
        if index % 10 == 0:
            assert message.partition == 2
    by_key = collections.defaultdict(set)
    for message in written:
        by_key[message.topic, message.key].add(message.partition)
    assert all(len(partitions) == 1 for (_, key), partitions in by_key.items() if key != b"k0")


def test_string_values_and_the_topic_option(spark: SparkSession, spark_broker: BrokerProcess) -> None:
    frame = spark.createDataFrame([("a",), ("b",)], "value string")
    frame.write.format("mqbroker").option("bootstrap", spark_broker.bootstrap).option("topic", "strings").mode("append").save()
    assert sorted(message.value for message in consume_all(spark_broker.bootstrap, "strings", 2)) == [b"a", b"b"]


def _copy_query(spark: SparkSession, broker: BrokerProcess, source: str, target: str, checkpoint_dir: str) -> StreamingQuery:
    return (
        spark.readStream.format("mqbroker").option("bootstrap", broker.bootstrap).option("subscribe", source)
        .option("startingOffsets", "earliest").load()
        .selectExpr("key", "value")
        .writeStream.format("mqbroker").option("bootstrap", broker.bootstrap).option("topic", target)
        .option("batchBytesMax", "2048")  # many small batches: the write takes long enough to interrupt
        .option("checkpointLocation", checkpoint_dir)
        .trigger(availableNow=True)
        .start()
    )


def _written(broker: BrokerProcess, topic: str) -> int:
    try:
        with Admin(broker.bootstrap) as admin:
            return sum(admin.list_offset(topic, partition, -1) for partition in range(admin.describe_topics([topic])[topic]))
    except Exception:  # the topic does not exist yet
        return 0


def _when_partly_written(broker: BrokerProcess, topic: str, action: Callable[[], None]) -> list[int]:
    """Run ``action`` once between 10% and 90% of the records are in ``topic``; return the counts seen then."""
    seen: list[int] = []

    def watch() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            count = _written(broker, topic)
            if count >= RECORDS // 10:
                seen.append(count)
                action()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return seen


def _task_workers() -> list[int]:
    """Python workers forked by this test's Spark for tasks (children of the ``pyspark.worker`` daemon)."""
    processes = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
                command = pathlib.Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            processes[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), command)

    def mine(pid: int) -> bool:
        while pid in processes and pid > 1:
            if pid == os.getpid():
                return True
            pid = processes[pid][0]
        return False

    daemons = {pid for pid, (_, command) in processes.items() if command.endswith(b"pyspark.daemon\0pyspark.worker\0") and mine(pid)}
    return [pid for pid, (parent, _) in processes.items() if parent in daemons]


def _assert_exactly_once(broker: BrokerProcess, topic: str) -> None:
    messages = consume_all(broker.bootstrap, topic, RECORDS, timeout_s=60)
    values = collections.Counter(message.value for message in messages)
    assert len(messages) == RECORDS, f"{len(messages) - RECORDS:+d} records; duplicated: {[v for v, n in values.items() if n > 1][:3]}"
    assert len(values) == RECORDS


def test_a_task_killed_mid_write_is_retried_without_duplicates_or_losses(
    spark: SparkSession, spark_broker: BrokerProcess, tmp_path: pathlib.Path
) -> None:
    produce(spark_broker.bootstrap, "eo-task-in", [b"%06d" % index + b"x" * 94 for index in range(RECORDS)], partitions=2)
    killed: list[int] = []

    def kill_workers() -> None:
        for pid in _task_workers():
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    seen = _when_partly_written(spark_broker, "eo-task-out", kill_workers)
    query = _copy_query(spark, spark_broker, "eo-task-in", "eo-task-out", checkpoint(tmp_path, "task"))
    query.awaitTermination(180)
    assert query.exception() is None
    assert killed and seen and seen[0] < RECORDS * 9 // 10, (killed, seen)
    _assert_exactly_once(spark_broker, "eo-task-out")


def test_a_query_stopped_mid_batch_and_restarted_writes_no_duplicate_and_loses_nothing(
    spark: SparkSession, spark_broker: BrokerProcess, tmp_path: pathlib.Path
) -> None:
    produce(spark_broker.bootstrap, "eo-restart-in", [b"%06d" % index + b"y" * 94 for index in range(RECORDS)], partitions=2)
    checkpoint_dir = checkpoint(tmp_path, "restart")
    queries: list[StreamingQuery] = []
    seen = _when_partly_written(spark_broker, "eo-restart-out", lambda: queries[0].stop())
    queries.append(_copy_query(spark, spark_broker, "eo-restart-in", "eo-restart-out", checkpoint_dir))
    queries[0].awaitTermination(180)
    assert seen and seen[0] < RECORDS * 9 // 10, seen
    assert not (pathlib.Path(checkpoint_dir) / "commits" / "0").exists(), "the stop came after the batch committed"
    assert _written(spark_broker, "eo-restart-out") < RECORDS
    restarted = _copy_query(spark, spark_broker, "eo-restart-in", "eo-restart-out", checkpoint_dir)
    restarted.awaitTermination(180)
    assert restarted.exception() is None
    assert (pathlib.Path(checkpoint_dir) / "commits" / "0").exists()
    _assert_exactly_once(spark_broker, "eo-restart-out")
