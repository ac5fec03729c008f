"""``mqbroker bench produce`` against a real broker reports refused sends as failures, not as throughput."""

from __future__ import annotations

import json
import subprocess
import sys

from mqbroker.client import Admin
from tests.integration.brokerprocess import BrokerProcess


def _bench(broker: BrokerProcess, *arguments: str) -> dict[str, object]:
    command = [sys.executable, "-c", "import sys; from mqbroker.cli import main; sys.exit(main())",
               "bench", "produce", "-b", broker.bootstrap, "--json", *arguments]
    return json.loads(subprocess.run(command, capture_output=True, text=True, check=True, timeout=120).stdout)


def test_refused_sends_count_as_failures_and_not_as_messages(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["small"], 1, configs={"max.message.bytes": "200"})
    refused = _bench(broker, "--topic", "small", "--size", "500", "--messages", "3000")
    assert (refused["sent"], refused["failed"], refused["messages"], refused["messages_per_s"]) == (3000, 3000, 0, 0.0)
    assert "MessageTooLargeError" in str(refused["first_error"])
    accepted = _bench(broker, "--messages", "3000", "--acks", "all")
    assert (accepted["sent"], accepted["failed"], accepted["messages"]) == (3000, 0, 3000)
    assert accepted["settings"]["acks"] == "all"  # type: ignore[index]
