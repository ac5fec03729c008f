"""A client's end of an ``MqttConnection`` in unit tests: what the broker wrote to it, decoded into packets."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import Clock

from mqbroker.protocols.frontends import FrontEndSecurity
from mqbroker.protocols.mqtt.codec import PacketDecoder, encode
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.hub import MqttHub
from mqbroker.protocols.mqtt.topics import TopicMapping
from mqbroker.protocols.mqtt.packets import PROTOCOL_LEVEL_5, ConnAck, Connect, PubAck, Publish
from mqbroker.protocols.mqtt.server import MqttConnection
from tests.fake_broker import FakeBroker


class ClientSocket:
    """The connection handle the adapter writes to (an MQTT 5.0 client's)."""

    peer = "127.0.0.1:1"
    secure = False

    def __init__(self) -> None:
        self.decoder = PacketDecoder(packet_bytes_max=1 << 20, protocol_level=PROTOCOL_LEVEL_5)
        self.packets: list[Any] = []
        #: Whether the broker has paused reading this connection (a client's bytes wait meanwhile).
        self.paused = False
        #: Bytes written to the client so far.
        self.bytes_written = 0

    def write(self, data: bytes) -> None:
        self.bytes_written += len(data)
        self.packets += self.decoder.receive_data(data)

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def peer_certificate(self) -> None:
        return None

    def take(self, kind: type | None = None) -> list[Any]:
        """The packets (of ``kind``, or all) received so far; forgotten once taken."""
        taken = [packet for packet in self.packets if kind is None or isinstance(packet, kind)]
        self.packets = [packet for packet in self.packets if kind is not None and not isinstance(packet, kind)]
        return taken


def connected(
    hub: MqttHub, connect: Connect, config: SessionConfig | None = None, security: FrontEndSecurity | None = None
) -> tuple[MqttConnection, ClientSocket]:
    """A connection of ``hub`` (``config``, else the default; ``security``: its byte-rate quotas, say) whose
    ``connect`` was accepted, once the fake broker wrote its session record; the client's end decodes at the
    CONNECT's protocol level."""
    connection = MqttConnection(hub, config or SessionConfig(), lambda: "generated", security)
    socket = ClientSocket()
    socket.decoder.protocol_level = connect.protocol_level
    connection.connection_made(socket)  # type: ignore[arg-type]
    connection.data_received(encode(connect, connect.protocol_level))
    hub.broker.sync()  # type: ignore[attr-defined]  # the session record
    assert [ack.reason_code for ack in socket.take(ConnAck)] == [0]
    return connection, socket


def started_hub(broker: FakeBroker, clock: IReactorTime | None = None, mapping: TopicMapping | None = None,
                **options: Any) -> MqttHub:
    """A hub on ``broker`` with ``clock`` (else the broker's, else a new one) and ``MqttHub``'s other ``options``,
    whose start has finished: what it wrote to the internal topics is durable (``FakeBroker.sync``)."""
    hub = MqttHub(broker, clock or broker.clock or Clock(), mapping or TopicMapping(), **options)
    Deferred.fromCoroutine(hub.start())
    broker.sync()
    assert hub.started.started
    return hub


def send_v5(connection: MqttConnection, packet: Any) -> None:
    """Feed ``packet``, encoded as MQTT 5.0, to ``connection`` as its client's bytes."""
    connection.data_received(encode(packet, PROTOCOL_LEVEL_5))


def acknowledge_all(connection: MqttConnection, socket: ClientSocket) -> list[bytes]:
    """Every PUBLISH the member gets until no more come, each acknowledged; their payloads."""
    received: list[bytes] = []
    while publishes := socket.take(Publish):
        received += [publish.payload for publish in publishes]
        for publish in publishes:
            send_v5(connection, PubAck(packet_id=publish.packet_id))
    return received
