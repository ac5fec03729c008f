"""A persistent session that moves to another broker when its broker dies: nothing goes to the client twice.

Two hubs (``holder`` and ``survivor``) on fake brokers that share their logs stand for two brokers of a cluster.
The survivor's shared reader of the log partition has a fetch out that has not come back (it went to the dead
broker), so when the client reconnects the session stands further on in the log than that reader.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from mqbroker import errors, limits
from mqbroker.model import FetchResult
from mqbroker.protocols.mqtt.codec import encode
from mqbroker.protocols.mqtt.hub import MqttHub
from mqbroker.protocols.mqtt.packets import (
    PROTOCOL_LEVEL_5,
    Connect,
    Properties,
    PubAck,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    SubscriptionRequest,
)
from mqbroker.protocols.mqtt.readers import RETRY_DELAY_S
from mqbroker.protocols.mqtt.server import MqttConnection
from mqbroker.protocols.mqtt.session_directory import SESSIONS_TOPIC
from mqbroker.protocols.mqtt.state import SessionState
from mqbroker.protocols.mqtt.stored import StoredSession
from mqbroker.protocols.mqtt.topics import TopicMapping
from mqbroker.records.readable import readable_records
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import ClientSocket, connected, started_hub

LOG_TOPIC = TopicMapping().default_log_topic
KEY = (LOG_TOPIC, 0)
QOS_LEVELS = (1, 2, 1, 2)


def _connect(hub: MqttHub, client_id: str, *, clean_start: bool) -> tuple[MqttConnection, ClientSocket]:
    return connected(hub, Connect(client_id=client_id, clean_start=clean_start, keep_alive_s=0,
                                  properties=Properties(session_expiry_interval_s=600)))


def _send(connection: MqttConnection, packet: Any) -> None:
    connection.data_received(encode(packet, PROTOCOL_LEVEL_5))


def _subscribe(connection: MqttConnection, socket: ClientSocket, topic_filter: str) -> None:
    _send(connection, Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter=topic_filter, qos=2),)))
    assert [ack.reason_codes for ack in socket.take(SubAck)] == [(2,)]


def _stored(broker: FakeBroker, client_id: str) -> StoredSession:
    """The newest session record of ``client_id``."""
    data = b"".join(batch for _, batch in broker.logs[(SESSIONS_TOPIC, 0)].batches)
    values = [record.value for record in readable_records(data, 0, topic=SESSIONS_TOPIC, partition=0, skipped=print)
              if record.key == client_id.encode()]
    assert values[-1] is not None
    return StoredSession.from_bytes(values[-1])


def test_a_session_resumed_ahead_of_the_survivors_reader_gets_its_in_flight_messages_once() -> None:
    clock = Clock()
    holder_broker, survivor_broker = FakeBroker(clock=clock), FakeBroker(clock=clock)
    survivor_broker.logs, survivor_broker.topic_configs = holder_broker.logs, holder_broker.topic_configs
    stalled: Deferred[list[FetchResult]] = Deferred()
    # The partition is led by the holder: the survivor's reader cannot be noticed locally, long-polls it, and that fetch
    # went to the dead broker.
    survivor_broker.script("wait_for_records", False, topic=LOG_TOPIC)
    survivor_broker.script("fetch", stalled, topic=LOG_TOPIC)
    survivor = started_hub(survivor_broker, clock)
    holder = started_hub(holder_broker, clock)
    device, device_socket = _connect(holder, "device", clean_start=True)
    _subscribe(device, device_socket, "plant/#")
    publisher, _ = _connect(holder, "publisher", clean_start=True)
    for number, qos in enumerate(QOS_LEVELS):
        _send(publisher, Publish(topic=f"plant/{number}", payload=b"reading %d" % number, qos=qos, packet_id=number + 1))
    sent = device_socket.take(Publish)  # never acknowledged
    assert [(packet.payload, packet.qos) for packet in sent] == [(b"reading %d" % n, q) for n, q in enumerate(QOS_LEVELS)]
    clock.advance(limits.mqtt_session_store_interval_ms / 1000)
    assert len(SessionState.from_bytes(_stored(holder_broker, "device").state).inflight) == 4

    holder.stopped = True  # kill -9: the holder reaches the cluster's logs no more
    holder_broker.logs, holder_broker.topic_configs = {}, {}
    survivor_broker.sync()  # the survivor's follower reads the holder's session records
    moved, moved_socket = _connect(survivor, "device", clean_start=False)
    resent = moved_socket.take(Publish)
    assert resent == [Publish(topic=p.topic, payload=p.payload, qos=p.qos, dup=True, packet_id=p.packet_id)
                      for p in sent]
    for packet in resent:
        _send(moved, PubAck(packet_id=packet.packet_id) if packet.qos == 1 else PubRec(packet_id=packet.packet_id))
    assert [packet.packet_id for packet in moved_socket.take(PubRel)] == [sent[1].packet_id, sent[3].packet_id]

    log = survivor_broker.logs[KEY]
    stalled.callback([FetchResult(topic=LOG_TOPIC, partition=0, records=log.read(0, 1 << 20),
                                  high_watermark=log.high_watermark, log_start_offset=log.log_start)])
    assert moved_socket.take(Publish) == []  # the survivor's reader brings the four messages: passed over
    survivor_publisher, _ = _connect(survivor, "survivor-publisher", clean_start=True)
    _send(survivor_publisher, Publish(topic="plant/marker", payload=b"marker", qos=1, packet_id=1))
    assert [packet.payload for packet in moved_socket.take(Publish)] == [b"marker"]
    clock.advance(limits.mqtt_session_store_interval_ms / 1000)
    assert _stored(survivor_broker, "device").cursors[KEY] == 5


def test_a_qos2_delivery_stores_a_cursor_past_the_messages_of_its_fetch_handed_out_before_it() -> None:
    """A QoS 2 PUBLISH waits for its state to be stored, and that write begins while the shared reader hands out
    its fetch: the cursor it stores is past the message (and the QoS 0 one before it), not where the fetch began."""
    clock = Clock()
    broker = FakeBroker(clock=clock, durable_at_once=False)
    hub = started_hub(broker, clock)
    device, device_socket = _connect(hub, "device", clean_start=True)
    _subscribe(device, device_socket, "plant/#")
    publisher, _ = _connect(hub, "publisher", clean_start=True)
    _send(publisher, Publish(topic="plant/a", payload=b"at most once", qos=0))
    _send(publisher, Publish(topic="plant/b", payload=b"exactly once", qos=2, packet_id=1))
    broker.sync()  # one fetch brings both
    assert [(packet.payload, packet.qos) for packet in device_socket.take(Publish)] == [
        (b"at most once", 0), (b"exactly once", 2)]
    stored = _stored(broker, "device")
    assert [entry.position for entry in SessionState.from_bytes(stored.state).inflight.values()] == [(LOG_TOPIC, 0, 1)]
    assert stored.cursors[KEY] == 2  # a broker resuming the session reads neither message again


def test_a_catch_up_read_refused_while_the_partition_leader_moves_is_tried_again_from_the_same_cursor() -> None:
    """Only a cursor outside the log moves the read elsewhere; a leader on the move answers again later, and the
    session reads on from its cursor (not from the log's start, which would deliver what it had again)."""
    clock = Clock()
    broker = FakeBroker(clock=clock)
    hub = started_hub(broker, clock)
    device, device_socket = _connect(hub, "device", clean_start=True)
    _subscribe(device, device_socket, "plant/#")
    publisher, _ = _connect(hub, "publisher", clean_start=True)
    for number in range(2):
        _send(publisher, Publish(topic=f"plant/{number}", payload=b"reading %d" % number, qos=1, packet_id=number + 1))
    for packet in device_socket.take(Publish):
        _send(device, PubAck(packet_id=packet.packet_id))
    clock.advance(limits.mqtt_session_store_interval_ms / 1000)
    device.connection_lost(None)  # type: ignore[arg-type]
    assert _stored(broker, "device").cursors[KEY] == 2
    for number in range(2, 4):  # while the device is away
        _send(publisher, Publish(topic=f"plant/{number}", payload=b"reading %d" % number, qos=1, packet_id=number + 1))
    broker.script("fetch", [FetchResult(topic=LOG_TOPIC, partition=0, error=errors.NotLeaderError("moving"))],
                  topic=LOG_TOPIC)
    _, socket = _connect(hub, "device", clean_start=False)
    assert socket.take(Publish) == []
    clock.advance(RETRY_DELAY_S)
    assert [packet.payload for packet in socket.take(Publish)] == [b"reading 2", b"reading 3"]
