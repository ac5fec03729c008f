"""Rules for topics: which names are valid, which configs the broker checks, how they map to storage.

Pure. The topics themselves live in the controller's metadata image (``mqbroker.cluster.metadata``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from mqbroker.errors import CorruptMessageError, InvalidConfigError, InvalidRecordError, InvalidTopicError, PolicyViolationError
from mqbroker.limits import topic_name_length_max
from mqbroker.records.compression import Compression
from mqbroker.records.decoder import decode_records
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import iter_batches
from mqbroker.storage import errors as storage_errors
from mqbroker.storage.config import LogConfig

#: Topic configuration keys the broker itself interprets (the rest belong to the storage engine).
BROKER_TOPIC_CONFIG_DEFAULTS = {"min.insync.replicas": "1", "unclean.leader.election.enable": "false",
                                "record.validation": "none", "compression.type": "producer"}
#: ``record.validation``: "decode" makes every record of a client's produce decode before it is appended
#: (the topics the broker's own readers decode: MQTT log topics, AMQP queues); "none" checks batches only.
RECORD_VALIDATIONS = ("none", "decode")
#: ``compression.type``: the codec a client's batches are stored in ("producer": as the client sent them).
#: Another codec costs a decompression and a compression per batch on the produce path, as in Kafka.
COMPRESSION_TYPES = {"producer": None, "uncompressed": Compression.NONE, "gzip": Compression.GZIP,
                     "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
#: A topic name, matched against the whole string (``$`` would also match before a final newline).
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
#: Producer ids are handed out in blocks so that a restart never reuses one without a write per id.
PRODUCER_ID_BLOCK_SIZE = 1000


def validate_topic_name(name: str) -> None:
    """Raise ``InvalidTopicError`` unless ``name`` can be a topic (and a directory name)."""
    if not name or len(name) > topic_name_length_max:
        raise InvalidTopicError(f"topic name must be 1..{topic_name_length_max} characters, got {len(name)}")
    if name in (".", "..") or not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(
            f"topic name {name!r} is not valid: use ASCII letters, digits, '.', '_' and '-'"
        )


def check_cluster_partitions(existing: int, adding: int, partitions_max: int) -> None:
    """Raise ``PolicyViolationError`` if ``adding`` partitions to the ``existing`` ones passes ``partitions_max``."""
    if existing + adding > partitions_max:
        raise PolicyViolationError(
            f"the cluster holds {existing} partitions; {adding} more would pass its limit of {partitions_max} "
            f"(setting cluster_partitions_max): delete topics you no longer need or raise the setting")


def validate_broker_topic_configs(configs: Mapping[str, str]) -> None:
    """Check the topic config keys the broker interprets; raise ``InvalidConfigError``."""
    value = configs.get("min.insync.replicas")
    if value is not None and (not str(value).isdigit() or int(value) < 1):
        raise InvalidConfigError(f"topic config 'min.insync.replicas' must be an integer >= 1, got {value!r}")
    unclean = configs.get("unclean.leader.election.enable")
    if unclean is not None and unclean not in ("true", "false"):
        raise InvalidConfigError(f"topic config 'unclean.leader.election.enable' must be true or false, got {unclean!r}")
    validation = configs.get("record.validation")
    if validation is not None and validation not in RECORD_VALIDATIONS:
        raise InvalidConfigError(f"topic config 'record.validation' must be none or decode, got {validation!r}")
    compression = configs.get("compression.type")
    if compression is not None and compression not in COMPRESSION_TYPES:
        raise InvalidConfigError(f"topic config 'compression.type' must be one of {', '.join(COMPRESSION_TYPES)}, "
                                 f"got {compression!r}")


def check_produced_records(topic: str, records: bytes, *, keys_required: bool) -> None:
    """Decode every record of a client's batches (CORRUPT_MESSAGE if one does not), and with ``keys_required``
    (a compacted topic) refuse a record without a key (INVALID_RECORD), as Kafka does.

    Only for topics the broker itself decodes later: this is per-record work on the produce path.
    """
    try:
        for position, header in iter_batches(records):
            if header.is_control:
                continue
            for record in decode_records(memoryview(records)[position : position + header.size_bytes]):
                if keys_required and record.key is None:
                    raise InvalidRecordError(
                        f"topic {topic!r} is compacted: every record needs a key (record at offset delta "
                        f"{record.offset - header.base_offset} has none)")
    except CorruptRecordError as error:
        raise CorruptMessageError(f"topic {topic!r} takes only records that decode (the broker reads them): "
                                  f"{error}") from None


def log_config_for(topic_defaults: Mapping[str, str], overrides: Mapping[str, str]) -> LogConfig:
    """The storage settings of a topic: broker-wide ``log.`` defaults, then the topic's overrides."""
    merged = {**topic_defaults, **overrides}
    storage_keys = {key: value for key, value in merged.items() if key not in BROKER_TOPIC_CONFIG_DEFAULTS}
    try:
        return LogConfig.from_mapping(storage_keys)
    except storage_errors.InvalidConfigError as error:
        raise InvalidConfigError(str(error)) from None


def validate_topic_defaults(topic_defaults: Mapping[str, str]) -> None:
    """Check the broker-wide ``log.`` defaults: the broker's own topic keys and the storage ones."""
    validate_broker_topic_configs(topic_defaults)
    log_config_for(topic_defaults, {})


def built_in_topic_configs() -> dict[str, str]:
    """The configuration of a topic when nothing is set anywhere: the storage engine's and the broker's own keys."""
    defaults = {key: str(value) for key, value in LogConfig.from_mapping({}).to_mapping().items()}
    defaults.update(BROKER_TOPIC_CONFIG_DEFAULTS)
    return defaults


_BUILT_IN = built_in_topic_configs()


class ConfigLayer(enum.Enum):
    """Where a topic config value comes from, highest precedence first (Kafka's config sources)."""

    TOPIC = "topic"
    DYNAMIC_BROKER = "dynamic_broker"
    DYNAMIC_DEFAULT = "dynamic_default"
    STATIC_BROKER = "static_broker"
    BUILT_IN = "built_in"


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfigLayers:
    """A topic's configuration layer by layer: its own overrides, then this broker's dynamic defaults, the cluster's
    dynamic defaults (both from the metadata image), this broker's static ``log.`` defaults, the built-in ones.

    With ``topic`` empty it is what a broker gives a topic without overrides (DescribeConfigs of a broker).
    """

    topic: Mapping[str, str] = field(default_factory=dict)
    dynamic_broker: Mapping[str, str] = field(default_factory=dict)
    dynamic_default: Mapping[str, str] = field(default_factory=dict)
    static_broker: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, static_broker: Mapping[str, str], broker_configs: Mapping[str, Mapping[str, str]], node_id: int,
           topic: Mapping[str, str] | None = None) -> TopicConfigLayers:
        """The layers on broker ``node_id``: ``broker_configs`` is the image's dynamic defaults by entity."""
        return cls(topic=dict(topic or {}), dynamic_broker=dict(broker_configs.get(str(node_id), {})),
                   dynamic_default=dict(broker_configs.get("", {})), static_broker=dict(static_broker))

    def layers(self) -> tuple[tuple[ConfigLayer, Mapping[str, str]], ...]:
        """Each layer and its keys, highest precedence first."""
        return ((ConfigLayer.TOPIC, self.topic), (ConfigLayer.DYNAMIC_BROKER, self.dynamic_broker),
                (ConfigLayer.DYNAMIC_DEFAULT, self.dynamic_default), (ConfigLayer.STATIC_BROKER, self.static_broker),
                (ConfigLayer.BUILT_IN, _BUILT_IN))

    def broker_defaults(self) -> dict[str, str]:
        """The defaults a topic takes from its broker (the layers between the topic's and the built-in ones)."""
        return {**self.static_broker, **self.dynamic_default, **self.dynamic_broker}

    def effective(self) -> dict[str, str]:
        """Each key's value in force."""
        return {**_BUILT_IN, **self.broker_defaults(), **self.topic}

    def sources(self) -> dict[str, list[tuple[ConfigLayer, str]]]:
        """Each key's values by layer, highest precedence first (the first is in force; Kafka's synonyms)."""
        return {key: [(layer, values[key]) for layer, values in self.layers() if key in values]
                for key in self.effective()}


def validate_dynamic_topic_defaults(layers: TopicConfigLayers) -> None:
    """Check dynamic defaults as a topic without overrides would take them; raise ``InvalidConfigError``.

    Only topic keys may be dynamic defaults: a key no topic has is refused.
    """
    for key in {**layers.dynamic_default, **layers.dynamic_broker}:
        if key not in _BUILT_IN:
            raise InvalidConfigError(f"{key!r} is not a topic configuration key, so it has no dynamic default; the "
                                     f"keys that do: {', '.join(sorted(_BUILT_IN))}")
    validate_topic_defaults(layers.broker_defaults())
