"""Share-group test helpers: consumer child processes, a ledger of what was delivered and acknowledged."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from mqbroker.client import Admin, Producer
from mqbroker.client.connection import BlockingConnection
from mqbroker.client.share_admin import ShareGroupAdmin
from mqbroker.errors import BrokerError
from mqbroker.protocols.native import messages as m
from mqbroker.shares.state_records import STATE_TOPIC, state_partition
from tests.integration.clusterprocess import wait_for

ROOT = pathlib.Path(__file__).parents[2]
#: Every child started and not yet killed: ``kill_children`` ends them after a test, failed or not.
_RUNNING: list[ShareChild] = []


def create_topic(bootstrap: str, topic: str, partitions: int = 1, replication_factor: int = -1,
                 configs: dict[str, str] | None = None) -> None:
    """Create ``topic`` (its leaders may take a moment to be elected)."""
    with Admin(bootstrap) as admin:
        admin.create_topics([topic], partitions=partitions, replication_factor=replication_factor,
                            configs=configs)


def create_group(bootstrap: str, group: str, topics: list[str], **configs: str) -> None:
    """A share group reading ``topics`` from their start, with ``configs`` (``lease_ms="2000"`` → ``lease.ms``)."""
    settings = {"auto.offset.reset": "earliest", **{key.replace("_", "."): value for key, value in configs.items()}}
    with ShareGroupAdmin(bootstrap) as admin:
        admin.create(group, topics, settings)


def produce(bootstrap: str, topic: str, values: Iterable[bytes], *, headers: list[tuple[str, bytes]] | None = None,
            partition: int | None = None) -> list[tuple[int, int]]:
    """Send ``values`` with acks=all; their (partition, offset) in order."""
    with Producer(bootstrap, acks="all", linger_ms=2) as producer:
        futures = [producer.send(topic, value, headers=headers or [], partition=partition) for value in values]
        producer.flush()
        return [(metadata.partition, metadata.offset) for metadata in (future.result(30) for future in futures)]


class ShareChild:
    """A ``share_consumer_child`` process; a thread collects what it reports."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, mode: str = "work") -> None:
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.share_consumer_child", bootstrap, group, topic, name, mode],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        )
        self._lock = threading.Lock()
        #: (partition, offset, delivery count, monotonic time) of every delivery.
        self.deliveries: list[tuple[int, int, int, float]] = []
        #: (partition, offset) of every record the broker confirmed acknowledged.
        self.acked: list[tuple[int, int]] = []
        self.refused: list[list[Any]] = []
        self.holding: list[int] = []
        self.joined = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        _RUNNING.append(self)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            now = time.monotonic()
            with self._lock:
                if "joined" in event:
                    self.joined.set()
                for partition, offset, count in event.get("got", ()):
                    self.deliveries.append((partition, offset, count, now))
                for partition, first, last in event.get("acked", ()):
                    self.acked.extend((partition, offset) for offset in range(first, last + 1))
                self.refused.extend(event.get("refused", ()))
                self.holding.extend(event.get("holding", ()))

    def snapshot(self) -> tuple[list[tuple[int, int, int, float]], list[tuple[int, int]]]:
        """Deliveries and acknowledgements so far."""
        with self._lock:
            return list(self.deliveries), list(self.acked)

    def refusals(self) -> list[list[Any]]:
        """``[partition, first, last, error class]`` of every acknowledgement the broker did not confirm."""
        with self._lock:
            return list(self.refused)

    def held(self) -> list[int]:
        """Offsets a ``hold`` child keeps leased."""
        with self._lock:
            return list(self.holding)

    def errors(self) -> str:
        """The child's stderr (after it ended)."""
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace") if self.process.poll() is not None else ""

    def kill(self) -> None:
        """SIGKILL: its leases end only by expiry."""
        self.process.kill()
        self.process.wait()
        self._reader.join(5)
        if self in _RUNNING:
            _RUNNING.remove(self)


def kill_children() -> None:
    """SIGKILL every child still running (a test's teardown: a failed assertion must not leave them behind)."""
    for child in list(_RUNNING):
        child.kill()


def acknowledged(children: Iterable[ShareChild]) -> Counter[tuple[int, int]]:
    """How often each (partition, offset) was acknowledged, over all ``children``."""
    counts: Counter[tuple[int, int]] = Counter()
    for child in children:
        counts.update(child.snapshot()[1])
    return counts


def unanswered(children: Iterable[ShareChild]) -> set[tuple[int, int]]:
    """Records whose acknowledgement met a dead connection: the broker may or may not have stored it."""
    lost = set()
    for child in children:
        lost.update((partition, offset) for partition, first, last, error in child.refusals()
                    if error == "BrokerUnavailableError" for offset in range(first, last + 1))
    return lost


def delivered(children: Iterable[ShareChild]) -> Counter[tuple[int, int]]:
    """How often each (partition, offset) was delivered, over all ``children``."""
    counts: Counter[tuple[int, int]] = Counter()
    for child in children:
        counts.update((partition, offset) for partition, offset, _, _ in child.snapshot()[0])
    return counts


def state_leaders(bootstrap: str) -> list[int]:
    """The leader of each ``__share_group_state`` partition (-1: none), empty before the topic exists."""
    with Admin(bootstrap) as admin:
        topics = [t for t in admin.metadata([STATE_TOPIC]).topics if t.name == STATE_TOPIC and not t.error_code]
    return [p.leader_id for p in sorted(topics[0].partitions, key=lambda p: p.partition_index)] if topics else []


def share_host(bootstrap: str, group_id: str) -> int:
    """The node id FindCoordinator (key type SHARE) names, -1 while there is none."""
    host, port = bootstrap.split(":")
    connection = BlockingConnection(host, int(port), "test", 10)
    try:
        found = connection.request(m.FindCoordinatorRequest(key=group_id, key_type=m.CoordinatorType.SHARE), 10)
        return found.node_id  # type: ignore[attr-defined]
    except BrokerError:
        return -1
    finally:
        connection.close()


def group_hosted_away_from(bootstrap: str, avoid: int) -> tuple[str, int]:
    """A group id whose state partition is led by a broker other than ``avoid`` (the controller), and that broker."""
    def settled() -> bool:
        leaders = state_leaders(bootstrap)
        return bool(leaders) and -1 not in leaders and set(leaders) != {avoid}

    wait_for(settled, 60, "the share-group state topic's leaders on every broker")
    leaders = state_leaders(bootstrap)
    for n in range(1000):
        group_id = f"tasks-{n}"
        leader = leaders[state_partition(group_id, len(leaders))]
        if leader != avoid:
            return group_id, leader
    raise AssertionError("no group id is hosted away from the controller")
