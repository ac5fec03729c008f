"""The MQTT hub's log readers skip a batch they cannot decode, count and log it, and go on serving."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from mqbroker import limits
from mqbroker.protocols.mqtt.followers import BROKER_HEADER, HUB_HEADER
from mqbroker.protocols.mqtt.hub import RETAINED_TOPIC, MqttHub
from mqbroker.protocols.mqtt.session_directory import HOLDER_CHECK_INTERVAL_S, SESSIONS_TOPIC
from mqbroker.protocols.mqtt.state import SessionState, Subscription
from mqbroker.protocols.mqtt.stored import StoredSession
from mqbroker.protocols.mqtt.topics import TopicMapping, record_key
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.readable import UnreadableTally
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import started_hub
from tests.poison import poison_batch
from tests.unit.protocols.test_startup import warnings  # noqa: F401  (a fixture)

LOG_TOPIC = TopicMapping().default_log_topic


class LiveConnection:
    """A connected session that takes every live message."""

    def __init__(self) -> None:
        self.offered: list[tuple[int, str, bytes]] = []

    def accepts_live(self, partition_key: Any) -> bool:
        return True

    def offer_live(self, partition_key: Any, offset: int, message: Any, subscriptions: Any) -> None:
        self.offered.append((offset, message.topic, message.payload))

    def offer_live_many(self, partition_key: Any, offers: Any) -> None:
        for offset, message, subscriptions in offers:
            self.offer_live(partition_key, offset, message, subscriptions)

    def flush(self, *, even_when_corked: bool = False) -> None:
        pass


def _poison(broker: FakeBroker, topic: str) -> None:
    broker.append(topic, poison_batch())


def _message_batch(topic: str, payload: bytes) -> bytes:
    builder = BatchBuilder()
    builder.append(0, record_key(topic), payload)
    return builder.build()


def test_retained_messages_around_a_poison_batch_are_restored(warnings: list[dict[str, Any]]) -> None:  # noqa: F811
    broker, tally = FakeBroker(), UnreadableTally()
    broker.append(RETAINED_TOPIC, _message_batch("plant/a", b"1"))
    _poison(broker, RETAINED_TOPIC)
    broker.append(RETAINED_TOPIC, _message_batch("plant/b", b"2"))
    hub = started_hub(broker, Clock(), unreadable=tally)
    assert sorted(message.payload for message in hub.retained.matching("plant/#")) == [b"1", b"2"]
    assert tally.counts() == {("MQTT reader", RETAINED_TOPIC): 1}
    [logged] = [event for event in warnings if event.get("reader") == "MQTT reader"]
    assert (logged["topic"], logged["partition"], logged["first_offset"], logged["last_offset"]) == (RETAINED_TOPIC, 0, 1, 1)
    hub.stop()


def test_live_subscribers_get_the_messages_after_a_poison_batch() -> None:
    broker, tally = FakeBroker(), UnreadableTally()
    hub = MqttHub(broker, Clock(), TopicMapping(), unreadable=tally)
    connection = LiveConnection()
    hub.connections["device-1"] = connection  # type: ignore[assignment]
    hub.registry.add("device-1", Subscription(topic_filter="#"))
    key = (LOG_TOPIC, 0)
    broker.append(LOG_TOPIC, _message_batch("plant/a", b"before"))
    _poison(broker, LOG_TOPIC)
    broker.append(LOG_TOPIC, _message_batch("plant/b", b"after"))
    hub.dispatch_all(key, b"".join(batch for _, batch in broker.logs[key].batches), 0)
    assert connection.offered == [(0, "plant/a", b"before"), (2, "plant/b", b"after")]
    assert tally.counts() == {("MQTT reader", LOG_TOPIC): 1}


class _Connecting:
    """A client connecting to the hub (``open_session`` only reads its client id)."""

    client_id = "device-9"

    def shut_down(self) -> None:
        pass


def _hub_with_a_session_live_on(holder: int) -> tuple[MqttHub, Clock]:
    """A clustered hub on broker 3 whose sessions topic says device-9 is live on broker ``holder``."""
    broker, clock = FakeBroker(), Clock()
    live = StoredSession(state=SessionState("device-9").to_bytes())
    builder = BatchBuilder()
    builder.append(0, b"device-9", live.to_bytes(), ((HUB_HEADER, b"another hub"), (BROKER_HEADER, b"%d" % holder)))
    broker.append(SESSIONS_TOPIC, builder.build())
    hub = started_hub(broker, clock, node_id=3)
    hub.sessions.clustered = True  # the fake answers as a cluster of one broker (1): broker 2 reads as fenced
    return hub, clock


def _open(hub: MqttHub) -> list[StoredSession | None]:
    """Connect device-9; the list gets the session once the connect may answer (it stays empty on an error)."""
    opened: list[StoredSession | None] = []
    Deferred.fromCoroutine(hub.open_session(_Connecting(), clean_start=False)).addCallback(opened.append)  # type: ignore[arg-type]
    return opened


def test_a_connect_does_not_wait_for_a_handover_from_a_fenced_broker() -> None:
    hub, clock = _hub_with_a_session_live_on(holder=2)
    opened = _open(hub)
    clock.advance(HOLDER_CHECK_INTERVAL_S)
    assert len(opened) == 1 and opened[0] is not None, "broker 2 is not among the live brokers: no handover can come"
    hub.stop()


def test_a_connect_waits_for_the_handover_of_a_live_broker_up_to_its_bound() -> None:
    hub, clock = _hub_with_a_session_live_on(holder=1)
    opened = _open(hub)
    clock.pump([HOLDER_CHECK_INTERVAL_S] * int(limits.mqtt_session_handoff_ms_max / 1000 / HOLDER_CHECK_INTERVAL_S - 1))
    assert not opened, "broker 1 is live: it may still hand the session over"
    clock.advance(2 * HOLDER_CHECK_INTERVAL_S)
    assert len(opened) == 1 and opened[0] is not None, "past the bound the newest stored state resumes"
    hub.stop()


def test_a_read_past_the_log_end_resumes_at_the_end_and_one_before_the_start_at_the_start() -> None:
    """A crash can take back a tail that ``mqtt_puback = written`` delivered: a session positioned past it goes on
    from the log end (not the whole log again); one that retention passed goes on from the log start."""
    broker = FakeBroker()
    for number in range(6):
        broker.append(LOG_TOPIC, _message_batch("plant/a", b"%d" % number))
    broker.logs[(LOG_TOPIC, 0)].log_start = 2
    hub = MqttHub(broker, Clock(), TopicMapping())
    key = (LOG_TOPIC, 0)
    resumed: list[int] = []
    for offset in (9, 0):
        Deferred.fromCoroutine(hub.restart_position(key, offset)).addCallback(resumed.append)
    assert resumed == [6, 2]
