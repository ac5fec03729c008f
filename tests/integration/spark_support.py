"""Fixtures for the Spark tests: one local SparkSession per test run (local[2,3]: tasks may retry) and a broker."""

from __future__ import annotations

import os
import pathlib
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

import mqbroker_spark
from mqbroker.client import Admin, Consumer, Message, Producer
from tests.integration.mqtt_support import MqttBroker


#: Spark's own Kafka source and sink (installed by tests/kafka_reference/kafka_reference.sh install); the
#: connector's own copies of Spark, Scala and compression libraries are left to the PySpark installation.
_SPARK_KAFKA_LIB = pathlib.Path(__file__).resolve().parents[1] / "kafka_reference" / "spark" / "lib"
_SPARK_KAFKA_JARS = ("spark-sql-kafka-0-10", "spark-token-provider-kafka-0-10", "kafka-clients", "commons-pool2")


def spark_kafka_connector_jars() -> list[pathlib.Path]:
    """The jars of ``format("kafka")``, for ``spark.jars``."""
    return sorted(jar for jar in _SPARK_KAFKA_LIB.glob("*.jar") if jar.name.startswith(_SPARK_KAFKA_JARS))


def local_spark_session() -> SparkSession:
    """The shared session: fast settings from docs/spark.md; workers run this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2,3]")
        .appName("mqbroker-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.jars", ",".join(str(jar) for jar in spark_kafka_connector_jars()))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    mqbroker_spark.register(spark)
    return spark


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    """The session every Spark test shares (getOrCreate: importing this fixture twice still makes one)."""
    return local_spark_session()


@pytest.fixture(scope="module")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MqttBroker]:
    """One broker for a module's Spark tests (each test uses its own topics)."""
    process = MqttBroker(data_dir=tmp_path_factory.mktemp("spark-broker") / "data")
    process.start()
    yield process
    process.kill()


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int | None = None, keyed: bool = True) -> None:
    """Write ``values`` (keyed by their index modulo 7) to ``topic``, creating it with ``partitions``."""
    if partitions is not None:
        with Admin(bootstrap) as admin:
            admin.create_topics([topic], partitions=partitions)
    with Producer(bootstrap, acks="all", linger_ms=1) as producer:
        for index, value in enumerate(values):
            producer.send(topic, value=value, key=b"k%d" % (index % 7) if keyed else None, headers=[("n", b"%d" % index)])
        producer.flush()


def consume_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 20.0) -> list[Message]:
    """Everything in ``topic``: waits for ``expected`` records, then a little longer for extras."""
    messages: list[Message] = []
    with Consumer(bootstrap, topics=[topic], auto_offset_reset="earliest") as consumer:
        for _ in range(int(timeout_s / 0.5)):
            messages += consumer.poll(timeout=0.5)
            if len(messages) >= expected:
                break
        messages += consumer.poll(timeout=0.5)  # duplicates would show up here
    return messages


def checkpoint(tmp_path: pathlib.Path, name: str) -> str:
    """A checkpoint directory path for a query."""
    return str(tmp_path / "checkpoints" / name)
