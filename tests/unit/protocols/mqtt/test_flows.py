"""The PUBLISH flows of a connected session: expiry and size on the way out, the receive maximum on the way in."""

from __future__ import annotations

import pytest

from mqbroker.protocols.mqtt.actions import Action, Close, PublishToLog, Send, SendPubAcks, SendPublishes, StoreSession
from mqbroker.protocols.mqtt.codec import PacketDecoder, encode
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.packets import (
    Connect,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
)
from mqbroker.protocols.mqtt.session import ConnectionState, MqttSession
from mqbroker.protocols.mqtt.state import InflightState, OutboundMessage, Subscription
from mqbroker.protocols.mqtt.topics import MappingRule, TopicMapping


def connected_session(level: int = 5, config: SessionConfig = SessionConfig()) -> MqttSession:
    """A session past CONNECT/CONNACK."""
    session = MqttSession(config=config, mapping=TopicMapping(), generate_client_id=lambda: "generated")
    session.receive_data(encode(Connect(protocol_level=level, client_id="c", keep_alive_s=0), level), 0)
    session.session_opened(None, 0)
    assert session.state is ConnectionState.CONNECTED
    return session


def sent_packets(actions: list[Action], level: int) -> list[Packet]:
    """The packets ``actions`` write, in order: a ``SendPublishes`` stands for each of its ``count`` PUBLISHes,
    whose encodings its bytes are."""
    packets: list[Packet] = []
    for action in actions:
        if isinstance(action, SendPublishes):
            publishes = PacketDecoder(packet_bytes_max=1 << 20, protocol_level=level).receive_data(action.data)
            assert len(publishes) == action.count and all(isinstance(packet, Publish) for packet in publishes)
            packets += publishes
        elif isinstance(action, Send):
            packets.append(action.packet)
    return packets


def test_an_expired_message_is_dropped_and_a_live_one_carries_its_remaining_lifetime() -> None:
    session = connected_session()
    subscription = [Subscription(topic_filter="#", qos=1)]
    expired = OutboundMessage(topic="t", payload=b"old", qos=1, properties=Properties(message_expiry_interval_s=5),
                              created_ms=0)
    assert session.deliver(expired, subscription, now_ms=5000) == []
    live = OutboundMessage(topic="t", payload=b"new", qos=1, properties=Properties(message_expiry_interval_s=60),
                           created_ms=1000)
    (send,) = [action for action in session.deliver(live, subscription, now_ms=11_000) if isinstance(action, Send)]
    assert isinstance(send.packet, Publish) and send.packet.properties.message_expiry_interval_s == 50


def test_a_message_larger_than_the_client_maximum_packet_size_is_dropped() -> None:
    session = MqttSession(config=SessionConfig(), mapping=TopicMapping(), generate_client_id=lambda: "g")
    connect = Connect(client_id="c", keep_alive_s=0, properties=Properties(maximum_packet_size=64))
    session.receive_data(encode(connect, 5), 0)
    session.session_opened(None, 0)
    big = OutboundMessage(topic="t", payload=b"x" * 100, qos=1)
    assert session.deliver(big, [Subscription(topic_filter="#", qos=1)], 0) == []
    assert session.session is not None and session.session.inflight == {}


def test_a_3_1_1_client_over_the_receive_maximum_is_paced_not_disconnected() -> None:
    session = connected_session(4, SessionConfig(receive_maximum=2))
    flood = b"".join(encode(Publish(topic="t", payload=b"x", qos=1, packet_id=n), 4) for n in range(1, 6))
    actions = session.receive_data(flood, 0)
    assert session.state is ConnectionState.CONNECTED and not any(isinstance(a, Close) for a in actions)
    assert session.log_writes_in_flight == 5  # the adapter pauses reading at the receive maximum


def test_a_5_0_client_over_the_receive_maximum_gets_disconnect_0x93() -> None:
    session = connected_session(5, SessionConfig(receive_maximum=2))
    flood = b"".join(encode(Publish(topic="t", payload=b"x", qos=1, packet_id=n), 5) for n in range(1, 6))
    actions = session.receive_data(flood, 0)
    assert any(isinstance(a, Send) and getattr(a.packet, "reason_code", None) == ReasonCode.RECEIVE_MAXIMUM_EXCEEDED
               for a in actions)
    assert session.state is ConnectionState.ERROR


def test_a_pubrel_for_an_unknown_packet_id_is_answered_packet_identifier_not_found() -> None:
    session = connected_session()
    actions = session.receive_data(encode(PubRel(packet_id=7), 5), 0)
    (send,) = [action for action in actions if isinstance(action, Send)]
    assert send.packet.reason_code == ReasonCode.PACKET_IDENTIFIER_NOT_FOUND  # type: ignore[union-attr]


def test_a_qos2_resend_while_the_first_copy_is_written_is_not_written_twice() -> None:
    session = connected_session()
    publish = Publish(topic="t", payload=b"x", qos=2, packet_id=9)
    session.receive_data(encode(publish, 5), 0)
    assert session.receive_data(encode(publish, 5), 0) == []
    assert session.log_writes_in_flight == 1


@pytest.mark.parametrize("level", [4, 5])
def test_one_log_write_is_acknowledged_in_publish_order_with_runs_of_pubacks_as_one_action(level: int) -> None:
    session = connected_session(level)
    qos_and_ids = [(1, 1), (2, 2), (1, 3), (1, 4)]
    received = b"".join(encode(Publish(topic="t", payload=b"x", qos=qos, packet_id=packet_id), level)
                        for qos, packet_id in qos_and_ids)
    tickets = [action.ticket for action in session.receive_data(received, 0) if isinstance(action, PublishToLog)]
    actions = session.log_writes_completed(tickets, 1)  # type: ignore[arg-type]
    sent = [action for action in actions if isinstance(action, (Send, SendPubAcks))]
    assert [type(action) for action in sent] == [SendPubAcks, Send, SendPubAcks]
    assert [action.packet_ids for action in sent if isinstance(action, SendPubAcks)] == [[1], [3, 4]]
    wire = PacketDecoder(packet_bytes_max=1024, protocol_level=level).receive_data(b"".join(a.data for a in sent))
    assert wire == [PubAck(packet_id=1), PubRec(packet_id=2), PubAck(packet_id=3), PubAck(packet_id=4)]


def test_a_publish_after_the_mapping_rules_changed_goes_to_the_new_log_topic() -> None:
    mapping = TopicMapping()
    session = MqttSession(config=SessionConfig(), mapping=mapping, generate_client_id=lambda: "generated")
    session.receive_data(encode(Connect(protocol_level=4, client_id="c", keep_alive_s=0), 4), 0)
    session.session_opened(None, 0)

    def log_topics() -> list[str]:
        published = encode(Publish(topic="alarms/1", payload=b"x"), 4) * 2
        return [action.log_topic for action in session.receive_data(published, 0) if isinstance(action, PublishToLog)]

    assert log_topics() == [mapping.default_log_topic] * 2
    mapping.replace_rules([MappingRule(mqtt_filter="alarms/#", log_topic="mqtt.alarms")])
    assert log_topics() == ["mqtt.alarms"] * 2


def _stores(actions: list[Action]) -> list[tuple[int, bool]]:
    """(index in the list, blocking) of each StoreSession."""
    return [(index, action.blocking) for index, action in enumerate(actions) if isinstance(action, StoreSession)]


def test_qos1_deliveries_and_acknowledgements_go_on_while_their_state_is_stored_but_qos2_steps_wait() -> None:
    """Losing a QoS 1 step in a crash costs a redelivery (allowed); losing a QoS 2 step would deliver twice."""
    session = MqttSession(config=SessionConfig(), mapping=TopicMapping(), generate_client_id=lambda: "g")
    session.receive_data(encode(Connect(client_id="c", keep_alive_s=0, clean_start=False,
                                        properties=Properties(session_expiry_interval_s=60)), 5), 0)
    session.session_opened(None, 0)
    subscription = [Subscription(topic_filter="#", qos=2)]
    at_least_once = session.deliver(OutboundMessage(topic="t", payload=b"1", qos=1, position=("log", 0, 7)),
                                    subscription, 0)
    assert _stores(at_least_once) == [(1, False)] and isinstance(at_least_once[0], SendPublishes)
    assert _stores(session.receive_data(encode(PubAck(packet_id=1), 5), 0)) == [(0, False)]
    exactly_once = session.deliver(OutboundMessage(topic="t", payload=b"2", qos=2, position=("log", 0, 8)),
                                   subscription, 0)
    assert _stores(exactly_once) == [(0, True)] and isinstance(exactly_once[1], SendPublishes)  # its packet id first
    assert _stores(session.receive_data(encode(PubRec(packet_id=2), 5), 0)) == [(0, True)]  # before PUBREL
    assert _stores(session.receive_data(encode(PubComp(packet_id=2), 5), 0)) == [(0, False)]
    assert session.session is not None and session.session.inflight == {}


def test_deliver_many_reads_its_deliveries_one_at_a_time_and_answers_with_one_action_list() -> None:
    """A catch-up fetch's messages go through the session as one list; the reader checks the window before each."""
    session = connected_session(4, SessionConfig(outbound_inflight_max_3_1_1=2, pending_messages_max=1))
    subscription = [Subscription(topic_filter="#", qos=1)]
    taken: list[int] = []

    def deliveries():  # type: ignore[no-untyped-def]
        for number in range(10):
            if not session.accepting_deliveries:
                return
            taken.append(number)
            yield OutboundMessage(topic="t", payload=b"%d" % number, qos=1), subscription

    actions = session.deliver_many(deliveries(), 0)
    sends = sent_packets(actions, 4)
    assert [(packet.packet_id, packet.payload) for packet in sends] == [(1, b"0"), (2, b"1")]  # type: ignore[union-attr]
    assert taken == [0, 1, 2]  # the third waits in the queue, which is then full
    assert session.session is not None and [message.payload for message in session.session.pending] == [b"2"]


@pytest.mark.parametrize("level", [4, 5])
def test_a_plain_delivery_goes_out_as_encode_writes_its_publish(level: int) -> None:
    """The send path that encodes a message without properties from its topic's string field writes the bytes of the
    PUBLISH it records in flight, at either level, QoS 1 and 2, retained or not, and after a change of topic."""
    session = connected_session(level)
    subscription = [Subscription(topic_filter="#", qos=2, retain_as_published=True)]
    messages = [OutboundMessage(topic=topic, payload=b"x" * size, qos=qos, retain=retain)
                for topic, size, qos, retain in [("a/b", 3, 1, False), ("a/b", 200, 2, True), ("ü/é", 0, 1, True)]]
    actions = session.deliver_many(((message, subscription) for message in messages), 0)
    assert session.session is not None
    in_flight = [Publish(topic=message.topic, payload=message.payload, qos=message.qos, retain=message.retain,
                         packet_id=packet_id, properties=message.properties)
                 for packet_id, message in session.session.inflight.items()]
    assert [(publish.topic, publish.qos, publish.retain, publish.packet_id) for publish in in_flight] == [
        ("a/b", 1, False, 1), ("a/b", 2, True, 2), ("ü/é", 1, True, 3)]
    assert b"".join(action.data for action in actions if isinstance(action, SendPublishes)) == b"".join(
        encode(publish, level) for publish in in_flight)


def test_a_read_of_pubacks_refills_the_window_in_order_before_the_packet_after_them() -> None:
    """PUBACKs of one read complete together (one refill of the window), and what they free goes out before the
    answer to a packet that follows them in the read; a duplicated or unknown PUBACK frees nothing."""
    session = connected_session(4, SessionConfig(outbound_inflight_max_3_1_1=2))
    subscription = [Subscription(topic_filter="#", qos=1)]
    messages = [OutboundMessage(topic="t", payload=b"%d" % number, qos=1) for number in range(5)]
    first = session.deliver_many(((message, subscription) for message in messages), 0)
    assert [packet.payload for packet in sent_packets(first, 4)] == [b"0", b"1"]  # type: ignore[union-attr]
    read = b"".join(encode(packet, 4) for packet in (PubAck(packet_id=1), PubAck(packet_id=1), PubAck(packet_id=9),
                                                       PubAck(packet_id=2), PingReq(), PubAck(packet_id=3)))
    sent = sent_packets(session.receive_data(read, 0), 4)
    assert [(type(packet), getattr(packet, "payload", None)) for packet in sent] == [
        (Publish, b"2"), (Publish, b"3"), (PingResp, None), (Publish, b"4")]
    assert session.session is not None and list(session.session.inflight) == [4, 5]


def test_a_refill_of_the_window_goes_as_one_action_split_only_around_a_message_with_properties() -> None:
    """The deliveries one refill of the window sends go as one ``SendPublishes`` (their encodings joined, in order); a
    message with properties goes as a ``Send`` of its own between the runs before and after it; a lone delivery goes
    as a ``SendPublishes`` of one (no packet object)."""
    session = connected_session(4, SessionConfig(outbound_inflight_max_3_1_1=5))
    subscription = [Subscription(topic_filter="#", qos=1)]
    messages = [OutboundMessage(topic="t", payload=b"%d" % number, qos=1) for number in range(10)]
    messages[7] = OutboundMessage(topic="t", payload=b"7", qos=1, properties=Properties(content_type="text/plain"))
    first = session.deliver_many(((message, subscription) for message in messages), 0)
    assert [type(action) for action in first if isinstance(action, (Send, SendPublishes))] == [SendPublishes] * 5
    read = b"".join(encode(PubAck(packet_id=packet_id), 4) for packet_id in range(1, 6))
    refill = [action for action in session.receive_data(read, 0) if isinstance(action, (Send, SendPublishes))]
    assert [type(action) for action in refill] == [SendPublishes, Send, SendPublishes]
    assert [(packet.packet_id, packet.payload) for packet in sent_packets(refill, 4)] == [  # type: ignore[union-attr]
        (6, b"5"), (7, b"6"), (8, b"7"), (9, b"8"), (10, b"9")]
    assert session.session is not None and list(session.session.inflight) == [6, 7, 8, 9, 10]


def test_a_refill_of_a_draining_window_waits_for_an_eighth_of_it_unless_all_that_waits_fits() -> None:
    """With messages queued, PUBACKs refill the client's window once a step of it is free (an eighth: 2 of 16), not at
    every one; what waits goes out at once when it all fits, and into an empty window."""
    session = connected_session(4, SessionConfig(outbound_inflight_max_3_1_1=16))
    subscription = [Subscription(topic_filter="#", qos=1)]
    messages = [OutboundMessage(topic="t", payload=b"%d" % number, qos=1) for number in range(19)]
    first = session.deliver_many(((message, subscription) for message in messages), 0)
    assert len(sent_packets(first, 4)) == 16
    assert sent_packets(session.receive_data(encode(PubAck(packet_id=1), 4), 0), 4) == []  # 1 free, 3 queued
    refill = sent_packets(session.receive_data(encode(PubAck(packet_id=2), 4), 0), 4)
    assert [(packet.packet_id, packet.payload) for packet in refill] == [(17, b"16"), (18, b"17")]  # type: ignore[union-attr]
    last = sent_packets(session.receive_data(encode(PubAck(packet_id=3), 4), 0), 4)  # all that waits fits
    assert [(packet.packet_id, packet.payload) for packet in last] == [(19, b"18")]  # type: ignore[union-attr]
    assert session.session is not None and len(session.session.inflight) == 16
    live = sent_packets(session.deliver_many([(messages[0], subscription)], 0), 4)  # the window is full: it waits
    assert live == [] and len(session.session.pending) == 1
    assert len(sent_packets(session.receive_data(encode(PubAck(packet_id=4), 4), 0), 4)) == 1  # it fits: it goes
    everything = b"".join(encode(PubAck(packet_id=packet_id), 4) for packet_id in range(5, 21))
    session.receive_data(everything, 0)
    assert session.session.inflight == {} and not session.session.pending


def test_a_delivery_in_flight_is_the_queued_message_itself_and_its_flow_follows_its_qos() -> None:
    """A plain delivery goes in flight as the message the fetch made (no packet or entry object per message); QoS 1
    awaits its PUBACK, QoS 2 its PUBREC, then its PUBCOMP; a PUBACK does not end a QoS 2 delivery."""
    session = connected_session(5)
    subscription = [Subscription(topic_filter="#", qos=2)]
    messages = [OutboundMessage(topic="t", payload=b"%d" % qos, qos=qos) for qos in (1, 2)]
    session.deliver_many(((message, subscription) for message in messages), 0)
    state = session.session
    assert state is not None and state.inflight[1] is messages[0] and state.inflight[2] is messages[1]
    assert [state.flow(1), state.flow(2)] == [InflightState.AWAITING_PUBACK, InflightState.AWAITING_PUBREC]
    session.receive_data(encode(PubAck(packet_id=2), 5) + encode(PubRec(packet_id=2), 5), 0)
    assert state.flow(2) is InflightState.AWAITING_PUBCOMP and state.released == {2}
    session.receive_data(encode(PubAck(packet_id=1), 5) + encode(PubComp(packet_id=2), 5), 0)
    assert state.inflight == {} and state.released == set()
