"""When a published message reaches a live subscriber, by ``mqtt_puback``: ``written`` hands it over from memory
right after the append, before its fsync; ``durable`` only once it is durable (the fake broker's high watermark
moves at ``sync``, the fsync)."""

from __future__ import annotations


from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from mqbroker import errors
from mqbroker.model import OffsetAndTimestamp

from mqbroker.protocols.mqtt.codec import encode
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.hub import PUBACK_ACKS, MqttHub
from mqbroker.protocols.mqtt.packets import (
    PROTOCOL_LEVEL_5,
    Connect,
    Properties,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    SubscriptionRequest,
)
from mqbroker.protocols.mqtt.server import MqttConnection
from mqbroker.protocols.mqtt.topics import TopicMapping
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import ClientSocket, connected, started_hub

LOG_TOPIC = TopicMapping().default_log_topic


def _hub(mode: str) -> tuple[FakeBroker, MqttHub, Clock]:
    clock = Clock()
    broker = FakeBroker(clock=clock, durable_at_once=False)
    return broker, started_hub(broker, puback_acks=PUBACK_ACKS[mode]), clock


def _client(hub: MqttHub, client_id: str) -> tuple[MqttConnection, ClientSocket]:
    return connected(hub, Connect(client_id=client_id))


def _subscribed_pair(mode: str) -> tuple[FakeBroker, MqttConnection, ClientSocket, MqttConnection, ClientSocket]:
    broker, hub, _ = _hub(mode)
    subscriber, subscriber_socket = _client(hub, "subscriber")
    request = SubscriptionRequest(topic_filter="plant/#", qos=1)
    subscriber.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), PROTOCOL_LEVEL_5))
    assert [ack.reason_codes for ack in subscriber_socket.take(SubAck)] == [(1,)]
    publisher, publisher_socket = _client(hub, "publisher")
    return broker, subscriber, subscriber_socket, publisher, publisher_socket


def _publish(publisher: MqttConnection, packet_id: int, payload: bytes) -> None:
    publisher.data_received(encode(Publish(topic="plant/a", payload=payload, qos=1, packet_id=packet_id),
                                   PROTOCOL_LEVEL_5))


def test_written_acknowledges_and_delivers_before_the_fsync() -> None:
    broker, _, subscriber_socket, publisher, publisher_socket = _subscribed_pair("written")
    _publish(publisher, 7, b"21.5")
    assert [ack.packet_id for ack in publisher_socket.take(PubAck)] == [7]
    assert [publish.payload for publish in subscriber_socket.take(Publish)] == [b"21.5"]
    broker.sync()  # the shared reader's fetch now returns the record: it is not delivered again
    _publish(publisher, 8, b"22.0")
    broker.sync()
    assert [publish.payload for publish in subscriber_socket.take(Publish)] == [b"22.0"]


def test_written_reader_does_not_decode_again_what_it_handed_out_from_memory() -> None:
    """Nothing the front end handed out from memory is decoded again (``PartitionDispatcher.run``: a long poll
    that brings such records, where the broker cannot watch the partition, moves on without decoding them); what
    it has not handed out is decoded."""
    broker, subscriber, subscriber_socket, publisher, _ = _subscribed_pair("written")
    hub = subscriber.hub
    decoded: list[int] = []
    dispatch_all = hub.dispatch_all
    hub.dispatch_all = lambda key, data, start, aborted=None: (  # type: ignore[method-assign]
        decoded.append(start), dispatch_all(key, data, start, aborted))[1]
    _publish(publisher, 7, b"21.5")
    broker.sync()
    assert decoded == []
    broker.append_records(LOG_TOPIC, [(b"plant/native", b"native")])
    broker.sync()
    assert len(decoded) == 1
    assert [publish.payload for publish in subscriber_socket.take(Publish)] == [b"21.5", b"native"]


def test_written_reader_is_not_woken_to_read_again_what_it_handed_out_from_memory() -> None:
    """The shared reader waits with ``wait_for_records`` from the position ``appended`` moves: the fsync of the
    front end's own appends neither wakes it nor makes it fetch them again; another writer's record does."""
    broker, _, subscriber_socket, publisher, _ = _subscribed_pair("written")
    fetched = len(_log_fetches(broker))
    _publish(publisher, 7, b"21.5")
    broker.sync()
    assert len(_log_fetches(broker)) == fetched
    broker.append_records(LOG_TOPIC, [(b"plant/native", b"native")])
    broker.sync()
    assert len(_log_fetches(broker)) == fetched + 1
    assert [publish.payload for publish in subscriber_socket.take(Publish)] == [b"21.5", b"native"]


def test_with_nobody_subscribed_the_reader_moves_past_records_without_fetching_them() -> None:
    """Nobody to hand them to: the shared reader takes the log's committed end instead of reading the records; a
    subscriber that comes later gets what is published after it subscribed."""
    broker, hub, _ = _hub("durable")
    publisher, _ = _client(hub, "publisher")
    fetched = len(_log_fetches(broker))
    _publish(publisher, 7, b"unheard")
    broker.sync()
    assert len(_log_fetches(broker)) == fetched and hub.live_position((LOG_TOPIC, 0)) == 1
    _a_late_subscriber_hears_only_what_follows(broker, hub, publisher)


def test_a_reader_whose_committed_end_cannot_be_read_fetches_instead_and_goes_on() -> None:
    broker, hub, _ = _hub("durable")
    publisher, _ = _client(hub, "publisher")
    broker.script("list_offset", errors.NotLeaderError("moving"), topic=LOG_TOPIC)
    _publish(publisher, 7, b"unheard")
    broker.sync()
    assert hub.live_position((LOG_TOPIC, 0)) == 1  # the fetch took it past the record
    _a_late_subscriber_hears_only_what_follows(broker, hub, publisher)


def test_a_subscriber_that_comes_while_the_reader_asks_for_the_committed_end_loses_nothing_published_after() -> None:
    """The committed end's answer may come late (the partition's leader moved: ``list_offset`` is routed to it), and
    by then include what was published after a client subscribed: the reader then reads on from where it stood
    rather than jumping past that."""
    broker, hub, _ = _hub("durable")
    publisher, _ = _client(hub, "publisher")
    answer: Deferred[OffsetAndTimestamp] = Deferred()
    broker.script("list_offset", answer, topic=LOG_TOPIC)
    _publish(publisher, 7, b"before")
    broker.sync()  # nobody subscribed: the reader asks for the committed end
    subscriber, subscriber_socket = _client(hub, "subscriber")
    request = SubscriptionRequest(topic_filter="plant/#", qos=1)
    subscriber.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), PROTOCOL_LEVEL_5))
    _publish(publisher, 8, b"heard")
    broker.sync()
    answer.callback(OffsetAndTimestamp(offset=2))  # the end as the leader answers it now
    assert b"heard" in [publish.payload for publish in subscriber_socket.take(Publish)]


def _a_late_subscriber_hears_only_what_follows(broker: FakeBroker, hub: MqttHub, publisher: MqttConnection) -> None:
    """A subscriber that comes now gets what ``publisher`` publishes after it subscribed, and nothing before."""
    subscriber, subscriber_socket = _client(hub, "subscriber")
    request = SubscriptionRequest(topic_filter="plant/#", qos=1)
    subscriber.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), PROTOCOL_LEVEL_5))
    _publish(publisher, 8, b"heard")
    broker.sync()
    assert [publish.payload for publish in subscriber_socket.take(Publish)] == [b"heard"]


def _log_fetches(broker: FakeBroker) -> list[tuple[object, ...]]:
    return [call for call in broker.calls_of("fetch") if call[1].positions[0].topic == LOG_TOPIC]


def test_durable_delivers_only_once_the_message_is_durable() -> None:
    broker, _, subscriber_socket, publisher, _ = _subscribed_pair("durable")
    _publish(publisher, 7, b"21.5")
    assert subscriber_socket.take(Publish) == []
    broker.sync()
    assert [publish.payload for publish in subscriber_socket.take(Publish)] == [b"21.5"]


def test_written_leaves_records_behind_another_writers_unsynced_ones_to_the_reader_in_log_order() -> None:
    broker, _, subscriber_socket, publisher, _ = _subscribed_pair("written")
    broker.append_records(LOG_TOPIC, [(b"plant/native", b"first")])  # not durable yet: the reader has not seen it
    _publish(publisher, 7, b"second")
    assert subscriber_socket.take(Publish) == []
    broker.sync()
    assert [publish.payload for publish in subscriber_socket.take(Publish)] == [b"first", b"second"]


def test_written_catch_up_waits_for_what_was_handed_out_before_its_fsync() -> None:
    """A subscriber whose queue is full falls behind at a record the reader handed out before its fsync: it reads
    on from there once the record is durable, and loses nothing."""
    broker, hub, _ = _hub("written")
    subscriber = MqttConnection(hub, SessionConfig(pending_messages_max=1), lambda: "generated")
    subscriber_socket = ClientSocket()
    subscriber.connection_made(subscriber_socket)  # type: ignore[arg-type]
    connect = Connect(client_id="subscriber", properties=Properties(receive_maximum=1))
    subscriber.data_received(encode(connect, PROTOCOL_LEVEL_5))
    broker.sync()
    request = SubscriptionRequest(topic_filter="plant/#", qos=1)
    subscriber.data_received(encode(Subscribe(packet_id=1, subscriptions=(request,)), PROTOCOL_LEVEL_5))
    publisher, _ = _client(hub, "publisher")
    for packet_id, payload in enumerate((b"1", b"2", b"3"), start=1):  # in flight, queued, left in the log
        _publish(publisher, packet_id, payload)
    payloads = []
    for _ in range(2):
        (publish,) = subscriber_socket.take(Publish)
        payloads.append(publish.payload)
        subscriber.data_received(encode(PubAck(packet_id=publish.packet_id), PROTOCOL_LEVEL_5))
    assert payloads == [b"1", b"2"]
    assert subscriber_socket.take(Publish) == []  # "3" is not durable yet: the catch-up waits for it
    broker.sync()
    assert [publish.payload for publish in subscriber_socket.take(Publish)] == [b"3"]


def test_a_written_append_that_fails_is_negatively_acknowledged_and_reaches_nobody() -> None:
    """``written`` hands an append out and acknowledges it in one callback; a write that fails gets neither: the
    PUBACK carries the failure (MQTT 5) and the subscriber gets nothing, then the next message goes through."""
    broker, _, subscriber_socket, publisher, publisher_socket = _subscribed_pair("written")
    broker.script("produce", errors.NotLeaderError("the partition moved"))
    _publish(publisher, 7, b"lost")
    assert [(ack.packet_id, ack.reason_code) for ack in publisher_socket.take(PubAck)] == [(7, 0x80)]
    assert subscriber_socket.take(Publish) == []
    _publish(publisher, 8, b"kept")
    assert [(ack.packet_id, ack.reason_code) for ack in publisher_socket.take(PubAck)] == [(8, 0)]
    assert [publish.payload for publish in subscriber_socket.take(Publish)] == [b"kept"]
