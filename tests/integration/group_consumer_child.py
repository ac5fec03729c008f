"""A group consumer in its own process (tests SIGKILL it): prints JSON lines of what it reads.

Usage: python -m tests.integration.group_consumer_child BOOTSTRAP GROUP TOPIC CLIENT_ID
Lines: {"assigned": [[topic, partition], ...]}, {"revoked": [...]}, {"lost": [...]},
and one {"m": [partition, offset], "t": seconds since the epoch} per message.
"""

from __future__ import annotations

import json
import sys
import time

from mqbroker.client import Consumer


def _say(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(bootstrap: str, group_id: str, topic: str, client_id: str) -> None:
    """Consume until killed."""
    consumer = Consumer(
        bootstrap, group_id=group_id, topics=[topic], client_id=client_id, auto_offset_reset="earliest",
        session_timeout_ms=2_000, heartbeat_interval_ms=300, auto_commit_interval_ms=200, fetch_max_wait_ms=100,
        on_assigned=lambda parts: _say(assigned=sorted(parts)),
        on_revoked=lambda parts: _say(revoked=sorted(parts)),
        on_lost=lambda parts: _say(lost=sorted(parts)),
    )
    _say(started=client_id)
    while True:
        for message in consumer.poll(0.2):
            _say(m=[message.partition, message.offset], t=time.time())


if __name__ == "__main__":
    main(*sys.argv[1:5])
