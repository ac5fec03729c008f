"""What a QoS 1 message costs the front end on its way from a publisher to a live subscriber, counted
deterministically: with ``mqtt_puback = "written"`` a message is decoded, appended, handed to the subscriber from
memory and acknowledged in the turn that read it, and the subscriber's PUBACK comes in a read of its own. A paced
message comes alone in its read (the latency run's); every wake of the reactor runs cold, so each Python call on
that path counts several times over (docs/mqtt.md, "Performance"). A publisher ahead of its PUBACKs sends many in a
read: they reach each subscriber in one pass through its session."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

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
from tests.call_count import calls_of, is_mqbroker
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import started_hub

LEVEL = PROTOCOL_LEVEL_3_1_1  # paho's default
#: Python calls of the front end (code under ``mqbroker/``) per paced message: its PUBLISH read (decode, session,
#: batch, delivery from memory, PUBACK) and the subscriber's PUBACK read: 121 before the cuts that set it to 88, 88
#: before its append was handed out and acknowledged in one callback, a read resumed no catch-up that had nothing
#: to read and the PUBACKs of an append that completed at once ran without a call per queued list, 82 before its
#: batch was built by ``plain_batch`` (one call, not ``BatchBuilder``'s four).
PACED_MESSAGE_CALLS_MAX = 79
#: The same per message of a read of ``BURST`` PUBLISHes (the subscriber's PUBACKs a read each); 54 before a live
#: subscriber's share of a read went through its session as one action list, 33 before the cuts above.
BURST = 50
BURST_MESSAGE_CALLS_MAX = 32
#: The same with ``durable``: the shared reader's fetch of each read's messages, after the fsync; 72 before, then 37.
DURABLE_BURST_MESSAGE_CALLS_MAX = 36


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


def _connected(hub: MqttHub, client_id: str, config: SessionConfig | None = None) -> tuple[MqttConnection, _Socket]:
    connection = MqttConnection(hub, config or SessionConfig(), lambda: "generated")
    socket = _Socket()
    connection.connection_made(socket)  # type: ignore[arg-type]
    connection.data_received(encode(Connect(client_id=client_id, protocol_level=LEVEL, keep_alive_s=0), LEVEL))
    hub.broker.sync()  # type: ignore[attr-defined]
    return connection, socket


def _paced_pair(burst: int = 1, config: SessionConfig | None = None,
                mode: str = "written") -> tuple[Callable[[int], None], _Socket, _Socket]:
    """A hub (``mqtt_puback = mode``) with a QoS 1 subscriber (``config``) and a publisher; the returned step
    publishes messages ``number * burst`` on (packet ids from 1) in a read, makes them durable (the fake broker's
    fsync: ``durable`` delivers them then, from the shared reader's fetch) and reads the subscriber's PUBACK of each
    in a read of its own."""
    broker = FakeBroker(durable_at_once=False)
    hub = started_hub(broker, puback_acks=PUBACK_ACKS[mode])
    subscriber, subscriber_socket = _connected(hub, "subscriber", config)
    request = SubscriptionRequest(topic_filter="plant/#", qos=1)
    subscriber.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), LEVEL))
    publisher, publisher_socket = _connected(hub, "publisher")
    reads = [b"".join(encode(Publish(topic="plant/a", payload=b"x" * 100, qos=1, packet_id=number + 1), LEVEL)
                      for number in range(start, start + burst)) for start in range(0, 200 * burst, burst)]
    pubacks = [encode(PubAck(packet_id=number + 1), LEVEL) for number in range(200 * burst)]

    def step(number: int) -> None:
        publisher.data_received(reads[number])
        if mode == "durable":
            broker.sync()
        for puback in pubacks[number * burst:(number + 1) * burst]:
            subscriber.data_received(puback)

    return step, publisher_socket, subscriber_socket


def test_a_paced_qos1_message_stays_within_its_python_call_budget() -> None:
    step, publisher_socket, subscriber_socket = _paced_pair()
    for number in range(100):  # warm: the topic's mapping, header tuples and routes are remembered
        step(number)
    frames = calls_of(lambda: [step(number) for number in range(100, 200)])
    front_end = [frame for frame in frames if is_mqbroker(frame)]
    assert len(front_end) / 100 <= PACED_MESSAGE_CALLS_MAX
    assert [packet.packet_id for packet in publisher_socket.packets() if isinstance(packet, PubAck)] == list(
        range(1, 201))
    assert [packet.payload for packet in subscriber_socket.packets() if isinstance(packet, Publish)] == [b"x" * 100] * 200


def test_a_read_of_many_qos1_messages_reaches_a_live_subscriber_in_one_pass_through_its_session() -> None:
    step, publisher_socket, subscriber_socket = _paced_pair(BURST, SessionConfig(outbound_inflight_max_3_1_1=1000))
    step(0)
    frames = calls_of(lambda: [step(number) for number in range(1, 21)])
    front_end = [frame for frame in frames if is_mqbroker(frame)]
    assert len(front_end) / (20 * BURST) <= BURST_MESSAGE_CALLS_MAX
    assert len([packet for packet in subscriber_socket.packets() if isinstance(packet, Publish)]) == 21 * BURST
    assert len(subscriber_socket.written) == 2 + 21  # CONNACK, SUBACK, then one write per read of the publisher's


def test_a_durable_fetch_of_many_qos1_messages_reaches_a_live_subscriber_in_one_pass_through_its_session() -> None:
    config = SessionConfig(outbound_inflight_max_3_1_1=1000)
    step, publisher_socket, subscriber_socket = _paced_pair(BURST, config, "durable")
    step(0)
    frames = calls_of(lambda: [step(number) for number in range(1, 21)])
    front_end = [frame for frame in frames if is_mqbroker(frame)]
    assert len(front_end) / (20 * BURST) <= DURABLE_BURST_MESSAGE_CALLS_MAX
    assert [packet.payload for packet in subscriber_socket.packets() if isinstance(packet, Publish)] == [
        b"x" * 100] * (21 * BURST)
    assert len(subscriber_socket.written) == 2 + 21  # CONNACK, SUBACK, then one write per fetch


@pytest.mark.parametrize("mode", ["written", "durable"])
def test_a_window_full_in_the_middle_of_a_run_leaves_the_rest_to_the_session_s_own_read(mode: str) -> None:
    """The subscriber takes what its window and queue have room for of a run handed out at once (an append with
    ``written``, the shared reader's fetch with ``durable``); it reads the rest from the log itself, once durable, in
    order, each message once."""
    broker = FakeBroker(durable_at_once=False)
    hub = started_hub(broker, puback_acks=PUBACK_ACKS[mode])
    subscriber, subscriber_socket = _connected(
        hub, "subscriber", SessionConfig(outbound_inflight_max_3_1_1=3, pending_messages_max=4))
    request = SubscriptionRequest(topic_filter="plant/#", qos=1)
    subscriber.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), LEVEL))
    publisher, _ = _connected(hub, "publisher")
    payloads = [b"%d" % number for number in range(20)]
    publisher.data_received(b"".join(encode(Publish(topic="plant/a", payload=payload, qos=1, packet_id=number + 1),
                                            LEVEL) for number, payload in enumerate(payloads)))
    if mode == "durable":
        broker.sync()
    delivered: list[bytes] = []
    for _ in range(20):
        received = [packet for packet in subscriber_socket.packets() if isinstance(packet, Publish)]
        subscriber_socket.written.clear()
        if not delivered:
            assert len(received) == 3  # the window (and 4 queued): the rest is read from the log
        delivered += [packet.payload for packet in received]
        for packet in received:
            subscriber.data_received(encode(PubAck(packet_id=packet.packet_id), LEVEL))
        broker.sync()
    assert delivered == payloads


def test_a_paced_qos1_message_runs_no_enum_code() -> None:
    """An Enum's ``__hash__`` and ``__call__`` are Python code: a state tested by set membership, or a batch's
    compression converted to its Enum, costs calls on every read and every batch."""
    step, _, _ = _paced_pair()
    step(0)
    frames = calls_of(lambda: step(1))
    assert [frame.f_code.co_name for frame in frames if frame.f_code.co_filename.endswith("enum.py")] == []


def test_reading_is_resumed_only_once_it_was_paused() -> None:
    """The adapter hears of a change of the back-pressure, not the decision after every read and log write."""
    step, publisher_socket, subscriber_socket = _paced_pair()
    for number in range(10):
        step(number)
    assert publisher_socket.reading_changes == [] and subscriber_socket.reading_changes == []
