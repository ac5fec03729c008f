"""Helpers for the MQTT integration tests: a broker process and paho-mqtt clients that record what they get."""

from __future__ import annotations

import itertools
import pathlib
import queue
import time
from collections.abc import Iterator
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from mqbroker.client import Admin, Consumer
from mqbroker.protocols.mqtt.state import SessionState
from mqbroker.protocols.mqtt.stored import StoredSession
from tests.integration.brokerprocess import BrokerProcess, running

_client_numbers = itertools.count(1)


class MqttBroker(BrokerProcess):
    """A ``BrokerProcess`` that names its MQTT port."""

    @property
    def mqtt_port(self) -> int:
        """The MQTT listener's port."""
        return self.ports["mqtt"]


def running_broker(data_dir: pathlib.Path) -> Iterator[MqttBroker]:
    """Start a broker in ``data_dir``; kill it afterwards."""
    yield from running(MqttBroker(data_dir=data_dir))  # type: ignore[misc]


@pytest.fixture(scope="module")
def mqtt_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MqttBroker]:
    """One broker shared by a module's tests (each test uses its own topics and client ids)."""
    yield from running_broker(tmp_path_factory.mktemp("mqtt") / "data")


@pytest.fixture
def own_broker(tmp_path: pathlib.Path) -> Iterator[MqttBroker]:
    """A broker of this test alone (for kills and restarts)."""
    yield from running_broker(tmp_path / "data")


def unique(prefix: str) -> str:
    """A name no other test uses."""
    return f"{prefix}-{next(_client_numbers)}-{time.monotonic_ns() % 1_000_000}"


class Client:
    """A paho client on a background loop; received messages arrive in ``messages``."""

    def __init__(self, broker: MqttBroker, client_id: str = "", *, version: int = mqtt.MQTTv311,
                 clean: bool = True, session_expiry_s: int | None = None, will: tuple[str, bytes, int] | None = None,
                 keep_alive_s: int = 60, connect_properties: Any = None, will_delay_s: int | None = None,
                 **options: Any) -> None:
        self.version = version
        self.messages: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self.disconnects: queue.Queue[Any] = queue.Queue()
        self.connack: queue.Queue[Any] = queue.Queue()
        self.suback: queue.Queue[Any] = queue.Queue()
        if version == mqtt.MQTTv5:
            self.paho = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version, **options)
        else:
            self.paho = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=version,
                                    clean_session=clean, **options)
        self.paho.on_message = lambda client, userdata, message: self.messages.put(message)
        self.paho.on_connect = lambda client, userdata, flags, code, properties: self.connack.put((flags, code, properties))
        self.paho.on_disconnect = lambda client, userdata, flags, code, properties: self.disconnects.put(code)
        self.paho.on_subscribe = lambda client, userdata, mid, codes, properties: self.suback.put(codes)
        if will is not None:
            will_properties = None
            if will_delay_s is not None:  # MQTT 5.0's Will Delay Interval
                from paho.mqtt.packettypes import PacketTypes
                from paho.mqtt.properties import Properties

                will_properties = Properties(PacketTypes.WILLMESSAGE)
                will_properties.WillDelayInterval = will_delay_s
            self.paho.will_set(will[0], will[1], will[2], properties=will_properties)
        properties = connect_properties
        if version == mqtt.MQTTv5 and session_expiry_s is not None:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            properties = properties or Properties(PacketTypes.CONNECT)
            properties.SessionExpiryInterval = session_expiry_s
        kwargs: dict[str, Any] = {"keepalive": keep_alive_s}
        if version == mqtt.MQTTv5:
            kwargs["clean_start"] = clean
            kwargs["properties"] = properties
        self.paho.connect("127.0.0.1", broker.mqtt_port, **kwargs)
        self.paho.loop_start()
        self.connack_result = self.connack.get(timeout=10)

    def subscribe(self, topic_filter: str, qos: int = 0, **options: Any) -> Any:
        """Subscribe and wait for the SUBACK; return its reason codes."""
        if self.version == mqtt.MQTTv5:
            from paho.mqtt.subscribeoptions import SubscribeOptions

            self.paho.subscribe(topic_filter, options=SubscribeOptions(qos=qos, **options), properties=options.get("properties"))
        else:
            self.paho.subscribe(topic_filter, qos)
        return self.suback.get(timeout=10)

    def publish(self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, **options: Any) -> None:
        """Publish and wait until the QoS flow completes."""
        info = self.paho.publish(topic, payload, qos=qos, retain=retain, **options)
        info.wait_for_publish(timeout=10)
        assert info.is_published(), f"publish to {topic} not acknowledged"

    def receive(self, count: int, timeout_s: float = 10.0) -> list[mqtt.MQTTMessage]:
        """Wait for ``count`` messages."""
        deadline = time.monotonic() + timeout_s
        received = []
        while len(received) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                received.append(self.messages.get(timeout=remaining))
            except queue.Empty:
                break
        return received

    def received_before_marker(self, publisher: Client, topic: str, qos: int = 1,
                               timeout_s: float = 20.0) -> list[mqtt.MQTTMessage]:
        """What this client receives before a marker that ``publisher`` sends to ``topic`` (which it subscribes to).

        Messages reach a subscriber in log order, and the default MQTT log topic has one partition;
        so whatever was on its way to this client arrives before the marker. A check that nothing
        (more) arrives waits for that condition instead of a quiet period a loaded machine can outlast.
        """
        marker = b"marker-%d" % next(_client_numbers)
        publisher.publish(topic, marker, qos)
        deadline = time.monotonic() + timeout_s
        found = []
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"the marker sent to {topic} did not arrive within {timeout_s} s"
            try:
                message = self.messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if message.payload == marker:
                return found
            found.append(message)

    def quiet(self, seconds: float = 0.5) -> list[mqtt.MQTTMessage]:
        """Whatever arrives within ``seconds`` (to check that nothing does)."""
        time.sleep(seconds)
        found = []
        while not self.messages.empty():
            found.append(self.messages.get_nowait())
        return found

    def disconnect(self) -> None:
        """A clean DISCONNECT."""
        self.paho.disconnect()
        self.paho.loop_stop()

    def drop(self) -> None:
        """Lose the connection without DISCONNECT (an abnormal close)."""
        self.paho.loop_stop()
        self.paho.socket().close()


class RawClient:
    """A socket speaking MQTT through mqbroker's own codec: for flows no library lets a test stop halfway."""

    def __init__(self, broker: MqttBroker, level: int = 5) -> None:
        import socket

        from mqbroker.protocols.mqtt.codec import PacketDecoder

        self.level = level
        self.socket = socket.create_connection(("127.0.0.1", broker.mqtt_port), timeout=10)
        self.decoder = PacketDecoder(packet_bytes_max=16 * 1024 * 1024, protocol_level=level)
        self.packets: list[Any] = []

    def send(self, packet: Any) -> None:
        """Encode and send one packet."""
        from mqbroker.protocols.mqtt.codec import encode

        self.socket.sendall(encode(packet, self.level))

    def send_bytes(self, data: bytes) -> None:
        """Send raw bytes (malformed input)."""
        self.socket.sendall(data)

    def receive(self, timeout_s: float = 10.0) -> Any:
        """The next packet from the broker, or None if the connection closed."""
        self.socket.settimeout(timeout_s)
        while not self.packets:
            data = self.socket.recv(65536)
            if not data:
                return None
            self.packets.extend(self.decoder.receive_data(data))
        return self.packets.pop(0)

    def closed_within(self, timeout_s: float) -> bool:
        """Whether the broker closes the connection within ``timeout_s`` (packets before it are skipped)."""
        try:
            while self.receive(timeout_s) is not None:
                pass
        except (TimeoutError, OSError):
            return False
        return True

    def close(self) -> None:
        """Drop the connection (no DISCONNECT)."""
        self.socket.close()


def stored_state(bootstrap: str, client_id: str) -> SessionState | None:
    """The session state of ``client_id`` in the newest record of ``__mqtt_sessions`` (None if it has none)."""
    sessions = ("__mqtt_sessions", 0)
    with Admin(bootstrap) as admin:
        end = admin.list_offset(*sessions, -1)
    newest = None
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([sessions])
        deadline = time.monotonic() + 10
        while consumer.position(sessions) < end:
            assert time.monotonic() < deadline, "the sessions topic was not read to its end"
            newest = next((m.value for m in reversed(consumer.poll(timeout=0.5)) if m.key == client_id.encode()), newest)
    return None if newest is None else SessionState.from_bytes(StoredSession.from_bytes(newest).state)
