"""Spark jobs over mqbroker topics: the IoT pipeline and its device simulator."""
