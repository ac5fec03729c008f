"""Shared subscriptions when a member's broker dies (kill -9) or its session ends: every message the publisher had
acknowledged reaches a member of the group at least once, and a message handed to another member goes to it as if it
had been delivered to it first.

Two hubs on fake brokers that share their logs stand for two brokers of a cluster (``test_session_failover.py``);
``holder.stopped`` and emptied logs stand for the holder's kill -9 (nothing it kept in memory survives).
"""

from __future__ import annotations


from twisted.internet.task import Clock

from mqbroker import limits
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.hub import MqttHub
from mqbroker.protocols.mqtt.packets import (
    Connect,
    Disconnect,
    Properties,
    PubAck,
    Publish,
    PubRec,
    SubAck,
    Subscribe,
    SubscriptionRequest,
)
from mqbroker.protocols.mqtt.server import MqttConnection
from mqbroker.protocols.mqtt.topics import TopicMapping
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import ClientSocket, acknowledge_all, connected, send_v5, started_hub

GROUP_FILTER = "$share/g/plant/#"
LOG_TOPIC = TopicMapping().default_log_topic


def _member(hub: MqttHub, client_id: str, *, window: int = 100, expiry_s: int = 600, clean_start: bool = True,
            qos: int = 1, identifier: int | None = None,
            queue: int = limits.mqtt_pending_messages_max) -> tuple[MqttConnection, ClientSocket]:
    """A member of the group (subscribed with ``qos``, and ``identifier`` if given; a session reopened with
    ``clean_start`` False keeps the subscription it had) whose queue holds ``queue`` messages."""
    connect = Connect(client_id=client_id, clean_start=clean_start, keep_alive_s=0,
                      properties=Properties(receive_maximum=window, session_expiry_interval_s=expiry_s))
    connection, socket = connected(hub, connect, SessionConfig(pending_messages_max=queue))
    if clean_start:
        properties = Properties(subscription_identifiers=(identifier,)) if identifier else Properties()
        send_v5(connection, Subscribe(packet_id=1, properties=properties,
                                    subscriptions=(SubscriptionRequest(topic_filter=GROUP_FILTER, qos=qos),)))
        assert [ack.reason_codes for ack in socket.take(SubAck)] == [(qos,)]
    return connection, socket


def _publish(hub: MqttHub, first: int, count: int, qos: int = 1, topic: str = "plant/a") -> None:
    """``count`` messages ``first``, ``first + 1``, ... to ``topic``, acknowledged to the publisher (durable)."""
    publisher, socket = connected(hub, Connect(client_id=f"publisher-{first}"))
    for number in range(first, first + count):
        send_v5(publisher, Publish(topic=topic, payload=b"%d" % number, qos=qos, packet_id=number + 1))
    hub.broker.sync()  # type: ignore[attr-defined]
    assert len(socket.take(PubAck if qos == 1 else PubRec)) == count


def _two_hubs() -> tuple[Clock, FakeBroker, MqttHub, MqttHub]:
    """The clock, the survivor's broker, the holder's hub and the survivor's hub."""
    clock = Clock()
    holder_broker, survivor_broker = FakeBroker(clock=clock), FakeBroker(clock=clock)
    survivor_broker.logs, survivor_broker.topic_configs = holder_broker.logs, holder_broker.topic_configs
    survivor, holder = started_hub(survivor_broker), started_hub(holder_broker)
    return clock, survivor_broker, holder, survivor


def _kill(holder: MqttHub, survivor_broker: FakeBroker) -> None:
    """kill -9 of the holder's broker: its hub reaches the cluster's logs no more; the survivor reads its records."""
    holder.stopped = True
    holder.broker.logs, holder.broker.topic_configs = {}, {}  # type: ignore[attr-defined]
    survivor_broker.sync()


def _numbers(payloads: list[bytes]) -> list[int]:
    return sorted(int(payload) for payload in payloads)


def test_a_members_queued_and_in_flight_messages_reach_it_on_the_survivor_after_its_broker_is_killed() -> None:
    """The device (window 2) has two of eight messages in flight and six queued, none acknowledged, when its broker
    dies; it resumes its session on the survivor, where its group has no member: all eight reach it."""
    clock, survivor_broker, holder, survivor = _two_hubs()
    device, device_socket = _member(holder, "device", window=2)
    _publish(holder, 0, 8)
    assert len(device_socket.take(Publish)) == 2
    clock.advance(limits.mqtt_session_store_interval_ms / 1000)  # its session record: two in flight, six queued
    _kill(holder, survivor_broker)
    moved, moved_socket = _member(survivor, "device", window=2, clean_start=False)
    assert _numbers(acknowledge_all(moved, moved_socket)) == list(range(8))


def test_what_a_member_took_after_its_last_stored_state_reaches_it_on_the_survivor() -> None:
    """Its broker dies before it stored the state in which it had the messages: read again from its cursor."""
    clock, survivor_broker, holder, survivor = _two_hubs()
    device, device_socket = _member(holder, "device", window=2)
    clock.advance(limits.mqtt_session_store_interval_ms / 1000)
    _publish(holder, 0, 8)
    assert len(device_socket.take(Publish)) == 2
    _kill(holder, survivor_broker)
    moved, moved_socket = _member(survivor, "device", window=2, clean_start=False)
    assert _numbers(acknowledge_all(moved, moved_socket)) == list(range(8))


def test_a_member_that_joined_the_survivors_group_after_the_messages_leaves_them_to_the_moved_member() -> None:
    """The survivor's group had no member when the eight were published (its reader handed them to nobody); a member
    joins there, then the device moves over: the eight reach one of the two, and later messages are split."""
    clock, survivor_broker, holder, survivor = _two_hubs()
    device, device_socket = _member(holder, "device", window=2)
    _publish(holder, 0, 8)
    assert len(device_socket.take(Publish)) == 2
    clock.advance(limits.mqtt_session_store_interval_ms / 1000)
    other, other_socket = _member(survivor, "other")
    _kill(holder, survivor_broker)
    moved, moved_socket = _member(survivor, "device", window=2, clean_start=False)
    got = acknowledge_all(moved, moved_socket) + acknowledge_all(other, other_socket)
    assert set(_numbers(got)) == set(range(8))
    _publish(survivor, 8, 4)
    later = acknowledge_all(moved, moved_socket) + acknowledge_all(other, other_socket)
    assert _numbers(later) == list(range(8, 12))


def test_a_persistent_member_alone_in_its_group_gets_what_was_published_while_it_was_away() -> None:
    """Its group had no member while it was disconnected: nobody had those messages; its session's cursor holds them."""
    hub = started_hub(FakeBroker(clock=Clock()))
    device, device_socket = _member(hub, "device", window=2)
    _publish(hub, 0, 4)
    assert len(device_socket.take(Publish)) == 2
    send_v5(device, Disconnect())
    device.connection_lost(None)  # type: ignore[arg-type]
    hub.broker.sync()  # type: ignore[attr-defined]
    _publish(hub, 4, 4)
    back, back_socket = _member(hub, "device", window=2, clean_start=False)
    assert set(_numbers(acknowledge_all(back, back_socket))) == set(range(8))


def test_a_message_handed_to_another_member_goes_with_that_members_qos_and_subscription_identifier() -> None:
    """The leaving member subscribed at QoS 1 without an identifier had the QoS 2 message in flight; its session ends,
    and the staying member (QoS 2, identifier 7) gets it as if it had been delivered to it first."""
    hub = started_hub(FakeBroker(clock=Clock()))
    leaving, leaving_socket = _member(hub, "leaving", expiry_s=0, qos=1)
    _publish(hub, 0, 1, qos=2)
    [first] = leaving_socket.take(Publish)
    assert first.qos == 1
    staying, staying_socket = _member(hub, "staying", expiry_s=0, qos=2, identifier=7)
    leaving.connection_lost(None)  # type: ignore[arg-type]
    hub.broker.sync()  # type: ignore[attr-defined]
    [handed] = staying_socket.take(Publish)
    assert (handed.payload, handed.qos, handed.dup) == (b"0", 2, False)
    assert handed.properties.subscription_identifiers == (7,)


def test_what_a_leaving_member_handed_back_reaches_the_full_member_on_the_survivor_and_its_own_messages_come_once() -> None:
    """``leaving`` (a session that is not kept) leaves while the device, the group's only other member, is full: the
    messages it hands back wait for room, so the device's session record keeps where they begin (its share cursor).
    The device's broker dies; on the survivor it gets them, and the messages of its plain subscription that it had
    acknowledged do not come again (they lie between the two cursors)."""
    clock, survivor_broker, holder, survivor = _two_hubs()
    device, device_socket = _member(holder, "device", window=2, queue=2)
    send_v5(device, Subscribe(packet_id=2, subscriptions=(SubscriptionRequest(topic_filter="status/#", qos=1),)))
    assert [ack.reason_codes for ack in device_socket.take(SubAck)] == [(1,)]
    leaving, leaving_socket = _member(holder, "leaving", window=1, expiry_s=0)
    _publish(holder, 0, 6)  # split between the two; "leaving" takes one at a time and queues the rest
    plant = acknowledge_all(device, device_socket)
    _publish(holder, 6, 2, topic="status/x")
    assert acknowledge_all(device, device_socket) == [b"6", b"7"]
    _publish(holder, 8, 12)  # the device takes two into flight and two into its queue, and then it is full
    assert len(device_socket.take(Publish)) == 2
    leaving.connection_lost(None)  # type: ignore[arg-type]
    assert leaving_socket.take(Publish)
    clock.advance(limits.mqtt_session_store_interval_ms / 1000)
    _kill(holder, survivor_broker)
    moved, moved_socket = _member(survivor, "device", window=2, clean_start=False)
    got = acknowledge_all(moved, moved_socket)
    assert set(_numbers(plant + got)) == set(range(20)) - {6, 7}
    assert b"6" not in got and b"7" not in got


def test_handed_back_messages_a_crash_took_back_from_the_log_are_not_read_for_ever() -> None:
    """``mqtt_puback = "written"``: a crash took back the log's tail that held what a member handed back. The group
    forgets those offsets (nobody can have them) instead of asking for them again and again."""
    hub = started_hub(FakeBroker(clock=Clock()))
    full, full_socket = _member(hub, "full", window=1, queue=1)
    leaving, _ = _member(hub, "leaving", window=1, expiry_s=0)
    _publish(hub, 0, 6)
    log = hub.broker.logs[(LOG_TOPIC, 0)]  # type: ignore[attr-defined]
    log.batches, log.log_end, log.high_watermark = [], 0, 0
    leaving.connection_lost(None)  # type: ignore[arg-type]
    fetches = len(hub.broker.calls_of("fetch"))  # type: ignore[attr-defined]
    assert _numbers(acknowledge_all(full, full_socket)) == [0, 2]  # what it had in flight and queued
    assert len(hub.broker.calls_of("fetch")) - fetches < 10  # type: ignore[attr-defined]
    assert list(hub.share_backlog.unhanded(("g", "plant/#"))) == []  # nothing left to hand out
