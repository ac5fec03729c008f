"""The sink's transactional option: one task's rows of one micro-batch as one transaction.

Runs in Spark's Python workers. A task's transactional id is derived from the query id and the
Spark partition id, so every attempt of that task, in this run or after a restart from the
checkpoint, has the same id:

* ``init_transactions`` bumps the id's producer epoch: an older attempt still running (a zombie) is
  fenced, and the transaction it left open is aborted (or, if it was being committed, finished)
  before the new attempt goes on;
* the transaction carries, as a committed offset of the query's marker group, the id of the next
  micro-batch to write (``batch id + 1`` under ``(MARKER_TOPIC, Spark partition)``), committed with
  the rows or not at all. A replayed batch (Spark re-runs the last batch whose commit it did not log)
  first reads that marker: a batch the task already committed is not written again.

A read_committed reader therefore sees each task's share of a micro-batch once and whole. The
micro-batch as a whole is not atomic: the tasks commit one by one (docs/spark.md).
"""

from __future__ import annotations

import time

from mqbroker.client import Producer
from mqbroker.client.group_admin import GroupAdmin
from mqbroker.client.group_member import ConsumerGroupMetadata
from mqbroker.errors import UnstableOffsetCommitError
from mqbroker_spark.delivery import OutgoingRecord, TopicPartition

#: The topic name under which a query's marker group stores each Spark partition's next batch id (no
#: such topic is created: offsets need none).
MARKER_TOPIC = "mqbroker-spark-sink"
#: How long a task waits for a transaction's marker offsets to be decided before it fails (and is retried).
STABLE_OFFSETS_WAIT_S = 30.0
STABLE_OFFSETS_RETRY_S = 0.1


def transactional_id_for(write_identity: str, task_partition: int) -> str:
    """The transactional id of one Spark task of a query (or batch job), the same for every attempt."""
    return f"mqbroker-spark/{write_identity}/{task_partition}"


def marker_group_for(write_identity: str) -> str:
    """The group whose offsets record, per Spark partition, the next batch id to write."""
    return f"mqbroker-spark-sink/{write_identity}"


def _next_batch_id(bootstrap: str, group: str, task_partition: int) -> int:
    """The batch id this task writes next (0 if it never committed), read once pending offsets are decided."""
    deadline = time.monotonic() + STABLE_OFFSETS_WAIT_S
    with GroupAdmin(bootstrap, client_id="mqbroker-spark-writer") as admin:
        while True:
            try:
                return admin.committed_offsets(group, require_stable=True).get((MARKER_TOPIC, task_partition), 0)
            except UnstableOffsetCommitError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(STABLE_OFFSETS_RETRY_S)


def write_transaction(
    bootstrap: str,
    write_identity: str,
    task_partition: int,
    batch_id: int,
    records: dict[TopicPartition, list[OutgoingRecord]],
    transaction_timeout_ms: int,
) -> int:
    """Write ``records`` and the batch marker in one transaction, unless this batch was committed already;
    return the number of records the batch holds either way."""
    count = sum(len(rows) for rows in records.values())
    group = marker_group_for(write_identity)
    producer = Producer(bootstrap, client_id="mqbroker-spark-writer", acks="all", linger_ms=5,
                        transactional_id=transactional_id_for(write_identity, task_partition),
                        transaction_timeout_ms=transaction_timeout_ms)
    try:
        producer.init_transactions()
        if _next_batch_id(bootstrap, group, task_partition) > batch_id:
            return count  # a replay of a batch this task committed before the query's commit was logged
        producer.begin_transaction()
        for (topic, partition), rows in sorted(records.items()):
            for key, value, headers in rows:
                producer.send(topic, value=value, key=key, headers=list(headers), partition=partition)
        producer.send_offsets_to_transaction({(MARKER_TOPIC, task_partition): batch_id + 1},
                                             ConsumerGroupMetadata(group_id=group))
        producer.commit_transaction()
    finally:
        producer.close()
    return count
