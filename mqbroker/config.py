"""Broker configuration: frozen dataclasses loaded from TOML and ``--set KEY=VALUE`` overrides.

Pure: no I/O beyond reading the text it is given. Unknown keys and bad values are errors
that name the key. Broker-wide defaults for topic configs are the ``log.`` keys (as in
Kafka, ``log.retention.ms`` is the default of a topic's ``retention.ms``).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mqbroker import limits
from mqbroker.ops.affinity import parse_cpu_list
from mqbroker.security.quotas import parse_quota_overrides

TOPIC_DEFAULT_PREFIX = "log."
#: Values of ``fsync_engine`` (see ``mqbroker.durability.sync_engines``).
FSYNC_ENGINES = ("auto", "aio", "thread", "worker")


def dial_address(host: str) -> str:
    """The address to dial or bind for a configured host: ``localhost`` is 127.0.0.1, as the listeners bind IPv4
    (an OS resolving localhost to ::1 first would miss them); any other name or address is used as given."""
    return "127.0.0.1" if host == "localhost" else host


class ConfigError(Exception):
    """A configuration key that is unknown or has a bad value; the message names the key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """Everything a broker needs to start. Defaults make a complete cluster of one."""

    data_dir: str = "./data"
    node_id: int = 1
    host: str = "localhost"
    advertised_host: str = ""
    #: The native port clients and followers are told to connect to (0: ``native_port``), e.g. a proxy's.
    advertised_native_port: int = 0
    cluster_id: str = "mqbroker"
    native_port: int = 9393
    mqtt_port: int = 1883
    amqp_port: int = 5672
    #: The type of a durable AMQP queue declared without ``x-queue-type`` (``share`` or ``classic``: see docs/queues.md).
    amqp_default_queue_type: str = "share"
    #: The Kafka wire protocol listener (``docs/kafka.md``); TLS on ``kafka_tls_port``.
    kafka_port: int = 9092
    http_port: int = 9394
    controller_port: int = 9395
    controller_quorum: str = ""
    #: Interface the controller listener binds (empty: ``host``); a cluster-internal network in production.
    controller_host: str = ""
    #: Open connections the controller listener accepts (its own budget: client floods cannot lock voters out).
    controller_connections_max: int = 64
    broker_heartbeat_interval_ms: int = 500
    broker_session_timeout_ms: int = 3_000
    auto_create_topics: bool = True
    #: Partitions the whole cluster may hold (every topic's, internal ones included); clients' creations past it are refused.
    cluster_partitions_max: int = 20_000
    default_partitions: int = 1
    #: -1: as internal topics (``offsets_topic_replication_factor`` bounded by the voters; 1 on a single broker).
    default_replication_factor: int = -1
    producer_id_expiration_ms: int = 86_400_000
    flush_check_interval_ms: int = 50
    retention_check_interval_ms: int = 300_000
    log_cleaner_interval_ms: int = 15_000
    checkpoint_interval_ms: int = 60_000
    connection_idle_ms: int = 600_000
    native_frame_bytes_max: int = 16 * 1024 * 1024
    shutdown_timeout_ms: int = 10_000
    #: CPUs every broker thread runs on, as a Linux CPU list ("0", "0-1"); empty: wherever the OS puts them.
    cpu_affinity: str = ""
    #: How fsync rounds run off the reactor thread: "aio" (Linux AIO), "thread", or "auto" (AIO where it works).
    fsync_engine: str = "auto"
    #: Segment files kept open at once, least recently used closed first (``mqbroker.storage.segment_files``).
    segment_files_open_max: int = limits.segment_files_open_max
    #: Threads that open (recover), create and checkpoint many partition logs at once (Kafka's num.recovery.threads.per.data.dir).
    log_recovery_threads: int = 8
    #: Consumer groups (Kafka's group.* and offsets.* broker settings).
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offsets_topic_partitions: int = 8
    #: Replicas of __consumer_offsets and the other internal topics (at most one per controller voter).
    offsets_topic_replication_factor: int = 3
    #: Partitions of __share_group_state: a share group is hosted by the leader of its partition.
    share_state_topic_partitions: int = 8
    #: Replication (Kafka's replica.* settings): a follower that has not caught up for the lag time leaves the ISR.
    replica_lag_time_max_ms: int = 10_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    leader_imbalance_check_interval_ms: int = 5_000
    #: Transactions (Kafka's transaction.* settings): partitions of __transaction_state, the longest
    #: transaction timeout a producer may ask for, how long an idle transactional id is remembered.
    transaction_state_partitions: int = 8
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    controlled_shutdown_timeout_ms: int = 5_000
    #: TLS listeners (see docs/security.md): only started when ``tls_cert`` is set; port 0 disables one.
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_client_auth: str = "none"
    native_tls_port: int = 9493
    mqtt_tls_port: int = 8883
    #: Partitions of the MQTT log topics the front end creates (``mqtt.messages``, mapping rules' topics);
    #: 0: one per broker of the cluster when they are created (1 on a single broker).
    mqtt_log_partitions: int = 0
    #: MQTT topic filter → log topic rules, first match wins: ``"filter=topic,filter=topic"`` (empty: none).
    mqtt_mapping_rules: str = ""
    #: When a QoS 1/2 PUBLISH is acknowledged: ``durable`` once every in-sync replica holds it on disk (acks=all,
    #: fsync before ack), ``written`` once this broker appended it (page cache; the fsync follows in its round).
    mqtt_puback: str = "durable"
    amqp_tls_port: int = 5671
    kafka_tls_port: int = 9093
    http_tls: bool = False
    controller_tls: bool = False
    #: The ``[security]`` table: authentication and authorization.
    security_allow_anonymous: bool = True
    security_authorizer: str = "allow-all"
    security_super_users: str = ""
    security_plain_without_tls: bool = False
    security_allow_if_no_acl: bool = False
    security_principal_mapping_rules: str = "DEFAULT"
    #: Replica fetches between brokers over the native TLS listeners, authenticated by each broker's certificate.
    security_inter_broker_tls: bool = False
    #: The SCRAM user brokers authenticate as (controller port, replica fetches, forwarded requests) without mTLS.
    security_inter_broker_user: str = "broker"
    #: A file holding the inter-broker user's password (the same on every broker); empty: no inter-broker SCRAM.
    security_inter_broker_password_file: str = ""
    #: Which certificates are brokers' and which node each names (mapping rule syntax; the id is the result).
    security_broker_certificate_rules: str = r"SAN:^URI:urn:mqbroker:broker:([0-9]{1,9})$/$1/"
    #: HTTP paths served without authentication when the ACL authorizer is on (comma-separated).
    security_http_open_paths: str = "/health,/ready"
    #: The ``[quotas]`` table: byte rates (0 = unlimited), connection limits, the slow-client timeout.
    quotas_principal_produce_bytes_per_second: int = 0
    quotas_principal_fetch_bytes_per_second: int = 0
    quotas_client_produce_bytes_per_second: int = 0
    quotas_client_fetch_bytes_per_second: int = 0
    quotas_connections_max: int = 10_000
    quotas_connections_per_ip_max: int = 1_000
    quotas_frame_timeout_ms: int = 30_000
    #: Open connections the HTTP listener accepts (its own budget, apart from the client protocols').
    quotas_http_connections_max: int = 256
    #: An HTTP request must arrive whole within this (slow clients cannot hold connections open).
    http_request_timeout_ms: int = 10_000
    #: Per-principal / per-client-id rates over the defaults: "principal User:alice produce=N fetch=N, client ID ...".
    quotas_overrides: str = ""
    #: The ``[connectors]`` table (docs/connectors.md): run connector tasks on this broker.
    connectors_enabled: bool = True
    #: Partitions of ``__connectors``; a task runs on the leader of its partition (more partitions spread tasks wider).
    connectors_topic_partitions: int = 8
    #: How often a broker checks which ``__connectors`` partitions it leads (and so which tasks it runs).
    connectors_leadership_check_interval_ms: int = 1_000
    #: How often task owners store each task's status and metrics in ``__connectors`` (what ``describe`` shows).
    connectors_status_interval_ms: int = 2_000
    topic_defaults: Mapping[str, str] = field(default_factory=dict)

    @property
    def public_host(self) -> str:
        """The host name clients are told to connect to."""
        if self.advertised_host:
            return self.advertised_host
        return "localhost" if self.host in ("", "0.0.0.0", "::") else self.host

    @property
    def public_native_port(self) -> int:
        """The native port clients and followers are told to connect to."""
        return self.advertised_native_port or self.native_port

    def listener_ports(self) -> dict[str, int]:
        """Every ``*_port`` listener setting by name; 0 disables that listener."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name.endswith("_port") and not f.name.startswith("advertised_")}


_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig) if f.name != "topic_defaults"}


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Turn nested TOML tables into dotted keys (``[log] retention.ms`` → ``log.retention.ms``)."""
    flat: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _coerce(key: str, value: Any, kind: Any) -> Any:
    """Check ``value`` (a TOML value, from the file or a ``--set``) against the field type, naming ``key`` on failure.

    Booleans must be TOML booleans and integers TOML integers; a string field takes a string or
    a list of strings (``super_users = ["User:admin"]``, kept comma-separated).
    """
    kind_name = kind if isinstance(kind, str) else kind.__name__
    if kind_name != "str" and isinstance(value, str):
        value = parse_value(value.strip())  # settings built in code: "1000", "true"
    if kind_name == "bool" and isinstance(value, bool):
        return value
    if kind_name == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind_name == "str":
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # --set cpu_affinity=0, cluster_id=7
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return ",".join(value)
    shown = "a list" if isinstance(value, list) else type(value).__name__
    expected = {"bool": "true or false", "int": "an integer", "str": "a string (or a list of strings)"}.get(
        kind_name, kind_name)
    raise ConfigError(f"configuration key {key!r}: {value!r} is {shown}, expected {expected}")


def _check_value(key: str, value: Any) -> None:
    """Range checks for settings where a wrong value would only fail later, far from its cause."""
    if key.endswith("_port") and not 0 <= value <= 65535:
        raise ConfigError(f"configuration key {key!r}: port {value} is outside 0..65535 (0 disables the listener)")
    if key in ("default_partitions", "default_replication_factor", "offsets_topic_partitions", "share_state_topic_partitions",
               "offsets_topic_replication_factor", "controller_connections_max", "quotas_http_connections_max",
               "http_request_timeout_ms", "cluster_partitions_max", "connectors_topic_partitions",
               "connectors_leadership_check_interval_ms", "connectors_status_interval_ms", "transaction_state_partitions",
               "transaction_max_timeout_ms", "transactional_id_expiration_ms") and value < 1 and not (
                   key == "default_replication_factor" and value == -1):
        raise ConfigError(f"configuration key {key!r}: must be at least 1, got {value}")
    if key.endswith("_ms") and value < 0:
        raise ConfigError(f"configuration key {key!r}: must not be negative, got {value}")
    if key == "tls_client_auth" and value not in ("none", "optional", "required"):
        raise ConfigError(f"configuration key 'tls_client_auth': must be none, optional or required, got {value!r}")
    if key == "mqtt_puback" and value not in ("durable", "written"):
        raise ConfigError(f"configuration key 'mqtt_puback': must be durable or written, got {value!r}")
    if key == "amqp_default_queue_type" and value not in ("classic", "share"):
        raise ConfigError(f"configuration key 'amqp_default_queue_type': must be classic or share, got {value!r}")
    if key == "security_authorizer" and value not in ("allow-all", "acl"):
        raise ConfigError(f"configuration key 'security.authorizer': must be allow-all or acl, got {value!r}")
    if key == "quotas_overrides":
        try:
            parse_quota_overrides(value)
        except ValueError as error:
            raise ConfigError(f"configuration key 'quotas.overrides': {error}") from None
    elif key.startswith("quotas_") and value < 0:
        raise ConfigError(f"configuration key {key!r}: must not be negative, got {value}")
    if key == "cpu_affinity" and value:
        try:
            parse_cpu_list(value)
        except ValueError as error:
            raise ConfigError(f"configuration key 'cpu_affinity': {error}") from None
    if key == "fsync_engine" and value not in FSYNC_ENGINES:
        raise ConfigError(f"configuration key 'fsync_engine': must be auto, aio, thread or worker, got {value!r}")
    if key == "segment_files_open_max" and value < 1:
        raise ConfigError(f"configuration key 'segment_files_open_max': must be at least 1, got {value}")
    if key == "log_recovery_threads" and value < 1:
        raise ConfigError(f"configuration key 'log_recovery_threads': must be at least 1, got {value}")
    if key == "node_id" and value < 0:
        raise ConfigError(f"configuration key 'node_id': must not be negative, got {value}")


def build_config(settings: Mapping[str, Any], validate_topic_defaults: Any = None) -> BrokerConfig:
    """Build a ``BrokerConfig`` from dotted ``settings``; reject unknown keys and bad values.

    ``validate_topic_defaults`` is called with the ``log.``-stripped mapping so that topic
    defaults are checked by the same code that checks a topic's own configs.
    """
    values: dict[str, Any] = {}
    topic_defaults: dict[str, str] = {}
    for key, value in settings.items():
        # ``[security] allow_anonymous`` arrives as ``security.allow_anonymous``: the field ``security_allow_anonymous``.
        normalized = key.replace("-", "_").replace(".", "_") if not key.startswith(TOPIC_DEFAULT_PREFIX) else key
        if normalized.startswith(TOPIC_DEFAULT_PREFIX):
            topic_defaults[normalized[len(TOPIC_DEFAULT_PREFIX):]] = str(value).lower() if isinstance(value, bool) else str(value)
            continue
        if normalized not in _FIELDS:
            raise ConfigError(f"unknown configuration key {key!r}; see docs/configuration.md for the keys")
        coerced = _coerce(key, value, _FIELDS[normalized].type)
        _check_value(normalized, coerced)
        values[normalized] = coerced
    if validate_topic_defaults is not None and topic_defaults:
        try:
            validate_topic_defaults(topic_defaults)
        except ConfigError:
            raise
        except Exception as error:  # the validator's own typed error, re-worded with the prefix
            raise ConfigError(f"configuration key under {TOPIC_DEFAULT_PREFIX!r}: {error}") from None
    return BrokerConfig(**values, topic_defaults=topic_defaults)


def parse_toml(text: str, source: str = "<config>") -> dict[str, Any]:
    """Parse TOML text into dotted settings; a syntax error names ``source``."""
    try:
        return _flatten(tomllib.loads(text))
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{source}: not valid TOML: {error}") from None


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """Parse ``KEY=VALUE`` strings from ``--set`` options; VALUE is a TOML value.

    ``--set security.super_users=["User:admin"]`` is a list, ``true`` a boolean, ``5`` an
    integer; anything that is not valid TOML (``localhost``, ``User:admin``) is taken as a
    bare string, as a shell user means it. ``build_config`` then checks the type.
    """
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, separator, value = pair.partition("=")
        if not separator or not key.strip():
            raise ConfigError(f"--set expects KEY=VALUE, got {pair!r}")
        settings[key.strip()] = parse_value(value.strip())
    return settings


def parse_value(text: str) -> Any:
    """One ``--set`` value as TOML (a list, boolean, number or quoted string), else the text itself."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        if text.startswith(("[", "{", '"', "'")):
            raise ConfigError(f"--set value {text!r} looks like TOML but is not valid TOML") from None
        return text
