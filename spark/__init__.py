"""mqbroker_spark: a PySpark Python data source and sink for mqbroker topics."""
