"""The Redis connectors against a real broker process and a real redis-server (issue 21).

Sink into a Stream, keys and pub/sub; source from a Stream and a list; kill -9 of the broker in
the middle of a copy (nothing lost, no duplicate Stream entry, no entry left unacknowledged);
Redis killed and restarted in the middle of a copy (the task backs off, reports the outage and
resumes).
"""

from __future__ import annotations

import json
import pathlib
import time
import urllib.request
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin
from mqbroker.connector_model import TaskState
from tests.integration.brokerprocess import BrokerProcess, running
from tests.integration.clusterprocess import wait_for
from tests.integration.connector_support import (connector_broker, consume_all, delete_every_connector, produce,
                                                 read_to_end, task_status)
from tests.integration.redisprocess import RedisProcess, running_redis


@pytest.fixture
def redis_server(tmp_path: pathlib.Path) -> Iterator[RedisProcess]:
    yield from running_redis(tmp_path / "redis")


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the tests that leave it running (each uses its own topics and connector names)."""
    yield from running(connector_broker(tmp_path_factory.mktemp("connectors-redis") / "data"))


@pytest.fixture
def broker(module_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The module's broker; the test's connectors are deleted when it ends."""
    yield module_broker
    with Admin(module_broker.bootstrap) as admin:
        delete_every_connector(admin)


def stream_positions(server: RedisProcess, stream: str, database: int = 0) -> list[tuple[int, int]]:
    """(partition, offset) of every entry of a Stream the sink wrote, in Stream order."""
    entries = server.client(database).xrange(stream)
    return [(int(fields[b"partition"]), int(fields[b"offset"])) for _, fields in entries]


def assert_exactly_once(positions: list[tuple[int, int]], expected: int) -> None:
    """Every (partition, offset) once, each partition's offsets in order, ``expected`` entries."""
    assert len(set(positions)) == len(positions), "a record reached the Stream twice"
    assert len(positions) == expected
    for partition in {partition for partition, _ in positions}:
        offsets = [offset for p, offset in positions if p == partition]
        assert offsets == sorted(offsets), f"partition {partition} out of order in the Stream"


def test_sink_writes_a_stream_latest_values_per_key_and_pubsub_messages(broker: BrokerProcess,
                                                                        redis_server: RedisProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["telemetry"], partitions=3)
    subscriber = redis_server.client(2).pubsub()
    subscriber.subscribe("live")
    subscriber.get_message(timeout=5)  # the subscription's confirmation
    records = [(f"device-{i % 10}".encode(), json.dumps({"n": i}).encode()) for i in range(300)]
    produce(broker.bootstrap, "telemetry", [*records, (b"device-3", None)])

    with Admin(broker.bootstrap) as admin:
        admin.create_connector("to-stream", {"type": "redis-sink", "topics": "telemetry", "redis.url": redis_server.url(0),
                                             "redis.stream": "{topic}-stream", "redis.stream.headers": "true"})
        admin.create_connector("to-keys", {"type": "redis-sink", "topics": "telemetry", "redis.url": redis_server.url(1),
                                           "redis.mode": "keys", "redis.key.prefix": "device:", "redis.key.ttl.ms": "600000"})
        admin.create_connector("to-pubsub", {"type": "redis-sink", "topics": "telemetry", "redis.url": redis_server.url(2),
                                             "redis.mode": "pubsub", "redis.channel": "live"})

    wait_for(lambda: redis_server.client(0).xlen("telemetry-stream") == 301, what="301 Stream entries")
    assert_exactly_once(stream_positions(redis_server, "telemetry-stream"), 301)
    tombstone = [fields for _, fields in redis_server.client(0).xrange("telemetry-stream") if b"value" not in fields]
    assert len(tombstone) == 1 and tombstone[0][b"key"] == b"device-3"

    keys = redis_server.client(1)
    wait_for(lambda: keys.get("device:device-9") == json.dumps({"n": 299}).encode(), what="the latest value per key")
    assert keys.get("device:device-0") == json.dumps({"n": 290}).encode()
    assert keys.get("device:device-3") is None, "the tombstone deletes the key"
    assert 0 < keys.pttl("device:device-0") <= 600_000

    published = []
    while len(published) < 301:
        message = subscriber.get_message(timeout=20)
        assert message is not None, f"only {len(published)} of 301 messages were published"
        if message["type"] == "message":
            published.append(message["data"])
    assert sorted(published) == sorted([value for _, value in records] + [b""])

    described = wait_for(lambda: (status := task_status(broker.bootstrap, "to-stream")).metrics.records_total == 301 and status,
                         what="describe counting 301 records")
    assert described.state is TaskState.RUNNING and described.metrics.lag_records == 0
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.ports['http']}/metrics", timeout=10) as reply:
        metrics = reply.read().decode()
    assert 'mqbroker_connector_records_total{connector="to-stream",task="0",type="redis-sink"} 301.0' in metrics
    assert 'mqbroker_connector_task_state{connector="to-keys",state="running",task="0",type="redis-sink"} 1.0' in metrics


def test_source_copies_a_stream_through_a_group_and_a_list_through_a_processing_list(
        broker: BrokerProcess, redis_server: RedisProcess) -> None:
    client = redis_server.client()
    for i in range(200):
        client.xadd("sensors", {"device": f"d{i % 7}", "temp": str(20 + i)})
    client.lpush("jobs", *[f"job-{i}" for i in range(100)])
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["readings", "jobs"], partitions=2)
        admin.create_connector("from-stream", {"type": "redis-source", "topic": "readings", "redis.url": redis_server.url(),
                                               "redis.stream": "sensors", "key.field": "device", "value.field": "temp"})
        admin.create_connector("from-list", {"type": "redis-source", "topic": "jobs", "redis.url": redis_server.url(),
                                             "redis.mode": "list", "redis.list": "jobs"})

    readings = consume_all(broker.bootstrap, "readings", 200)
    assert sorted(int(message.value) for message in readings) == list(range(20, 220))
    assert {message.key for message in readings} == {f"d{i}".encode() for i in range(7)}
    origins = [dict(message.headers)["mqbroker.redis.entry"] for message in readings]
    assert len(set(origins)) == 200 and all(origin.startswith(b"from-stream:") for origin in origins)
    wait_for(lambda: client.xpending("sensors", "mqbroker-from-stream")["pending"] == 0, what="every entry acknowledged")

    jobs = consume_all(broker.bootstrap, "jobs", 100)
    assert sorted(message.value for message in jobs) == sorted(f"job-{i}".encode() for i in range(100))
    wait_for(lambda: client.llen("jobs") == 0 and client.llen("jobs:processing:from-list:0") == 0,
             what="the list and the processing list emptied")


def test_sink_survives_kill_9_of_the_broker_without_losing_or_duplicating(tmp_path: pathlib.Path,
                                                                          redis_server: RedisProcess) -> None:
    broker = connector_broker(tmp_path / "data")
    broker.start()
    try:
        with Admin(broker.bootstrap) as admin:
            admin.create_topics(["events"], partitions=2)
        produce(broker.bootstrap, "events", [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20_000)])
        with Admin(broker.bootstrap) as admin:
            admin.create_connector("events-sink", {
                "type": "redis-sink", "topics": "events", "redis.url": redis_server.url(), "batch.records": "20",
                "redis.pipeline.depth": "1", "checkpoint.interval.ms": "200"})
        wait_for(lambda: redis_server.client().xlen("events") >= 2_000, what="the copy under way")
        broker.kill()
        copied_before_restart = redis_server.client().xlen("events")
        assert copied_before_restart < 20_000, "the copy finished before the kill: the test proves nothing"
        broker.restart()
        produce(broker.bootstrap, "events", [(f"k{i}".encode(), f"v{i}".encode()) for i in range(20_000, 21_000)])
        wait_for(lambda: redis_server.client().xlen("events") >= 21_000, timeout_s=120, what="the whole topic copied")
        assert_exactly_once(stream_positions(redis_server, "events"), 21_000)
    finally:
        broker.kill()


def test_source_survives_kill_9_of_the_broker_leaving_no_entry_unacknowledged_or_duplicated(
        tmp_path: pathlib.Path, redis_server: RedisProcess) -> None:
    """The broker dies after a batch is in the log and before its XACK: the entries stay pending in Redis.

    Redis write commands are paused (``CLIENT PAUSE WRITE``) to hold the task between its produce
    and its XACK, then the broker is killed; the next start must acknowledge those entries
    without producing them again, and copy everything else.
    """
    client = redis_server.client()
    entry_ids = _add_orders(client, range(ENTRIES))
    broker = connector_broker(tmp_path / "data")
    broker.start()
    try:
        with Admin(broker.bootstrap) as admin:
            admin.create_topics(["orders"], partitions=2)
            admin.create_connector("orders-source", {"type": "redis-source", "topic": "orders",
                                                     "redis.url": redis_server.url(), "redis.stream": "orders",
                                                     "key.field": "id", "batch.records": "25"})
        group = "mqbroker-orders-source"
        wait_for(lambda: _delivered(client, "orders", group) >= 500, what="the copy under way")
        wait_for(lambda: _held_between_produce_and_acknowledge(broker, client, group), timeout_s=60,
                 what="the task holding produced entries it has not acknowledged")
        broker.kill()
        client.execute_command("CLIENT", "UNPAUSE")
        assert _delivered(client, "orders", group) < ENTRIES, "the copy finished before the kill: the test proves nothing"
        broker.restart()
        entry_ids += _add_orders(client, range(ENTRIES, ENTRIES + 500))
        wait_for(lambda: _delivered(client, "orders", group) == ENTRIES + 500 and client.xpending("orders", group)["pending"] == 0,
                 timeout_s=120, what="every entry delivered and acknowledged")
        origins = [dict(message.headers)["mqbroker.redis.entry"] for message in read_to_end(broker.bootstrap, "orders")]
        assert set(origins) == {b"orders-source:" + entry_id for entry_id in entry_ids}, "an entry is missing from the topic"
        assert len(origins) == len(set(origins)), "an entry was produced twice"
        assert "pending entries are in the log already: acknowledging them" in broker.log_text()
    finally:
        broker.kill()


#: Entries in the stream before the kill: enough that the copy is still under way while the test tries to hold it
#: between a produce and its XACK (with 5,000 a fast copy was over before the first try, in a CI run).
ENTRIES = 40_000


def _add_orders(client: object, numbers: range) -> list[bytes]:
    """XADD an ``orders`` entry for each of ``numbers`` (pipelined); their ids."""
    pipeline = client.pipeline(transaction=False)  # type: ignore[attr-defined]
    for number in numbers:
        pipeline.xadd("orders", {"id": str(number)})
    return pipeline.execute()


def _held_between_produce_and_acknowledge(broker: BrokerProcess, client: object, group: str) -> bool:
    """Pause Redis writes; True (still paused) once some pending entry is in the log, else unpause and False."""
    client.execute_command("CLIENT", "PAUSE", 30_000, "WRITE")  # type: ignore[attr-defined]
    time.sleep(0.5)
    pending = {entry["message_id"] for entry in
               client.xpending_range("orders", group, min="-", max="+", count=1000)}  # type: ignore[attr-defined]
    in_log = {dict(message.headers)["mqbroker.redis.entry"].partition(b":")[2]
              for message in read_to_end(broker.bootstrap, "orders")}
    if pending & in_log:
        return True
    client.execute_command("CLIENT", "UNPAUSE")  # type: ignore[attr-defined]
    time.sleep(0.2)
    return False


def _delivered(client: object, stream: str, group: str) -> int:
    """Entries the group has read (Redis 7's entries-read; 0 before the task made the group)."""
    found = [g for g in client.xinfo_groups(stream) if g["name"] == group.encode()]  # type: ignore[attr-defined]
    return int(found[0]["entries-read"] or 0) if found else 0


def test_redis_restart_mid_stream_backs_off_reports_the_outage_and_resumes(broker: BrokerProcess,
                                                                          redis_server: RedisProcess) -> None:
    produce(broker.bootstrap, "metrics", [(None, f"m{i}".encode()) for i in range(10_000)])
    with Admin(broker.bootstrap) as admin:
        admin.create_connector("metrics-sink", {"type": "redis-sink", "topics": "metrics", "redis.url": redis_server.url(),
                                                "batch.records": "20", "redis.pipeline.depth": "1"})
    wait_for(lambda: redis_server.client().xlen("metrics") >= 1_000, what="the copy under way")
    redis_server.kill()
    outage = wait_for(lambda: (status := task_status(broker.bootstrap, "metrics-sink")).metrics.in_outage and status,
                      what="describe reporting the outage")
    assert outage.state is TaskState.BACKOFF and outage.metrics.outages_total == 1
    assert "Redis" in (outage.metrics.last_error or "")
    time.sleep(1.5)  # Redis stays down a while: the task keeps backing off
    redis_server.start()
    wait_for(lambda: redis_server.client().xlen("metrics") == 10_000, timeout_s=60, what="the copy finished")
    assert_exactly_once(stream_positions(redis_server, "metrics"), 10_000)
    recovered = wait_for(lambda: not (status := task_status(broker.bootstrap, "metrics-sink")).metrics.in_outage
                         and status.state is TaskState.RUNNING and status, what="the task running again")
    assert recovered.metrics.outages_total == 1 and recovered.metrics.outage_seconds >= 1.5
