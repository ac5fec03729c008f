"""Rules for topics: which names are valid, which configs the broker checks, how they map to storage.

Pure. The topics themselves live in the controller's metadata image (``mqbroker.cluster.metadata``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

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
