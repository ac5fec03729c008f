"""The topic catalog of a single broker: topics, partition counts, config overrides, producer ids.

Pure: it turns its state into bytes and back; the broker writes those bytes atomically.
(When the Raft controller lands, the committed metadata image takes this role.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from mqbroker.errors import InvalidConfigError, InvalidTopicError
from mqbroker.limits import topic_name_length_max
from mqbroker.storage import errors as storage_errors
from mqbroker.storage.config import LogConfig

#: Topic configuration keys the broker itself interprets (the rest belong to the storage engine).
BROKER_TOPIC_CONFIG_DEFAULTS = {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"}
_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
#: Producer ids are handed out in blocks so that a restart never reuses one without a write per id.
PRODUCER_ID_BLOCK_SIZE = 1000


def validate_topic_name(name: str) -> None:
    """Raise ``InvalidTopicError`` unless ``name`` can be a topic (and a directory name)."""
    if not name or len(name) > topic_name_length_max:
        raise InvalidTopicError(f"topic name must be 1..{topic_name_length_max} characters, got {len(name)}")
    if name in (".", "..") or not _TOPIC_NAME.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} is not valid: use ASCII letters, digits, '.', '_' and '-'"
        )


def validate_broker_topic_configs(configs: Mapping[str, str]) -> None:
    """Check the topic config keys the broker interprets; raise ``InvalidConfigError``."""
    value = configs.get("min.insync.replicas")
    if value is not None and (not str(value).isdigit() or int(value) < 1):
        raise InvalidConfigError(f"topic config 'min.insync.replicas' must be an integer >= 1, got {value!r}")
    unclean = configs.get("unclean.leader.election.enable")
    if unclean is not None and unclean not in ("true", "false"):
        raise InvalidConfigError(f"topic config 'unclean.leader.election.enable' must be true or false, got {unclean!r}")


def log_config_for(topic_defaults: Mapping[str, str], overrides: Mapping[str, str]) -> LogConfig:
    """The storage settings of a topic: broker-wide ``log.`` defaults, then the topic's overrides."""
    merged = {**topic_defaults, **overrides}
    storage_keys = {key: value for key, value in merged.items() if key not in BROKER_TOPIC_CONFIG_DEFAULTS}
    try:
        return LogConfig.from_mapping(storage_keys)
    except storage_errors.InvalidConfigError as error:
        raise InvalidConfigError(str(error)) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicRecord:
    """One topic as the catalog knows it."""

    name: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class TopicCatalog:
    """All topics and the next free producer-id block."""

    topics: dict[str, TopicRecord] = field(default_factory=dict)
    producer_id_block_end: int = 0

    def add(self, record: TopicRecord) -> None:
        """Record a new topic."""
        assert record.name not in self.topics, record.name
        self.topics[record.name] = record

    def remove(self, name: str) -> None:
        """Forget a topic."""
        del self.topics[name]

    def set_partitions(self, name: str, count: int) -> None:
        """Record a grown partition count."""
        assert count >= self.topics[name].partitions
        self.topics[name] = replace(self.topics[name], partitions=count)

    def set_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replace a topic's config overrides."""
        self.topics[name] = replace(self.topics[name], configs=dict(configs))

    def to_bytes(self) -> bytes:
        """Serialize for an atomic write."""
        document = {
            "version": 1,
            "producer_id_block_end": self.producer_id_block_end,
            "topics": [
                {"name": t.name, "partitions": t.partitions, "configs": dict(t.configs)}
                for t in sorted(self.topics.values(), key=lambda t: t.name)
            ],
        }
        return json.dumps(document, indent=1, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> TopicCatalog:
        """Load what ``to_bytes`` wrote; a corrupt file is an error the operator must see."""
        try:
            document = json.loads(data)
            topics = {
                t["name"]: TopicRecord(name=t["name"], partitions=int(t["partitions"]), configs=dict(t["configs"]))
                for t in document["topics"]
            }
            return cls(topics=topics, producer_id_block_end=int(document["producer_id_block_end"]))
        except (ValueError, KeyError, TypeError) as error:
            raise InvalidConfigError(f"the topic catalog file is corrupt: {error}") from None
