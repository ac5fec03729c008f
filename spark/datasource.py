"""The ``mqbroker`` data source: options in, the Kafka-like schema, readers and writers out."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from mqbroker_spark.options import SinkOptions, SourceOptions
from mqbroker_spark.reader import MqbrokerBatchReader, MqbrokerStreamReader
from mqbroker_spark.writer import MqbrokerBatchWriter, MqbrokerStreamWriter, check_input_schema

#: The columns of a read, as Spark's Kafka source has them.
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
HEADERS_COLUMN = "headers array<struct<key: string, value: binary>>"


class MqbrokerDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("mqbroker")``; options in docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "mqbroker"

    def schema(self) -> str:
        """The read schema; ``headers`` only with ``includeHeaders=true``, as in the Kafka source."""
        if SourceOptions.parse(self.options, streaming=False).include_headers:
            return f"{SCHEMA}, {HEADERS_COLUMN}"
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch read of fixed offset ranges."""
        return MqbrokerBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A stream of micro-batches of offsets."""
        return MqbrokerStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch write (appends; topics cannot be overwritten)."""
        options = SinkOptions.parse(self.options)
        check_input_schema(schema, options)
        return MqbrokerBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A streaming write, exactly once per micro-batch."""
        options = SinkOptions.parse(self.options)
        check_input_schema(schema, options)
        return MqbrokerStreamWriter(options)
