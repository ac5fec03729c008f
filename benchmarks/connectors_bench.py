"""Connector benchmark: the Redis sink, the Redis source and the mirror, each beside what a user would
write by hand, on one machine (a broker process, a second one for the mirror, a ``redis-server``).

* **sink** (topic → Redis Stream): ``N`` records of ``--value-bytes`` are produced first (acks=all,
  only acknowledged ones count); then, alternating for ``--rounds`` rounds, into a fresh Stream each:
  ``redis-py direct`` (redis-py pipelines XADD of the same records: what Redis takes from one Python
  client, the ceiling), ``hand bridge`` (an mqbroker Consumer reading the topic and redis-py
  pipelining XADD: the script a user would write) and ``connector`` (a ``redis-sink`` inside the
  broker, timed from its creation until the Stream holds every record);
* **source** (Redis Stream → topic): ``N`` entries in a Stream; ``hand bridge`` (redis-py
  XREADGROUP, an mqbroker Producer with acks=all, then XACK) against ``connector`` (a
  ``redis-source``), each into a fresh topic, timed until every entry is in the log and none pending;
* **mirror** (cluster → cluster): ``N`` records in a topic of the source broker; ``hand bridge``
  (Consumer on the source, Producer acks=all on the target) against ``connector`` (a ``mirror``
  on the target broker), timed until the target topic holds every record.

Throughput counts acknowledged records only: records the target acknowledged (XADD replies,
acks=all produces) and, for the connectors, what the target holds at the end (the Stream's
length, the topic's end offsets) — the run fails if a record is missing. Latency (p50/p99) is
end to end at a paced ``--rate``: the send time (``CLOCK_MONOTONIC``) travels in the record, a
reader in a child process takes it out where the record arrives (XREAD on the Stream, a Consumer
on the topic). Ratios are taken within one run (variants alternate), never across runs.

Redis runs with ``appendonly yes`` and ``--redis-appendfsync`` (default ``always``: a write is on
disk before Redis acknowledges it, as the sink's exactly-once tests run it).

Run: ``python benchmarks/connectors_bench.py [--records 100000] [--value-bytes 100] [--rounds 2]
[--rate 2000] [--seconds 5] [--redis-appendfsync always|everysec|no] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pathlib
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from mqbroker.cli.bench import produce_acknowledged  # noqa: E402
from mqbroker.client import Admin, Consumer, Producer  # noqa: E402
from mqbroker.errors import UnknownTopicOrPartitionError  # noqa: E402
from tests.integration.brokerprocess import BrokerProcess  # noqa: E402
from tests.integration.connector_support import connector_broker  # noqa: E402
from tests.integration.redisprocess import RedisProcess  # noqa: E402

#: Marks a paced latency record; the send time (a big-endian double) follows.
LATENCY_MARK = b"lat:"
#: Records per pipeline / produce batch in the hand-written bridges (the connectors' batch.records default).
BATCH = 500
#: The Stream length bound the sink and the direct writer both ask for (MAXLEN ~).
STREAM_MAXLEN = 10_000_000
#: The parts of the run, each optional (``--only``).
PARTS = ("sink", "source", "mirror", "latency")
#: A variant that has not finished after this long fails the run.
DEADLINE_S = 600.0


def progress(message: str) -> None:
    print(f"[connectors-bench] {message}", file=sys.stderr, flush=True)


@contextmanager
def processes(root: pathlib.Path, appendfsync: str, before_tree: pathlib.Path | None = None,
              ) -> Iterator[tuple[BrokerProcess, BrokerProcess, RedisProcess, BrokerProcess | None]]:
    """The broker under test, a second broker (the mirror's source cluster), redis-server, and with
    ``before_tree`` a broker running that source tree (the sink's before/after comparison)."""
    started: list[Any] = []
    try:
        for process in (connector_broker(root / "broker"), connector_broker(root / "east"),
                        RedisProcess(root / "redis", appendfsync=appendfsync)):
            process.start()
            started.append(process)
        before = None
        if before_tree is not None:
            before = connector_broker(root / "before")
            before.environment = {"PYTHONPATH": str(before_tree)}
            before.start()
            started.append(before)
        yield started[0], started[1], started[2], before
    finally:
        for process in reversed(started):
            process.kill()


def wait_until(condition: Callable[[], bool], what: str, interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not reached within {DEADLINE_S} s")
        time.sleep(interval_s)


def end_offsets(bootstrap: str, topic: str) -> int:
    """The sum of the topic's end offsets (0 while it does not exist)."""
    with Admin(bootstrap) as admin:
        try:
            partitions = admin.describe_topics([topic])[topic]
        except UnknownTopicOrPartitionError:
            return 0
        return sum(admin.list_offset(topic, partition, -1) for partition in range(partitions))


def remote_topics(bootstrap: str) -> list[str]:
    with Admin(bootstrap) as admin:
        return admin.list_topics()


def figures(records: int, value_bytes: int, seconds: float) -> dict[str, float]:
    return {"msg_s": records / seconds, "mb_s": records * value_bytes / seconds / 1e6, "seconds": seconds}


def fill_topic(bootstrap: str, topic: str, records: int, value: bytes) -> int:
    """Produce ``records`` copies of ``value`` (acks=all, keys spread over partitions); the acknowledged count."""
    with Admin(bootstrap) as admin:
        admin.create_topics([topic], partitions=2)
    with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        outcomes = produce_acknowledged(producer, topic, value, records)
    if outcomes.failed:
        raise RuntimeError(f"{outcomes.failed} sends failed filling {topic}: {outcomes.first_error}")
    return outcomes.acknowledged


# -- sink ----------------------------------------------------------------------------------------


def sink_direct(server: RedisProcess, stream: str, records: int, value: bytes) -> float:
    """redis-py pipelining XADD of ``records`` entries shaped as the sink writes them; seconds."""
    client = server.client()
    started = time.perf_counter()
    acknowledged = 0
    for start in range(0, records, BATCH):
        pipeline = client.pipeline(transaction=False)
        for offset in range(start, min(start + BATCH, records)):
            pipeline.xadd(stream, {"partition": 0, "offset": offset, "timestamp": 0, "value": value},
                          maxlen=STREAM_MAXLEN, approximate=True)
        acknowledged += len(pipeline.execute())
    seconds = time.perf_counter() - started
    assert acknowledged == records and client.xlen(stream) == records
    return seconds


def sink_hand_bridge(bootstrap: str, server: RedisProcess, topic: str, stream: str, records: int) -> float:
    """An mqbroker Consumer from the beginning of ``topic``, redis-py pipelining each poll's records; seconds."""
    client = server.client()
    copied = 0
    started = time.perf_counter()
    with Consumer(bootstrap, group_id=None) as consumer:
        consumer.assign([(topic, 0), (topic, 1)])
        for partition in (0, 1):
            consumer.seek((topic, partition), 0)
        while copied < records:
            messages = consumer.poll(timeout=1.0)
            if not messages:
                continue
            pipeline = client.pipeline(transaction=False)
            for message in messages:
                pipeline.xadd(stream, {"partition": message.partition, "offset": message.offset,
                                       "timestamp": message.timestamp, "value": message.value},
                              maxlen=STREAM_MAXLEN, approximate=True)
            copied += len(pipeline.execute())
            if time.perf_counter() - started > DEADLINE_S:
                raise RuntimeError("the hand bridge did not finish")
    seconds = time.perf_counter() - started
    assert client.xlen(stream) == records
    return seconds


def sink_connector(bootstrap: str, server: RedisProcess, name: str, topic: str, stream: str, records: int,
                   startups: list[float] | None = None) -> float:
    """A redis-sink from the topic's beginning into ``stream``: seconds from create to the last entry (and into
    ``startups`` the seconds from create to the first entry: the task starting, connecting, loading its script)."""
    client = server.client()
    started = time.perf_counter()
    with Admin(bootstrap) as admin:
        admin.create_connector(name, {"type": "redis-sink", "topics": topic, "redis.url": server.url(),
                                      "redis.stream": stream, "redis.stream.maxlen": str(STREAM_MAXLEN)})
    wait_until(lambda: client.xlen(stream) > 0, f"{stream} holding its first entry", interval_s=0.002)
    first_s = time.perf_counter() - started
    wait_until(lambda: client.xlen(stream) >= records, f"{stream} holding {records} entries")
    seconds = time.perf_counter() - started
    assert client.xlen(stream) == records, "the sink wrote an entry twice"
    with Admin(bootstrap) as admin:
        admin.alter_connector(name, "delete")
    if startups is not None:
        startups.append(first_s)
    return seconds


# -- source --------------------------------------------------------------------------------------


def fill_stream(server: RedisProcess, stream: str, records: int, value: bytes) -> None:
    client = server.client()
    for start in range(0, records, BATCH):
        pipeline = client.pipeline(transaction=False)
        for n in range(start, min(start + BATCH, records)):
            pipeline.xadd(stream, {"device": f"d{n % 100}", "v": value})
        pipeline.execute()


def source_hand_bridge(bootstrap: str, server: RedisProcess, stream: str, topic: str, records: int) -> float:
    """redis-py XREADGROUP, produce with acks=all, XACK after the produce: seconds until all are acknowledged."""
    client = server.client()
    client.xgroup_create(stream, "hand", id="0")
    copied = 0
    started = time.perf_counter()
    with Producer(bootstrap, acks="all", linger_ms=5) as producer:
        while copied < records:
            reply = client.xreadgroup("hand", "hand-0", {stream: ">"}, count=BATCH, block=1000)
            if not reply:
                continue
            entries = reply[0][1]
            futures = [producer.send(topic, key=fields[b"device"], value=fields[b"v"]) for _, fields in entries]
            producer.flush()
            for future in futures:
                future.result(timeout=60)
            client.xack(stream, "hand", *[entry_id for entry_id, _ in entries])
            copied += len(entries)
    seconds = time.perf_counter() - started
    assert client.xpending(stream, "hand")["pending"] == 0 and end_offsets(bootstrap, topic) == records
    return seconds


def source_connector(bootstrap: str, server: RedisProcess, name: str, stream: str, topic: str, records: int) -> float:
    """A redis-source from ``stream`` into ``topic``: seconds from create until every entry is in the log."""
    client = server.client()
    group = f"mqbroker-{name}"
    started = time.perf_counter()
    with Admin(bootstrap) as admin:
        admin.create_connector(name, {"type": "redis-source", "topic": topic, "redis.stream": stream,
                                      "redis.url": server.url(), "key.field": "device", "value.field": "v"})

    def done() -> bool:
        try:
            return end_offsets(bootstrap, topic) >= records and client.xpending(stream, group)["pending"] == 0
        except Exception:  # the topic or the group does not exist yet
            return False

    wait_until(done, f"{topic} holding {records} records", interval_s=0.05)
    seconds = time.perf_counter() - started
    assert end_offsets(bootstrap, topic) == records, "the source produced an entry twice"
    with Admin(bootstrap) as admin:
        admin.alter_connector(name, "delete")
    return seconds


# -- mirror --------------------------------------------------------------------------------------


def mirror_hand_bridge(source: str, target: str, topic: str, remote: str, records: int) -> float:
    """A Consumer on the source, a Producer (acks=all) on the target, key and value kept: seconds."""
    with Admin(target) as admin:
        admin.create_topics([remote], partitions=2)
    copied = 0
    started = time.perf_counter()
    with Consumer(source, group_id=None) as consumer, Producer(target, acks="all", linger_ms=5) as producer:
        consumer.assign([(topic, 0), (topic, 1)])
        for partition in (0, 1):
            consumer.seek((topic, partition), 0)
        futures = []
        while copied < records:
            for message in consumer.poll(timeout=1.0):
                futures.append(producer.send(remote, key=message.key, value=message.value, partition=message.partition,
                                             headers=message.headers))
                copied += 1
        producer.flush()
        for future in futures:
            future.result(timeout=60)
    return time.perf_counter() - started


def mirror_connector(source: str, target: str, name: str, alias: str, topic: str, records: int) -> float:
    """A mirror of ``topic`` (remote name ``<alias>.<topic>``): seconds from create until the target holds it all."""
    started = time.perf_counter()
    with Admin(target) as admin:
        admin.create_connector(name, {"type": "mirror", "source.bootstrap": source, "source.alias": alias,
                                      "target.alias": "bench", "topics": topic, "sync.group.offsets": "false"})
    remote = f"{alias}.{topic}"
    wait_until(lambda: end_offsets(target, remote) >= records, f"{remote} holding {records} records", 0.05)
    seconds = time.perf_counter() - started
    assert end_offsets(target, remote) == records
    with Admin(target) as admin:
        admin.alter_connector(name, "delete")
    return seconds


# -- latency -------------------------------------------------------------------------------------


def _read_stream_delays(port: int, stream: str, total: int, ready: Any, results: Any) -> None:
    """Child process: XREAD the Stream from its end; each paced entry's delay in milliseconds."""
    client = redis.Redis(host="127.0.0.1", port=port)
    delays: list[float] = []
    last = "$"
    ready.set()
    deadline = time.monotonic() + DEADLINE_S
    while len(delays) < total and time.monotonic() < deadline:
        for _, entries in client.xread({stream: last}, count=1000, block=1000) or []:
            for entry_id, fields in entries:
                last = entry_id
                value = fields.get(b"value", b"")
                if value.startswith(LATENCY_MARK):
                    (sent_at,) = struct.unpack_from(">d", value, len(LATENCY_MARK))
                    delays.append((time.monotonic() - sent_at) * 1000)
    results.send((delays, time.monotonic()))


def _read_topic_delays(bootstrap: str, topic: str, total: int, ready: Any, results: Any) -> None:
    """Child process: consume ``topic`` from its end; each paced record's delay in milliseconds."""
    delays: list[float] = []
    with Consumer(bootstrap, auto_offset_reset="latest") as consumer:
        consumer.assign([(topic, 0), (topic, 1)])
        consumer.poll(timeout=0.5)
        ready.set()
        deadline = time.monotonic() + DEADLINE_S
        while len(delays) < total and time.monotonic() < deadline:
            for message in consumer.poll(timeout=0.2):
                if message.value and message.value.startswith(LATENCY_MARK):
                    (sent_at,) = struct.unpack_from(">d", message.value, len(LATENCY_MARK))
                    delays.append((time.monotonic() - sent_at) * 1000)
    results.send((delays, time.monotonic()))


def paced_latency(reader: Callable[..., None], reader_args: tuple[Any, ...], send: Callable[[bytes], None],
                  flush: Callable[[], None], rate: int, seconds: float, value_bytes: int) -> dict[str, float]:
    """Send ``rate`` records a second for ``seconds`` through ``send``; p50/p99 of what the reader measured."""
    total = int(rate * seconds)
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    receiving, sending = context.Pipe(duplex=False)
    child = context.Process(target=reader, args=(*reader_args, total, ready, sending))
    child.start()
    if not ready.wait(60):
        raise RuntimeError("the latency reader did not start")
    time.sleep(0.5)
    padding = b"x" * max(0, value_bytes - len(LATENCY_MARK) - 8)
    started = time.monotonic()
    burst = 10
    for n in range(0, total, burst):
        pause = started + n / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        for _ in range(burst):
            send(LATENCY_MARK + struct.pack(">d", time.monotonic()) + padding)
    flush()
    sent_s = time.monotonic() - started
    if not receiving.poll(DEADLINE_S):
        raise RuntimeError("the latency reader sent no result")
    received, last_arrival = receiving.recv()
    delays = sorted(received)
    child.join(30)
    if len(delays) != total:
        raise RuntimeError(f"the reader saw {len(delays)} of {total} paced records")
    return {"p50_ms": delays[len(delays) // 2], "p99_ms": delays[int(len(delays) * 0.99)], "records": total,
            "sent_per_s": total / sent_s, "delivered_per_s": total / (last_arrival - started)}


def latencies(broker: BrokerProcess, east: BrokerProcess, server: RedisProcess, rate: int, seconds: float,
              value_bytes: int) -> dict[str, dict[str, float]]:
    """End-to-end latency through each connector at a paced rate (the connectors running before it starts)."""
    bootstrap = broker.bootstrap
    results: dict[str, dict[str, float]] = {}
    with Admin(bootstrap) as admin:
        admin.create_topics(["lat-sink", "lat-source"], partitions=2)
        admin.create_connector("lat-sink", {"type": "redis-sink", "topics": "lat-sink", "redis.url": server.url(),
                                            "redis.stream": "lat-sink"})
        admin.create_connector("lat-source", {"type": "redis-source", "topic": "lat-source", "redis.stream": "lat-in",
                                              "redis.url": server.url(), "value.field": "value"})
    with Admin(east.bootstrap) as admin:
        admin.create_topics(["lat-mirror"], partitions=2)
    with Admin(bootstrap) as admin:
        admin.create_connector("lat-mirror", {"type": "mirror", "source.bootstrap": east.bootstrap,
                                              "source.alias": "east", "target.alias": "bench", "topics": "lat-mirror",
                                              "sync.group.offsets": "false", "fetch.wait.ms": "100"})
    time.sleep(3)  # every task started and connected

    with Producer(bootstrap, acks="all", linger_ms=1) as producer:
        results["sink"] = paced_latency(_read_stream_delays, (server.port, "lat-sink"),
                                        lambda value: producer.send("lat-sink", value=value), producer.flush,
                                        rate, seconds, value_bytes)
    client = server.client()
    pipeline = client.pipeline(transaction=False)

    def xadd(value: bytes) -> None:
        pipeline.xadd("lat-in", {"value": value})
        if len(pipeline) >= 10:
            pipeline.execute()

    results["source"] = paced_latency(_read_topic_delays, (bootstrap, "lat-source"), xadd, pipeline.execute,
                                      rate, seconds, value_bytes)
    wait_until(lambda: "east.lat-mirror" in remote_topics(bootstrap), "the mirror creating east.lat-mirror")
    with Producer(east.bootstrap, acks="all", linger_ms=1) as producer:
        results["mirror"] = paced_latency(_read_topic_delays, (bootstrap, "east.lat-mirror"),
                                          lambda value: producer.send("lat-mirror", value=value), producer.flush,
                                          rate, seconds, value_bytes)
    return results


def mirror_steady(east: BrokerProcess, broker: BrokerProcess, rate: int, seconds: float,
                  value_bytes: int) -> dict[str, float]:
    """A mirror kept busy by a producer paced at ``rate`` records/s on the source: what it delivers per second
    (msg/s, MB/s: the records over the time from the first send to the last arrival in the target, read by
    another process) and the replication lag of each record (source send → read in the target), p50/p99."""
    with Admin(east.bootstrap) as admin:
        admin.create_topics(["steady"], partitions=2)
    with Admin(broker.bootstrap) as admin:
        admin.create_connector("steady", {"type": "mirror", "source.bootstrap": east.bootstrap,
                                          "source.alias": "east", "target.alias": "bench", "topics": "steady",
                                          "sync.group.offsets": "false", "fetch.wait.ms": "100"})
    wait_until(lambda: "east.steady" in remote_topics(broker.bootstrap), "the mirror creating east.steady")
    with Producer(east.bootstrap, acks="all", linger_ms=5) as producer:
        lag = paced_latency(_read_topic_delays, (broker.bootstrap, "east.steady"),
                            lambda value: producer.send("steady", value=value), producer.flush, rate, seconds,
                            value_bytes)
    copied = end_offsets(broker.bootstrap, "east.steady")
    assert copied == lag["records"], f"the target holds {copied} of {lag['records']} records"
    with Admin(broker.bootstrap) as admin:
        admin.alter_connector("steady", "delete")
    return {"offered_per_s": rate, "sent_per_s": lag["sent_per_s"], "msg_s": lag["delivered_per_s"],
            "mb_s": lag["delivered_per_s"] * value_bytes / 1e6, "lag_p50_ms": lag["p50_ms"],
            "lag_p99_ms": lag["p99_ms"], "records": copied}


# -- the run -------------------------------------------------------------------------------------


def run(records: int, value_bytes: int, rounds: int, rate: int, seconds: float, appendfsync: str,
        parts: tuple[str, ...] = PARTS, before_tree: pathlib.Path | None = None, steady_rate: int = 50_000,
        steady_seconds: float = 10.0) -> dict[str, Any]:
    value = b"v" * value_bytes
    out: dict[str, Any] = {"records": records, "value_bytes": value_bytes, "rounds": rounds,
                           "redis_appendfsync": appendfsync, "parts": list(parts),
                           "load_average": list(os.getloadavg())}
    samples: dict[str, list[float]] = {}
    startups: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="connectors-bench-") as root, processes(
            pathlib.Path(root), appendfsync, before_tree) as (broker, east, server, before):
        bootstrap = broker.bootstrap
        progress(f"filling the sink topic and the mirror's source topic with {records} records")
        if "sink" in parts:
            fill_topic(bootstrap, "sink-in", records, value)
            if before is not None:
                fill_topic(before.bootstrap, "sink-in", records, value)
        if "mirror" in parts:
            fill_topic(east.bootstrap, "orders", records, value)
        for round_number in range(rounds):
            if "sink" in parts:
                progress(f"round {round_number + 1}/{rounds}: sink")
                samples.setdefault("sink redis-py direct", []).append(
                    sink_direct(server, f"direct-{round_number}", records, value))
                samples.setdefault("sink hand bridge", []).append(
                    sink_hand_bridge(bootstrap, server, "sink-in", f"hand-{round_number}", records))
                if before is not None:
                    samples.setdefault("sink connector (before)", []).append(
                        sink_connector(before.bootstrap, server, f"before-{round_number}", "sink-in",
                                       f"before-{round_number}", records, startups.setdefault("before", [])))
                samples.setdefault("sink connector", []).append(
                    sink_connector(bootstrap, server, f"sink-{round_number}", "sink-in", f"sink-{round_number}",
                                   records, startups.setdefault("after", [])))
            if "source" in parts:
                progress(f"round {round_number + 1}/{rounds}: source")
                for variant in ("hand", "connector"):
                    stream = f"src-{variant}-{round_number}"
                    fill_stream(server, stream, records, value)
                    topic = f"from-{stream}"
                    with Admin(bootstrap) as admin:
                        admin.create_topics([topic], partitions=2)
                    if variant == "hand":
                        took = source_hand_bridge(bootstrap, server, stream, topic, records)
                    else:
                        took = source_connector(bootstrap, server, f"source-{round_number}", stream, topic, records)
                    samples.setdefault(f"source {'hand bridge' if variant == 'hand' else 'connector'}", []).append(took)
            if "mirror" in parts:
                progress(f"round {round_number + 1}/{rounds}: mirror")
                samples.setdefault("mirror hand bridge", []).append(
                    mirror_hand_bridge(east.bootstrap, bootstrap, "orders", f"hand-{round_number}.orders", records))
                samples.setdefault("mirror connector", []).append(
                    mirror_connector(east.bootstrap, bootstrap, f"mirror-{round_number}", f"m{round_number}", "orders",
                                     records))
        out["throughput"] = {name: figures(records, value_bytes, statistics.median(times))
                             for name, times in samples.items()}
        throughput = out["throughput"]
        for variant, name in (("after", "sink connector"), ("before", "sink connector (before)")):
            if variant in startups:
                first_s = statistics.median(startups[variant])
                throughput[name]["first_entry_s"] = first_s
                throughput[name]["copy_msg_s"] = records / (throughput[name]["seconds"] - first_s)
        for kind, baseline in (("sink", "sink redis-py direct"), ("source", "source hand bridge"),
                               ("mirror", "mirror hand bridge"), ("sink", "sink hand bridge"),
                               ("sink", "sink connector (before)")):
            if baseline in throughput:
                throughput[f"{kind} connector"]["ratio_to_" + baseline.split(" ", 1)[1].replace(" ", "_").replace("(", "").replace(")", "")] = (
                    throughput[baseline]["seconds"] / throughput[f"{kind} connector"]["seconds"])
        if "mirror" in parts:
            progress("steady-state mirror at a paced load")
            out["mirror_steady"] = mirror_steady(east, broker, rate=steady_rate, seconds=steady_seconds,
                                                 value_bytes=value_bytes)
        if "latency" in parts:
            progress(f"latency at {rate} records/s for {seconds} s through each connector")
            out["latency"] = latencies(broker, east, server, rate, seconds, value_bytes)
            out["latency_rate_per_s"] = rate
    out["load_average_after"] = list(os.getloadavg())
    return out


def report(out: dict[str, Any]) -> str:
    lines = [f"{out['records']} records of {out['value_bytes']} bytes, median of {out['rounds']} rounds "
             f"(acknowledged records only; redis-server appendonly yes, appendfsync {out['redis_appendfsync']})", f"{'variant':<24}{'msg/s':>12}{'MB/s':>9}{'seconds':>9}  ratio"]
    for name, figure in out["throughput"].items():
        ratios = ", ".join(f"{key[9:]} {value:.2f}" for key, value in figure.items() if key.startswith("ratio_to_"))
        lines.append(f"{name:<24}{figure['msg_s']:>12,.0f}{figure['mb_s']:>9.1f}{figure['seconds']:>9.2f}  {ratios}")
        if "first_entry_s" in figure:
            lines.append(f"{'':<4}first entry after {figure['first_entry_s']:.2f} s; from it to the last: "
                         f"{figure['copy_msg_s']:,.0f} msg/s")
    if "mirror_steady" in out:
        steady = out["mirror_steady"]
        lines.append(f"mirror at a steady load (offered {steady['offered_per_s']:,} msg/s, sent "
                     f"{steady['sent_per_s']:,.0f} msg/s): copied {steady['msg_s']:,.0f} msg/s, "
                     f"{steady['mb_s']:.1f} MB/s, lag p50 {steady['lag_p50_ms']:.1f} ms, p99 {steady['lag_p99_ms']:.1f} ms")
    if "latency" in out:
        lines.append(f"end-to-end latency at {out['latency_rate_per_s']} records/s (send → arrival, another process):")
        for name, figure in out["latency"].items():
            lines.append(f"  {name:<8} p50 {figure['p50_ms']:7.1f} ms   p99 {figure['p99_ms']:7.1f} ms   "
                         f"({figure['records']} records)")
    lines.append("load average (1, 5, 15 min) before {:.2f} {:.2f} {:.2f}, after {:.2f} {:.2f} {:.2f}".format(
        *out["load_average"], *out["load_average_after"]))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=int, default=2_000, help="paced records/s for the latency figures")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the latency load lasts")
    parser.add_argument("--redis-appendfsync", choices=("always", "everysec", "no"), default="always",
                        help="redis-server's appendfsync (always: a write is on disk before Redis acknowledges it)")
    parser.add_argument("--steady-rate", type=int, default=50_000,
                        help="records/s a producer offers the mirror's source topic for the steady-state figure")
    parser.add_argument("--steady-seconds", type=float, default=10.0, help="how long the steady mirror load lasts")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts to run, of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--before-tree", type=pathlib.Path,
                        help="a source tree (e.g. git archive of an older commit) whose sink runs beside this one's, "
                             "alternating, in a broker of its own")
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    parts = tuple(part.strip() for part in arguments.only.split(",") if part.strip())
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s) {', '.join(sorted(unknown))}: choose from {', '.join(PARTS)}")
    out = run(arguments.records, arguments.value_bytes, arguments.rounds, arguments.rate, arguments.seconds,
              arguments.redis_appendfsync, parts, arguments.before_tree, arguments.steady_rate,
              arguments.steady_seconds)
    print(json.dumps(out, indent=2) if arguments.json else report(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
