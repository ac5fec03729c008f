"""Crash safety and misbehaving peers: kill -9 with unacked confirmed messages, bad frames, a client
that stops sending heartbeats."""

from __future__ import annotations

import pathlib
import socket
import struct
import time
from collections.abc import Iterator

import pika
import pytest

from mqbroker import limits

from tests.integration.amqp_support import AmqpBroker, amqp_broker, running_broker  # noqa: F401 (fixture)
from tests.integration.kafka_support import unique

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


@pytest.fixture
def fresh_broker(tmp_path: pathlib.Path) -> Iterator[AmqpBroker]:
    """A broker of the test's own (one it kills and restarts)."""
    yield from running_broker(tmp_path / "data")


def test_every_confirmed_message_survives_kill_9_while_unacked(fresh_broker: AmqpBroker) -> None:
    """Every confirmed message of a durable queue survives; a non-durable queue and its binding do not."""
    connection = fresh_broker.connect()
    channel = connection.channel()
    channel.exchange_declare("orders", "topic", durable=True)
    channel.queue_declare("durable-work", durable=True)
    channel.queue_bind("durable-work", "orders", "order.#")
    channel.queue_declare("scratch", durable=False)  # RabbitMQ deletes a non-durable queue when its node restarts
    channel.queue_bind("scratch", "orders", "order.#")
    channel.confirm_delivery()
    sent = [f"message {index}".encode() for index in range(200)]
    for body in sent:
        channel.basic_publish("orders", "order.new", body)  # returns once confirmed
    consumer = fresh_broker.connect()
    consumer_channel = consumer.channel()
    consumer_channel.basic_qos(prefetch_count=50)
    taken = []
    for method, _, body in consumer_channel.consume("durable-work", inactivity_timeout=3):
        taken.append(body)
        if len(taken) == 50:
            break
    fresh_broker.kill()
    fresh_broker.restart()
    after = fresh_broker.connect()
    after_channel = after.channel()
    after_channel.queue_declare("durable-work", passive=True)  # the declaration survived
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
        after.channel().queue_declare("scratch", passive=True)
    assert gone.value.reply_code == 404, "the non-durable queue was deleted by the restart"
    received = []
    # The 50 delivered but unacknowledged come back once the restarted share-group host gives up on their
    # holder (share_restored_lease_grace_ms, docs/amqp.md); the other 150 at once.
    deadline = time.monotonic() + limits.share_restored_lease_grace_ms / 1000 + 20
    for method, _, body in after_channel.consume("durable-work", inactivity_timeout=1):
        if method is not None:
            received.append(body)
            after_channel.basic_ack(method.delivery_tag)
        if len(received) >= len(sent) or time.monotonic() > deadline:
            break
    after_channel.cancel()
    assert sorted(received) == sorted(sent)
    after_channel.confirm_delivery()
    after_channel.basic_publish("orders", "order.late", b"routed after restart")  # the binding survived
    assert after_channel.basic_get("durable-work", auto_ack=True)[2] == b"routed after restart"
    after.close()


def _open_raw(broker: AmqpBroker) -> socket.socket:
    """A socket past the handshake's protocol header (the server answered connection.start)."""
    sock = socket.create_connection(("127.0.0.1", broker.ports["amqp"]), timeout=5)
    sock.sendall(PROTOCOL_HEADER)
    sock.recv(4096)
    return sock


def _close_code(sock: socket.socket) -> int:
    """The reply code of the connection.close the server sends (10, 50)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
        marker = data.find(b"\x00\x0a\x00\x32")
        if marker >= 0 and len(data) >= marker + 6:
            return int(struct.unpack_from(">H", data, marker + 4)[0])
    raise AssertionError(f"no connection.close in {data!r}")


@pytest.mark.parametrize(("frame", "code"), [
    (b"\x01\x00\x00\x00\x00\x00\x04\x00\x0a\x00\x0b\x00", 501),  # no frame-end octet
    (b"\x09\x00\x00\x00\x00\x00\x00\xce", 501),  # unknown frame type
    (struct.pack(">BHI", 1, 0, 10_000_000) + b"x", 501),  # larger than frame_max
    (struct.pack(">BHI", 1, 0, 4) + b"\x00\x63\x00\x01\xce", 540),  # unknown class
])
def test_malformed_frames_close_with_the_spec_code_and_spare_other_connections(
    amqp_broker: AmqpBroker, frame: bytes, code: int
) -> None:
    bystander = amqp_broker.connect()
    channel = bystander.channel()
    queue = unique("bystander")
    channel.queue_declare(queue, durable=True)
    sock = _open_raw(amqp_broker)
    sock.sendall(frame)
    assert _close_code(sock) == code
    sock.close()
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"still here")
    assert channel.basic_get(queue, auto_ack=True)[2] == b"still here"
    bystander.close()


def test_frame_on_an_unopened_channel_is_a_channel_error(amqp_broker: AmqpBroker) -> None:
    connection = amqp_broker.connect()
    channel = connection.channel()
    impl = connection._impl
    # basic.qos on channel 77, which was never opened.
    payload = struct.pack(">HHIHB", 60, 10, 0, 1, 0)
    impl._transport.write(struct.pack(">BHI", 1, 77, len(payload)) + payload + b"\xce")
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=2)
        channel.queue_declare("x")
    assert closed.value.reply_code == 504


def _method_frame(channel: int, class_id: int, method_id: int, arguments: bytes) -> bytes:
    payload = struct.pack(">HH", class_id, method_id) + arguments
    return struct.pack(">BHI", 1, channel, len(payload)) + payload + b"\xce"


def _shortstr(text: str) -> bytes:
    return bytes([len(text)]) + text.encode()


def _await_method(sock: socket.socket, buffer: bytearray, class_id: int, method_id: int) -> None:
    """Read frames until the method ``class_id.method_id`` arrives (heartbeats and others are skipped)."""
    while True:
        while len(buffer) >= 7 and len(buffer) >= 8 + struct.unpack_from(">I", buffer, 3)[0]:
            frame_type, size = buffer[0], struct.unpack_from(">I", buffer, 3)[0]
            frame, buffer[:] = bytes(buffer[: 8 + size]), buffer[8 + size :]
            if frame_type == 1 and struct.unpack_from(">HH", frame, 7) == (class_id, method_id):
                return
        chunk = sock.recv(65536)
        assert chunk, f"the server closed before sending {class_id}.{method_id}"
        buffer += chunk


def test_a_client_that_goes_silent_is_dropped_after_two_missed_heartbeats(amqp_broker: AmqpBroker) -> None:
    sock = socket.create_connection(("127.0.0.1", amqp_broker.ports["amqp"]), timeout=10)
    buffer = bytearray()
    sock.sendall(PROTOCOL_HEADER)
    _await_method(sock, buffer, 10, 10)  # connection.start
    sock.sendall(_method_frame(0, 10, 11, struct.pack(">I", 0) + _shortstr("PLAIN")
                               + struct.pack(">I", 12) + b"\x00guest\x00guest" + _shortstr("en_US")))
    _await_method(sock, buffer, 10, 30)  # connection.tune
    sock.sendall(_method_frame(0, 10, 31, struct.pack(">HIH", 0, 131072, 1)))  # tune-ok: heartbeat 1 s
    sock.sendall(_method_frame(0, 10, 40, _shortstr("/") + _shortstr("") + b"\x00"))
    _await_method(sock, buffer, 10, 41)  # open-ok
    sock.sendall(_method_frame(1, 20, 10, _shortstr("")))
    _await_method(sock, buffer, 20, 11)  # channel.open-ok
    # An exclusive queue: it lives exactly as long as the broker believes this connection does.
    sock.sendall(_method_frame(1, 50, 10, struct.pack(">H", 0) + _shortstr("silent-owned") + b"\x04"
                               + struct.pack(">I", 0)))
    _await_method(sock, buffer, 50, 11)  # declare-ok
    silent_since = time.monotonic()
    received = bytearray(buffer)
    while chunk := sock.recv(65536):  # from now on the client sends nothing, not even heartbeats
        received += chunk
        assert time.monotonic() - silent_since < 30, "the silent client was never dropped"
    dropped_after_s = time.monotonic() - silent_since
    sock.close()
    # Two missed 1 s heartbeats: not before 1.5 s; the upper bound leaves a loaded machine room.
    assert 1.5 <= dropped_after_s <= 12.0
    assert received and all(received[index : index + 8] == b"\x08\x00\x00\x00\x00\x00\x00\xce"
                            for index in range(0, len(received), 8))  # the broker sent heartbeats only
    other = amqp_broker.connect()
    other.channel().queue_declare("silent-owned", exclusive=True)  # 405 while the silent owner counted as alive
    other.close()
