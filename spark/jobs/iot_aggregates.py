"""The IoT pipeline: MQTT telemetry in, per-device window aggregates and band alerts out to MQTT.

Devices publish JSON such as ``{"ts": 1718000000000, "temperature": 21.5}`` on
``devices/{id}/telemetry``. The MQTT front end stores each message in the log topic
``mqtt.messages`` keyed by its MQTT topic, which this job reads. It writes back into the same
log topic with the MQTT topic as the record key, so MQTT subscribers receive:

* ``devices/{id}/alerts``: every reading outside ``[low, high]``, as soon as its micro-batch runs;
* ``aggregates/{id}``: count, mean, min and max per device and event-time window, once the
  watermark passes the window's end.

Run ``python -m mqbroker_spark.jobs.iot_aggregates --bootstrap HOST:PORT`` (``--master
spark://HOST:7077`` for a cluster; the default is ``local[*]``).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

import mqbroker_spark

#: The log topic the default MQTT mapping stores every message in and delivers from.
MQTT_LOG_TOPIC = "mqtt.messages"
TELEMETRY_TOPIC_PATTERN = r"^devices/([^/]+)/telemetry$"


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineSettings:
    """Where to read and write, the alert band and the windowing."""

    bootstrap: str
    checkpoint_dir: str
    metric: str = "temperature"
    low: float = 0.0
    high: float = 40.0
    window: str = "10 seconds"
    watermark: str = "5 seconds"
    trigger: str = "1 second"
    starting_offsets: str = "latest"


def telemetry(spark: SparkSession, settings: PipelineSettings) -> DataFrame:
    """Readings as ``device, event_time, value`` from the MQTT log topic (other MQTT traffic dropped)."""
    topic = F.col("key").cast("string")
    reading = F.from_json(F.col("value").cast("string"), f"ts long, `{settings.metric}` double")
    return (
        spark.readStream.format("mqbroker")
        .option("bootstrap", settings.bootstrap)
        .option("subscribe", MQTT_LOG_TOPIC)
        .option("startingOffsets", settings.starting_offsets)
        .load()
        .where(topic.rlike(TELEMETRY_TOPIC_PATTERN))
        .select(F.regexp_extract(topic, TELEMETRY_TOPIC_PATTERN, 1).alias("device"), reading.alias("reading"))
        .select("device", F.timestamp_millis("reading.ts").alias("event_time"), F.col(f"reading.`{settings.metric}`").alias("value"))
        .where(F.col("event_time").isNotNull() & F.col("value").isNotNull())
    )


def alerts(readings: DataFrame, settings: PipelineSettings) -> DataFrame:
    """Readings outside the band, keyed ``devices/{id}/alerts``."""
    low, high = F.lit(settings.low), F.lit(settings.high)
    outside = (F.col("value") < low) | (F.col("value") > high)
    payload = F.struct(
        F.col("device"),
        F.unix_millis(F.col("event_time")).alias("ts"),
        F.col("value"),
        F.when(F.col("value") < low, F.lit("low")).otherwise(F.lit("high")).alias("kind"),
        low.alias("low"),
        high.alias("high"),
    )
    return readings.where(outside).select(
        F.concat(F.lit("devices/"), F.col("device"), F.lit("/alerts")).alias("key"), F.to_json(payload).alias("value")
    )


def aggregates(readings: DataFrame, settings: PipelineSettings) -> DataFrame:
    """Count, mean, min and max per device and event-time window, keyed ``aggregates/{id}``."""
    windowed = (
        readings.withWatermark("event_time", settings.watermark)
        .groupBy(F.window("event_time", settings.window), F.col("device"))
        .agg(
            F.count("value").alias("count"),
            F.avg("value").alias("mean"),
            F.min("value").alias("min"),
            F.max("value").alias("max"),
        )
    )
    payload = F.struct(
        F.col("device"),
        F.unix_millis(F.col("window.start")).alias("window_start"),
        F.unix_millis(F.col("window.end")).alias("window_end"),
        F.col("count"),
        F.col("mean"),
        F.col("min"),
        F.col("max"),
    )
    return windowed.select(F.concat(F.lit("aggregates/"), F.col("device")).alias("key"), F.to_json(payload).alias("value"))


def start(spark: SparkSession, settings: PipelineSettings) -> list[StreamingQuery]:
    """Start the alert and aggregate queries (each with its own checkpoint); return them."""
    readings = telemetry(spark, settings)
    queries = []
    for name, frame in (("alerts", alerts(readings, settings)), ("aggregates", aggregates(readings, settings))):
        queries.append(
            frame.writeStream.format("mqbroker")
            .queryName(f"iot-{name}")
            .option("bootstrap", settings.bootstrap)
            .option("topic", MQTT_LOG_TOPIC)
            .option("checkpointLocation", os.path.join(settings.checkpoint_dir, name))
            .outputMode("append")
            .trigger(processingTime=settings.trigger)
            .start()
        )
    return queries


def _arguments(argv: list[str] | None) -> tuple[argparse.Namespace, PipelineSettings]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9393", help="native listener HOST:PORT")
    parser.add_argument("--master", default="local[*]", help="local[*] or spark://HOST:PORT")
    parser.add_argument("--checkpoint-dir", default="/tmp/mqbroker-iot-checkpoints")
    parser.add_argument("--metric", default="temperature", help="the JSON field to aggregate")
    parser.add_argument("--low", type=float, default=0.0, help="alert below this value")
    parser.add_argument("--high", type=float, default=40.0, help="alert above this value")
    parser.add_argument("--window", default="10 seconds")
    parser.add_argument("--watermark", default="5 seconds")
    parser.add_argument("--trigger", default="1 second")
    parser.add_argument("--starting-offsets", default="latest", choices=("earliest", "latest"))
    arguments = parser.parse_args(argv)
    settings = PipelineSettings(
        bootstrap=arguments.bootstrap,
        checkpoint_dir=arguments.checkpoint_dir,
        metric=arguments.metric,
        low=arguments.low,
        high=arguments.high,
        window=arguments.window,
        watermark=arguments.watermark,
        trigger=arguments.trigger,
        starting_offsets=arguments.starting_offsets,
    )
    return arguments, settings


def main(argv: list[str] | None = None) -> None:
    """Run the pipeline until interrupted."""
    arguments, settings = _arguments(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers must import mqbroker_spark
    spark = (
        SparkSession.builder.master(arguments.master)
        .appName("mqbroker-iot-aggregates")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    mqbroker_spark.register(spark)
    start(spark, settings)
    print(f"iot pipeline running on {arguments.master}: reading {MQTT_LOG_TOPIC} at {settings.bootstrap}", flush=True)
    try:
        spark.streams.awaitAnyTermination()
    except KeyboardInterrupt:
        for query in spark.streams.active:
            query.stop()


if __name__ == "__main__":
    main()
