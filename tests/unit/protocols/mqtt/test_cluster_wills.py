"""A will stored by another broker's hub is published by the hub leading ``__mqtt_wills`` once that broker
is fenced, and only then."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from twisted.internet.task import Clock

from mqbroker import errors
from mqbroker.model import BrokerEndpoint, ClusterMetadata
from mqbroker.protocols.mqtt.actions import PublishToLog, ScheduleWill
from mqbroker.protocols.mqtt.cluster_wills import ORPHAN_CHECK_INTERVAL_S, WILLS_TOPIC
from mqbroker.protocols.mqtt.followers import BROKER_HEADER, HUB_HEADER
from mqbroker.protocols.mqtt.hub import WILL_RETRY_S, MqttHub
from mqbroker.protocols.mqtt.stored_will import StoredWill
from mqbroker.protocols.mqtt.topics import TopicMapping
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.readable import readable_records
from tests.fake_broker import FakeBroker
from tests.unit.protocols.mqtt.client_socket import started_hub

LOG_TOPIC = TopicMapping().default_log_topic


def _will_record(client_id: str, holder: int, payload: bytes, due_at_ms: int | None = None) -> bytes:
    will = StoredWill(delay_ms=0 if due_at_ms is None else 60_000, due_at_ms=due_at_ms,
                      write=PublishToLog(ticket=None, log_topic=LOG_TOPIC, key=b"dev/status", payload=payload, headers=()))
    builder = BatchBuilder()
    builder.append(0, client_id.encode(), will.to_bytes(), ((HUB_HEADER, b"another hub"), (BROKER_HEADER, b"%d" % holder)))
    return builder.build()


class _ClusterOfOneAndThree(FakeBroker):
    """The fake broker 1, in a cluster whose live brokers are 1 and 3 (2 is fenced); 1 leads every partition."""

    def _metadata(self, topics: Sequence[str] | None) -> ClusterMetadata:
        cluster = super()._metadata(topics)
        return replace(cluster, brokers=(*cluster.brokers, BrokerEndpoint(node_id=3, host="127.0.0.1", port=9395)))


def _started_hub(broker: FakeBroker, clock: Clock, node_id: int) -> MqttHub:
    hub = started_hub(broker, clock, node_id=node_id)
    hub.sessions.clustered = True
    return hub


def _stored_wills(broker: FakeBroker) -> list[StoredWill | None]:
    """Every record the hub wrote to the wills topic, read back (None: a deletion)."""
    return [None if value is None else StoredWill.from_bytes(value)
            for topic, value in _published(broker) if topic == WILLS_TOPIC]


def _published(broker: FakeBroker) -> list[tuple[str, bytes]]:
    """(topic, record value) of every produce to the MQTT log or the wills topic."""
    found = []
    for _, topic, partition, records, *_ in broker.calls_of("produce"):
        if topic in (LOG_TOPIC, WILLS_TOPIC):
            found += [(topic, record.value) for record in readable_records(records, 0, topic=topic, partition=partition,
                                                                           skipped=_unexpected)]
    return found


def _unexpected(batch: object) -> None:
    raise AssertionError(f"the hub wrote a batch that does not decode: {batch}")


def test_the_will_of_a_client_whose_broker_is_fenced_is_published_once() -> None:
    broker, clock = _ClusterOfOneAndThree(), Clock()
    broker.add_topic(WILLS_TOPIC)
    broker.append(WILLS_TOPIC, _will_record("dev-1", holder=2, payload=b"dev-1 is gone"))
    broker.append(WILLS_TOPIC, _will_record("dev-2", holder=3, payload=b"dev-2 is gone"))  # its broker is live
    hub = _started_hub(broker, clock, node_id=1)
    assert (LOG_TOPIC, b"dev-1 is gone") not in _published(broker)
    clock.advance(ORPHAN_CHECK_INTERVAL_S)
    assert _published(broker).count((LOG_TOPIC, b"dev-1 is gone")) == 1
    assert (WILLS_TOPIC, None) in _published(broker), "the record is deleted: no other hub publishes it again"
    clock.advance(ORPHAN_CHECK_INTERVAL_S * 3)
    assert _published(broker).count((LOG_TOPIC, b"dev-1 is gone")) == 1
    assert (LOG_TOPIC, b"dev-2 is gone") not in _published(broker)
    hub.stop()


def test_only_the_hub_leading_the_wills_topic_publishes_orphans() -> None:
    broker, clock = _ClusterOfOneAndThree(), Clock()
    broker.add_topic(WILLS_TOPIC)
    broker.append(WILLS_TOPIC, _will_record("dev-1", holder=2, payload=b"dev-1 is gone"))
    hub = _started_hub(broker, clock, node_id=3)  # broker 1 leads every partition
    clock.advance(ORPHAN_CHECK_INTERVAL_S * 3)
    assert (LOG_TOPIC, b"dev-1 is gone") not in _published(broker)
    hub.stop()


def test_a_restarted_broker_publishes_the_wills_its_previous_run_held() -> None:
    broker, clock = _ClusterOfOneAndThree(), Clock()
    broker.add_topic(WILLS_TOPIC)
    broker.append(WILLS_TOPIC, _will_record("dev-1", holder=3, payload=b"dev-1 is gone"))  # written before a crash
    hub = _started_hub(broker, clock, node_id=3)  # broker 3 again, not leading the wills topic, never fenced
    clock.advance(ORPHAN_CHECK_INTERVAL_S)
    assert _published(broker).count((LOG_TOPIC, b"dev-1 is gone")) == 1
    hub.stop()


def test_a_single_broker_stores_no_wills() -> None:
    broker, clock = FakeBroker(), Clock()
    hub = started_hub(broker, clock, node_id=1)
    write = PublishToLog(ticket=None, log_topic=LOG_TOPIC, key=b"dev/status", payload=b"gone", headers=())
    hub.wills.connected("dev-1", ScheduleWill(client_id="dev-1", at_ms=0, actions=(write,)))
    hub.wills.disconnected("dev-1", None)
    assert not [topic for _, topic, *_ in broker.calls_of("produce") if topic == WILLS_TOPIC]
    hub.stop()


def test_a_will_whose_delay_began_stays_stored_with_its_due_time_until_it_is_published() -> None:
    broker, clock = _ClusterOfOneAndThree(), Clock()
    hub = _started_hub(broker, clock, node_id=1)
    clock.advance(100)
    write = PublishToLog(ticket=None, log_topic=LOG_TOPIC, key=b"dev/status", payload=b"gone", headers=())
    will = ScheduleWill(client_id="dev-1", at_ms=hub.now_ms() + 10_000, actions=(write,))
    hub.wills.connected("dev-1", will)
    hub.schedule_will(will)  # the connection ended: the session's will action, then the end of its session
    hub.wills.disconnected("dev-1", will)
    [connected, begun] = _stored_wills(broker)
    assert connected is not None and connected.due_at_ms is None and connected.delay_ms == 10_000
    assert begun is not None and begun.due_at_ms == will.at_ms, "a survivor publishes it at its time"
    clock.advance(9.9)
    assert (LOG_TOPIC, b"gone") not in _published(broker)
    clock.advance(0.1)
    assert (LOG_TOPIC, b"gone") in _published(broker)
    assert _stored_wills(broker)[-1] is None, "published: the record is deleted"
    hub.stop()


def test_a_client_back_on_the_same_broker_deletes_its_begun_will() -> None:
    broker, clock = _ClusterOfOneAndThree(), Clock()
    hub = _started_hub(broker, clock, node_id=1)
    write = PublishToLog(ticket=None, log_topic=LOG_TOPIC, key=b"dev/status", payload=b"gone", headers=())
    will = ScheduleWill(client_id="dev-1", at_ms=hub.now_ms() + 10_000, actions=(write,))
    hub.wills.connected("dev-1", will)
    hub.schedule_will(will)
    hub.wills.disconnected("dev-1", will)
    hub.cancel_will("dev-1")  # the client is back, without a will
    hub.wills.connected("dev-1", None)
    assert _stored_wills(broker)[-1] is None
    clock.advance(20)
    assert (LOG_TOPIC, b"gone") not in _published(broker)
    hub.stop()


def test_a_dead_brokers_will_whose_delay_began_is_published_at_its_due_time_and_held_meanwhile() -> None:
    broker, clock = _ClusterOfOneAndThree(), Clock()
    clock.advance(1000)
    broker.add_topic(WILLS_TOPIC)
    broker.append(WILLS_TOPIC, _will_record("dev-1", holder=2, payload=b"dev-1 is gone", due_at_ms=1_005_000))
    hub = _started_hub(broker, clock, node_id=1)
    clock.advance(ORPHAN_CHECK_INTERVAL_S)
    [held] = _stored_wills(broker)
    assert held is not None and held.due_at_ms == 1_005_000, "stored under this broker: if it dies too, another has it"
    clock.advance(3.9)
    assert (LOG_TOPIC, b"dev-1 is gone") not in _published(broker), "not before its time"
    clock.advance(0.1)
    assert _published(broker).count((LOG_TOPIC, b"dev-1 is gone")) == 1
    assert _stored_wills(broker)[-1] is None
    hub.stop()


def _refused_will() -> tuple[FakeBroker, Clock, MqttHub, ScheduleWill]:
    """Broker 1 of a cluster, client ``dev-1`` connected with a will due now whose first write will be refused."""
    broker, clock = _ClusterOfOneAndThree(), Clock()
    hub = _started_hub(broker, clock, node_id=1)
    write = PublishToLog(ticket=None, log_topic=LOG_TOPIC, key=b"dev/status", payload=b"gone", headers=())
    will = ScheduleWill(client_id="dev-1", at_ms=hub.now_ms(), actions=(write,))
    hub.wills.connected("dev-1", will)
    broker.script("produce", errors.NotEnoughReplicasError("1 in sync, 2 needed"), topic=LOG_TOPIC)
    return broker, clock, hub, will


def test_a_will_whose_write_failed_is_written_again_and_stays_stored_until_then() -> None:
    broker, clock, hub, will = _refused_will()
    hub.schedule_will(will)  # due now: written at once, and refused
    hub.wills.disconnected("dev-1", will)
    assert _published(broker).count((LOG_TOPIC, b"gone")) == 1
    assert _stored_wills(broker)[-1] is not None, "not written yet: a survivor would still publish it"
    clock.advance(WILL_RETRY_S)
    assert _published(broker).count((LOG_TOPIC, b"gone")) == 2
    assert _stored_wills(broker)[-1] is None, "written: the record is deleted"
    clock.advance(10 * WILL_RETRY_S)
    assert _published(broker).count((LOG_TOPIC, b"gone")) == 2
    hub.stop()


def test_a_client_back_before_its_failed_will_is_written_again_stops_it() -> None:
    broker, clock, hub, will = _refused_will()
    hub.schedule_will(will)
    hub.cancel_will("dev-1")  # the client is back
    clock.advance(10 * WILL_RETRY_S)
    assert _published(broker).count((LOG_TOPIC, b"gone")) == 1
    hub.stop()
