"""The adapter's writes of a persistent session's state: one at a time, QoS 1 sends never wait for one, QoS 2
sends always do, changes are written within ``limits.mqtt_session_store_interval_ms``, the final state last."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock

from mqbroker import limits
from mqbroker.protocols.mqtt.codec import encode
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.packets import (
    ConnAck,
    Connect,
    Properties,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    SubscriptionRequest,
)
from mqbroker.protocols.mqtt.server import MqttConnection
from mqbroker.protocols.mqtt.session_directory import SESSIONS_TOPIC
from mqbroker.protocols.mqtt.state import OutboundMessage, SessionState
from mqbroker.protocols.mqtt.stored import StoredSession
from mqbroker.protocols.mqtt.topics import TopicMapping
from mqbroker.records.readable import readable_records
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import ClientSocket, started_hub

LOG_TOPIC = TopicMapping().default_log_topic
INTERVAL_S = limits.mqtt_session_store_interval_ms / 1000


class Harness:
    """A hub on a fake broker whose produces wait for ``release``, and one 5.0 client with a persistent session."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.broker = FakeBroker()
        self.hub = started_hub(self.broker, self.clock)
        self.broker.hold_produces = True
        self.connection = MqttConnection(self.hub, SessionConfig(), lambda: "generated")
        self.socket = ClientSocket()
        self.connection.connection_made(self.socket)  # type: ignore[arg-type]
        self.receive(Connect(client_id="device", clean_start=False, keep_alive_s=0,
                             properties=Properties(session_expiry_interval_s=600)))
        self.release()
        assert [type(packet) for packet in self.socket.take()] == [ConnAck]
        self.receive(Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter="t/#", qos=2),)))
        self.release()
        assert [type(packet) for packet in self.socket.take()] == [SubAck]
        self.subscriptions = list(self.connection.session.session.subscriptions.values())  # type: ignore[union-attr]

    def receive(self, packet: Any) -> None:
        self.connection.data_received(encode(packet, 5))

    def deliver(self, offset: int, qos: int) -> None:
        message = OutboundMessage(topic=f"t/{offset}", payload=b"%d" % offset, qos=qos, position=(LOG_TOPIC, 0, offset))
        self.connection.deliver(message, self.subscriptions)

    def writes_in_flight(self) -> int:
        return len(self.broker.held_produces)

    def release(self) -> None:
        """The oldest session write is durable."""
        self.broker.held_produces.pop(0).callback(None)

    def stored(self) -> list[StoredSession]:
        """Every session record written so far, oldest first."""
        data = b"".join(batch for _, batch in self.broker.logs[(SESSIONS_TOPIC, 0)].batches)
        return [StoredSession.from_bytes(record.value)
                for record in readable_records(data, 0, topic=SESSIONS_TOPIC, partition=0, skipped=print)]


def test_qos1_sends_go_out_at_once_and_their_state_follows_one_write_at_a_time() -> None:
    harness = Harness()
    for offset in range(3):
        harness.deliver(offset, qos=1)
    assert [packet.payload for packet in harness.socket.take()] == [b"0", b"1", b"2"]  # no write waited for
    assert harness.writes_in_flight() == 0
    harness.clock.advance(INTERVAL_S)
    assert harness.writes_in_flight() == 1
    harness.deliver(3, qos=1)
    harness.receive(PubAck(packet_id=1))
    assert [packet.payload for packet in harness.socket.take()] == [b"3"]
    assert harness.writes_in_flight() == 1  # the next write waits for this one
    harness.release()
    assert list(SessionState.from_bytes(harness.stored()[-1].state).inflight) == [1, 2, 3]
    harness.clock.advance(INTERVAL_S)
    harness.release()
    assert list(SessionState.from_bytes(harness.stored()[-1].state).inflight) == [2, 3, 4]  # the newest state
    harness.clock.advance(10 * INTERVAL_S)
    assert harness.writes_in_flight() == 0  # nothing changed since


def test_a_qos2_send_waits_for_its_packet_id_to_be_stored_after_the_write_in_flight() -> None:
    harness = Harness()
    harness.deliver(0, qos=1)
    harness.clock.advance(INTERVAL_S)
    harness.socket.take()
    harness.deliver(1, qos=2)
    assert harness.socket.take() == [] and harness.writes_in_flight() == 1  # behind the write in flight
    harness.release()
    assert harness.socket.take() == [] and harness.writes_in_flight() == 1  # its own write
    harness.release()
    [sent] = harness.socket.take()
    assert isinstance(sent, Publish) and sent.qos == 2
    assert sent.packet_id in SessionState.from_bytes(harness.stored()[-1].state).inflight


def test_the_final_state_is_written_after_the_write_in_flight() -> None:
    harness = Harness()
    harness.deliver(0, qos=1)
    harness.clock.advance(INTERVAL_S)
    harness.connection.connection_lost(None)  # type: ignore[arg-type]
    assert harness.writes_in_flight() == 1 and harness.stored()[-1].ended_at_ms is None
    harness.release()
    assert harness.stored()[-1].ended_at_ms is not None  # the session record ends as the client left it
    assert harness.hub.sessions.offline["device"] is not None
