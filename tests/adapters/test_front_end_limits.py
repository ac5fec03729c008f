"""Slow clients and byte-rate quotas on the MQTT and AMQP sessions, on StringTransport and a fake clock."""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from mqbroker import limits
from mqbroker.protocols.adapter import CodecProtocol
from mqbroker.protocols.amqp import codec, spec
from mqbroker.protocols.amqp.server import AmqpSession
from tests.adapters.test_amqp_server import FakeVirtualHost


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
