"""A reopened session's own reads of the log: sized to what its queue has room for, every message delivered once."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from mqbroker import limits
from mqbroker.config import BrokerConfig
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
from mqbroker.security.quotas import BURST_MS
from mqbroker.security.service import SecurityServices
from mqbroker.service import front_end_security
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import ClientSocket, connected, started_hub

LOG_TOPIC = TopicMapping().default_log_topic
CONFIG = SessionConfig(outbound_inflight_max_3_1_1=100)
MESSAGES = 2 * limits.mqtt_pending_messages_max
WINDOW = 20


def _connect(hub: MqttHub) -> tuple[MqttConnection, ClientSocket]:
    return connected(hub, Connect(client_id="drainer", clean_start=False, keep_alive_s=0, protocol_level=4), CONFIG)


def _publish_in_batches(broker: FakeBroker, hub: MqttHub, count: int, qos: int = 1) -> None:
    """``count`` messages of ``qos`` to "bench/drain", in batches of 50, durable."""
    key = record_key("bench/drain")
    headers = record_headers(qos, False, "publisher", NO_PROPERTIES)
    for first in range(0, count, 50):
        builder = BatchBuilder()
        builder.append_many(0, [(key, b"%d" % number, headers) for number in range(first, first + 50)])
        broker.append(LOG_TOPIC, builder.build(), hub.partition_for(LOG_TOPIC, key))
    broker.sync()


def test_a_draining_session_reads_about_what_its_queue_has_room_for_and_gets_every_message_once() -> None:
    broker = FakeBroker(clock=Clock())
    hub = started_hub(broker)
    connection, socket = _connect(hub)
    request = SubscriptionRequest(topic_filter="bench/drain", qos=1)
    connection.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), 4))
    connection.data_received(encode(Disconnect(), 4))
    connection.connection_lost(None)  # type: ignore[arg-type]
    _publish_in_batches(broker, hub, MESSAGES)
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


@pytest.mark.parametrize("qos", [0, 1])
def test_a_catch_up_over_its_fetch_quota_waits_out_each_throttle_and_gets_every_message_once_in_order(qos: int) -> None:
    """A live session over its fetch byte-rate quota falls behind (``offer_live``) and reads the rest itself at each
    release (``_deliveries_released``). The catch-up holds each next message back as soon as the quota is exceeded
    (``deliveries_held``, asked again after each delivery under a quota): what the client has had never exceeds the
    quota's burst and the rate since by more than a window of messages (a QoS 1 window refilled by acknowledgements
    goes whole, as a Kafka fetch answer does; its debt is then waited out), until every message came, once, in
    order. The client's acknowledgements wait while the broker does not read it."""
    clock = Clock()
    broker = FakeBroker(clock=clock)
    hub = started_hub(broker)
    count, quota = 600, 2_000  # bytes per second; the bucket holds one second of it (``BURST_MS``)
    security = front_end_security(SecurityServices(BrokerConfig(quotas_client_fetch_bytes_per_second=quota)))
    start_s = clock.seconds()
    connection, socket = connected(hub, Connect(client_id="drainer", keep_alive_s=0, protocol_level=4),
                                   SessionConfig(outbound_inflight_max_3_1_1=WINDOW, pending_messages_max=2 * WINDOW),
                                   security)
    request = SubscriptionRequest(topic_filter="bench/drain", qos=qos)
    connection.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), 4))
    _publish_in_batches(broker, hub, count, qos)
    received: list[bytes] = []
    unacknowledged: list[int] = []
    held_steps = publish_bytes = 0
    for _ in range(10_000):
        publishes = socket.take(Publish)
        received += [publish.payload for publish in publishes]
        unacknowledged += [publish.packet_id for publish in publishes if publish.qos]
        publish_bytes = max([publish_bytes, *(len(encode(publish, 4)) for publish in publishes)])
        sent = socket.bytes_written
        assert sent <= quota * (BURST_MS / 1000 + clock.seconds() - start_s) + WINDOW * publish_bytes, sent
        if len(received) == count:
            break
        if unacknowledged and not socket.paused:
            connection.data_received(b"".join(encode(PubAck(packet_id=packet_id), 4) for packet_id in unacknowledged))
            unacknowledged = []
        elif not publishes:
            held_steps += 1
            clock.advance(0.05)
    assert received == [b"%d" % number for number in range(count)]
    assert held_steps  # the quota held it
    # at the quota's rate: all but the burst and the last window's debt (nothing follows it to wait) was waited for
    assert clock.seconds() - start_s >= (socket.bytes_written - quota * BURST_MS / 1000 - WINDOW * publish_bytes) / quota
