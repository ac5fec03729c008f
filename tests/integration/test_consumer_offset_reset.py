"""``auto_offset_reset="none"`` against a real broker, as Kafka's consumer behaves: a partition with a committed
offset starts there; one without (and not sought) makes ``poll`` raise ``NoOffsetForPartitionError`` naming it
until the application seeks it; a position outside the log makes ``poll`` raise ``PositionOutOfRangeError`` and
stays where it was, still assigned, so a seek resumes reading. Blocking and Twisted consumers; the three-broker
variant of the group case is in test_cluster_groups.py (``committed_or_sought``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import pytest_twisted
from twisted.internet import reactor

from mqbroker.client import Admin, Consumer, NoOffsetForPartitionError, PositionOutOfRangeError, Producer
from mqbroker.client.twisted import TwistedConsumer
from tests.integration.brokerprocess import BrokerProcess, running

GROUP_SETTINGS = ["--set", "group_initial_rebalance_delay_ms=0"]
#: Each group's members leave on close, so no test waits for a session timeout.
FAST = dict(heartbeat_interval_ms=300, fetch_max_wait_ms=100)
RECORDS = 5


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose groups form at once, shared by the module's tests (each uses its own topics and groups)."""
    yield from running(BrokerProcess(data_dir=tmp_path_factory.mktemp("reset-none") / "data",
                                     extra_args=GROUP_SETTINGS))


def two_partitions_of_records(bootstrap: str, topic: str, replication_factor: int = 1) -> None:
    """Create ``topic`` with two partitions of RECORDS records each (values ``b"<partition>-<offset>"``)."""
    with Admin(bootstrap) as admin:
        admin.create_topics([topic], partitions=2, replication_factor=replication_factor)
    with Producer(bootstrap, acks="all") as producer:
        for partition in range(2):
            for offset in range(RECORDS):
                producer.send(topic, b"%d-%d" % (partition, offset), partition=partition)


def _read(consumer: Consumer, count: int, timeout_s: float = 30.0) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < count:
        assert time.monotonic() < deadline, f"timed out: read {seen}"
        seen += [(message.partition, message.offset) for message in consumer.poll(0.2)]
    return seen


def _raised(consumer: Consumer, error: type[Exception], timeout_s: float = 30.0) -> Exception:
    """Poll until ``error`` is raised (a group assigns its partitions a while after the first poll)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline, f"timed out waiting for {error.__name__}"
        try:
            assert consumer.poll(0.2) == [], "records came before the error"
        except error as raised:
            return raised


def committed_or_sought(bootstrap: str, topic: str, group: str, replication_factor: int = 1) -> None:
    """The group committed offset 3 of partition 0 and nothing of partition 1: a "none" member reads partition 0
    from 3 and raises for partition 1 (every poll, until it is sought); sought, it reads both once each."""
    two_partitions_of_records(bootstrap, topic, replication_factor)
    with Consumer(bootstrap, group_id=group, topics=[topic], auto_offset_reset="earliest", enable_auto_commit=False,
                  **FAST) as first:
        _read(first, 2 * RECORDS)
        first.commit({(topic, 0): 3})
    with Consumer(bootstrap, group_id=group, topics=[topic], auto_offset_reset="none", **FAST) as consumer:
        raised = _raised(consumer, NoOffsetForPartitionError)
        assert raised.partitions == {(topic, 1)} and f"{topic}-1" in str(raised)
        with pytest.raises(NoOffsetForPartitionError):  # the consumer holds nothing back meanwhile: still raises
            consumer.poll(0.2)
        with pytest.raises(NoOffsetForPartitionError):
            consumer.position((topic, 1))
        assert consumer.position((topic, 0)) == 3
        consumer.seek((topic, 1), 1)
        seen = _read(consumer, RECORDS - 3 + RECORDS - 1)
        assert sorted(seen) == [(0, 3), (0, 4), (1, 1), (1, 2), (1, 3), (1, 4)]
        consumer.commit()
    with Consumer(bootstrap, group_id=group, topics=[topic], auto_offset_reset="none", **FAST) as again:
        assert _read_for(again, 2.0) == []  # both committed at their ends: nothing raised, nothing returned


def _read_for(consumer: Consumer, seconds: float) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen += [(message.partition, message.offset) for message in consumer.poll(0.2)]
    return seen


def test_a_group_member_starts_at_the_commits_and_raises_for_a_partition_without_one(
        group_broker: BrokerProcess) -> None:
    committed_or_sought(group_broker.bootstrap, "none-group", "none-group")


def test_an_assigned_consumer_raises_until_sought_and_keeps_an_out_of_range_position(
        group_broker: BrokerProcess) -> None:
    """No group: every partition waits for a seek; a position past the log end raises and is kept (still
    assigned), and a seek back reads on."""
    topic = "none-assigned"
    two_partitions_of_records(group_broker.bootstrap, topic)
    with Consumer(group_broker.bootstrap, topics=[topic], auto_offset_reset="none", fetch_max_wait_ms=100) as consumer:
        with pytest.raises(NoOffsetForPartitionError) as raised:
            consumer.poll(0.2)
        assert raised.value.partitions == {(topic, 0), (topic, 1)}
        consumer.seek((topic, 0), 2)
        consumer.seek_to_beginning((topic, 1))
        assert sorted(_read(consumer, 2 * RECORDS - 2)) == [(0, 2), (0, 3), (0, 4)] + [(1, n) for n in range(RECORDS)]
        consumer.seek((topic, 0), 100)
        out_of_range = _raised(consumer, PositionOutOfRangeError)
        assert out_of_range.offsets == {(topic, 0): 100} and f"{topic}-0 at 100" in str(out_of_range)
        assert consumer.assignment() == {(topic, 0), (topic, 1)} and consumer.position((topic, 0)) == 100
        consumer.seek((topic, 0), 1)
        assert _read(consumer, RECORDS - 1) == [(0, n) for n in range(1, RECORDS)]


@pytest_twisted.ensureDeferred
async def test_the_twisted_consumer_raises_until_sought_and_keeps_an_out_of_range_position(
        group_broker: BrokerProcess) -> None:
    topic = "none-twisted"
    two_partitions_of_records(group_broker.bootstrap, topic)
    consumer = TwistedConsumer(reactor, group_broker.bootstrap, auto_offset_reset="none", fetch_max_wait_ms=100)
    try:
        await consumer.assign_topics([topic])
        with pytest.raises(NoOffsetForPartitionError) as raised:
            await consumer.poll()
        assert raised.value.partitions == {(topic, 0), (topic, 1)}
        with pytest.raises(NoOffsetForPartitionError):
            await consumer.position((topic, 0))
        consumer.seek((topic, 0), 3)
        consumer.seek_to_beginning((topic, 1))
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while len(seen) < RECORDS + 2:
            assert time.monotonic() < deadline, f"timed out: read {seen}"
            seen += [(message.partition, message.offset) for message in await consumer.poll()]
        assert sorted(seen) == [(0, 3), (0, 4)] + [(1, n) for n in range(RECORDS)]
        consumer.seek((topic, 1), 100)
        while True:
            assert time.monotonic() < deadline, "timed out waiting for PositionOutOfRangeError"
            try:
                assert await consumer.poll() == []
            except PositionOutOfRangeError as error:
                assert error.offsets == {(topic, 1): 100}
                break
        assert consumer.assignment() == {(topic, 0), (topic, 1)} and await consumer.position((topic, 1)) == 100
        consumer.seek((topic, 1), 4)
        assert [(message.partition, message.offset) for message in await consumer.poll()] == [(1, 4)]
    finally:
        await consumer.close()
