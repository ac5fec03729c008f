"""``mqbroker bench`` against a real broker: refused sends count as failures, not as throughput; e2e receives
every message with its consumer in a process of its own or on a thread."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mqbroker.client import Admin
from tests.integration.brokerprocess import BrokerProcess


def _bench(broker: BrokerProcess, *arguments: str, mode: str = "produce") -> dict[str, object]:
    command = [sys.executable, "-c", "import sys; from mqbroker.cli import main; sys.exit(main())",
               "bench", mode, "-b", broker.bootstrap, "--json", *arguments]
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
    assert refused["client_cpu_us_per_message"] is None  # nothing counted to divide by
    assert 0 < accepted["client_cpu_us_per_message"] < 1e6  # type: ignore[operator]


@pytest.mark.parametrize("consumer", ["process", "thread"])
def test_e2e_receives_every_message_wherever_its_consumer_runs(broker: BrokerProcess, consumer: str) -> None:
    result = _bench(broker, "--messages", "500", "--rate", "2000", "--consumer", consumer, mode="e2e")
    assert (result["sent"], result["failed"], result["messages"]) == (500, 0, 500)
    assert result["settings"]["consumer"] == consumer  # type: ignore[index]
    latency_ms = result["latency_ms"]
    assert isinstance(latency_ms, dict) and 0 < latency_ms["p50"] <= latency_ms["max"] < 30_000
