"""Slow clients and byte-rate quotas on the MQTT and AMQP sessions, on StringTransport and a fake clock."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from mqbroker import limits
from mqbroker.config import BrokerConfig
from mqbroker.protocols.adapter import CodecProtocol
from mqbroker.protocols.amqp import codec, spec
from mqbroker.protocols.amqp.server import AmqpSession
from mqbroker.security.quotas import ByteRateQuota, QuotaKind, QuotaManager
from mqbroker.protocols.throttle import Throttle, throttles
from mqbroker.security.service import SecurityServices
from mqbroker.service import front_end_security
from tests.unit.protocols.amqp.test_server import FakeVirtualHost


def _amqp_connection(frame_timeout_s: float) -> tuple[Clock, StringTransport, codec.FrameDecoder, CodecProtocol]:
    clock = Clock()
    protocol = CodecProtocol(AmqpSession(FakeVirtualHost(clock), clock), None,  # type: ignore[arg-type]
                             frame_timeout_s=frame_timeout_s)
    protocol.callLater = clock.callLater  # type: ignore[method-assign]
    transport = StringTransport()
    protocol.makeConnection(transport)
    return clock, transport, codec.FrameDecoder(limits.amqp_frame_bytes_max, expect_protocol_header=False), protocol


def test_an_amqp_frame_trickled_after_the_handshake_closes_the_connection_at_the_frame_timeout() -> None:
    clock, transport, _, protocol = _amqp_connection(frame_timeout_s=2.0)
    handshake = [
        spec.PROTOCOL_HEADER,
        codec.encode_method(0, spec.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                                      response=b"\0guest\0guest")),
        codec.encode_method(0, spec.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=0)),
        codec.encode_method(0, spec.ConnectionOpen(virtual_host="/")),
        codec.encode_method(1, spec.ChannelOpen()),
    ]
    for frame in handshake:  # whole frames, however slowly they come, are fine
        clock.advance(1.5)
        protocol.dataReceived(frame)
    assert not transport.disconnecting
    trickled = codec.encode_method(1, spec.ExchangeDeclare(exchange="x", type="direct"))
    for byte in trickled[:10]:  # one byte every 0.3 s: each resets the idle timer, none completes a frame
        protocol.dataReceived(bytes([byte]))
        clock.advance(0.3)
    assert transport.disconnecting


def test_a_partial_amqp_protocol_header_is_closed_at_the_frame_timeout() -> None:
    clock, transport, _, protocol = _amqp_connection(frame_timeout_s=2.0)
    protocol.dataReceived(spec.PROTOCOL_HEADER[:3])
    clock.advance(1.9)
    assert not transport.disconnecting
    clock.advance(0.2)
    assert transport.disconnecting


def _throttle(kind: QuotaKind, released: list[float], clock: Clock) -> Throttle:
    quotas = QuotaManager(default_client_quota=ByteRateQuota(produce_bytes_per_second=10_000,
                                                             fetch_bytes_per_second=10_000))
    throttle = Throttle(quotas, kind, clock, lambda: released.append(clock.seconds()))
    throttle.principal, throttle.client_id = "User:alice", "app"
    return throttle


def test_a_flow_over_its_quota_is_held_for_the_throttle_time_then_released() -> None:
    clock, released = Clock(), []
    throttle = _throttle(QuotaKind.PRODUCE, released, clock)
    throttle.record(10_000)  # one second of quota: the burst a fresh client may send
    assert not throttle.active
    throttle.record(5_000)
    assert throttle.active
    throttle.record(5_000)  # more while held: the hold grows to cover it
    clock.advance(0.99)
    assert throttle.active and released == []
    clock.advance(0.02)
    assert not throttle.active and released == [1.01]  # the release runs when the clock passes 1.0 s


def test_a_closed_connection_cancels_its_hold() -> None:
    clock, released = Clock(), []
    throttle = _throttle(QuotaKind.FETCH, released, clock)
    throttle.record(50_000)
    throttle.cancel()
    clock.advance(60)
    assert released == [] and not throttle.active


def test_no_throttles_without_byte_rate_quotas() -> None:
    unlimited = front_end_security(SecurityServices(BrokerConfig()))
    assert throttles(unlimited, Clock(), lambda: None, lambda: None) == (None, None)
    limited = front_end_security(SecurityServices(BrokerConfig(quotas_client_fetch_bytes_per_second=1)))
    produce, fetch = throttles(limited, Clock(), lambda: None, lambda: None)
    assert produce is not None and fetch is not None


def test_an_amqp_publisher_over_its_quota_is_not_read_until_the_throttle_ends() -> None:
    clock = Clock()
    services = SecurityServices(BrokerConfig(quotas_client_produce_bytes_per_second=1_000, security_plain_without_tls=True))
    session = AmqpSession(FakeVirtualHost(clock), clock, front_end_security(services))  # type: ignore[arg-type]
    protocol = CodecProtocol(session, None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    for frame in (spec.PROTOCOL_HEADER,
                  codec.encode_method(0, spec.ConnectionStartOk(client_properties={"connection_name": "app"},
                                                                mechanism="PLAIN", response=b"\0guest\0guest")),
                  codec.encode_method(0, spec.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=0)),
                  codec.encode_method(0, spec.ConnectionOpen(virtual_host="/")),
                  codec.encode_method(1, spec.ChannelOpen())):
        protocol.dataReceived(frame)
    assert transport.producerState == "producing"
    protocol.dataReceived(codec.encode_message(1, spec.BasicPublish(routing_key="q"), b"\x00\x00", b"x" * 3_000, 131072))
    assert transport.producerState == "paused"  # 2 KB over a 1 KB/s quota: 2 s
    clock.advance(1.9)
    assert transport.producerState == "paused"
    clock.advance(0.2)
    assert transport.producerState == "producing"


def _open_amqp_channel(protocol: CodecProtocol) -> None:
    for frame in (spec.PROTOCOL_HEADER,
                  codec.encode_method(0, spec.ConnectionStartOk(client_properties={}, mechanism="PLAIN",
                                                                response=b"\0guest\0guest")),
                  codec.encode_method(0, spec.ConnectionTuneOk(channel_max=10, frame_max=131072, heartbeat=0)),
                  codec.encode_method(0, spec.ConnectionOpen(virtual_host="/")),
                  codec.encode_method(1, spec.ChannelOpen())):
        protocol.dataReceived(frame)


def test_a_fast_client_whose_reads_end_mid_frame_is_not_closed_at_the_frame_timeout() -> None:
    clock, transport, _, protocol = _amqp_connection(frame_timeout_s=2.0)
    _open_amqp_channel(protocol)
    frame = codec.encode_method(1, spec.BasicQos(prefetch_count=1))
    stream, chunk = frame * 40, len(frame) + 1
    for start in range(0, 15 * chunk, chunk):  # 3 s of reads, each completing a frame and ending inside the next
        protocol.dataReceived(stream[start:start + chunk])
        clock.advance(0.2)
    assert not transport.disconnecting


def test_the_frame_timeout_does_not_run_while_the_broker_holds_reading_back() -> None:
    clock, transport, _, protocol = _amqp_connection(frame_timeout_s=2.0)
    _open_amqp_channel(protocol)
    protocol.dataReceived(codec.encode_method(1, spec.BasicQos(prefetch_count=1))[:5])
    protocol.pause_reading()  # as a produce quota or unstored publishes do
    clock.advance(10)
    assert not transport.disconnecting
    protocol.resume_reading()  # the rest of the frame now gets the whole timeout
    clock.advance(1.9)
    assert not transport.disconnecting
    clock.advance(0.2)
    assert transport.disconnecting
