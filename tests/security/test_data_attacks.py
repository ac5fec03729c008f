"""Attacks on the data the broker itself reads and on its names and bounds (issue 17, part B).

One broker as embedded by default (anonymous, allow-all: the most exposed setting), with a small
cluster-wide partition limit. Each test performs the attack, checks the documented refusal, that
the topics, end offsets (the internal topics' too) and the broker's own state did not change, and
that honest clients (native and MQTT) are still served (docs/security.md, tested attacks).
"""

from __future__ import annotations

import os
import re
import time
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pika
import pytest

from mqbroker.client import Admin
from mqbroker.protocols.amqp.stored import queue_topic
from mqbroker.protocols.native import messages as m
from tests.integration.brokerprocess import BrokerProcess, running
from tests.integration.clusterprocess import wait_for
from tests.integration.mqtt_support import Client as MqttClient
from tests.integration.nativewire import RawNativeConnection
from tests.poison import poison_batch
from tests.security.support import CANARY, honest_round_trip, state_of
from tests.unit.storage.logtools import make_batch

PARTITIONS_MAX = 200
MQTT_LOG_TOPIC = "mqtt.messages"
INTERNAL_TOPICS = ("__consumer_offsets", "__mqtt_sessions", "__mqtt_retained", "__amqp_metadata")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """The embedded default, with ``cluster_partitions_max`` small enough to reach."""
    process = BrokerProcess(data_dir=tmp_path_factory.mktemp("data-attacks") / "data",
                            extra_args=["--set", f"cluster_partitions_max={PARTITIONS_MAX}"])
    for started in running(process):
        with Admin(started.bootstrap) as admin:
            admin.create_topics([CANARY], partitions=1)
            wait_for(lambda: {t.name for t in admin.metadata().topics} >= {"__mqtt_sessions", "__amqp_metadata"},
                     30, "the front ends' internal topics")
        yield started


def _mqtt(broker: BrokerProcess, client_id: str, **options: Any) -> MqttClient:
    return MqttClient(SimpleNamespace(mqtt_port=broker.ports["mqtt"]), client_id, **options)  # type: ignore[arg-type]


def _produce(broker: BrokerProcess, topic: str, records: bytes, partition: int = 0) -> tuple[int, str]:
    """One raw Produce (acks=1): the partition's error code and message."""
    raw = RawNativeConnection(broker.ports["native"])
    try:
        answer = raw.call(m.ProduceRequest(acks=1, timeout_ms=5_000, topics=(m.ProduceTopic(
            name=topic, partitions=(m.ProducePartition(partition_index=partition, records=records),)),)))
    finally:
        raw.close()
    [result] = answer.topics[0].partitions
    return result.error_code, result.error_message or ""


def _end(broker: BrokerProcess, topic: str) -> int:
    with Admin(broker.bootstrap) as admin:
        return admin.list_offset(topic, 0, -1)


def _internal_ends(admin: Admin) -> dict[str, int]:
    return {topic: admin.list_offset(topic, 0, -1) for topic in INTERNAL_TOPICS}


def _state(broker: BrokerProcess) -> tuple[Any, dict[str, int]]:
    with Admin(broker.bootstrap) as admin:
        return state_of(admin), _internal_ends(admin)


def _honest(broker: BrokerProcess) -> None:
    """A native round trip and an MQTT one."""
    honest_round_trip(broker.bootstrap, None)
    topic = f"honest/{time.monotonic_ns()}"
    subscriber = _mqtt(broker, f"honest-sub-{time.monotonic_ns()}")
    publisher = _mqtt(broker, f"honest-pub-{time.monotonic_ns()}")
    try:
        subscriber.subscribe(topic, qos=1)
        publisher.publish(topic, b"honest", qos=1)
        assert [message.payload for message in subscriber.receive(1)] == [b"honest"]
    finally:
        subscriber.disconnect()
        publisher.disconnect()


def _metric(broker: BrokerProcess, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.ports['http']}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    wanted = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{key}="{value}"' in line for key, value in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{wanted}}} in /metrics")


# -- issue 17 #3: a poison batch stopped MQTT delivery -------------------------------------------


def test_a_poison_batch_for_the_mqtt_log_is_refused_and_one_already_there_is_skipped(broker: BrokerProcess) -> None:
    """The 80-byte batch (valid CRC, garbage records) is refused on produce (CORRUPT_MESSAGE: the MQTT log topic
    is record.validation=decode). On a topic that still takes it (a topic from before the setting), it is
    appended, and every MQTT subscriber, old and new, keeps receiving: the hub counts, logs and skips it."""
    assert len(poison_batch()) == 80
    subscriber = _mqtt(broker, "poison-old-subscriber")
    publisher = _mqtt(broker, "poison-publisher")
    try:
        subscriber.subscribe("plant/#", qos=1)
        with Admin(broker.bootstrap) as admin:
            end = admin.list_offset(MQTT_LOG_TOPIC, 0, -1)
            assert admin.describe_configs(MQTT_LOG_TOPIC)["record.validation"] == "decode"
            before = _state(broker)
            code, message = _produce(broker, MQTT_LOG_TOPIC, poison_batch())
            assert (code, "takes only records that decode" in message) == (2, True)  # CORRUPT_MESSAGE
            assert _state(broker) == before and admin.list_offset(MQTT_LOG_TOPIC, 0, -1) == end

            admin.alter_configs(MQTT_LOG_TOPIC, {"record.validation": "none"})  # as a topic made before it existed
            try:
                assert _produce(broker, MQTT_LOG_TOPIC, poison_batch()) == (0, "")
                poisoned_at = admin.list_offset(MQTT_LOG_TOPIC, 0, -1) - 1
            finally:
                admin.alter_configs(MQTT_LOG_TOPIC, {"record.validation": "decode"})
        publisher.publish("plant/after-the-poison", b"still served", qos=1)
        assert [message.payload for message in subscriber.receive(1)] == [b"still served"]
        newcomer = _mqtt(broker, "poison-new-subscriber")
        try:
            newcomer.subscribe("plant/#", qos=1)
            publisher.publish("plant/later", b"new subscribers too", qos=1)
            assert [message.payload for message in newcomer.receive(1)] == [b"new subscribers too"]
        finally:
            newcomer.disconnect()
    finally:
        subscriber.disconnect()
        publisher.disconnect()
    assert _metric(broker, "mqbroker_unreadable_batches_total", reader="MQTT reader", topic=MQTT_LOG_TOPIC) >= 1
    assert re.search(rf"MQTT reader skipped an undecodable batch of {MQTT_LOG_TOPIC}-0 at offsets "
                     rf"{poisoned_at}\.\.{poisoned_at}", broker.log_text())
    _honest(broker)


def test_a_poison_batch_on_an_amqp_source_topic_is_skipped_and_queues_are_refused_one(broker: BrokerProcess) -> None:
    """A native topic an exchange reads (x-source-topic) takes any CRC-valid batch: the source reader counts, logs
    and skips the poison and routes what follows. A queue's own topic (record.validation=decode) refuses it."""
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["sensors"], partitions=1)
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.ports["amqp"]))
    try:
        channel = connection.channel()
        channel.exchange_declare("sensors-x", "fanout", arguments={"x-source-topic": "sensors"})
        channel.queue_declare("sensor-readings")
        channel.queue_bind("sensor-readings", "sensors-x")
        before = _state(broker), _end(broker, queue_topic("sensor-readings"))
        code, message = _produce(broker, queue_topic("sensor-readings"), poison_batch())
        assert (code, "takes only records that decode" in message) == (2, True)
        assert (_state(broker), _end(broker, queue_topic("sensor-readings"))) == before
        assert _produce(broker, "sensors", poison_batch()) == (0, "")
        assert _produce(broker, "sensors", make_batch([b"21.5 C"], keys=[b"sensor-1"])) == (0, "")
        taken = []
        wait_for(lambda: bool(taken.append(channel.basic_get("sensor-readings", auto_ack=True)[2]) or taken[-1]),
                 20, "the reading routed after the poison batch")
        assert taken[-1] == b"21.5 C"
    finally:
        connection.close()
    assert _metric(broker, "mqbroker_unreadable_batches_total", reader="AMQP source reader", topic="sensors") == 1
    _honest(broker)


# -- internal topics are the broker's ---------------------------------------------------------------


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__mqtt_sessions", "__amqp_metadata", "__not_yet_there"])
def test_clients_cannot_produce_to_internal_topics(broker: BrokerProcess, topic: str) -> None:
    """Internal topics accepted produce from any principal with WRITE (issue 17 #3): now INVALID_TOPIC_EXCEPTION,
    nothing is written and no topic is auto-created."""
    before = _state(broker)
    code, message = _produce(broker, topic, make_batch([b"forged"], keys=[b"forged-key"]))
    assert code == 17 and f"topic {topic!r} is internal" in message  # INVALID_TOPIC_EXCEPTION
    assert _state(broker) == before
    with Admin(broker.bootstrap) as admin:
        assert "__not_yet_there" not in {t.name for t in admin.metadata().topics}
    _honest(broker)


def test_clients_cannot_create_delete_or_change_internal_topics(broker: BrokerProcess) -> None:
    """Creating a __ topic is INVALID_TOPIC_EXCEPTION; deleting, altering, growing one or deleting its records is
    TOPIC_AUTHORIZATION_FAILED for anyone but a super user (the anonymous principal here)."""
    before = _state(broker)
    with Admin(broker.bootstrap) as admin:
        configs = admin.describe_configs("__mqtt_sessions")
        attempts = [
            (lambda: admin.create_topics(["__evil"], partitions=1), "is internal"),
            (lambda: admin.delete_topics(["__mqtt_sessions"]), "only a super user"),
            (lambda: admin.alter_configs("__mqtt_retained", {"retention.ms": "1"}), "only a super user"),
            (lambda: admin.create_partitions("__consumer_offsets", 64), "only a super user"),
            (lambda: admin.delete_records("__mqtt_sessions", 0, -1), "only a super user"),
        ]
        for attempt, refusal in attempts:
            with pytest.raises(Exception, match=refusal):
                attempt()
        assert admin.describe_configs("__mqtt_sessions") == configs
    assert _state(broker) == before
    _honest(broker)


# -- records the broker decodes must decode --------------------------------------------------------


def test_a_compacted_topic_refuses_records_without_keys(broker: BrokerProcess) -> None:
    with Admin(broker.bootstrap) as admin:
        admin.create_topics(["compacted-attack"], partitions=1, configs={"cleanup.policy": "compact"})
    before = _state(broker)
    code, message = _produce(broker, "compacted-attack", make_batch([b"no key"], keys=[None]))
    assert code == 87 and "every record needs a key" in message  # INVALID_RECORD
    assert _produce(broker, "compacted-attack", poison_batch())[0] == 2  # CORRUPT_MESSAGE
    assert _state(broker) == before
    assert _produce(broker, "compacted-attack", make_batch([b"keyed"], keys=[b"k"])) == (0, "")
    _honest(broker)


# -- issue 17 #4: names ending in a newline -----------------------------------------------------------


def test_a_topic_name_ending_in_a_newline_is_refused_and_the_broker_restarts(broker: BrokerProcess) -> None:
    """'evil\\n' was auto-created by a Metadata request, split a line of recovery-point-offset-checkpoint and
    stopped the next start. Now Metadata and CreateTopics refuse it (INVALID_TOPIC_EXCEPTION) and a restart
    after a checkpoint reads every line back."""
    before = _state(broker)
    raw = RawNativeConnection(broker.ports["native"])
    try:
        described = raw.call(m.MetadataRequest(topics=("evil\n",), allow_auto_topic_creation=True))
        created = raw.call(m.CreateTopicsRequest(topics=(m.CreatableTopic(name="evil\r\n", num_partitions=1),),
                                                 timeout_ms=5_000))
    finally:
        raw.close()
    assert [t.error_code for t in described.topics] == [17] and [t.error_code for t in created.topics] == [17]
    assert _state(broker) == before
    broker.stop()
    broker.restart()
    checkpoint = (broker.data_dir / "recovery-point-offset-checkpoint").read_text()
    assert all(len(line.split(" ")) in (1, 3) for line in checkpoint.splitlines())
    assert _state(broker)[0] == before[0]
    _honest(broker)


def test_a_group_id_with_a_newline_is_refused(broker: BrokerProcess) -> None:
    before = _state(broker)
    raw = RawNativeConnection(broker.ports["native"])
    try:
        answer = raw.call(m.OffsetCommitRequest(group_id="billing\nINFO forged log line", topics=(m.OffsetCommitTopic(
            name=CANARY, partitions=(m.OffsetCommitPartition(partition_index=0, committed_offset=0),)),)))
    finally:
        raw.close()
    [result] = answer.topics[0].partitions
    assert result.error_code == 24 and "control or unprintable character" in (result.error_message or "")
    assert _state(broker) == before
    _honest(broker)


# -- issue 17 #6: one anonymous CreateTopics of 2,000 partitions ----------------------------------------


def _open_files(broker: BrokerProcess) -> int:
    assert broker.process is not None
    return len(os.listdir(f"/proc/{broker.process.pid}/fd"))


def test_partitions_past_the_cluster_limit_are_refused_by_name(broker: BrokerProcess) -> None:
    """2,000 partitions in one request took the broker from 31 to 2,031 open files; now POLICY_VIOLATION names
    cluster_partitions_max, no partition is made and no file opened."""
    before, files = _state(broker), _open_files(broker)
    raw = RawNativeConnection(broker.ports["native"])
    try:
        answer = raw.call(m.CreateTopicsRequest(topics=(m.CreatableTopic(name="flood", num_partitions=2_000),),
                                                timeout_ms=5_000))
    finally:
        raw.close()
    [result] = answer.topics
    assert result.error_code == 44 and "cluster_partitions_max" in (result.error_message or "")  # POLICY_VIOLATION
    with Admin(broker.bootstrap) as admin:
        with pytest.raises(Exception, match="cluster_partitions_max"):
            admin.create_partitions(CANARY, PARTITIONS_MAX + 1)
    assert _state(broker) == before
    assert _open_files(broker) <= files + 5  # sockets of this test's clients at most
    _honest(broker)
