"""A share consumer in its own process (tests SIGKILL it): prints JSON lines of what it gets and acknowledges.

Usage: python -m tests.integration.share_consumer_child BOOTSTRAP GROUP TOPIC NAME MODE
MODE ``work``: acknowledge every record (committing after each poll); ``hold``: keep the first
records it gets leased and never acknowledge them (the test kills it).
Lines: {"joined": name}, {"got": [[partition, offset, delivery count], ...]},
{"acked": [[partition, first, last]]} for each range the broker stored,
{"refused": [[partition, first, last, error class]]} for each it did not (``BrokerUnavailableError``:
the connection died first, so the broker may have stored it), {"holding": [...]}.
"""

from __future__ import annotations

import json
import sys
import time

from mqbroker.client import ShareConsumer
from mqbroker.client.share_core import AcknowledgeOutcome


def _say(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def _report(outcomes: list[AcknowledgeOutcome]) -> None:
    acked = [[o.partition, o.first_offset, o.last_offset] for o in outcomes if o.error is None]
    refused = [[o.partition, o.first_offset, o.last_offset, type(o.error).__name__] for o in outcomes if o.error is not None]
    if acked:
        _say(acked=acked)
    if refused:
        _say(refused=refused)


def main(bootstrap: str, group_id: str, topic: str, name: str, mode: str) -> None:
    """Consume until killed (or, holding, until killed too)."""
    consumer = ShareConsumer(bootstrap, group_id=group_id, topics=[topic], client_id=name, records_max=50,
                             fetch_wait_ms=200, request_timeout_s=10.0, on_acknowledged=_report)
    _say(joined=name)
    while True:
        messages = consumer.poll(0.5)
        if not messages:
            continue
        _say(got=[[m.partition, m.offset, m.delivery_count] for m in messages])
        if mode == "hold":
            _say(holding=[m.offset for m in messages])
            while True:
                time.sleep(1)
        consumer.acknowledge(messages)
        consumer.commit()


if __name__ == "__main__":
    main(*sys.argv[1:6])
