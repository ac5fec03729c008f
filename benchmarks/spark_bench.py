"""Spark over mqbroker: records/s through the source alone and source -> identity -> sink, and alert delay.

Starts its own broker (free ports) and a local[2] SparkSession. 100-byte values. The alert
delay is measured over real MQTT: from a paho device publishing an out-of-band reading on
``devices/bench/telemetry`` (QoS 1) to a paho subscriber of ``devices/+/alerts`` receiving its
alert, with the IoT job's 1-second trigger. Rates count records the topic really holds: the input is
filled with acknowledged sends (a failed one fails the run), and the sink's output is counted in
the broker afterwards (both runs, warm-up included).

    python benchmarks/spark_bench.py [--records 400000] [--alerts 20]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import queue
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import paho.mqtt.client as mqtt  # noqa: E402
from paho.mqtt.enums import CallbackAPIVersion  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

import mqbroker_spark  # noqa: E402
from mqbroker.cli.bench import produce_acknowledged  # noqa: E402
from mqbroker.client import Admin, Producer  # noqa: E402
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


#: How long an alert may take before it counts as lost.
ALERT_WAIT_S = 30


def fill(bootstrap: str, topic: str, records: int) -> None:
    """``records`` 100-byte values over two partitions."""
    with Admin(bootstrap) as admin:
        admin.create_topics([topic], partitions=2)
    with Producer(bootstrap, acks=1, linger_ms=20) as producer:
        for partition in range(2):
            filled = produce_acknowledged(producer, topic, b"v" * 100, records // 2 + partition * (records % 2),
                                          partition=partition)
            assert not filled.failed, f"{filled.failed} sends filling {topic} failed: {filled.first_error}"


def stored(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` (every partition, below the high watermark)."""
    with Admin(bootstrap) as admin:
        partitions = admin.describe_topics([topic])[topic]
        return sum(admin.list_offset(topic, p, -1) - admin.list_offset(topic, p, -2) for p in range(partitions))


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
    """Seconds from a paho publish of an out-of-band reading to its alert at a paho subscriber, ``count`` times."""
    settings = iot_aggregates.PipelineSettings(bootstrap=broker.bootstrap, checkpoint_dir=str(directory), trigger="1 second")
    alerts: queue.Queue[tuple[float, bytes]] = queue.Queue()
    subscriber = mqtt_client(broker, "bench-subscriber")
    subscriber.on_message = lambda client, userdata, message: alerts.put((time.perf_counter(), message.payload))
    subscriber.subscribe("devices/+/alerts", qos=1)
    device = mqtt_client(broker, "bench")
    queries = iot_aggregates.start(spark, settings)
    delays = []
    try:
        time.sleep(8)  # the first micro-batches (JVM warm-up) are not what a running job sees
        for number in range(count):
            payload = json.dumps({"ts": time.time_ns() // 1_000_000, "temperature": 99.0 + number})
            sent = time.perf_counter()
            device.publish("devices/bench/telemetry", payload, qos=1)
            while True:
                try:
                    received, body = alerts.get(timeout=max(0.0, sent + ALERT_WAIT_S - time.perf_counter()))
                except queue.Empty:
                    delays.append(math.inf)  # lost: a failure, not a missing sample
                    break
                if json.loads(body)["value"] == 99.0 + number:
                    delays.append(received - sent)
                    break
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - sent)) + 0.37)  # land at varying trigger phases
    finally:
        for client in (device, subscriber):
            client.disconnect()
            client.loop_stop()
        for query in queries:
            query.stop()
    return delays


def mqtt_client(broker: BrokerProcess, client_id: str) -> mqtt.Client:
    """A connected paho MQTT 5 client with its network loop running."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
    client.connect("127.0.0.1", broker.ports["mqtt"])
    client.loop_start()
    return client


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
            written = stored(broker.bootstrap, "bench-out")
            assert written == 2 * arguments.records, f"the sink stored {written} of {2 * arguments.records} records"
            delays = alert_delays(spark, broker, directory / "checkpoints", arguments.alerts)
            delivered = sum(1 for delay in delays if math.isfinite(delay))
            print(f"alert delay, paho -> paho (1 s trigger) p50 {statistics.median(delays):.2f} s, max {max(delays):.2f} s "
                  f"over {len(delays)} alerts, {delivered} delivered within {ALERT_WAIT_S} s (inf: one was lost)")
        finally:
            broker.kill()


if __name__ == "__main__":
    main()
