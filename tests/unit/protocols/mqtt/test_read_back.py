"""A reopened session's in-flight messages are read back from the log at their stored positions."""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from mqbroker import errors
from mqbroker.protocols.mqtt.hub import MqttHub
from mqbroker.protocols.mqtt.packets import Properties
from mqbroker.protocols.mqtt.read_back import read_back_inflight
from mqbroker.protocols.mqtt.state import InflightState, OutboundMessage, SessionState
from mqbroker.protocols.mqtt.topics import TopicMapping, record_key
from tests.fake_broker import FakeBroker

LOG_TOPIC = TopicMapping().default_log_topic


def _delivered(offset: int, qos: int = 1) -> OutboundMessage:
    """What a session sent: the message at ``offset`` of partition 0 (subscription identifier 4)."""
    return OutboundMessage(topic=f"plant/{offset}", payload=b"reading %d" % offset, qos=qos,
                           properties=Properties(subscription_identifiers=(4,)), position=(LOG_TOPIC, 0, offset))


def test_stored_positions_are_read_back_into_the_publishes_that_were_sent() -> None:
    broker = FakeBroker()
    for offset in range(8):
        broker.append_records(LOG_TOPIC, [(record_key(f"plant/{offset}"), b"reading %d" % offset)])
    broker.logs[(LOG_TOPIC, 0)].log_start = 2  # retention deleted offsets 0 and 1
    sent = SessionState("device", expiry_interval_s=60)
    sent.inflight = {9: _delivered(1), 10: _delivered(3), 11: _delivered(4, qos=2), 12: _delivered(6), 13: _delivered(7)}
    sent.released = {11}
    loaded = SessionState.from_bytes(sent.to_bytes())
    assert set(loaded.unread) == {9, 10, 12, 13}
    done = Deferred.fromCoroutine(read_back_inflight(MqttHub(broker, Clock(), TopicMapping()), loaded, now_ms=0))
    assert done.called and done.result is None
    assert loaded.unread == {}
    assert list(loaded.inflight) == [10, 11, 12, 13]  # offset 1 is gone from the log: that delivery is dropped
    for packet_id in (10, 12, 13):
        message, delivered = loaded.inflight[packet_id], sent.inflight[packet_id]
        assert (message.topic, message.payload, message.qos, message.retain, message.properties, message.position) == (
            delivered.topic, delivered.payload, delivered.qos, delivered.retain, delivered.properties, delivered.position)
    assert loaded.flow(11) is InflightState.AWAITING_PUBCOMP  # only its packet id is resent (PUBREL)


def test_a_message_the_partition_does_not_serve_yet_fails_the_open_rather_than_being_dropped() -> None:
    broker = FakeBroker(durable_at_once=False)  # appended, but the high watermark has not moved past it
    broker.append_records(LOG_TOPIC, [(record_key("plant/0"), b"reading 0")])
    sent = SessionState("device", expiry_interval_s=60)
    sent.inflight = {1: _delivered(0)}
    loaded = SessionState.from_bytes(sent.to_bytes())
    done = Deferred.fromCoroutine(read_back_inflight(MqttHub(broker, Clock(), TopicMapping()), loaded, now_ms=0))
    failures: list[Failure] = []
    done.addErrback(failures.append)
    assert failures and failures[0].check(errors.LeaderNotAvailableError)
    assert loaded.unread == {1: (LOG_TOPIC, 0, 0)}  # untouched: the session stays stored as it was
