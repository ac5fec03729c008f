"""The single-node broker over its native protocol: long-poll, persistence, bad input, metrics.

Tests that leave the broker running and write their own topics share one (``shared_broker``); those that
stop it, count its metrics or need other settings start their own.
"""

from __future__ import annotations

import os
import pathlib
import re
import select
import struct
import subprocess
import threading
import time
import urllib.request
import zlib

import pytest

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.connectors.state import CONNECTORS_TOPIC
from mqbroker.errors import ErrorCode
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native.codec import ErrorResponse
from mqbroker.protocols.schema import compile_message, encode_into
from mqbroker.records.builder import BatchBuilder
from tests.integration.brokerprocess import GRACEFUL_EXIT_CODES, TWISTD, BrokerProcess, free_port
from tests.integration.nativewire import RawNativeConnection


def _batch(*values: bytes, producer_id: int = -1, base_sequence: int = -1) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1, base_sequence=base_sequence)
    for value in values:
        builder.append(int(time.time() * 1000), None, value)
    return builder.build()


def _produce(topic: str, records: bytes, acks: int = -1) -> m.ProduceRequest:
    return m.ProduceRequest(acks=acks, timeout_ms=5000, topics=(
        m.ProduceTopic(name=topic, partitions=(m.ProducePartition(partition_index=0, records=records),)),))


def _fetch(topic: str, offset: int, max_wait_ms: int) -> m.FetchRequest:
    return m.FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, topics=(
        m.FetchTopic(name=topic, partitions=(
            m.FetchPartition(partition_index=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),))


def _metadata_works(broker: BrokerProcess) -> bool:
    connection = RawNativeConnection(broker.ports["native"])
    try:
        return isinstance(connection.call(m.MetadataRequest(topics=None)), m.MetadataResponse)
    finally:
        connection.close()


#: The wait of the fetch that a produce must wake (it would answer empty after this long on its own).
WAKEUP_FETCH_WAIT_MS = 30_000


@pytest.mark.alone  # bounds a time or rate: no other test's load meanwhile
def test_a_waiting_fetch_returns_as_soon_as_a_produce_arrives(shared_broker: BrokerProcess) -> None:
    waiting = RawNativeConnection(shared_broker.ports["native"])
    producing = RawNativeConnection(shared_broker.ports["native"])
    producing.call(_produce("wakeup", _batch(b"first")))
    correlation_id = waiting.send(_fetch("wakeup", 1, max_wait_ms=WAKEUP_FETCH_WAIT_MS))
    time.sleep(0.3)  # give the fetch time to park on the empty end of the log
    assert not select.select([waiting.socket], [], [], 0)[0], "the fetch answered before there was anything to read"
    produced_at = time.perf_counter()
    producing.call(_produce("wakeup", _batch(b"second")))
    response = waiting.receive(correlation_id)
    woken_after_s = time.perf_counter() - produced_at
    assert len(response.topics[0].partitions[0].records) > 0
    # The produce woke it: the answer came long before the fetch's own 30 s wait ran out (on an idle
    # machine within milliseconds of the produce; the bound leaves room for a loaded one's fsync and scheduling).
    assert woken_after_s < WAKEUP_FETCH_WAIT_MS / 1000 / 6, f"the fetch waited {woken_after_s * 1000:.1f} ms after the produce"


def test_an_empty_long_poll_waits_its_max_wait(shared_broker: BrokerProcess) -> None:
    connection = RawNativeConnection(shared_broker.ports["native"])
    connection.call(_produce("idle", _batch(b"x")))
    started = time.perf_counter()
    response = connection.call(_fetch("idle", 1, max_wait_ms=300))
    assert 0.25 < time.perf_counter() - started < 2.0
    assert len(response.topics[0].partitions[0].records) == 0


def test_messages_survive_a_graceful_restart_which_skips_recovery(broker: BrokerProcess) -> None:
    with Producer(broker.bootstrap, acks="all") as producer:
        for index in range(1000):
            producer.send("persist", f"m{index}".encode())
        producer.flush()
    assert broker.stop() in GRACEFUL_EXIT_CODES
    assert "stopped cleanly" in broker.log_text()
    assert (broker.data_dir / ".clean-shutdown").exists()
    broker.restart()
    with Consumer(broker.bootstrap, topics=["persist"], auto_offset_reset="earliest") as consumer:
        values = _read(consumer, 1000)
    assert values == [f"m{index}".encode() for index in range(1000)]


def _read(consumer: Consumer, count: int, timeout_s: float = 20.0) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        values += [message.value for message in consumer.poll(timeout=0.5)]
    return values


def test_an_idempotent_retry_on_a_new_connection_is_written_once(shared_broker: BrokerProcess) -> None:
    first = RawNativeConnection(shared_broker.ports["native"])
    identity = first.call(m.InitProducerIdRequest())
    batch = _batch(b"a", b"b", b"c", producer_id=identity.producer_id, base_sequence=0)
    original = first.call(_produce("retried", batch)).topics[0].partitions[0]
    first.close()  # the producer never saw the answer: it retries on a new connection
    second = RawNativeConnection(shared_broker.ports["native"])
    retried = second.call(_produce("retried", batch)).topics[0].partitions[0]
    assert (retried.error_code, retried.base_offset) == (0, original.base_offset)
    with Admin(shared_broker.bootstrap) as admin:
        assert admin.list_offset("retried", 0, -1) == 3


def test_a_sequence_gap_is_refused_with_out_of_order_sequence(shared_broker: BrokerProcess) -> None:
    connection = RawNativeConnection(shared_broker.ports["native"])
    identity = connection.call(m.InitProducerIdRequest())
    connection.call(_produce("gap", _batch(b"a", producer_id=identity.producer_id, base_sequence=0)))
    result = connection.call(_produce("gap", _batch(b"c", producer_id=identity.producer_id, base_sequence=5)))
    assert result.topics[0].partitions[0].error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_an_unknown_topic_without_auto_create_is_a_clear_error(tmp_path) -> None:
    broker = BrokerProcess(data_dir=tmp_path / "data", extra_args=["--set", "auto_create_topics=false"])
    broker.start()
    try:
        connection = RawNativeConnection(broker.ports["native"])
        result = connection.call(_fetch("missing", 0, max_wait_ms=0)).topics[0].partitions[0]
        assert result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert "mqbroker topics create missing" in result.error_message
        produced = connection.call(_produce("missing", _batch(b"x"))).topics[0].partitions[0]
        assert produced.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        broker.kill()


def _request_frame(api_key: int, version: int, body: bytes = b"") -> bytes:
    header = m.ApiKey  # noqa: F841 (the header layout is the codec's RequestHeader)
    from mqbroker.protocols.native.codec import RequestHeader

    parts: list[bytes | memoryview] = []
    encode_into(compile_message(RequestHeader), RequestHeader(api_key=api_key, api_version=version,
                                                              correlation_id=42, client_id="raw"), parts)
    payload = b"".join(bytes(part) for part in parts) + body
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize(
    ("api_key", "version", "code"),
    [(999, 0, ErrorCode.UNKNOWN_API_KEY), (int(m.ApiKey.METADATA), 77, ErrorCode.UNSUPPORTED_VERSION)],
)
def test_unknown_api_keys_and_versions_get_an_error_and_the_connection_stays_open(
    shared_broker: BrokerProcess, api_key: int, version: int, code: ErrorCode
) -> None:
    connection = RawNativeConnection(shared_broker.ports["native"])
    connection.send_bytes(_request_frame(api_key, version))
    data = connection.socket.recv(4096)
    correlation_id, error_code = struct.unpack_from(">ih", data, 4)
    assert (correlation_id, error_code) == (42, code)
    assert isinstance(connection.call(m.MetadataRequest(topics=None)), m.MetadataResponse)


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">i", 2**30) + b"x" * 16,  # announces a frame far above the limit
        struct.pack(">i", -5),  # negative length
        _request_frame(int(m.ApiKey.PRODUCE), 0, b"\x00\x01"),  # truncated body
    ],
    ids=["oversized", "negative-length", "truncated-body"],
)
def test_malformed_frames_close_only_that_connection(shared_broker: BrokerProcess, garbage: bytes) -> None:
    topic = f"bystander-{zlib.crc32(garbage)}"  # the module's broker is shared: a topic per case
    bystander = RawNativeConnection(shared_broker.ports["native"])
    bystander.call(_produce(topic, _batch(b"before")))
    offender = RawNativeConnection(shared_broker.ports["native"])
    offender.send_bytes(garbage)
    offender.read_until_closed()  # the broker answers (when it can read a header) and closes
    produced = bystander.call(_produce(topic, _batch(b"after"))).topics[0].partitions[0]
    assert (produced.error_code, produced.base_offset) == (0, 1)
    assert _metadata_works(shared_broker)


def test_a_corrupt_batch_is_refused_and_nothing_is_appended(shared_broker: BrokerProcess) -> None:
    connection = RawNativeConnection(shared_broker.ports["native"])
    corrupt = bytearray(_batch(b"payload"))
    corrupt[-1] ^= 0xFF  # breaks the CRC
    result = connection.call(_produce("crc", bytes(corrupt))).topics[0].partitions[0]
    assert result.error_code == ErrorCode.CORRUPT_MESSAGE
    assert connection.call(_produce("crc", _batch(b"good"))).topics[0].partitions[0].base_offset == 0


def test_a_batch_over_max_message_bytes_is_refused(shared_broker: BrokerProcess) -> None:
    with Admin(shared_broker.bootstrap) as admin:
        admin.create_topics(["small"], 1, configs={"max.message.bytes": "1000"})
    connection = RawNativeConnection(shared_broker.ports["native"])
    result = connection.call(_produce("small", _batch(b"x" * 2000))).topics[0].partitions[0]
    assert result.error_code == ErrorCode.MESSAGE_TOO_LARGE


def test_health_ready_and_metrics_are_served(broker: BrokerProcess) -> None:
    with Producer(broker.bootstrap, acks=1) as producer:
        producer.send("observed", b"x" * 100).result(10)
    base = f"http://127.0.0.1:{broker.ports['http']}"
    with urllib.request.urlopen(base + "/health") as reply:
        assert reply.read() == b"ok\n"
    with urllib.request.urlopen(base + "/metrics") as reply:
        text = reply.read().decode()
    with Admin(broker.bootstrap) as admin:  # the connector runtime's claims (no connector runs: nothing else)
        internal = sum(admin.list_offset(CONNECTORS_TOPIC, partition, -1)
                       for partition in range(admin.describe_topics([CONNECTORS_TOPIC])[CONNECTORS_TOPIC]))
    assert f"mqbroker_produced_records_total {1.0 + internal}" in text
    assert 'mqbroker_request_latency_seconds_count{api="produce",protocol="native"}' in text
    partitions = re.search(r"^mqbroker_partitions (\S+)$", text, re.M)
    assert partitions is not None and float(partitions.group(1)) >= 1


def test_a_bad_configuration_value_stops_start_up_naming_the_key(tmp_path) -> None:
    result = subprocess.run([*TWISTD, "-n", "--pidfile=", "mqbroker", "--data-dir", str(tmp_path),
                             "--set", "log.retention.ms=soon"], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "retention.ms" in result.stdout + result.stderr


def test_cpu_affinity_keeps_every_broker_thread_on_the_chosen_cpu(tmp_path) -> None:
    cpu = min(os.sched_getaffinity(0))
    process = BrokerProcess(data_dir=tmp_path / "data", extra_args=["--set", f"cpu_affinity={cpu}"])
    process.start()
    try:
        _metadata_works(process)  # the background pool has started by now
        assert process.process is not None
        tasks = pathlib.Path(f"/proc/{process.process.pid}/task")
        masks = {task.name: re.search(r"^Cpus_allowed_list:\s*(\S+)$", (task / "status").read_text(), re.M).group(1)
                 for task in tasks.iterdir()}
        assert len(masks) >= 2  # the reactor and the background pool (and the fsync thread where AIO is missing)
        assert set(masks.values()) == {str(cpu)}
        assert f"broker threads run on CPU(s) {cpu}" in process.log_text()
    finally:
        process.kill()


def test_a_port_in_use_stops_start_up(tmp_path) -> None:
    import socket

    with socket.socket() as occupied:
        occupied.bind(("127.0.0.1", 0))
        occupied.listen()
        port = occupied.getsockname()[1]
        result = subprocess.run([*TWISTD, "-n", "--pidfile=", "mqbroker", "--data-dir", str(tmp_path),
                                 "--host", "127.0.0.1", "--native-port", str(port), "--mqtt-port", "0", "--kafka-port", "0",
                                 "--amqp-port", "0", "--http-port", str(free_port()), "--controller-port", "0"],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert str(port) in result.stdout + result.stderr


def test_sigterm_answers_a_waiting_fetch_before_the_broker_exits(broker: BrokerProcess) -> None:
    connection = RawNativeConnection(broker.ports["native"])
    connection.call(_produce("draining", _batch(b"x")))
    correlation_id = connection.send(_fetch("draining", 1, max_wait_ms=20_000))
    time.sleep(0.2)
    answered: list[object] = []
    reader = threading.Thread(target=lambda: answered.append(connection.receive(correlation_id)))
    reader.start()
    started = time.monotonic()
    assert broker.stop() in GRACEFUL_EXIT_CODES
    reader.join(5)
    assert answered and not isinstance(answered[0], ErrorResponse)
    assert time.monotonic() - started < 10


def test_compacted_internal_topics_get_small_segments_so_they_compact(shared_broker: BrokerProcess) -> None:
    with Admin(shared_broker.bootstrap) as admin:
        deadline = time.monotonic() + 20
        while "__consumer_offsets" not in admin.list_topics():
            assert time.monotonic() < deadline, "the offsets topic was never created"
            time.sleep(0.1)
        configs = admin.describe_configs("__consumer_offsets")
    assert (configs["cleanup.policy"], configs["segment.bytes"]) == ("compact", str(16 * 1024 * 1024))

