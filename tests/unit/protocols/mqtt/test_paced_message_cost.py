"""What a paced QoS 1 message costs the front end, counted deterministically: with ``mqtt_puback = "written"`` a
message that comes alone in its read (the latency run's) is decoded, appended, handed to a live subscriber from
memory and acknowledged in that read's turn, and the subscriber's PUBACK comes in a read of its own. Every wake of
the reactor runs cold, so each Python call on that path counts several times over (docs/mqtt.md, "Performance")."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from mqbroker.protocols.mqtt.codec import PacketDecoder, encode
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.hub import PUBACK_ACKS, MqttHub
from mqbroker.protocols.mqtt.packets import (
    PROTOCOL_LEVEL_3_1_1,
    Connect,
    PubAck,
    Publish,
    Subscribe,
    SubscriptionRequest,
)
from mqbroker.protocols.mqtt.server import MqttConnection
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import started_hub

LEVEL = PROTOCOL_LEVEL_3_1_1  # paho's default
#: Python calls of the front end (code under ``mqbroker/``) per paced message: its PUBLISH read (decode, session,
#: batch, delivery from memory, PUBACK) and the subscriber's PUBACK read: 121 before the cuts that set it.
PACED_MESSAGE_CALLS_MAX = 86


class _Socket:
    """A connection handle that keeps what it was told (no decoding: nothing of the client's is counted)."""

    peer = "127.0.0.1:1"
    secure = False

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.reading_changes: list[str] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading_changes.append("pause")

    def resume_reading(self) -> None:
        self.reading_changes.append("resume")

    def peer_certificate(self) -> None:
        return None

    def packets(self) -> list[Any]:
        return PacketDecoder(packet_bytes_max=1 << 20, protocol_level=LEVEL).receive_data(b"".join(self.written))


def _connected(hub: MqttHub, client_id: str) -> tuple[MqttConnection, _Socket]:
    connection = MqttConnection(hub, SessionConfig(), lambda: "generated")
    socket = _Socket()
    connection.connection_made(socket)  # type: ignore[arg-type]
    connection.data_received(encode(Connect(client_id=client_id, protocol_level=LEVEL, keep_alive_s=0), LEVEL))
    hub.broker.sync()  # type: ignore[attr-defined]
    return connection, socket


def _paced_pair() -> tuple[Callable[[int], None], _Socket, _Socket]:
    """A ``written`` hub with a QoS 1 subscriber and a publisher; the returned step publishes message ``number``
    (packet ids from 1) in a read of its own and reads the subscriber's PUBACK of it in another."""
    hub = started_hub(FakeBroker(durable_at_once=False), puback_acks=PUBACK_ACKS["written"])
    subscriber, subscriber_socket = _connected(hub, "subscriber")
    request = SubscriptionRequest(topic_filter="plant/#", qos=1)
    subscriber.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), LEVEL))
    publisher, publisher_socket = _connected(hub, "publisher")
    publishes = [encode(Publish(topic="plant/a", payload=b"x" * 100, qos=1, packet_id=number + 1), LEVEL)
                 for number in range(200)]
    pubacks = [encode(PubAck(packet_id=number + 1), LEVEL) for number in range(200)]

    def step(number: int) -> None:
        publisher.data_received(publishes[number])
        subscriber.data_received(pubacks[number])

    return step, publisher_socket, subscriber_socket


def _calls_of(run: Callable[[], None]) -> list[FrameType]:
    """The Python frames ``run`` called (every call, its callees' too)."""
    frames: list[FrameType] = []

    def profile(frame: FrameType, event: str, argument: object) -> None:
        if event == "call":
            frames.append(frame)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return frames


def test_a_paced_qos1_message_stays_within_its_python_call_budget() -> None:
    step, publisher_socket, subscriber_socket = _paced_pair()
    for number in range(100):  # warm: the topic's mapping, header tuples and routes are remembered
        step(number)
    frames = _calls_of(lambda: [step(number) for number in range(100, 200)])
    front_end = [frame for frame in frames if "/mqbroker/" in frame.f_code.co_filename]
    assert len(front_end) / 100 <= PACED_MESSAGE_CALLS_MAX
    assert [packet.packet_id for packet in publisher_socket.packets() if isinstance(packet, PubAck)] == list(
        range(1, 201))
    assert [packet.payload for packet in subscriber_socket.packets() if isinstance(packet, Publish)] == [b"x" * 100] * 200


def test_a_paced_qos1_message_runs_no_enum_code() -> None:
    """An Enum's ``__hash__`` and ``__call__`` are Python code: a state tested by set membership, or a batch's
    compression converted to its Enum, costs calls on every read and every batch."""
    step, _, _ = _paced_pair()
    step(0)
    frames = _calls_of(lambda: step(1))
    assert [frame.f_code.co_name for frame in frames if frame.f_code.co_filename.endswith("enum.py")] == []


def test_reading_is_resumed_only_once_it_was_paused() -> None:
    """The adapter hears of a change of the back-pressure, not the decision after every read and log write."""
    step, publisher_socket, subscriber_socket = _paced_pair()
    for number in range(10):
        step(number)
    assert publisher_socket.reading_changes == [] and subscriber_socket.reading_changes == []
