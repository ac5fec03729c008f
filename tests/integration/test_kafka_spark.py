"""Spark's built-in Kafka source and sink (``format("kafka")``, spark-sql-kafka-0-10) against mqbroker's
Kafka listener: batch reads, batch writes and a streaming copy from topic to topic."""

from __future__ import annotations

import pathlib

from pyspark.sql import SparkSession

from tests.integration.kafka_support import consume_with_confluent, kafka_bootstrap, unique
from tests.integration.mqtt_support import MqttBroker
from tests.integration.spark_support import checkpoint, spark, spark_broker  # noqa: F401 (fixtures)


def _produce(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd"})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)])
    assert producer.flush(20) == 0


def test_spark_reads_a_topic_through_its_kafka_source(spark: SparkSession, spark_broker: MqttBroker) -> None:
    bootstrap, topic = kafka_bootstrap(spark_broker), unique("spark-in")
    _produce(bootstrap, topic, 300)
    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("includeHeaders", "true").load())
    rows = frame.selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v", "partition", "offset").collect()
    assert sorted((row.k, row.v) for row in rows) == sorted((f"k{i}", f"v{i}") for i in range(300))
    assert {row.partition for row in rows} == {0, 1, 2}


def test_spark_writes_a_topic_through_its_kafka_sink(spark: SparkSession, spark_broker: MqttBroker) -> None:
    bootstrap, topic = kafka_bootstrap(spark_broker), unique("spark-out")
    frame = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(200)], "key string, value string")
    frame.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()
    read = consume_with_confluent(bootstrap, topic, 200)
    assert sorted((m.key(), m.value()) for m in read) == sorted((b"k%d" % i, b"v%d" % i) for i in range(200))


def test_a_streaming_query_copies_one_topic_into_another(spark: SparkSession, spark_broker: MqttBroker,
                                                         tmp_path: pathlib.Path) -> None:
    bootstrap, source, target = kafka_bootstrap(spark_broker), unique("spark-src"), unique("spark-dst")
    _produce(bootstrap, source, 150)
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
             .option("startingOffsets", "earliest").load()
             .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
             .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", target)
             .option("checkpointLocation", checkpoint(tmp_path, "copy")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    read = consume_with_confluent(bootstrap, target, 150)
    assert sorted(m.value() for m in read) == sorted(b"V%d" % i for i in range(150))
