"""Dynamic broker configuration through the Kafka listener: cluster-wide defaults (``--entity-default``) and
per-broker ones (``--entity-name 1``) set with confluent-kafka's AdminClient and Kafka's own ``kafka-configs``,
described with their sources and synonyms, inherited by topics without overrides, enforced (``min.insync.replicas``
refuses acks=all below it), stored in the cluster metadata (kept across a restart, in force on every broker)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from mqbroker.errors import ErrorCode
from mqbroker.protocols.kafka.messages import admin as m
from mqbroker.protocols.kafka.messages.apis import ApiKey
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import start_cluster, wait_for
from tests.integration.kafka_support import (
    FAST_GROUPS,
    kafka_bootstrap,
    kafka_broker_fixture,
    kafka_call,
    kafka_tool,
    produce_one,
    unique,
)

kafka_broker = kafka_broker_fixture("kafka-dynamic-configs")
#: confluent-kafka's ConfigSource values.
DYNAMIC_TOPIC, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC_BROKER, DEFAULT = 1, 2, 3, 4, 5


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _alter(bootstrap: str, broker: int, validate_only: bool = False, **changes: str | None) -> None:
    """Set (a value) or delete (None) broker configs of broker ``broker`` with confluent-kafka (``_`` for ``.``)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET
                           if value is not None else AlterConfigOpType.DELETE) for name, value in changes.items()]
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker), incremental_configs=entries)
    admin = _admin(bootstrap)  # kept alive until the result came
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(15)


def _alter_default(broker: BrokerProcess, **changes: str | None) -> None:
    """The same for the cluster-wide defaults (resource name "", which confluent-kafka refuses to send): on the wire."""
    request = m.IncrementalAlterConfigsRequest(validate_only=False, resources=(m.IncrementalAlterConfigsResource(
        resource_type=4, resource_name="", configs=tuple(
            m.IncrementalAlterableConfig(name=name.replace("_", "."), config_operation=0 if value is not None else 1,
                                         value=value) for name, value in changes.items())),))
    answer = kafka_call(broker.ports["kafka"], ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, request).responses[0]
    assert answer.error_code == 0, answer.error_message


def _cluster_defaults(broker: BrokerProcess) -> dict[str, tuple[str, int]]:
    """DescribeConfigs of the cluster-wide defaults (broker resource ""), on the wire."""
    request = m.DescribeConfigsRequest(resources=(m.DescribeConfigsResource(resource_type=4, resource_name="",
                                                                            configuration_keys=None),))
    result = kafka_call(broker.ports["kafka"], ApiKey.DESCRIBE_CONFIGS, 4, request).results[0]
    assert result.error_code == 0, result.error_message
    return {entry.name: (entry.value, entry.config_source) for entry in result.configs}


def _synonyms(broker: BrokerProcess, name: str, key: str) -> list[tuple[str, str, int]]:
    """The synonyms of one key of broker resource ``name``, as DescribeConfigs v4 with synonyms answers them."""
    request = m.DescribeConfigsRequest(include_synonyms=True, resources=(m.DescribeConfigsResource(
        resource_type=4, resource_name=name, configuration_keys=(key,)),))
    (entry,) = kafka_call(broker.ports["kafka"], ApiKey.DESCRIBE_CONFIGS, 4, request).results[0].configs
    return [(synonym.name, synonym.value, synonym.source) for synonym in entry.synonyms]


def _described(bootstrap: str, kind: Any, name: str) -> dict[str, Any]:
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(kind, name)
    admin = _admin(bootstrap)
    return admin.describe_configs([resource])[resource].result(15)


def _topic(bootstrap: str, **configs: str) -> str:
    from confluent_kafka.admin import NewTopic

    topic = unique("dynamic")
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(20)
    return topic


def _source(bootstrap: str, topic: str, key: str) -> tuple[str, int]:
    from confluent_kafka.admin import ConfigResource

    entry = _described(bootstrap, ConfigResource.Type.TOPIC, topic)[key]
    return entry.value, entry.source


def test_a_new_cluster_reports_min_insync_replicas_as_its_dynamic_default(kafka_broker: BrokerProcess) -> None:
    """As Kafka 4.1's controller does at activation: the cluster-wide default holds the static value."""
    from confluent_kafka.admin import ConfigResource

    bootstrap = kafka_bootstrap(kafka_broker)
    topic = _topic(bootstrap)
    assert wait_for(lambda: _source(bootstrap, topic, "min.insync.replicas") == ("1", DYNAMIC_DEFAULT) or None,
                    10, "the activation default")
    assert _cluster_defaults(kafka_broker) == {"min.insync.replicas": ("1", DYNAMIC_DEFAULT)}
    entry = _described(bootstrap, ConfigResource.Type.BROKER, "1")["min.insync.replicas"]
    assert (entry.value, entry.source, entry.is_read_only) == ("1", DYNAMIC_DEFAULT, False)


def test_a_cluster_default_is_inherited_by_topics_and_enforced(kafka_broker: BrokerProcess) -> None:
    bootstrap, port = kafka_bootstrap(kafka_broker), kafka_broker.ports["kafka"]
    inherits, overrides = _topic(bootstrap), _topic(bootstrap, **{"min.insync.replicas": "1"})
    _alter_default(kafka_broker, min_insync_replicas="2")
    try:
        assert _source(bootstrap, inherits, "min.insync.replicas") == ("2", DYNAMIC_DEFAULT)
        assert _source(bootstrap, overrides, "min.insync.replicas") == ("1", DYNAMIC_TOPIC)
        assert produce_one(port, inherits, -1, b"refused") == ErrorCode.NOT_ENOUGH_REPLICAS  # one broker, two needed
        assert produce_one(port, inherits, 1, b"leader-only") == 0
        assert produce_one(port, overrides, -1, b"accepted") == 0
    finally:
        _alter_default(kafka_broker, min_insync_replicas="1")
    assert produce_one(port, inherits, -1, b"accepted") == 0


def test_a_brokers_own_default_wins_over_the_clusters_and_yields_to_the_topics(kafka_broker: BrokerProcess) -> None:
    from confluent_kafka.admin import ConfigResource

    bootstrap = kafka_bootstrap(kafka_broker)
    inherits, overrides = _topic(bootstrap), _topic(bootstrap, **{"retention.ms": "60000"})
    _alter_default(kafka_broker, log_retention_ms="7200000")
    _alter(bootstrap, 1, log_retention_ms="3600000")
    try:
        assert _source(bootstrap, inherits, "retention.ms") == ("3600000", DYNAMIC_BROKER)
        assert _source(bootstrap, overrides, "retention.ms") == ("60000", DYNAMIC_TOPIC)
        entry = _described(bootstrap, ConfigResource.Type.BROKER, "1")["log.retention.ms"]
        assert (entry.value, entry.source, entry.is_read_only) == ("3600000", DYNAMIC_BROKER, False)
        assert _synonyms(kafka_broker, "1", "log.retention.ms") == [  # confluent-kafka keeps one per name
            ("log.retention.ms", "3600000", DYNAMIC_BROKER), ("log.retention.ms", "7200000", DYNAMIC_DEFAULT),
            ("log.retention.ms", "604800000", DEFAULT)]
        _alter(bootstrap, 1, log_retention_ms=None)
        assert _source(bootstrap, inherits, "retention.ms") == ("7200000", DYNAMIC_DEFAULT)
    finally:
        _alter(bootstrap, 1, log_retention_ms=None)
        _alter_default(kafka_broker, log_retention_ms=None)
    assert _source(bootstrap, inherits, "retention.ms") == ("604800000", DEFAULT)
    assert _described(bootstrap, ConfigResource.Type.BROKER, "1")["num.partitions"].is_read_only


def test_static_keys_bad_values_per_broker_min_insync_and_validate_only_change_nothing(kafka_broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException

    bootstrap = kafka_bootstrap(kafka_broker)
    topic = _topic(bootstrap)
    with pytest.raises(KafkaException) as static:
        _alter(bootstrap, 1, num_partitions="3")
    assert static.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "num.partitions" in static.value.args[0].str()
    with pytest.raises(KafkaException) as bad:  # a broker config's bad value: INVALID_REQUEST, as Kafka
        _alter(bootstrap, 1, log_segment_bytes="many")
    assert bad.value.args[0].code() == KafkaError.INVALID_REQUEST
    with pytest.raises(KafkaException) as per_broker:  # cluster-wide only, as Kafka with eligible leader replicas
        _alter(bootstrap, 1, min_insync_replicas="2")
    assert per_broker.value.args[0].code() == KafkaError.INVALID_CONFIG
    _alter(bootstrap, 1, validate_only=True, log_segment_bytes="2000000")
    assert _source(bootstrap, topic, "segment.bytes") == ("1073741824", DEFAULT)


def test_the_legacy_alter_configs_replaces_a_brokers_dynamic_configs_whole(kafka_broker: BrokerProcess) -> None:
    from confluent_kafka.admin import ConfigResource

    bootstrap = kafka_bootstrap(kafka_broker)
    topic = _topic(bootstrap)
    admin = _admin(bootstrap)

    def replace(**configs: str) -> None:
        resource = ConfigResource(ConfigResource.Type.BROKER, "1", set_config=configs)
        admin.alter_configs([resource])[resource].result(15)

    replace(**{"log.segment.bytes": "2000000", "log.retention.ms": "3600000"})
    assert _source(bootstrap, topic, "segment.bytes") == ("2000000", DYNAMIC_BROKER)
    replace(**{"log.retention.ms": "7200000"})  # segment.bytes, not named, goes back to its default
    assert _source(bootstrap, topic, "segment.bytes") == ("1073741824", DEFAULT)
    assert _source(bootstrap, topic, "retention.ms") == ("7200000", DYNAMIC_BROKER)
    replace()
    assert _source(bootstrap, topic, "retention.ms") == ("604800000", DEFAULT)


def test_kafka_configs_sets_describes_and_deletes_a_cluster_default(kafka_broker: BrokerProcess) -> None:
    bootstrap = kafka_bootstrap(kafka_broker)
    topic = _topic(bootstrap)
    altered = kafka_tool("kafka-configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type", "brokers",
                         "--entity-default", "--add-config", "compression.type=gzip")
    assert altered.returncode == 0, altered.stderr
    try:
        described = kafka_tool("kafka-configs", "--bootstrap-server", bootstrap, "--describe", "--entity-type",
                               "brokers", "--entity-default")
        assert "compression.type=gzip sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:compression.type=gzip}" \
            in described.stdout, described.stdout + described.stderr
        assert _source(bootstrap, topic, "compression.type") == ("gzip", DYNAMIC_DEFAULT)
    finally:
        deleted = kafka_tool("kafka-configs", "--bootstrap-server", bootstrap, "--alter", "--entity-type",
                             "brokers", "--entity-default", "--delete-config", "compression.type")
    assert deleted.returncode == 0, deleted.stderr
    assert _source(bootstrap, topic, "compression.type") == ("producer", DEFAULT)


def test_dynamic_defaults_are_kept_across_a_restart(tmp_path: pathlib.Path) -> None:
    for broker in [BrokerProcess(data_dir=tmp_path / "data", extra_args=list(FAST_GROUPS))]:
        broker.start()
        try:
            bootstrap = kafka_bootstrap(broker)
            topic = _topic(bootstrap)
            _alter_default(broker, log_segment_bytes="2000000")
            broker.kill()
            broker.restart()
            bootstrap = kafka_bootstrap(broker)
            assert wait_for(lambda: _source(bootstrap, topic, "segment.bytes") == ("2000000", DYNAMIC_DEFAULT)
                            or None, 20, "the default replayed")
        finally:
            broker.kill()


def test_a_default_set_through_one_broker_is_in_force_on_another(tmp_path: pathlib.Path) -> None:
    brokers = start_cluster(tmp_path, 3, [*FAST_GROUPS, "--kafka-tls-port", "0"])
    try:
        first, third = kafka_bootstrap(brokers[0]), kafka_bootstrap(brokers[2])
        _alter_default(brokers[0], min_insync_replicas="3")
        _alter(first, 3, log_retention_ms="3600000")
        # Broker 3 (not the one altered through) reports both, and its own default as DYNAMIC_BROKER_CONFIG.
        from confluent_kafka.admin import ConfigResource

        def on_third() -> tuple[tuple[str, int], tuple[str, int]] | None:
            described = _described(third, ConfigResource.Type.BROKER, "3")
            entries = described["min.insync.replicas"], described["log.retention.ms"]
            return tuple((entry.value, entry.source) for entry in entries)  # type: ignore[return-value]

        assert wait_for(lambda: on_third() == (("3", DYNAMIC_DEFAULT), ("3600000", DYNAMIC_BROKER)) or None, 10,
                        "the defaults on broker 3")
        # A one-replica topic without an override takes the cluster's 3: broker 3 refuses acks=all if it leads it.
        inherits = _topic(third)
        leader = _admin(third).list_topics(inherits, timeout=10).topics[inherits].partitions[0].leader
        port = brokers[leader - 1].ports["kafka"]
        assert produce_one(port, inherits, -1, b"refused") == ErrorCode.NOT_ENOUGH_REPLICAS
    finally:
        for broker in brokers:
            broker.kill()
