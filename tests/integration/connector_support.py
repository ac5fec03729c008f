"""Helpers of the connector tests: brokers with fast connector status, waiting on a task's state."""

from __future__ import annotations

import pathlib
import time
from typing import Any

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.connector_model import TaskDescription
from tests.integration.brokerprocess import BrokerProcess

#: Task owners report status twice a second, so that tests see changes quickly.
FAST_CONNECTORS = ["--set", "connectors.status_interval_ms=500", "--set", "connectors.leadership_check_interval_ms=300"]


def connector_broker(data_dir: pathlib.Path, *extra_args: str) -> BrokerProcess:
    """A broker whose connector tasks report status every 500 ms."""
    return BrokerProcess(data_dir=data_dir, extra_args=[*FAST_CONNECTORS, *extra_args])


def delete_every_connector(admin: Admin) -> None:
    """Delete every connector through ``admin``, so that a test sharing the broker leaves no task running for the
    next."""
    for connector in admin.describe_connectors():
        admin.alter_connector(connector.name, "delete")
    assert admin.describe_connectors() == []


def task_status(bootstrap: str, name: str, task: int = 0) -> TaskDescription:
    """A connector task's status as ``describe`` reports it."""
    with Admin(bootstrap) as admin:
        (described,) = admin.describe_connectors([name])
    return described.tasks[task]


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]], **options: Any) -> None:
    """Produce ``(key, value)`` records with acks=all and wait for every acknowledgement."""
    with Producer(bootstrap, acks="all", **options) as producer:
        futures = [producer.send(topic, key=key, value=value) for key, value in records]
        producer.flush()
        for future in futures:
            future.result(timeout=30)


def consume_all(bootstrap: str, topic: str, count: int, timeout_s: float = 60.0) -> list[Any]:
    """Read ``topic`` from the beginning until ``count`` messages arrived (fails on timeout)."""
    messages: list[Any] = []
    with Consumer(bootstrap, group_id=None, topics=[topic], auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + timeout_s
        while len(messages) < count:
            assert time.monotonic() < deadline, f"only {len(messages)} of {count} messages arrived from {topic}"
            messages += consumer.poll(timeout=1.0)
    return messages


def read_to_end(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[Any]:
    """Every message of ``topic`` up to the partitions' ends as they are now."""
    with Admin(bootstrap) as admin:
        ends = {partition: admin.list_offset(topic, partition, -1)
                for partition in range(admin.describe_topics([topic])[topic])}
    messages: list[Any] = []
    with Consumer(bootstrap, group_id=None, topics=[topic], auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + timeout_s
        positions = {partition: 0 for partition in ends}
        while any(positions[partition] < end for partition, end in ends.items()):
            assert time.monotonic() < deadline, f"{topic} not read to its end in time"
            for message in consumer.poll(timeout=1.0):
                messages.append(message)
                positions[message.partition] = message.offset + 1
    return messages
