"""The generic codec adapter and the native session, on StringTransport and a fake clock."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.config import BrokerConfig
from mqbroker.model import BrokerEndpoint, ProduceResult
from mqbroker.protocols.adapter import CodecProtocol, ConnectionHandle
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native.connection import ClientConnection
from mqbroker.protocols.native.server import NativeSession
from tests import fake_broker
from tests.fake_broker import FakeBroker


class RecordingSession:
    """A session that records what the adapter hands it."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.connection: ConnectionHandle | None = None
        self.lost: Failure | None = None

    def connection_made(self, connection: ConnectionHandle) -> None:
        self.connection = connection

    def data_received(self, data: bytes) -> None:
        self.received.append(data)

    def connection_lost(self, reason: Failure) -> None:
        self.lost = reason


def _connect(session: Any, idle_timeout_s: float | None = None, clock: Clock | None = None) -> tuple[CodecProtocol, StringTransport]:
    protocol = CodecProtocol(session, idle_timeout_s)
    if clock is not None:
        protocol.callLater = clock.callLater  # TimeoutMixin's seam for the clock
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def test_bytes_reach_the_session_and_writes_reach_the_socket() -> None:
    session = RecordingSession()
    protocol, transport = _connect(session)
    protocol.dataReceived(b"abc")
    assert session.received == [b"abc"]
    assert session.connection is not None
    session.connection.write(b"reply")
    assert transport.value() == b"reply"


def test_a_silent_connection_is_closed_after_the_idle_timeout() -> None:
    clock = Clock()
    session = RecordingSession()
    protocol, transport = _connect(session, idle_timeout_s=10.0, clock=clock)
    clock.advance(9.0)
    protocol.dataReceived(b"still here")
    clock.advance(9.0)
    assert not transport.disconnecting
    clock.advance(1.5)
    assert transport.disconnecting


def test_reading_pauses_while_the_socket_send_buffer_is_full() -> None:
    protocol, transport = _connect(RecordingSession())
    assert transport.producer is protocol  # registered as a streaming producer
    protocol.pauseProducing()  # the transport's buffer filled: a slow reader
    assert transport.producerState == "paused"
    protocol.resumeProducing()
    assert transport.producerState == "producing"


def test_reading_stays_paused_until_both_transport_and_session_have_drained() -> None:
    session = RecordingSession()
    protocol, transport = _connect(session)
    protocol.pauseProducing()
    assert session.connection is not None
    session.connection.pause_reading()
    protocol.resumeProducing()
    assert transport.producerState == "paused"  # the session still has too much in flight
    session.connection.resume_reading()
    assert transport.producerState == "producing"


def test_a_native_request_is_answered_on_the_same_connection() -> None:
    broker = FakeBroker(node=BrokerEndpoint(node_id=1, host="h", port=1))
    protocol, transport = _connect(NativeSession(broker, BrokerConfig()))
    client = ClientConnection("adapter-test")
    correlation_id, data = client.send_request(m.MetadataRequest(topics=None))
    protocol.dataReceived(data)
    (event,) = client.receive_data(transport.value())
    assert event.correlation_id == correlation_id
    assert event.response.brokers[0].host == "h"


def test_the_native_session_stops_reading_at_its_in_flight_bound() -> None:
    broker = FakeBroker()
    broker.hold_produces = True  # every produce stays pending, filling the in-flight window
    protocol, transport = _connect(NativeSession(broker, BrokerConfig()))
    client = ClientConnection("adapter-test", inflight_requests_max=10_000)
    request = m.ProduceRequest(acks=1, timeout_ms=1000, topics=(
        m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition_index=0, records=b""),)),))
    for _ in range(limits.native_inflight_requests_max):
        protocol.dataReceived(client.send_request(request)[1])
    assert len(broker.held_produces) == limits.native_inflight_requests_max
    assert transport.producerState == "paused"


class BufferingSession(RecordingSession):
    """A session that keeps the bytes after the last ``|`` of each read (its incomplete frame), and counts how often
    the adapter asks for them."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = b""
        self.asked = 0

    @property
    def buffered_bytes(self) -> int:
        self.asked += 1
        return len(self.buffer)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.buffer = (self.buffer + data).rpartition(b"|")[2]


def test_a_read_without_an_idle_timeout_resets_no_timer() -> None:
    """MQTT's keep-alive is its session's: its reads (two per paced message) call nothing of ``TimeoutMixin``."""
    protocol, _ = _connect(RecordingSession())
    resets: list[None] = []
    protocol.resetTimeout = lambda: resets.append(None)  # type: ignore[method-assign]
    protocol.dataReceived(b"abc")
    assert resets == []


def test_a_read_of_whole_frames_asks_the_session_for_its_buffered_bytes_once() -> None:
    """Nothing was left over from the last read, so nothing is before this one (a buffer grows only by what is
    read): every front end's usual read asks once, after it, not before and after."""
    clock = Clock()
    session = BufferingSession()
    protocol = CodecProtocol(session, None, frame_timeout_s=5.0)
    protocol.callLater = clock.callLater  # type: ignore[method-assign]
    protocol.makeConnection(StringTransport())
    protocol.dataReceived(b"frame|")
    session.asked = 0
    for _ in range(10):
        protocol.dataReceived(b"frame|")
    assert session.asked == 10
    protocol.dataReceived(b"fra")  # a frame begun: its timer runs
    protocol.dataReceived(b"me|fr")  # completes it, begins another: the timer starts again
    clock.advance(4.0)
    protocol.dataReceived(b"ame|")
    clock.advance(4.0)
    assert not protocol.closed
    protocol.dataReceived(b"tric")
    clock.advance(5.1)
    assert protocol.closed


def test_a_one_partition_produce_is_answered_by_one_callback_on_the_brokers_deferred(monkeypatch: Any) -> None:
    """Nearly every produce names one partition: its answer is built in one callback (settle, per-partition
    result, gather, response were four, each run on every produce), with the same reply, error or not."""

    class CountingDeferred(Deferred):  # type: ignore[type-arg]
        added = 0

        def addCallbacks(self, *args: Any, **kwargs: Any) -> Any:
            self.added += 1
            return super().addCallbacks(*args, **kwargs)

        def addCallback(self, *args: Any, **kwargs: Any) -> Any:
            self.added += 1
            return super().addCallback(*args, **kwargs)

    monkeypatch.setattr(fake_broker, "Deferred", CountingDeferred)
    broker = FakeBroker()
    broker.hold_produces = True
    protocol, transport = _connect(NativeSession(broker, BrokerConfig()))
    client = ClientConnection("adapter-test")
    request = m.ProduceRequest(acks=1, timeout_ms=1000, topics=(
        m.ProduceTopic(name="t", partitions=(m.ProducePartition(partition_index=0, records=b""),)),))
    for _ in range(2):
        protocol.dataReceived(client.send_request(request)[1])
    written, refused = broker.held_produces
    assert written.added == 2  # the handler's answer and the session's reply
    written.callback(ProduceResult(base_offset=7, last_offset=7, log_append_time_ms=-1, log_start_offset=0))
    refused.errback(errors.NotLeaderError("t-0 moved"))
    answers = client.receive_data(transport.value())
    [[first], [second]] = [[p for t in a.response.topics for p in t.partitions] for a in answers]
    assert (first.error_code, first.base_offset) == (0, 7)
    assert (second.error_code, second.error_message, second.base_offset) == (errors.ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                                               "t-0 moved", -1)
