"""A consume-transform-produce worker in its own process (tests SIGKILL it): exactly once through transactions.

Usage: python -m tests.integration.txn_worker_child BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID HOLD_S
Reads INPUT (read_committed, as a static member of GROUP), writes ``out-`` + each value to OUTPUT
and commits the input offsets in the same transaction; each transaction's records are flushed and
then held HOLD_S seconds before the commit, so a kill most likely finds one open with data in the log. Prints one JSON line per committed
transaction ({"committed": record count}), per aborted one ({"aborted": reason}) and while it holds one
open ({"holding": record count}).
"""

from __future__ import annotations

import json
import sys
import time

from mqbroker.client import Consumer, Producer
from mqbroker.errors import BrokerError


#: Records per transaction at most (a poll may return thousands).
TRANSACTION_RECORDS_MAX = 50


def _say(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(bootstrap: str, input_topic: str, output_topic: str, group_id: str, transactional_id: str,
         hold_s: str) -> None:
    """Transform until killed."""
    consumer = Consumer(bootstrap, group_id=group_id, group_instance_id=transactional_id, topics=[input_topic],
                        auto_offset_reset="earliest", enable_auto_commit=False, isolation_level="read_committed",
                        session_timeout_ms=6_000, heartbeat_interval_ms=500, fetch_max_wait_ms=100)
    producer = Producer(bootstrap, transactional_id=transactional_id, linger_ms=2, transaction_timeout_ms=10_000,
                        max_block_ms=60_000)
    producer.init_transactions()
    _say(started=transactional_id)
    while True:
        messages = consumer.poll(0.2)
        if not messages:
            continue
        messages, rest = messages[:TRANSACTION_RECORDS_MAX], messages[TRANSACTION_RECORDS_MAX:]
        for partition, offset in sorted({(m.topic, m.partition): m.offset for m in reversed(rest)}.items()):
            consumer.seek(partition, offset)  # read again later, in a transaction of its own
        producer.begin_transaction()
        try:
            for message in messages:
                producer.send(output_topic, value=b"out-" + (message.value or b""), key=message.key,
                              partition=message.partition)
            producer.flush()
            _say(holding=len(messages))
            time.sleep(float(hold_s))
            positions = {}
            for message in messages:
                positions[message.topic, message.partition] = message.offset + 1
            producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            producer.commit_transaction()
        except BrokerError as error:
            _say(aborted=str(error))
            producer.abort_transaction()
            for (topic, partition) in {(m.topic, m.partition) for m in messages}:
                committed = consumer.committed((topic, partition))
                consumer.seek((topic, partition), committed if committed is not None else 0)
            continue
        _say(committed=len(messages))


if __name__ == "__main__":
    main(*sys.argv[1:7])
