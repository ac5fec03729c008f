"""Consumer groups against a real broker: assignment, failover, cooperative rebalances, static
membership, fencing, offsets across restarts and the dead-letter helper."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.client.dead_letter import DeadLetterHandler
from mqbroker.client.group_admin import GroupAdmin
from mqbroker.client.twisted import TwistedConsumer
from mqbroker.errors import FencedInstanceIdError
from tests.integration.brokerprocess import BrokerProcess, running

SESSION_TIMEOUT_S = 2.0
#: A killed member's partitions move once its 2 s session times out, plus a rebalance; the bound leaves a
#: loaded machine room and still tells that apart from waiting out the rebalance timeout (max.poll.interval, 300 s).
TAKEOVER_S_MAX = SESSION_TIMEOUT_S + 13.0
GROUP_SETTINGS = ["--set", "group_initial_rebalance_delay_ms=0", "--set", "group_min_session_timeout_ms=500"]
FAST = dict(session_timeout_ms=2_000, heartbeat_interval_ms=300, fetch_max_wait_ms=100, auto_offset_reset="earliest")


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker whose groups form at once and accept short session timeouts, shared by the tests that leave it
    running (each uses its own topics and groups)."""
    yield from running(BrokerProcess(data_dir=tmp_path_factory.mktemp("groups") / "data", extra_args=GROUP_SETTINGS))


@pytest.fixture
def own_group_broker(tmp_path: pathlib.Path) -> Iterator[BrokerProcess]:
    """The same settings in a broker of the test's own (one it restarts)."""
    yield from running(BrokerProcess(data_dir=tmp_path / "data", extra_args=GROUP_SETTINGS))


class ChildConsumer:
    """A group consumer process; a thread collects what it prints."""

    def __init__(self, broker: BrokerProcess, group: str, topic: str, name: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.group_consumer_child", broker.bootstrap, group, topic, name],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=pathlib.Path(__file__).parents[2],
        )
        self.lock = threading.Lock()
        self.owned: set[int] = set()
        self.received: list[tuple[int, int, float]] = []
        self.events: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            with self.lock:
                if "m" in event:
                    self.received.append((event["m"][0], event["m"][1], event["t"]))
                    continue
                self.events.append(event)
                for key, change in (("assigned", self.owned.update), ("revoked", self.owned.difference_update),
                                    ("lost", self.owned.difference_update)):
                    if key in event:
                        change(partition for _, partition in event[key])

    def partitions(self) -> set[int]:
        with self.lock:
            return set(self.owned)

    def messages(self) -> list[tuple[int, int, float]]:
        with self.lock:
            return list(self.received)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def _wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _produce(broker: BrokerProcess, topic: str, count: int, start: int = 0) -> None:
    with Producer(broker.bootstrap, linger_ms=1) as producer:
        for number in range(start, start + count):
            producer.send(topic, str(number).encode(), key=str(number).encode())


def _create(broker: BrokerProcess, topic: str, partitions: int) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=partitions)


def _end_offsets(broker: BrokerProcess, topic: str, partitions: int) -> dict[int, int]:
    with Admin(broker.bootstrap) as admin:
        return {p: admin.list_offset(topic, p, -1) for p in range(partitions)}


def test_members_share_partitions_a_killed_one_is_replaced_and_nothing_is_lost(group_broker: BrokerProcess) -> None:
    _create(group_broker, "work", 6)
    children = [ChildConsumer(group_broker, "workers", "work", f"c{n}") for n in range(2)]
    _wait(lambda: sorted(len(c.partitions()) for c in children) == [3, 3], 30, "two members with three each")
    stop = threading.Event()
    produced = [0]

    def produce_steadily() -> None:
        with Producer(group_broker.bootstrap, linger_ms=1) as producer:
            while not stop.is_set():
                producer.send("work", str(produced[0]).encode(), key=str(produced[0]).encode())
                produced[0] += 1
                time.sleep(0.002)

    producer_thread = threading.Thread(target=produce_steadily)
    producer_thread.start()
    try:
        time.sleep(1.0)
        kept = {id(c): c.partitions() for c in children}
        events_before = {id(c): len(c.events) for c in children}
        children.append(ChildConsumer(group_broker, "workers", "work", "c2"))
        _wait(lambda: [len(c.partitions()) for c in children] == [2, 2, 2], 30, "three members with two each")
        rebalanced_at = time.time()
        # Cooperative: members that kept partitions were never asked to give them up, and read on from them.
        for child in children[:2]:
            retained = kept[id(child)] & child.partitions()
            revoked = {p for event in child.events[events_before[id(child)]:] for _, p in event.get("revoked", ())}
            assert retained and not revoked & retained, f"partitions {revoked & retained} paused by the rebalance"
            _wait(lambda: any(p in retained and t >= rebalanced_at for p, _, t in child.messages()), 30,  # noqa: B023
                  "the unaffected member reading its kept partitions after the rebalance")
        victim = children.pop()
        moved = victim.partitions()
        victim.kill()
        killed_at = time.monotonic()
        _wait(lambda: set().union(*(c.partitions() for c in children)) == set(range(6)), 30, "takeover")
        assert time.monotonic() - killed_at < TAKEOVER_S_MAX
        assert moved <= set().union(*(c.partitions() for c in children))
    finally:
        stop.set()
        producer_thread.join()
    ends = _end_offsets(group_broker, "work", 6)
    everything = {(p, o) for p, end in ends.items() for o in range(end)}
    _wait(lambda: everything <= {(p, o) for c in children + [victim] for p, o, _ in c.messages()}, 30,
          "every produced message to be processed")
    for child in children:
        child.kill()


def test_two_groups_on_one_topic_each_get_everything(group_broker: BrokerProcess) -> None:
    _create(group_broker, "shared", 3)
    _produce(group_broker, "shared", 90)
    seen: dict[str, set[bytes]] = {"a": set(), "b": set()}
    consumers = {name: Consumer(group_broker.bootstrap, group_id=name, topics=["shared"], **FAST) for name in seen}
    try:
        deadline = time.monotonic() + 30
        while any(len(s) < 90 for s in seen.values()) and time.monotonic() < deadline:
            for name, consumer in consumers.items():
                seen[name].update(m.value for m in consumer.poll(0.1) if m.value is not None)
    finally:
        for consumer in consumers.values():
            consumer.close()
    expected = {str(n).encode() for n in range(90)}
    assert seen["a"] == expected and seen["b"] == expected


def _poll_until(consumers: list[Consumer], condition: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        for consumer in consumers:
            consumer.poll(0.05)


def test_static_member_restarted_within_its_timeout_causes_no_rebalance(group_broker: BrokerProcess) -> None:
    _create(group_broker, "static", 4)
    events: list[str] = []
    stay = Consumer(group_broker.bootstrap, group_id="s", topics=["static"], group_instance_id="stay", **FAST,
                    on_assigned=lambda p: events.append("assigned"), on_revoked=lambda p: events.append("revoked"))
    bounce = Consumer(group_broker.bootstrap, group_id="s", topics=["static"], group_instance_id="bounce", **FAST)
    try:
        _poll_until([stay, bounce], lambda: len(stay.assignment()) == 2 and len(bounce.assignment()) == 2, 30)
        settled = time.monotonic() + 1.0
        _poll_until([stay, bounce], lambda: time.monotonic() > settled, 5)
        before = bounce.assignment()
        events.clear()
        bounce.close()  # a static member does not leave
        bounce = Consumer(group_broker.bootstrap, group_id="s", topics=["static"], group_instance_id="bounce", **FAST)
        _poll_until([stay, bounce], lambda: bool(bounce.assignment()), 10)
        settled = time.monotonic() + 1.5
        _poll_until([stay, bounce], lambda: time.monotonic() > settled, 5)
        assert bounce.assignment() == before
        assert events == [], f"the other member saw a rebalance: {events}"
    finally:
        stay.close()
        bounce.close()


def test_fenced_zombie_commit_is_refused(group_broker: BrokerProcess) -> None:
    _create(group_broker, "fence", 1)
    _produce(group_broker, "fence", 5)
    zombie = Consumer(group_broker.bootstrap, group_id="f", topics=["fence"], group_instance_id="i", **FAST,
                      enable_auto_commit=False)
    successor = None
    try:
        _poll_until([zombie], lambda: bool(zombie.assignment()), 30)
        successor = Consumer(group_broker.bootstrap, group_id="f", topics=["fence"], group_instance_id="i", **FAST,
                             enable_auto_commit=False)
        _poll_until([successor], lambda: bool(successor.assignment()), 30)
        with pytest.raises(FencedInstanceIdError):
            zombie.commit({("fence", 0): 3})
    finally:
        if successor is not None:
            successor.close()
        zombie.close()


def test_committed_offsets_survive_a_broker_restart(own_group_broker: BrokerProcess) -> None:
    _create(own_group_broker, "durable", 2)
    with Producer(own_group_broker.bootstrap, linger_ms=1) as producer:
        for partition in (0, 1):  # ten records each: both committed offsets below have a record to read
            for number in range(10):
                producer.send("durable", b"%d" % number, partition=partition)
    consumer = Consumer(own_group_broker.bootstrap, group_id="d", topics=["durable"], **FAST, enable_auto_commit=False)
    _poll_until([consumer], lambda: len(consumer.assignment()) == 2, 30)
    consumer.commit({("durable", 0): 4, ("durable", 1): 7})
    consumer.close()
    own_group_broker.stop()
    own_group_broker.start()
    with GroupAdmin(own_group_broker.bootstrap) as admin:
        assert admin.committed_offsets("d") == {("durable", 0): 4, ("durable", 1): 7}
    resumed = Consumer(own_group_broker.bootstrap, group_id="d", topics=["durable"], **FAST)
    first_read: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 30
        while len(first_read) < 2 and time.monotonic() < deadline:
            for message in resumed.poll(0.1):
                first_read.setdefault(message.partition, message.offset)
        # Checked on the first record read, not on the position: one poll may assign and read past it.
        assert first_read == {0: 4, 1: 7}
    finally:
        resumed.close()


def test_dead_letter_helper_parks_a_poison_message_and_the_partition_keeps_flowing(
    group_broker: BrokerProcess,
) -> None:
    _create(group_broker, "orders", 1)
    _create(group_broker, "orders.dlq", 1)
    _produce(group_broker, "orders", 10)
    handled: list[bytes] = []
    attempts: list[bytes] = []

    def handle(message: Any) -> None:
        attempts.append(message.value)
        if message.value == b"4":
            raise ValueError("poison")
        handled.append(message.value)

    with Producer(group_broker.bootstrap) as dlq_producer:
        wrapped = DeadLetterHandler(handle, producer=dlq_producer, dead_letter_topic="orders.dlq", attempts_max=3,
                                    sleep=lambda s: time.sleep(min(s, 0.05)))
        consumer = Consumer(group_broker.bootstrap, group_id="o", topics=["orders"], **FAST)
        try:
            deadline = time.monotonic() + 30
            while len(handled) < 9 and time.monotonic() < deadline:
                for message in consumer.poll(0.1):
                    wrapped(message)
        finally:
            consumer.close()
    assert handled == [str(n).encode() for n in range(10) if n != 4]
    assert attempts.count(b"4") == 3
    reader = Consumer(group_broker.bootstrap, topics=["orders.dlq"], auto_offset_reset="earliest")
    try:
        parked: list[Any] = []
        deadline = time.monotonic() + 10
        while not parked and time.monotonic() < deadline:
            parked = reader.poll(0.2)
    finally:
        reader.close()
    headers = dict(parked[0].headers)
    assert parked[0].value == b"4"
    assert headers["dlq.attempts"] == b"3" and headers["dlq.origin.offset"] == b"4"
    assert headers["dlq.origin.topic"] == b"orders" and b"poison" in headers["dlq.error"]


@pytest_twisted.ensureDeferred
async def test_twisted_consumer_shares_a_group_with_a_blocking_one_and_takes_over_when_it_dies(
    group_broker: BrokerProcess,
) -> None:
    _create(group_broker, "mixed", 4)
    _produce(group_broker, "mixed", 200)
    owned: set[int] = set()
    seen: set[tuple[int, int]] = set()
    consumer = TwistedConsumer(
        reactor, group_broker.bootstrap, group_id="mixed", topics=["mixed"], client_id="twisted",
        session_timeout_ms=2_000, heartbeat_interval_ms=300, auto_commit_interval_ms=200, fetch_max_wait_ms=100,
        auto_offset_reset="earliest",
        on_assigned=lambda parts: owned.update(p for _, p in parts),
        on_revoked=lambda parts: owned.difference_update(p for _, p in parts),
    )
    child = ChildConsumer(group_broker, "mixed", "mixed", "blocking")

    async def poll_until(condition: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            seen.update((m.partition, m.offset) for m in await consumer.poll())
            await deferLater(reactor, 0.01, lambda: None)  # let the reader thread's child output in

    try:
        await poll_until(lambda: len(owned) == 2 and len(child.partitions()) == 2, 30, "two partitions each")
        assert owned.isdisjoint(child.partitions()) and consumer.assignment() == {("mixed", p) for p in owned}
        child.kill()
        killed_at = time.monotonic()
        await poll_until(lambda: len(owned) == 4, 30, "the Twisted consumer to take over")
        assert time.monotonic() - killed_at < TAKEOVER_S_MAX
        everything = {(p, o) for p, end in _end_offsets(group_broker, "mixed", 4).items() for o in range(end)}
        await poll_until(lambda: everything <= seen | {(p, o) for p, o, _ in child.messages()}, 30, "every message")
        consumer.pause(("mixed", 0))
        assert consumer.paused() == {("mixed", 0)}
        consumer.resume(("mixed", 0))
        await consumer.commit({("mixed", 0): 3})
        assert await consumer.committed(("mixed", 0)) == 3
        assert await consumer.position(("mixed", 1)) == _end_offsets(group_broker, "mixed", 4)[1]
    finally:
        child.kill()
        await consumer.close()
    with GroupAdmin(group_broker.bootstrap) as admin:
        assert admin.describe_group("mixed").members == ()  # the Twisted consumer left on close


def _everything(broker: BrokerProcess, topic: str, partitions: int) -> list[tuple[int, int]]:
    return [(partition, offset) for partition, end in _end_offsets(broker, topic, partitions).items()
            for offset in range(end)]


def test_an_assignment_whose_callback_raised_is_applied_again_by_the_next_poll(group_broker: BrokerProcess) -> None:
    """``on_assigned`` raises once: the poll raises it, the next poll applies the assignment again (callback
    included) and every record is read once; the member rejoins later (a second member gets a partition)."""
    _create(group_broker, "callback-raises", 2)
    _produce(group_broker, "callback-raises", 20)
    calls: list[set[tuple[str, int]]] = []

    def on_assigned(partitions: set[tuple[str, int]]) -> None:
        calls.append(partitions)
        if len(calls) == 1:
            raise RuntimeError("the application's callback failed")

    settings: dict[str, Any] = dict(group_id="callback-raises", topics=["callback-raises"], **FAST)
    with Consumer(group_broker.bootstrap, on_assigned=on_assigned, **settings) as first:
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        with pytest.raises(RuntimeError):
            while time.monotonic() < deadline:
                seen += [(m.partition, m.offset) for m in first.poll(0.1)]
        everything = _everything(group_broker, "callback-raises", 2)
        deadline = time.monotonic() + 30
        while len(seen) < len(everything) and time.monotonic() < deadline:
            seen += [(m.partition, m.offset) for m in first.poll(0.1)]
        assert sorted(seen) == everything and calls[1] == calls[0]
        with Consumer(group_broker.bootstrap, **settings) as second:
            _poll_until([first, second], lambda: len(first.assignment()) == len(second.assignment()) == 1, 30)


@pytest_twisted.ensureDeferred
async def test_a_twisted_poll_cancelled_in_an_assignment_callback_applies_it_at_the_next_poll(
        group_broker: BrokerProcess) -> None:
    """``on_assigned`` returns a Deferred that never fires and the poll is cancelled (``addTimeout``): the next
    poll applies the assignment again and reads every record, and the member rejoins later (a second member, in
    a process of its own, gets a partition)."""
    _create(group_broker, "callback-cancelled", 2)
    _produce(group_broker, "callback-cancelled", 20)
    waiting: list[Deferred[None]] = []

    def on_assigned(partitions: set[tuple[str, int]]) -> Deferred[None] | None:
        if waiting:
            return None
        waiting.append(Deferred())
        return waiting[0]

    consumer = TwistedConsumer(
        reactor, group_broker.bootstrap, group_id="callback-cancelled", topics=["callback-cancelled"],
        session_timeout_ms=2_000, heartbeat_interval_ms=300, fetch_max_wait_ms=100, auto_offset_reset="earliest",
        on_assigned=on_assigned,
    )
    try:
        seen: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        cancelled = False
        while not cancelled:
            assert time.monotonic() < deadline, "timed out waiting for the assignment"
            try:
                seen += [(m.partition, m.offset) for m in await consumer.poll().addTimeout(2.0, reactor)]
            except defer.TimeoutError:
                cancelled = True
        everything = _everything(group_broker, "callback-cancelled", 2)
        while len(seen) < len(everything):
            assert time.monotonic() < deadline + 30, f"timed out: {len(seen)} records read"
            seen += [(m.partition, m.offset) for m in await consumer.poll()]
        assert sorted(seen) == everything
        child = ChildConsumer(group_broker, "callback-cancelled", "callback-cancelled", "second")
        try:
            while not (len(consumer.assignment()) == len(child.partitions()) == 1):
                assert time.monotonic() < deadline + 60, "timed out waiting for the rebalance"
                await consumer.poll()
                await deferLater(reactor, 0.01, lambda: None)  # let the reader thread's child output in
        finally:
            child.kill()
    finally:
        await consumer.close()
