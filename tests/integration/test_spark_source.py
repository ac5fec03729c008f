"""The mqbroker source in real PySpark (local mode) against a real broker."""

from __future__ import annotations

import json
import pathlib

from pyspark.sql import SparkSession

from mqbroker.client import Admin, Producer
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.spark_support import checkpoint, produce, spark, spark_broker  # noqa: F401 (fixtures)


def _read(spark: SparkSession, broker: BrokerProcess, topic: str, **options: str) -> list:
    reader = spark.read.format("mqbroker").option("bootstrap", broker.bootstrap).option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().collect()


def test_batch_read_returns_exactly_the_records_of_the_topic(spark: SparkSession, spark_broker: BrokerProcess) -> None:
    values = [b"value-%04d" % index for index in range(600)]
    produce(spark_broker.bootstrap, "known", values, partitions=3)
    produce(spark_broker.bootstrap, "other", [b"not this"], partitions=1)
    rows = _read(spark, spark_broker, "known", includeHeaders="true", maxRecordsPerPartition="150")
    assert sorted(row.value for row in rows) == values
    assert {row.topic for row in rows} == {"known"} and {row.partition for row in rows} == {0, 1, 2}
    for partition in range(3):
        offsets = sorted(row.offset for row in rows if row.partition == partition)
        assert offsets == list(range(len(offsets)))
    by_value = {row.value: row for row in rows}
    assert by_value[b"value-0008"].key == b"k1" and [tuple(h) for h in by_value[b"value-0008"].headers] == [("n", b"8")]
    assert all(row.timestampType == 0 and row.timestamp is not None for row in rows)


def test_batch_read_between_json_offsets(spark: SparkSession, spark_broker: BrokerProcess) -> None:
    produce(spark_broker.bootstrap, "ranged", [b"%d" % index for index in range(50)], partitions=1)
    rows = _read(spark, spark_broker, "ranged", startingOffsets='{"ranged": {"0": 10}}', endingOffsets='{"ranged": {"0": 20}}')
    assert sorted(row.offset for row in rows) == list(range(10, 20))
    assert "headers" not in rows[0].asDict()


def _stream_to_files(spark: SparkSession, broker: BrokerProcess, topic: str, output: pathlib.Path, checkpoint_dir: str, **options: str):
    reader = spark.readStream.format("mqbroker").option("bootstrap", broker.bootstrap).option("subscribePattern", topic + "-.*")
    reader = reader.option("startingOffsets", "earliest")
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .selectExpr("topic", "partition", "offset", "value")
        .writeStream.format("json")
        .option("path", str(output))
        .option("checkpointLocation", checkpoint_dir)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive and query.exception() is None
    return query


def test_available_now_reads_everything_and_a_restart_reads_only_new_records_of_old_and_new_partitions(
    spark: SparkSession, spark_broker: BrokerProcess, tmp_path: pathlib.Path
) -> None:
    produce(spark_broker.bootstrap, "stream-a", [b"first-%d" % index for index in range(300)], partitions=2)
    output, checkpoint_dir = tmp_path / "out", checkpoint(tmp_path, "stream")
    query = _stream_to_files(spark, spark_broker, "stream", output, checkpoint_dir, maxOffsetsPerTrigger="100")
    batches = [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]]
    assert sum(batches) == 300 and max(batches) <= 100
    with Admin(spark_broker.bootstrap) as admin:
        admin.create_partitions("stream-a", 3)
    produce(spark_broker.bootstrap, "stream-a", [b"second-%d" % index for index in range(200)])
    produce(spark_broker.bootstrap, "stream-b", [b"new-topic-%d" % index for index in range(20)], partitions=1)
    _stream_to_files(spark, spark_broker, "stream", output, checkpoint_dir)
    rows = spark.read.json(str(output)).collect()
    values = sorted(row.value for row in rows)  # binary columns come back base64 in JSON
    assert len(values) == len(set(values)) == 520
    assert {(row.topic, row.partition) for row in rows} == {("stream-a", 0), ("stream-a", 1), ("stream-a", 2), ("stream-b", 0)}
    last = json.loads((pathlib.Path(checkpoint_dir) / "offsets" / max(
        (path.name for path in (pathlib.Path(checkpoint_dir) / "offsets").iterdir() if path.name.isdigit()), key=int
    )).read_text().splitlines()[-1])
    assert sum(sum(partitions.values()) for partitions in last.values()) == 520


def test_read_committed_by_default_leaves_out_aborted_and_open_transactions(spark: SparkSession,
                                                                            spark_broker: BrokerProcess) -> None:
    with Admin(spark_broker.bootstrap) as admin:
        admin.create_topics(["txn-read"], partitions=2)
    with Producer(spark_broker.bootstrap, transactional_id="spark-source-writer", linger_ms=0) as producer:
        producer.init_transactions()
        with producer.transaction():
            for index in range(10):
                producer.send("txn-read", value=b"committed-%d" % index, partition=index % 2)
        producer.begin_transaction()
        for index in range(10):
            producer.send("txn-read", value=b"aborted-%d" % index, partition=index % 2)
        producer.flush()
        producer.abort_transaction()
        with producer.transaction():
            for index in range(4):
                producer.send("txn-read", value=b"later-%d" % index, partition=index % 2)
        producer.begin_transaction()  # open while Spark reads: the batch ends at the last stable offset
        for index in range(4):
            producer.send("txn-read", value=b"open-%d" % index, partition=index % 2)
        producer.flush()
        committed = sorted(row.value for row in _read(spark, spark_broker, "txn-read"))
        assert committed == sorted([b"committed-%d" % index for index in range(10)] + [b"later-%d" % i for i in range(4)])
        everything = _read(spark, spark_broker, "txn-read", isolationLevel="read_uncommitted")
        assert len(everything) == 28 and {row.value[:4] for row in everything} == {b"comm", b"abor", b"late", b"open"}
        producer.abort_transaction()
