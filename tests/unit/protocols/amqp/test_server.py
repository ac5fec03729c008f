"""The AMQP session (server.py) on StringTransport and a fake clock: heartbeats, confirms, backpressure, causal
routing in a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from mqbroker import limits
from mqbroker.protocols.adapter import CodecProtocol
from mqbroker.protocols.amqp import codec, spec
from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.definitions_fence import DefinitionsFence
from mqbroker.protocols.amqp.held_bytes import ByteBudget
from mqbroker.protocols.amqp.queues import ConsumerKey
from mqbroker.protocols.amqp.server import AmqpSession
from mqbroker.protocols.amqp.spec import ReplyCode
from mqbroker.protocols.startup import StartedSignal


class FakeVirtualHost:
    """Just what a session uses of the virtual host when it only publishes: every publish is
    routed to one queue, whose batches the test settles by hand."""

    def __init__(self, clock: Clock, started: bool = True) -> None:
        self.clock = clock
        self.held_bytes = ByteBudget(limits.amqp_held_bytes_broker_max)
        self.started = StartedSignal(clock, "AMQP front end")
        if started:
            self.started.fire()
        self.queues: dict[str, Any] = {}
        self.batches: list[BatchStored] = []
        self.stored: list[bytes] = []
        self.runs: list[int] = []  # the size of each run of publishes stored at once
        self.gone: list[int] = []
        self.definitions = None  # a single broker: no other broker's declarations to wait for

    def now_ms(self) -> int:
        return int(self.clock.seconds() * 1000)

    def store(self, exchange: str, routing_key: str, headers: Any, properties_raw: bytes, body: bytes,
              expiration: str | None, *, from_client: bool = False) -> list[BatchStored]:
        if not self.batches or self.batches[-1].outcome is not None:
            self.batches.append(BatchStored())  # one batch per "reactor turn": until the test settles it
        self.stored.append(body)
        return [self.batches[-1]]

    def store_run(self, exchange: str, routing_key: str, headers: Any, properties_raw: bytes, bodies: list[bytes],
                  expiration: str | None, *, from_client: bool = False) -> list[BatchStored] | None:
        self.runs.append(len(bodies))
        return [batch for body in bodies for batch in self.store(exchange, routing_key, headers, properties_raw, body,
                                                                 expiration)][:1]

    def session_gone(self, session_id: int, holders: set[ConsumerKey]) -> None:
        self.gone.append(session_id)


class Client:
    """A session behind the generic adapter on a StringTransport, driven with encoded frames."""

    def __init__(self, heartbeat_s: int = 0, capabilities: dict[str, Any] | None = None,
                 vhost_started: bool = True) -> None:
        self.clock = Clock()
        self.vhost = FakeVirtualHost(self.clock, vhost_started)
        self.session = AmqpSession(self.vhost, self.clock)  # type: ignore[arg-type]
        self.protocol = CodecProtocol(self.session, None)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self.decoder = codec.FrameDecoder(limits.amqp_frame_bytes_max, expect_protocol_header=False)
        self.send_bytes(spec.PROTOCOL_HEADER)
        self.send(0, spec.ConnectionStartOk(client_properties={"capabilities": capabilities or {}},
                                            mechanism="PLAIN", response=b"\0guest\0guest"))
        self.heartbeat_s = heartbeat_s
        if vhost_started:
            self.open()

    def open(self) -> None:
        """The rest of the handshake, once the broker has sent Connection.Tune; then channel 1."""
        self.send(0, spec.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=self.heartbeat_s))
        self.send(0, spec.ConnectionOpen(virtual_host="/"))
        self.send(1, spec.ChannelOpen())
        assert spec.ChannelOpenOk() in self.methods()

    def send_bytes(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def send(self, channel: int, method: spec.Method) -> None:
        self.send_bytes(codec.encode_method(channel, method))

    def publish_bytes(self, body: bytes) -> bytes:
        return codec.encode_message(1, spec.BasicPublish(routing_key="q"), b"\x00\x00", body, 131072)

    def frames(self) -> list[codec.Frame]:
        """Everything the broker wrote since the last call."""
        data = self.transport.value()
        self.transport.clear()
        return self.decoder.receive_data(data)

    def methods(self) -> list[spec.Method]:
        return [frame.method for frame in self.frames() if isinstance(frame, codec.MethodFrame)]


def test_heartbeats_are_sent_when_idle_and_a_silent_client_is_dropped() -> None:
    client = Client(heartbeat_s=2)
    client.frames()
    client.clock.pump([1.0, 1.0])  # half an interval after the handshake's last frame: a heartbeat goes out
    assert [type(frame) for frame in client.frames()] == [codec.HeartbeatFrame]
    client.clock.advance(1.5)
    assert not client.transport.disconnecting
    client.clock.advance(0.5)  # two intervals without a frame from the client
    assert client.transport.disconnecting
    client.protocol.connectionLost(None)
    assert client.vhost.gone == [client.session.session_id]


def test_a_connection_waits_for_the_virtual_host_to_start_and_is_then_served() -> None:
    client = Client(vhost_started=False)
    assert not any(isinstance(method, spec.ConnectionTune) for method in client.methods())
    client.clock.advance(limits.front_end_ready_wait_s_max / 2)
    client.vhost.started.fire()
    assert any(isinstance(method, spec.ConnectionTune) for method in client.methods())
    client.open()


def test_a_connection_is_closed_with_320_if_the_virtual_host_does_not_start_in_time() -> None:
    client = Client(vhost_started=False)
    client.clock.advance(limits.front_end_ready_wait_s_max)
    [close] = [method for method in client.methods() if isinstance(method, spec.ConnectionClose)]
    assert close.reply_code == ReplyCode.CONNECTION_FORCED
    assert "AMQP front end has not finished starting within 5 s" in close.reply_text


def test_client_heartbeats_keep_the_connection_open() -> None:
    client = Client(heartbeat_s=2)
    for _ in range(10):
        client.clock.advance(1.0)
        client.send_bytes(codec.HEARTBEAT_FRAME)
    assert not client.transport.disconnecting


def test_pipelined_confirmed_publishes_are_acked_with_one_multiple_ack_once_their_batch_is_stored() -> None:
    client = Client()
    client.send(1, spec.ConfirmSelect())
    assert client.methods() == [spec.ConfirmSelectOk()]
    client.send_bytes(b"".join(client.publish_bytes(b"m%d" % index) for index in range(5)))
    assert client.methods() == []  # nothing is confirmed before it is durable
    assert client.vhost.runs == [5]  # alike but for their bodies: stored as one run
    [batch] = client.vhost.batches
    batch.settle(True)
    client.clock.advance(0)  # confirms go out at the end of the reactor turn
    assert client.methods() == [spec.BasicAck(delivery_tag=5, multiple=True)]


def test_the_runs_one_fsync_round_settles_are_answered_together_in_one_write() -> None:
    """Batches of three turns settled at once (one fsync round): one basic.ack for all, in one write."""
    client = Client()
    client.send(1, spec.ConfirmSelect())
    client.methods()
    for _ in range(3):
        client.vhost.batches.append(BatchStored())  # a turn of its own: a batch of its own
        client.send_bytes(b"".join(client.publish_bytes(b"m%d" % index) for index in range(4)))
    assert len(client.vhost.batches) == 3 and client.methods() == []
    writes: list[bytes] = []
    client.transport.write = writes.append  # type: ignore[method-assign]
    for batch in client.vhost.batches:
        batch.settle(True)
    assert writes == []  # nothing before the turn ends
    client.clock.advance(0)
    [written] = writes
    assert [frame.method for frame in codec.FrameDecoder(131072, expect_protocol_header=False).receive_data(written)
            ] == [spec.BasicAck(delivery_tag=12, multiple=True)]


def test_a_refused_batch_is_nacked_and_later_confirms_keep_their_order() -> None:
    client = Client()
    client.send(1, spec.ConfirmSelect())
    client.send_bytes(client.publish_bytes(b"first") * 2)
    first = client.vhost.batches[-1]
    first.settle(False)
    client.clock.advance(0)  # confirms go out at the end of the reactor turn
    client.send_bytes(client.publish_bytes(b"second"))
    client.vhost.batches[-1].settle(True)
    client.clock.advance(0)  # confirms go out at the end of the reactor turn
    assert client.methods()[1:] == [spec.BasicNack(delivery_tag=2, multiple=True, requeue=False),
                                    spec.BasicAck(delivery_tag=3, multiple=False)]


def test_the_publisher_is_blocked_while_too_many_bytes_await_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "amqp_unstored_publish_bytes_max", 1_000)
    client = Client(capabilities={"connection.blocked": True})
    client.frames()
    client.send_bytes(client.publish_bytes(b"x" * 600))
    assert client.methods() == [] and client.transport.producerState == "producing"
    client.send_bytes(client.publish_bytes(b"x" * 600))
    [blocked] = client.methods()
    assert isinstance(blocked, spec.ConnectionBlocked)
    assert client.transport.producerState == "paused"  # the socket is not read meanwhile
    client.vhost.batches[-1].settle(True)
    assert client.methods() == [spec.ConnectionUnblocked()]
    assert client.transport.producerState == "producing"


def test_a_client_without_the_capability_is_paused_but_never_sent_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "amqp_unstored_publish_bytes_max", 100)
    client = Client()
    client.frames()
    client.send_bytes(client.publish_bytes(b"x" * 200))
    assert client.methods() == [] and client.transport.producerState == "paused"
    client.vhost.batches[-1].settle(True)
    assert client.methods() == [] and client.transport.producerState == "producing"


class HeldDefinitions:
    """A cluster's definitions follower whose catching up the test finishes by hand."""

    def __init__(self) -> None:
        self.catch_ups: list[Deferred[None]] = []
        self.fence = DefinitionsFence(self._catch_up, Clock())

    def _catch_up(self) -> Deferred[None]:
        self.catch_ups.append(Deferred())
        return self.catch_ups[-1]


def test_in_a_cluster_publishes_are_stored_once_the_definitions_as_of_their_arrival_are_applied() -> None:
    """Causal routing: a publish waits for a round of catching up that started after it arrived; the publishes of
    one burst share it, and those arriving during it wait for the next."""
    client = Client()
    definitions = HeldDefinitions()
    client.vhost.definitions = definitions
    client.send_bytes(b"".join(client.publish_bytes(b"early %d" % index) for index in range(3)))
    assert client.vhost.stored == [] and len(definitions.catch_ups) == 1
    client.send_bytes(client.publish_bytes(b"late"))  # arrives while the round runs
    definitions.catch_ups[0].callback(None)
    assert client.vhost.stored == [b"early 0", b"early 1", b"early 2"]
    assert len(definitions.catch_ups) == 2, "the late publish started the next round"
    definitions.catch_ups[1].callback(None)
    assert client.vhost.stored == [b"early 0", b"early 1", b"early 2", b"late"]
