"""Quotas and hardening on a real broker: a throttled producer loses nothing, connection limits, slow clients."""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.protocols.native.codec import encode_request
from mqbroker.protocols.native.messages import ApiKey, ApiVersionsRequest
from tests.integration.brokerprocess import BrokerProcess

QUOTA_BYTES_PER_SECOND = 200_000
PER_IP_CONNECTIONS_MAX = 8


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker with a per-client produce quota, a per-IP connection limit and a 1 s frame timeout."""
    process = BrokerProcess(data_dir=tmp_path_factory.mktemp("limited") / "data", extra_args=[
        "--set", f"quotas.client_produce_bytes_per_second={QUOTA_BYTES_PER_SECOND}",
        "--set", f"quotas.connections_per_ip_max={PER_IP_CONNECTIONS_MAX}",
        "--set", "quotas.frame_timeout_ms=1000",
    ])
    process.start()
    yield process
    process.kill()


@pytest.mark.alone  # bounds a time or rate: no other test's load meanwhile
def test_a_fast_producer_is_throttled_to_its_quota_and_nothing_is_lost(limited: BrokerProcess) -> None:
    with Admin(limited.bootstrap) as admin:
        admin.create_topics(["quota"], partitions=1)
    value = b"x" * 1000
    sent = 0
    started = time.monotonic()
    # a small buffer: ``send`` blocks while the broker holds the replies, so sending paces with acknowledgements
    with Producer(limited.bootstrap, acks=1, linger_ms=0, batch_size=16_384, buffer_bytes_max=64_000,
                  client_id="fast") as producer:
        while time.monotonic() - started < 8.0:  # as fast as the broker lets it
            producer.send("quota", value=value)
            sent += 1
        producer.flush(30)
        elapsed_s = time.monotonic() - started
    rate = sent * len(value) / elapsed_s
    assert abs(rate - QUOTA_BYTES_PER_SECOND) / QUOTA_BYTES_PER_SECOND <= 0.20, rate
    consumer = Consumer(limited.bootstrap, topics=["quota"], auto_offset_reset="earliest")
    try:
        received = 0
        deadline = time.monotonic() + 30
        while received < sent and time.monotonic() < deadline:
            received += len(consumer.poll(0.5))
    finally:
        consumer.close()
    assert received == sent


def _ping(sock: socket.socket) -> bool:
    """Send an ApiVersions request (v0, correlation id 7); True if an answer comes back."""
    try:
        sock.sendall(encode_request(ApiKey.API_VERSIONS, 0, 7, "probe", ApiVersionsRequest()))
        return len(sock.recv(65536)) > 0
    except OSError:
        return False


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def test_connections_beyond_the_per_ip_limit_are_refused_without_harming_open_ones(limited: BrokerProcess) -> None:
    port = limited.ports["native"]
    open_ones = _every_slot(port)  # once the connections of earlier tests are closed
    try:
        flood = [_connect(port) for _ in range(50)]
        assert not any(_ping(sock) for sock in flood)  # each was closed as soon as it was accepted
        for sock in flood:
            sock.close()
        assert all(_ping(sock) for sock in open_ones)
    finally:
        for sock in open_ones:
            sock.close()
    for sock in _every_slot(port):  # slots are released on close
        sock.close()


def _every_slot(port: int, timeout_s: float = 20.0) -> list[socket.socket]:
    """``PER_IP_CONNECTIONS_MAX`` connections that all answer (retried while older ones are still being closed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        sockets = [_connect(port) for _ in range(PER_IP_CONNECTIONS_MAX)]
        if all([_ping(sock) for sock in sockets]):
            return sockets
        for sock in sockets:
            sock.close()
        assert time.monotonic() < deadline, f"{PER_IP_CONNECTIONS_MAX} connections never all answered"
        time.sleep(0.1)


def test_a_slow_loris_connection_is_closed_after_the_frame_timeout(limited: BrokerProcess) -> None:
    sock = _connect(limited.ports["native"])
    try:
        started = time.monotonic()
        closed_after_s = None
        sock.settimeout(0.2)
        for byte in struct.pack(">i", 100) + b"\x00" * 100:  # one byte every 0.2 s: a frame would take 21 s
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(1) == b"":
                    closed_after_s = time.monotonic() - started
                    break
            except TimeoutError:
                continue
            except OSError:
                closed_after_s = time.monotonic() - started
                break
        # Closed by the frame timeout, long before the 21 s the frame would take (the bound leaves a loaded machine room).
        assert closed_after_s is not None and closed_after_s < 10.0
    finally:
        sock.close()

