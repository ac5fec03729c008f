"""Spark over mqbroker: records/s through the source alone and source -> identity -> sink, and alert delay.

Starts its own broker (free ports) and a local[2] SparkSession. 100-byte values. The alert
delay is measured from the moment a telemetry record is stored in ``mqtt.messages`` (what an
MQTT publish becomes) to the alert record appearing there (what an MQTT subscriber is sent),
with the IoT job's 1-second trigger.

    python benchmarks/spark_bench.py [--records 400000] [--alerts 20]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from pyspark.sql import SparkSession  # noqa: E402

import mqbroker_spark  # noqa: E402
from mqbroker.client.blocking import Admin, Consumer, Producer  # noqa: E402
from mqbroker_spark.jobs import iot_aggregates  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402


def session() -> SparkSession:
    """local[2] with the fast settings."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g")
        .config("spark.ui.showConsoleProgress", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    mqbroker_spark.register(spark)
    return spark


def fill(bootstrap: str, topic: str, records: int) -> None:
    """``records`` 100-byte values over two partitions."""
    with Admin(bootstrap) as admin:
        admin.create_topics([topic], partitions=2)
    value = b"v" * 100
    with Producer(bootstrap, acks=1, linger_ms=20) as producer:
        for index in range(records):
            producer.send(topic, value=value, partition=index % 2)
        producer.flush()


def timed(label: str, records: int, action) -> float:
    """Run ``action`` twice (the first warms the workers) and report the second run's rate."""
    action()
    started = time.perf_counter()
    action()
    elapsed = time.perf_counter() - started
    rate = records / elapsed
    print(f"{label:<32} {records:>9,} records in {elapsed:6.2f} s = {rate:>10,.0f} records/s", flush=True)
    return rate


def alert_delays(spark: SparkSession, broker: BrokerProcess, directory: pathlib.Path, count: int) -> list[float]:
    """Seconds from storing an out-of-band reading to its alert record, ``count`` times, one per second."""
    settings = iot_aggregates.PipelineSettings(bootstrap=broker.bootstrap, checkpoint_dir=str(directory), trigger="1 second")
    with Admin(broker.bootstrap) as admin:
        partitions = admin.describe_topics([iot_aggregates.MQTT_LOG_TOPIC])[iot_aggregates.MQTT_LOG_TOPIC]
    queries = iot_aggregates.start(spark, settings)
    consumer = Consumer(broker.bootstrap, auto_offset_reset="latest")
    consumer.assign([(iot_aggregates.MQTT_LOG_TOPIC, partition) for partition in range(partitions)])
    delays = []
    try:
        with Producer(broker.bootstrap, acks="all", linger_ms=0) as producer:
            time.sleep(8)  # the first micro-batches (JVM warm-up) are not what a running job sees
            for number in range(count):
                sent = time.perf_counter()
                payload = json.dumps({"ts": time.time_ns() // 1_000_000, "temperature": 99.0 + number}).encode()
                producer.send(iot_aggregates.MQTT_LOG_TOPIC, value=payload, key=b"devices/bench/telemetry").result(10)
                while True:
                    found = [m for m in consumer.poll(0.05) if m.key == b"devices/bench/alerts" and b'"value":%d.0' % (99 + number) in (m.value or b"")]
                    if found:
                        delays.append(time.perf_counter() - sent)
                        break
                    assert time.perf_counter() - sent < 30, "no alert within 30 s"
                time.sleep(max(0.0, 1.0 - (time.perf_counter() - sent)) + 0.37)  # land at varying trigger phases
    finally:
        consumer.close()
        for query in queries:
            query.stop()
    return delays


def main() -> None:
    """Run the three measurements and print a summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--alerts", type=int, default=20)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as temporary:
        directory = pathlib.Path(temporary)
        broker = BrokerProcess(data_dir=directory / "data")
        broker.start()
        try:
            fill(broker.bootstrap, "bench-in", arguments.records)
            spark = session()
            source = spark.read.format("mqbroker").option("bootstrap", broker.bootstrap).option("subscribe", "bench-in").load()
            timed("source -> noop", arguments.records, lambda: source.write.format("noop").mode("overwrite").save())
            sink = source.selectExpr("key", "value").write.format("mqbroker").option("bootstrap", broker.bootstrap)
            timed("source -> identity -> sink", arguments.records, lambda: sink.option("topic", "bench-out").mode("append").save())
            with Producer(broker.bootstrap) as producer:  # the topic the MQTT front end would have created
                producer.send(iot_aggregates.MQTT_LOG_TOPIC, value=b"{}", key=b"bench/start").result(10)
            delays = alert_delays(spark, broker, directory / "checkpoints", arguments.alerts)
            print(f"alert delay (1 s trigger)        p50 {statistics.median(delays):.2f} s, max {max(delays):.2f} s over {len(delays)} alerts")
        finally:
            broker.kill()


if __name__ == "__main__":
    main()
