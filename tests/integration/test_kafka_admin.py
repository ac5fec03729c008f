"""Kafka admin clients against mqbroker: topics, partitions, configurations, records, offsets and groups."""

from __future__ import annotations

from typing import Any

import pytest

from mqbroker.protocols.kafka.messages.admin import (
    CreatableTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DeleteTopicState,
)
from mqbroker.protocols.kafka.messages.apis import ApiKey
from mqbroker.protocols.kafka.messages.cluster import MetadataRequest, MetadataRequestTopic
from mqbroker.protocols.kafka.messages.produce_fetch import FetchPartition, FetchRequest, FetchTopic
from mqbroker.records.compression import Compression
from mqbroker.records.header import iter_batches
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import wait_for
from tests.integration.kafka_support import (
    consume_with_confluent,
    kafka_bootstrap,
    kafka_call,
    kafka_broker_fixture,
    unique,
)


kafka_broker = kafka_broker_fixture("kafka-admin")


@pytest.fixture
def admin(kafka_broker: BrokerProcess) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": kafka_bootstrap(kafka_broker)})


def _produce(bootstrap: str, topic: str, count: int, timestamp_ms: int = 0) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i, timestamp=timestamp_ms + i if timestamp_ms else 0)
    assert producer.flush(20) == 0


def test_topics_are_created_grown_described_and_deleted(admin: Any) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions, NewTopic

    topic = unique("admin")
    admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3600000"})])[topic].result(10)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(10)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(10)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 5
    admin.delete_topics([topic])[topic].result(10)
    assert topic not in admin.list_topics(timeout=10).topics


def test_configurations_are_described_with_their_source_and_altered_incrementally(admin: Any) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic

    topic = unique("configs")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    for changes in ([ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
                     ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)],
                    [ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND)]):
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=changes)
        admin.incremental_alter_configs([resource])[resource].result(10)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    entries = next(iter(described.values())).result(10)
    assert entries["retention.ms"].value == "120000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert entries["cleanup.policy"].value == "compact,delete"
    assert entries["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_file_delete_delay_ms_is_altered_described_and_checked(admin: Any) -> None:
    """AlterConfigs (the whole set, as confluent-kafka's own suite sends it) takes file.delete.delay.ms."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

    topic = unique("delay")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"file.delete.delay.ms": "12345"})
    admin.alter_configs([resource])[resource].result(10)
    entries = next(iter(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values())).result(10)
    delay = entries["file.delete.delay.ms"]
    assert (delay.value, delay.source) == ("12345", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"file.delete.delay.ms": "-5"})
    with pytest.raises(KafkaException, match="file.delete.delay.ms"):
        admin.alter_configs([bad])[bad].result(10)


def test_configuration_types_and_the_brokers_own_settings_are_described(kafka_broker: BrokerProcess) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    topic = unique("typed")
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(kafka_broker))
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        entries = described["topic"][topic]
        assert (entries["retention.bytes"]["value"], entries["retention.bytes"]["config_type"]) == ("-1", "LONG")
        assert entries["cleanup.policy"]["config_type"] == "LIST"
        assert (entries["file.delete.delay.ms"]["value"], entries["file.delete.delay.ms"]["config_type"]) == ("60000", "LONG")
        described = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, 1)], config_filter="all")
        settings = described["broker"]["1"]
        advertised = settings["advertised.listeners"]
        assert advertised["value"].endswith(f":{kafka_broker.ports['kafka']}")
        assert (advertised["config_source"], advertised["read_only"]) == ("STATIC_BROKER_CONFIG", True)
        delay = settings["group.initial.rebalance.delay.ms"]  # set on the command line
        assert (delay["value"], delay["config_source"], delay["config_type"]) == ("200", "STATIC_BROKER_CONFIG", "INT")
        assert settings["num.partitions"]["config_source"] == "DEFAULT_CONFIG"
        assert (settings["log.segment.delete.delay.ms"]["value"], settings["log.segment.delete.delay.ms"]["config_type"]) \
            == ("60000", "LONG")
    finally:
        admin.close()


def test_records_are_deleted_and_offsets_found_by_time(kafka_broker: BrokerProcess, admin: Any) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    bootstrap, topic = kafka_bootstrap(kafka_broker), unique("records")
    _produce(bootstrap, topic, 10, timestamp_ms=1_700_000_000_000)
    partition = TopicPartition(topic, 0)
    found = admin.list_offsets({partition: OffsetSpec.for_timestamp(1_700_000_000_004)})[partition].result(10)
    assert found.offset == 4
    deleted = admin.delete_records([TopicPartition(topic, 0, 6)])[partition].result(10)
    assert deleted.low_watermark == 6
    earliest = admin.list_offsets({partition: OffsetSpec.earliest()})[partition].result(10)
    latest = admin.list_offsets({partition: OffsetSpec.latest()})[partition].result(10)
    assert (earliest.offset, latest.offset) == (6, 10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("low")})
    assert consumer.get_watermark_offsets(partition, 10) == (6, 10)
    consumer.close()


def test_list_offsets_finds_the_record_with_the_largest_timestamp(kafka_broker: BrokerProcess, admin: Any) -> None:
    """ListOffsets 7 (max timestamp, KIP-734): the record itself, inside a batch, the first of equal ones."""
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    bootstrap, topic = kafka_bootstrap(kafka_broker), unique("max-time")
    partition = TopicPartition(topic, 0)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 100})  # one batch
    for timestamp_ms in (1_000_100, 1_000_400, 1_000_200, 1_000_400):
        producer.produce(topic, value=b"v", timestamp=timestamp_ms)
    assert producer.flush(20) == 0
    found = admin.list_offsets({partition: OffsetSpec.max_timestamp()})[partition].result(10)
    assert (found.offset, found.timestamp) == (1, 1_000_400)
    producer.produce(topic, value=b"later", timestamp=2_000_000)
    assert producer.flush(20) == 0
    assert admin.list_offsets({partition: OffsetSpec.max_timestamp()})[partition].result(10).offset == 4


def test_client_chosen_replicas_are_used_for_new_topics_and_partitions(admin: Any) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions, NewTopic

    topic = unique("placed")
    (node_id,) = admin.list_topics(timeout=10).brokers
    admin.create_topics([NewTopic(topic, 2, replica_assignment=[[node_id], [node_id]])])[topic].result(10)
    admin.create_partitions([NewPartitions(topic, 4, replica_assignment=[[node_id], [node_id]])])[topic].result(10)
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    assert {number: p.replicas for number, p in partitions.items()} == {n: [node_id] for n in range(4)}
    for wrong in ([[node_id + 5]], [[node_id, node_id]], [[node_id]] * 2):  # unknown, repeated, too many
        with pytest.raises(KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
            admin.create_partitions([NewPartitions(topic, 5, replica_assignment=wrong)])[topic].result(10)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4


def _stored_codecs(kafka_broker: BrokerProcess, topic: str) -> list[int]:
    """The compression codec of each batch of partition 0, as a raw Fetch returns them."""
    fetched = kafka_call(kafka_broker.ports["kafka"], ApiKey.FETCH, 12, FetchRequest(max_wait_ms=0, min_bytes=0, topics=(
        FetchTopic(topic=topic, partitions=(FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),)))
    return [header.compression for _, header in iter_batches(fetched.responses[0].partitions[0].records)]


def test_a_topic_compression_type_rewrites_batches_in_its_codec(kafka_broker: BrokerProcess, admin: Any) -> None:
    """``compression.type=zstd`` stores gzip batches as zstd, readable as before; ``producer`` keeps the client's."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    bootstrap, topic = kafka_bootstrap(kafka_broker), unique("recompressed")
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": "zstd"})])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "gzip", "enable.idempotence": True})
    for number in range(50):
        producer.produce(topic, key=b"k%d" % number, value=b"value %d" % number, headers=[("h", b"%d" % number)])
    assert producer.flush(20) == 0
    assert set(_stored_codecs(kafka_broker, topic)) == {Compression.ZSTD}
    read = consume_with_confluent(bootstrap, topic, 50, timeout_s=10)
    assert [(m.key(), m.value(), m.headers()) for m in read] == [
        (b"k%d" % n, b"value %d" % n, [("h", b"%d" % n)]) for n in range(50)]
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("compression.type", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    described = admin.describe_configs([ConfigResource("topic", topic)])[ConfigResource("topic", topic)].result(10)
    assert described["compression.type"].value == "producer"
    for _ in range(20):
        producer.produce(topic, value=b"kept as sent " * 10)  # compressible (librdkafka sends what shrinks only)
    assert producer.flush(20) == 0
    assert _stored_codecs(kafka_broker, topic)[-1] == Compression.GZIP
    bad = ConfigResource("topic", topic, set_config={"compression.type": "brotli"})
    with pytest.raises(Exception, match="compression.type"):
        admin.alter_configs([bad])[bad].result(10)


def test_groups_are_listed_described_and_deleted(kafka_broker: BrokerProcess, admin: Any) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    bootstrap, topic, group = kafka_bootstrap(kafka_broker), unique("grouped"), unique("admin-group")
    _produce(bootstrap, topic, 3)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    listed = admin.list_consumer_groups().result(10)
    assert group in {listing.group_id for listing in listed.valid}
    [description] = admin.describe_consumer_groups([group]).values()
    assert description.result(10).state.name == "EMPTY"
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    [offsets] = admin.list_consumer_group_offsets([request]).values()
    assert [tp.offset for tp in offsets.result(10).topic_partitions] == [2]
    admin.delete_consumer_groups([group])[group].result(10)
    assert group not in {listing.group_id for listing in admin.list_consumer_groups().result(10).valid}


def test_a_described_members_subscription_names_its_topics(kafka_broker: BrokerProcess) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer

    bootstrap, topic, group = kafka_bootstrap(kafka_broker), unique("subscribed"), unique("described")
    _produce(bootstrap, topic, 1)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest")
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        wait_for(lambda: consumer.poll(timeout_ms=200) is not None and consumer.assignment(), 20, what="an assignment")
        [described] = admin.describe_groups([group]).values()
        [member] = described["members"]
        assert member["member_metadata"]["topics"] == [topic]
        assert member["member_assignment"]["assigned_partitions"][0]["topic"] == topic
    finally:
        consumer.close()
        admin.close()


def test_the_cluster_is_described_with_the_kafka_listener(kafka_broker: BrokerProcess, admin: Any) -> None:
    cluster = admin.describe_cluster().result(10)
    assert [(node.id, node.host, node.port) for node in cluster.nodes] == [(1, "127.0.0.1", kafka_broker.ports["kafka"])]
    assert cluster.controller.id == 1 and cluster.cluster_id == "mqbroker"


def test_topics_have_ids_that_metadata_and_delete_topics_take(kafka_broker: BrokerProcess, admin: Any) -> None:
    """Topic ids: answered by CreateTopics and Metadata, looked up by Metadata and DeleteTopics, new per incarnation."""
    port, topic = kafka_broker.ports["kafka"], unique("with-id")
    created = kafka_call(port, ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=(CreatableTopic(
        name=topic, num_partitions=1, replication_factor=-1, assignments=(), configs=()),)))
    topic_id = created.topics[0].topic_id
    assert topic_id != bytes(16)
    by_id = kafka_call(port, ApiKey.METADATA, 12, MetadataRequest(topics=(
        MetadataRequestTopic(topic_id=topic_id, name=None), MetadataRequestTopic(topic_id=b"\x01" * 16, name=None))))
    assert [(t.name, t.topic_id, t.error_code) for t in by_id.topics] == [(topic, topic_id, 0),
                                                                            (None, b"\x01" * 16, 100)]
    deleted = kafka_call(port, ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(topics=(
        DeleteTopicState(name=None, topic_id=topic_id),), timeout_ms=10000))
    assert [(t.name, t.error_code) for t in deleted.responses] == [(topic, 0)]
    again = kafka_call(port, ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=(CreatableTopic(
        name=topic, num_partitions=1, replication_factor=-1, assignments=(), configs=()),)))
    assert again.topics[0].error_code == 0 and again.topics[0].topic_id not in (topic_id, bytes(16))
