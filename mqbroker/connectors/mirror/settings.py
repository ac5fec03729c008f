"""The mirror connector's settings, read from its configuration. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mqbroker import errors
from mqbroker.connectors.settings import SettingsReader

NAMINGS = ("prefix", "identity")
#: How the mirror talks to the other cluster: mqbroker's native protocol, or the Kafka protocol (any
#: Kafka-protocol cluster: Apache Kafka, Redpanda, mqbroker's own Kafka listener).
PROTOCOLS = ("native", "kafka")
#: A cluster alias: it becomes part of topic names (``<alias>.<topic>``) and of record headers.
_ALIAS = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceSecurity:
    """How the mirror authenticates to the other cluster (the clients' TLS and SASL options)."""

    tls: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MirrorSettings:
    """Replicate topics from ``source_bootstrap`` (cluster ``source_alias``) into this cluster (``target_alias``),
    or, with ``target_bootstrap``, from this cluster (``source_alias``) into a Kafka-protocol cluster."""

    source_bootstrap: str
    #: The protocol of the source cluster (``native`` or ``kafka``); ``kafka`` when this cluster is the source.
    source_protocol: str = "native"
    #: A Kafka-protocol cluster to copy this cluster's topics into (outbound); None: copy into this cluster.
    target_bootstrap: str | None = None
    source_alias: str
    target_alias: str
    topics: tuple[str, ...] = ()
    topics_pattern: re.Pattern[str] | None = None
    topics_exclude: re.Pattern[str] | None = None
    naming: str = "prefix"
    groups: tuple[str, ...] = ()
    groups_pattern: re.Pattern[str] | None = None
    sync_group_offsets: bool = True
    sync_topic_configs: bool = True
    replication_factor: int = -1
    start: str = "earliest"
    checkpoint_interval_ms: int = 5_000
    refresh_interval_ms: int = 10_000
    fetch_partition_bytes: int = 1024 * 1024
    fetch_wait_ms: int = 500
    security: SourceSecurity = SourceSecurity()


def _alias(reader: SettingsReader, key: str) -> str:
    alias = reader.text(key)
    if not _ALIAS.fullmatch(alias):
        raise errors.InvalidConfigError(f"{key} must be 1..64 letters, digits, '_' or '-', got {alias[:70]!r}")
    return str(alias)


def _security(reader: SettingsReader, prefix: str) -> SourceSecurity:
    """TLS and SASL towards the other cluster (``source.*`` keys, or ``target.*`` for an outbound mirror)."""
    return SourceSecurity(
        tls=reader.boolean(f"{prefix}tls", False), tls_ca=reader.text(f"{prefix}tls.ca", None),
        tls_cert=reader.text(f"{prefix}tls.cert", None), tls_key=reader.text(f"{prefix}tls.key", None),
        sasl_mechanism=reader.text(f"{prefix}sasl.mechanism", None),
        username=reader.text(f"{prefix}sasl.username", None), password=reader.text(f"{prefix}sasl.password", None))


def parse_mirror(name: str, reader: SettingsReader) -> MirrorSettings:
    """The ``mirror`` keys (see docs/connectors.md)."""
    topics = reader.names("topics", ())
    topics_pattern = reader.pattern("topics.pattern")
    if not topics and topics_pattern is None:
        raise errors.InvalidConfigError("a mirror needs topics (names) or topics.pattern (a regular expression)")
    source_alias, target_alias = _alias(reader, "source.alias"), _alias(reader, "target.alias")
    if source_alias == target_alias:
        raise errors.InvalidConfigError("source.alias and target.alias must differ (they name two clusters)")
    target_bootstrap = reader.text("target.bootstrap", None)
    if target_bootstrap is not None:
        reader.choice("target.protocol", ("kafka",), "kafka")
        if reader.text("source.bootstrap", None) is not None:
            raise errors.InvalidConfigError("a mirror reads source.bootstrap into this cluster or copies this cluster "
                                            "into target.bootstrap, not both: set one of them")
    groups = reader.names("groups", ())
    groups_pattern = reader.pattern("groups.pattern", None if groups else ".*")
    return MirrorSettings(
        source_bootstrap=reader.text("source.bootstrap", "") if target_bootstrap is not None
        else reader.text("source.bootstrap"),
        source_protocol=reader.choice("source.protocol", PROTOCOLS, "native"), target_bootstrap=target_bootstrap,
        source_alias=source_alias, target_alias=target_alias,
        topics=topics, topics_pattern=topics_pattern, topics_exclude=reader.pattern("topics.exclude.pattern"),
        naming=reader.choice("naming", NAMINGS, "prefix"), groups=groups, groups_pattern=groups_pattern,
        sync_group_offsets=reader.boolean("sync.group.offsets", True),
        sync_topic_configs=reader.boolean("sync.topic.configs", True),
        replication_factor=reader.integer("target.replication.factor", -1, minimum=-1, maximum=32),
        start=reader.choice("start", ("earliest", "latest"), "earliest"),
        checkpoint_interval_ms=reader.integer("checkpoint.interval.ms", 5_000, minimum=100, maximum=3_600_000),
        refresh_interval_ms=reader.integer("refresh.interval.ms", 10_000, minimum=100, maximum=3_600_000),
        fetch_partition_bytes=reader.integer("fetch.partition.bytes", 1024 * 1024, minimum=1024, maximum=64 * 1024 * 1024),
        fetch_wait_ms=reader.integer("fetch.wait.ms", 500, minimum=0, maximum=30_000),
        security=_security(reader, "target." if target_bootstrap is not None else "source."),
    )
