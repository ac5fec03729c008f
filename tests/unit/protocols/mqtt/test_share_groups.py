"""Shared subscriptions (``$share/{group}/{filter}``) whose members come and go: every message reaches a member."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from mqbroker import limits
from mqbroker.model import FetchResult
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.hub import MqttHub
from mqbroker.protocols.mqtt.packets import (
    Connect,
    Disconnect,
    Properties,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    SubscriptionRequest,
)
from mqbroker.protocols.mqtt.server import MqttConnection
from mqbroker.protocols.mqtt.topics import TopicMapping
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import ClientSocket, acknowledge_all, connected, send_v5, started_hub

LOG_TOPIC = TopicMapping().default_log_topic
MESSAGES = 12


def _member(hub: MqttHub, client_id: str, *, window: int = 100, expiry_s: int = 0,
            queue: int = limits.mqtt_pending_messages_max) -> tuple[MqttConnection, ClientSocket]:
    connect = Connect(client_id=client_id, clean_start=expiry_s == 0, keep_alive_s=0,
                      properties=Properties(receive_maximum=window, session_expiry_interval_s=expiry_s))
    connection, socket = connected(hub, connect, SessionConfig(pending_messages_max=queue))
    send_v5(connection, Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter="$share/g/plant/#", qos=1),)))
    assert [ack.reason_codes for ack in socket.take(SubAck)] == [(1,)]
    return connection, socket


def _publish_all(hub: MqttHub, count: int = MESSAGES) -> None:
    publisher, _ = connected(hub, Connect(client_id="publisher"))
    for number in range(count):
        send_v5(publisher, Publish(topic="plant/a", payload=b"%d" % number, qos=1, packet_id=number + 1))
    hub.broker.sync()  # type: ignore[attr-defined]


def _leave_with_a_full_window(expiry_s: int) -> tuple[MqttHub, list[bytes], list[bytes], MqttConnection, ClientSocket]:
    """Two members split the messages; ``leaving`` (window 2) takes two into flight, queues the rest of its share and
    leaves. What it was sent, and what ``staying`` got."""
    hub = started_hub(FakeBroker(clock=Clock()))
    leaving, leaving_socket = _member(hub, "leaving", window=2, expiry_s=expiry_s)
    staying, staying_socket = _member(hub, "staying")
    _publish_all(hub)
    sent_to_leaving = [publish.payload for publish in leaving_socket.take(Publish)]
    assert len(sent_to_leaving) == 2  # its window; the rest of its share waits in its queue
    got = acknowledge_all(staying, staying_socket)
    assert len(got) == MESSAGES // 2
    send_v5(leaving, Disconnect())
    leaving.connection_lost(None)  # type: ignore[arg-type]
    hub.broker.sync()  # type: ignore[attr-defined]  # its session's last record
    return hub, sent_to_leaving, got + acknowledge_all(staying, staying_socket), staying, staying_socket


def test_a_member_whose_session_ends_hands_what_it_had_not_had_acknowledged_to_the_other_member() -> None:
    """Its queued messages were never sent, its two in flight nobody will resend: the group's other member gets them
    (MQTT 5.0 §4.8.2: a message whose member's session ends goes to another member)."""
    _, sent_to_leaving, got, _, _ = _leave_with_a_full_window(expiry_s=0)
    assert sorted(got, key=int) == [b"%d" % n for n in range(MESSAGES)]
    assert set(sent_to_leaving) <= set(got)


def test_a_qos2_message_whose_receipt_the_leaving_member_acknowledged_goes_to_nobody_else() -> None:
    """PUBREC received: the client has the message (exactly once); only the PUBREL flow was left."""
    hub = started_hub(FakeBroker(clock=Clock()))
    leaving, leaving_socket = connected(hub, Connect(client_id="leaving", keep_alive_s=0))
    send_v5(leaving, Subscribe(packet_id=1, subscriptions=(SubscriptionRequest(topic_filter="$share/g/plant/#", qos=2),)))
    publisher, _ = connected(hub, Connect(client_id="publisher"))
    send_v5(publisher, Publish(topic="plant/a", payload=b"once", qos=2, packet_id=1))
    send_v5(publisher, PubRel(packet_id=1))
    hub.broker.sync()  # type: ignore[attr-defined]
    (publish,) = leaving_socket.take(Publish)
    send_v5(leaving, PubRec(packet_id=publish.packet_id))
    staying, staying_socket = _member(hub, "staying")
    leaving.connection_lost(None)  # type: ignore[arg-type]
    assert staying_socket.take(Publish) == []


def test_a_persistent_member_that_leaves_hands_its_queue_over_and_gets_its_in_flight_messages_again() -> None:
    hub, sent_to_leaving, got, _, _ = _leave_with_a_full_window(expiry_s=600)
    assert not set(sent_to_leaving) & set(got)  # in flight: resent to it when it comes back
    assert sorted(got + sent_to_leaving, key=int) == [b"%d" % n for n in range(MESSAGES)]
    back, back_socket = connected(hub, Connect(client_id="leaving", clean_start=False, keep_alive_s=0,
                                               properties=Properties(session_expiry_interval_s=600)))
    resent = back_socket.take(Publish)
    assert [(publish.payload, publish.dup) for publish in resent] == [(payload, True) for payload in sent_to_leaving]


def test_messages_handed_back_while_the_other_members_are_full_go_out_as_room_comes() -> None:
    hub = started_hub(FakeBroker(clock=Clock()))
    leaving, _ = _member(hub, "leaving", window=1)
    full, full_socket = _member(hub, "full", window=1, queue=2)
    _publish_all(hub, 8)  # "leaving": one in flight, three queued; "full": one in flight, one queued, two kept
    send_v5(leaving, Disconnect())
    leaving.connection_lost(None)  # type: ignore[arg-type]
    assert len(full_socket.packets) == 1  # no room for the handed-back messages yet
    got = acknowledge_all(full, full_socket)
    assert sorted(got, key=int) == [b"%d" % n for n in range(8)]
    assert len(got) == 8


def _survivor_after_a_failover(with_other_member: bool) -> tuple[MqttHub, Any, Any]:
    """Two hubs on fake brokers sharing their logs stand for two brokers (``test_session_failover.py``). The device
    had four messages from its broker (and acknowledged them) before that broker died; the survivor's reader had not
    read them yet (its fetch went to the dead broker). The device is reopened on the survivor, where ``other`` may be
    a member of the group already; then the survivor's reader brings the four. The survivor, the device's connection
    and socket there, and ``other``'s (or Nones)."""
    clock = Clock()
    holder_broker, survivor_broker = FakeBroker(clock=clock), FakeBroker(clock=clock)
    survivor_broker.logs, survivor_broker.topic_configs = holder_broker.logs, holder_broker.topic_configs
    stalled: Deferred[list[FetchResult]] = Deferred()
    survivor_broker.script("wait_for_records", False, topic=LOG_TOPIC)
    survivor_broker.script("fetch", stalled, topic=LOG_TOPIC)
    survivor, holder = started_hub(survivor_broker), started_hub(holder_broker)
    other = _member(survivor, "other") if with_other_member else (None, None)
    device, device_socket = _member(holder, "device", expiry_s=600)
    _publish_all(holder, 4)
    assert len(acknowledge_all(device, device_socket)) == 4
    clock.advance(limits.mqtt_session_store_interval_ms / 1000)

    holder.stopped = True  # kill -9: the holder reaches the cluster's logs no more
    holder_broker.logs, holder_broker.topic_configs = {}, {}
    survivor_broker.sync()  # the survivor's follower reads the holder's session records
    moved = connected(survivor, Connect(client_id="device", clean_start=False, keep_alive_s=0,
                                        properties=Properties(session_expiry_interval_s=600)))
    log = survivor_broker.logs[(LOG_TOPIC, 0)]
    stalled.callback([FetchResult(topic=LOG_TOPIC, partition=0, records=log.read(0, 1 << 20),
                                  high_watermark=log.high_watermark, log_start_offset=log.log_start)])
    return survivor, moved, other


def test_a_member_reopened_ahead_of_the_survivors_reader_leaves_what_it_had_to_the_groups_other_member() -> None:
    """The device stands past the four: the survivor's group gives each to its other member, not to the device
    (which would pass over it: lost)."""
    survivor, (moved, moved_socket), (other, other_socket) = _survivor_after_a_failover(with_other_member=True)
    assert moved_socket.take(Publish) == []
    assert acknowledge_all(other, other_socket) == [b"%d" % n for n in range(4)]
    _publish_all(survivor, 4)  # past where the device stood: split between the two again
    assert len(acknowledge_all(moved, moved_socket)) == 2
    assert len(acknowledge_all(other, other_socket)) == 2


def test_a_group_whose_only_member_had_the_records_on_its_previous_broker_does_not_get_them_again() -> None:
    survivor, (moved, moved_socket), _ = _survivor_after_a_failover(with_other_member=False)
    survivor.resume_share_groups()
    assert moved_socket.take(Publish) == []
    _publish_all(survivor, 2)
    assert acknowledge_all(moved, moved_socket) == [b"0", b"1"]
