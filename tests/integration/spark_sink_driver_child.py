"""A Spark driver in its own process (the test SIGKILLs its process group): copies a topic with the transactional sink.

Usage: python -m tests.integration.spark_sink_driver_child BOOTSTRAP INPUT OUTPUT CHECKPOINT RECORDS_PER_TRIGGER
Runs one streaming query on local[2] from INPUT to OUTPUT (``transactional=true``), trigger AvailableNow with at
most RECORDS_PER_TRIGGER records per micro-batch, and exits once it has read everything there was at its start.
A restart with the same CHECKPOINT resumes from the checkpoint's last batch.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import mqbroker_spark

#: The transaction timeout of the sink's tasks: a transaction the killed driver left open under a task id the
#: restarted query does not use again is aborted by the coordinator after this long.
TRANSACTION_TIMEOUT_MS = 10_000


def main(bootstrap: str, input_topic: str, output_topic: str, checkpoint: str, records_per_trigger: str) -> None:
    """Run the query to its end."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    spark = (
        SparkSession.builder.master("local[2]").appName("mqbroker-spark-sink-driver")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g").getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    mqbroker_spark.register(spark)
    query = (
        spark.readStream.format("mqbroker").option("bootstrap", bootstrap).option("subscribe", input_topic)
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", records_per_trigger).load()
        .selectExpr("key", "value")
        .writeStream.format("mqbroker").option("bootstrap", bootstrap).option("topic", output_topic)
        .option("transactional", "true").option("transactionTimeoutMs", str(TRANSACTION_TIMEOUT_MS))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print("started", flush=True)
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"the query failed: {query.exception()}")
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
