"""mqbroker_spark: a PySpark Python data source and sink for mqbroker topics (docs/spark.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Make ``format("mqbroker")`` available to ``spark`` for reads, writes and streams."""
    from mqbroker_spark.datasource import MqbrokerDataSource  # pyspark loads only when Spark is in use

    spark.dataSource.register(MqbrokerDataSource)
