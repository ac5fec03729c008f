"""A reopened session's own reads of the log: sized to what its queue has room for, every message delivered once."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from mqbroker import limits
from mqbroker.protocols.mqtt.codec import encode
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.headers import record_headers
from mqbroker.protocols.mqtt.hub import MqttHub
from mqbroker.protocols.mqtt.packets import (
    NO_PROPERTIES,
    Connect,
    Disconnect,
    PubAck,
    Publish,
    Subscribe,
    SubscriptionRequest,
)
from mqbroker.protocols.mqtt.server import MqttConnection
from mqbroker.protocols.mqtt.topics import TopicMapping, record_key
from mqbroker.records.builder import BatchBuilder
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import ClientSocket, connected

LOG_TOPIC = TopicMapping().default_log_topic
CONFIG = SessionConfig(outbound_inflight_max_3_1_1=100)
MESSAGES = 2 * limits.mqtt_pending_messages_max


def _connect(hub: MqttHub) -> tuple[MqttConnection, ClientSocket]:
    return connected(hub, Connect(client_id="drainer", clean_start=False, keep_alive_s=0, protocol_level=4), CONFIG)


def test_a_draining_session_reads_about_what_its_queue_has_room_for_and_gets_every_message_once() -> None:
    clock = Clock()
    broker = FakeBroker(clock=clock)
    hub = MqttHub(broker, clock, TopicMapping())
    Deferred.fromCoroutine(hub.start())
    broker.sync()
    connection, socket = _connect(hub)
    request = SubscriptionRequest(topic_filter="bench/drain", qos=1)
    connection.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), 4))
    connection.data_received(encode(Disconnect(), 4))
    connection.connection_lost(None)  # type: ignore[arg-type]
    key = record_key("bench/drain")
    headers = record_headers(1, False, "publisher", NO_PROPERTIES)
    for first in range(0, MESSAGES, 50):
        builder = BatchBuilder()
        builder.append_many(0, [(key, b"%d" % number, headers) for number in range(first, first + 50)])
        broker.append(LOG_TOPIC, builder.build(), hub.partition_for(LOG_TOPIC, key))
    reads_before = len(broker.calls_of("fetch"))
    connection, socket = _connect(hub)
    received: list[bytes] = []
    while len(received) < MESSAGES:
        publishes = socket.take(Publish)
        assert publishes, f"stuck after {len(received)}"
        received += [publish.payload for publish in publishes]
        connection.data_received(b"".join(encode(PubAck(packet_id=publish.packet_id), 4) for publish in publishes))
    assert received == [b"%d" % number for number in range(MESSAGES)]
    sizes = [request.positions[0].max_bytes for _, request in broker.calls_of("fetch")[reads_before:]
             if request.positions[0].topic == LOG_TOPIC]
    assert sizes[0] == limits.mqtt_log_fetch_bytes_max  # nothing read yet: the most
    # then half a queue of room at a time (a refill), about 60 bytes a record: the floor
    assert len(sizes) > 1 and set(sizes[1:]) == {limits.mqtt_catch_up_fetch_bytes_min}
