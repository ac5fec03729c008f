"""Connectors against hostile input, and the ``mqbroker connectors`` command (issue 21).

A "Redis" that answers garbage (an HTTP server, binary bytes, a bulk string of 2 GB announced),
a Redis that vanishes for good, Stream entries larger than a topic's batches may be, and a
poison batch (right CRC, garbage records) in a topic the sink reads: each time the task reports
a clear error, and the broker keeps serving its clients and its other connectors.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin
from mqbroker.connector_model import TaskState
from tests.integration.brokerprocess import BrokerProcess, running
from tests.integration.clusterprocess import wait_for
from tests.integration.connector_support import (connector_broker, consume_all, delete_every_connector, produce,
                                                 task_status)
from tests.integration.kafka_support import unique
from tests.integration.nativewire import produce_batch
from tests.integration.redisprocess import RedisProcess, running_redis
from tests.poison import poison_batch

CLI = "import sys; from mqbroker.cli import main; sys.exit(main(sys.argv[1:]))"


class GarbageServer:
    """A TCP server that answers every read with ``reply`` (what a misconfigured redis.url may reach)."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(client,), daemon=True).start()

    def _answer(self, client: socket.socket) -> None:
        with client:
            try:
                while client.recv(65536):
                    client.sendall(self.reply)
            except OSError:
                pass

    def close(self) -> None:
        self._listener.close()


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module's tests (each uses its own topics and connector names)."""
    yield from running(connector_broker(tmp_path_factory.mktemp("connectors-hostile") / "data"))


@pytest.fixture
def broker(module_broker: BrokerProcess) -> Iterator[BrokerProcess]:
    """The module's broker; the test's connectors are deleted when it ends."""
    yield module_broker
    with Admin(module_broker.bootstrap) as admin:
        delete_every_connector(admin)


@pytest.fixture
def redis_server(tmp_path: pathlib.Path) -> Iterator[RedisProcess]:
    yield from running_redis(tmp_path / "redis")


def cli(broker: BrokerProcess, *arguments: str, expect: int = 0) -> str:
    done = subprocess.run([sys.executable, "-c", CLI, *arguments, "--bootstrap", broker.bootstrap],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == expect, (done.stdout, done.stderr)
    return done.stdout + done.stderr


def metrics(broker: BrokerProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.ports['http']}/metrics", timeout=10) as reply:
        return reply.read().decode()


def test_the_cli_creates_lists_describes_pauses_resumes_and_deletes_connectors(
        broker: BrokerProcess, redis_server: RedisProcess, tmp_path: pathlib.Path) -> None:
    produce(broker.bootstrap, "telemetry", [(f"d{i}".encode(), b"v%d" % i) for i in range(50)])
    settings = tmp_path / "to-redis.toml"
    settings.write_text(f'type = "redis-sink"\ntopics = ["telemetry"]\n[redis]\nurl = "{redis_server.url()}"\n'
                        'mode = "keys"\nkey.prefix = "device:"\n')
    assert "created connector 'to-redis'" in cli(broker, "connectors", "create", "to-redis", "-f", str(settings))
    wait_for(lambda: redis_server.client().get("device:d49") == b"v49", what="the keys written")

    listed = json.loads(cli(broker, "connectors", "list", "-o", "json"))["connectors"]
    assert [(c["name"], c["type"], c["state"], c["tasks"]) for c in listed] == [("to-redis", "redis-sink", "running", 1)]
    described = wait_for(lambda: (d := json.loads(cli(broker, "connectors", "describe", "to-redis", "-o", "json"))
                                  ["connectors"][0])["tasks"][0]["records_total"] == 50 and d, what="describe: 50")
    assert described["config"]["redis.url"] == redis_server.url() and described["config"]["principal"] == "User:ANONYMOUS"
    assert described["tasks"][0]["state"] == "running" and described["tasks"][0]["lag_records"] == 0
    plain = cli(broker, "connectors", "list").splitlines()  # standard output is a pipe: plain, nothing cut
    assert plain[0].split("\t")[:3] == ["NAME", "TYPE", "STATE"] and plain[1].startswith("to-redis\tredis-sink\trunning")

    cli(broker, "connectors", "pause", "to-redis")
    wait_for(lambda: task_status(broker.bootstrap, "to-redis").state is TaskState.PAUSED, what="paused")
    produce(broker.bootstrap, "telemetry", [(b"d0", b"while paused")])
    cli(broker, "connectors", "resume", "to-redis")
    wait_for(lambda: redis_server.client().get("device:d0") == b"while paused", what="resumed and caught up")

    assert "no connector 'missing'" in cli(broker, "connectors", "describe", "missing", expect=1)
    assert "redis.mode" in cli(broker, "connectors", "create", "bad", "type=redis-sink", "topics=t",
                               f"redis.url={redis_server.url()}", "redis.mode=nope", expect=1)
    assert "KEY=VALUE" in cli(broker, "connectors", "create", "bad", "type", expect=2)
    cli(broker, "connectors", "delete", "to-redis")
    assert json.loads(cli(broker, "connectors", "list", "-o", "json")) == {"connectors": []}


@pytest.mark.parametrize("reply, problem", [
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "a line that is not RESP"),
    (b"\x00\xff\xfe\xfd binary garbage\r\n", "a line that is not RESP"),
    (b"$2000000000\r\nabc", "a bulk string of 2000000000"),
])
def test_a_redis_url_reaching_something_else_is_reported_and_the_broker_keeps_serving(
        broker: BrokerProcess, reply: bytes, problem: str) -> None:
    server = GarbageServer(reply)
    topic, sink, source = unique("readings"), unique("sink"), unique("source")
    try:
        produce(broker.bootstrap, topic, [(b"k", b"v")])
        with Admin(broker.bootstrap) as admin:
            admin.create_connector(sink, {"type": "redis-sink", "topics": topic,
                                            "redis.url": f"redis://127.0.0.1:{server.port}"})
            admin.create_connector(source, {"type": "redis-source", "topic": unique("from-redis"), "redis.stream": "s",
                                              "redis.url": f"redis://127.0.0.1:{server.port}"})
        for name in (sink, source):
            status = wait_for(lambda n=name: (s := task_status(broker.bootstrap, n)).metrics.outages_total >= 1 and s,
                              what=f"{name} reporting the outage", timeout_s=60)
            assert status.state is TaskState.BACKOFF and "is it a Redis server?" in (status.metrics.last_error or "")
            assert problem in (status.metrics.last_error or "")
        produce(broker.bootstrap, topic, [(b"k", b"still served")])
        assert [message.value for message in consume_all(broker.bootstrap, topic, 2)] == [b"v", b"still served"]
        assert f'mqbroker_connector_task_state{{connector="{sink}",state="backoff"' in metrics(broker)
    finally:
        server.close()


def test_a_redis_that_vanishes_leaves_the_task_backing_off_and_the_connector_deletable(
        broker: BrokerProcess, redis_server: RedisProcess) -> None:
    topic, sink = unique("readings"), unique("sink")
    produce(broker.bootstrap, topic, [(None, b"%d" % i) for i in range(20)])
    with Admin(broker.bootstrap) as admin:
        admin.create_connector(sink, {"type": "redis-sink", "topics": topic, "redis.url": redis_server.url()})
    wait_for(lambda: redis_server.client().xlen(topic) == 20, what="20 entries")
    redis_server.kill()
    produce(broker.bootstrap, topic, [(None, b"after")])
    status = wait_for(lambda: (s := task_status(broker.bootstrap, sink)).metrics.in_outage and s,
                      what="the outage reported", timeout_s=60)
    assert status.state is TaskState.BACKOFF and "Redis" in (status.metrics.last_error or "")
    assert status.metrics.lag_records >= 1, "the record produced since is still to copy"
    with Admin(broker.bootstrap) as admin:
        admin.alter_connector(sink, "delete")
        assert admin.describe_connectors() == []


def test_stream_entries_larger_than_a_batch_fail_the_task_or_are_skipped_and_big_reads_are_split(
        broker: BrokerProcess, redis_server: RedisProcess) -> None:
    client = redis_server.client()
    for i in range(12):  # 3.6 MB in one read: four batches or more of the 1 MiB default max.message.bytes
        client.xadd("medium", {"n": str(i), "blob": "m" * 300_000})
    for stream in ("kept-back", "skipping"):
        client.xadd(stream, {"n": "0"})
        client.xadd(stream, {"n": "1", "blob": "h" * 2_000_000})
        client.xadd(stream, {"n": "2"})
    with Admin(broker.bootstrap) as admin:
        for name, stream, extra in (("medium", "medium", {}), ("kept-back", "kept-back", {}),
                                    ("skipping", "skipping", {"oversized": "skip"})):
            admin.create_connector(name, {"type": "redis-source", "topic": f"from-{name}", "redis.stream": stream,
                                          "redis.url": redis_server.url(), **extra})

    medium = consume_all(broker.bootstrap, "from-medium", 12)
    assert sorted(int(json.loads(message.value)["n"]) for message in medium) == list(range(12))
    wait_for(lambda: client.xpending("medium", "mqbroker-medium")["pending"] == 0, what="medium acknowledged")

    skipped = consume_all(broker.bootstrap, "from-skipping", 2)
    assert sorted(json.loads(message.value)["n"] for message in skipped) == ["0", "2"]
    wait_for(lambda: client.xpending("skipping", "mqbroker-skipping")["pending"] == 0, what="all acknowledged")
    skipping = task_status(broker.bootstrap, "skipping")
    assert skipping.metrics.errors_total >= 1 and "skipped (oversized=skip)" in (skipping.metrics.last_error or "")

    kept_back = wait_for(lambda: (s := task_status(broker.bootstrap, "kept-back")).state is TaskState.FAILED and s,
                         what="the task failing on the oversized entry")
    assert "max.message.bytes" in (kept_back.metrics.last_error or "")
    assert client.xpending("kept-back", "mqbroker-kept-back")["pending"] == 3, "nothing acknowledged: all in Redis"
    with Admin(broker.bootstrap) as admin:
        assert admin.list_offset("from-kept-back", 0, -1) == 0


def test_a_poison_batch_in_a_topic_the_sink_reads_is_skipped_counted_and_copying_goes_on(
        broker: BrokerProcess, redis_server: RedisProcess) -> None:
    topic, sink = unique("readings"), unique("sink")
    with Admin(broker.bootstrap) as admin:
        admin.create_topics([topic], partitions=1)
    produce(broker.bootstrap, topic, [(None, b"before")])
    assert produce_batch(broker.ports["native"], topic, 0, poison_batch()) == 0, \
        "a plain topic takes the batch (its CRC is right)"
    produce(broker.bootstrap, topic, [(None, b"after")])
    with Admin(broker.bootstrap) as admin:
        admin.create_connector(sink, {"type": "redis-sink", "topics": topic, "redis.url": redis_server.url()})
    wait_for(lambda: redis_server.client().xlen(topic) == 2, what="the records around the poison batch")
    values = [fields[b"value"] for _, fields in redis_server.client().xrange(topic)]
    assert values == [b"before", b"after"]
    assert f'mqbroker_unreadable_batches_total{{reader="connector {sink}/0",topic="{topic}"}} 1.0' in metrics(broker)
    status = task_status(broker.bootstrap, sink)
    assert status.state is TaskState.RUNNING and f"undecodable batch of {topic}-0 at offsets 1..1" in (
        status.metrics.last_error or "")
