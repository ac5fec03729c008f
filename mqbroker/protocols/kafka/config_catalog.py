"""What DescribeConfigs says about configuration keys: each key's Kafka type, and the broker's own settings.

Kafka clients show a key's type (DescribeConfigs v3+) and tools such as ``kafka-configs
--entity-type brokers`` describe a broker. mqbroker's broker settings other than the topic
defaults are static (set at start-up from its configuration file and ``--set``), so a broker
resource answers them read-only, under Kafka's names where Kafka has the same setting, with source
STATIC_BROKER_CONFIG when the operator set them and DEFAULT_CONFIG otherwise (the topic defaults,
which may be dynamic, are resolved per request: ``handlers.configs``). Pure: no Twisted, no I/O.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any


class ConfigType(enum.IntEnum):
    """Kafka's ConfigEntry types (DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Kafka's config sources."""

    DYNAMIC_TOPIC = 1
    DYNAMIC_BROKER = 2
    DYNAMIC_DEFAULT = 3
    STATIC_BROKER = 4
    DEFAULT = 5


#: The types of the topic keys mqbroker serves, as Apache Kafka declares them (``LogConfig``); a key not
#: listed (mqbroker's own) is a STRING. A key's broker-wide default has the same type.
TOPIC_CONFIG_TYPES: Mapping[str, ConfigType] = {
    "cleanup.policy": ConfigType.LIST,
    "compression.type": ConfigType.STRING,
    "delete.retention.ms": ConfigType.LONG,
    "file.delete.delay.ms": ConfigType.LONG,
    "flush.messages": ConfigType.LONG,
    "flush.ms": ConfigType.LONG,
    "index.interval.bytes": ConfigType.INT,
    "max.message.bytes": ConfigType.INT,
    "min.cleanable.dirty.ratio": ConfigType.DOUBLE,
    "min.compaction.lag.ms": ConfigType.LONG,
    "min.insync.replicas": ConfigType.INT,
    "retention.bytes": ConfigType.LONG,
    "retention.ms": ConfigType.LONG,
    "segment.bytes": ConfigType.INT,
    "segment.ms": ConfigType.LONG,
    "unclean.leader.election.enable": ConfigType.BOOLEAN,
}


def config_type(key: str) -> ConfigType:
    """A topic key's Kafka type."""
    return TOPIC_CONFIG_TYPES.get(key, ConfigType.STRING)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfigEntry:
    """One static broker setting as DescribeConfigs answers it (read-only)."""

    value: str
    source: ConfigSource
    type: ConfigType


#: Kafka broker keys -> (mqbroker config field, type). Only settings that mean the same on both.
_BROKER_KEYS: Mapping[str, tuple[str, ConfigType]] = {
    "node.id": ("node_id", ConfigType.INT),
    "broker.id": ("node_id", ConfigType.INT),
    "log.dirs": ("data_dir", ConfigType.STRING),
    "auto.create.topics.enable": ("auto_create_topics", ConfigType.BOOLEAN),
    "num.partitions": ("default_partitions", ConfigType.INT),
    "default.replication.factor": ("default_replication_factor", ConfigType.SHORT),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", ConfigType.INT),
    "connections.max.idle.ms": ("connection_idle_ms", ConfigType.LONG),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", ConfigType.INT),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", ConfigType.INT),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", ConfigType.INT),
    "offsets.retention.minutes": ("offsets_retention_ms", ConfigType.INT),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", ConfigType.LONG),
    "offsets.topic.num.partitions": ("offsets_topic_partitions", ConfigType.INT),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", ConfigType.SHORT),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", ConfigType.LONG),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", ConfigType.INT),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", ConfigType.INT),
    "replica.fetch.response.max.bytes": ("replica_fetch_response_max_bytes", ConfigType.INT),
    "log.retention.check.interval.ms": ("retention_check_interval_ms", ConfigType.LONG),
    "controlled.shutdown.timeout.ms": ("controlled_shutdown_timeout_ms", ConfigType.LONG),
}


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def broker_configs(config: Any, defaults: Any, listeners: Mapping[str, str]) -> dict[str, BrokerConfigEntry]:
    """The broker's static settings under Kafka's names (its topic defaults, which may be dynamic, are not here).

    ``config`` is the broker's configuration and ``defaults`` one with nothing set (a setting that differs
    was set by the operator); ``listeners`` maps ``listeners`` and ``advertised.listeners`` to their Kafka-form values.
    """
    entries: dict[str, BrokerConfigEntry] = {}
    for key, (field_name, kind) in _BROKER_KEYS.items():
        value, default = getattr(config, field_name), getattr(defaults, field_name)
        if key == "offsets.retention.minutes":
            value, default = value // 60_000, default // 60_000
        source = ConfigSource.DEFAULT if value == default else ConfigSource.STATIC_BROKER
        entries[key] = BrokerConfigEntry(value=_text(value), source=source, type=kind)
    for key, value in listeners.items():
        entries[key] = BrokerConfigEntry(value=value, source=ConfigSource.STATIC_BROKER, type=ConfigType.LIST)
    return entries


#: Topic keys whose broker-wide default is not simply ``log.`` + the key (Kafka's ``ServerTopicConfigSynonyms``).
_BROKER_NAMES = {"max.message.bytes": "message.max.bytes", "flush.ms": "log.flush.interval.ms",
                 "file.delete.delay.ms": "log.segment.delete.delay.ms", "segment.ms": "log.roll.ms",
                 "delete.retention.ms": "log.cleaner.delete.retention.ms",
                 "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
                 "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio", "compression.type": "compression.type",
                 "flush.messages": "log.flush.interval.messages", "min.insync.replicas": "min.insync.replicas",
                 "unclean.leader.election.enable": "unclean.leader.election.enable"}


def broker_key(topic_key: str) -> str:
    """The broker setting that holds a topic key's default (``retention.ms`` -> ``log.retention.ms``)."""
    return _BROKER_NAMES.get(topic_key, "log." + topic_key)
