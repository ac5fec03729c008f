"""The Kafka wire protocol: Kafka clients and tools (kafka-python, aiokafka, confluent-kafka, kcat,
Kafka's own CLI, Spark's ``format("kafka")``) read and write mqbroker's logs unmodified.

``messages`` and ``codec`` are pure (the message definitions and the per-version codec),
``connection`` is the sans-I/O connection (framing, in-order responses), ``handlers`` translate
requests into ``IBroker`` calls (all of them in ``broker_calls``), and ``server`` is the thin
Twisted adapter.
"""
