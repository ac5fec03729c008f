"""RecordBatch v2 and its compression codecs: the shared leaf of storage, client, front ends and Spark."""
