"""Metadata records: what the controller commits to the Raft log, and what applying one gave (pure).

Every admin operation becomes one ``Record``: a frozen dataclass, stored as a JSON object with a
``type`` field. Besides brokers, topics, partition assignments and leaders, ``PutGenericRecord``
holds typed key/value records (ACLs, users, AMQP exchanges/queues/bindings, MQTT mappings) that
other features define by ``kind``. Applying them to the image is ``cluster.metadata``'s job.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mqbroker import errors

@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBroker:
    """A broker announces (or re-announces after a restart) where clients reach it.

    ``unclean_election_default`` (here and in the other records that may elect leaders) is the
    proposer's broker-wide ``log.unclean.leader.election.enable``: topics without their own
    setting use it, and carrying it in the record keeps applying deterministic on every node.
    """

    node_id: int
    host: str
    port: int
    unclean_election_default: str = "false"
    #: Every listener's port by configuration key ("kafka_port", "kafka_tls_port", ...); ``port`` is the native one.
    listeners: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerHeartbeat:
    """A broker is alive; a fenced broker that heartbeats is unfenced."""

    node_id: int
    unclean_election_default: str = "false"


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBroker:
    """``node_id`` missed its session (or is shutting down): its leaderships move to other ISR members."""

    node_id: int
    unclean_election_default: str = "false"


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopic:
    """A new topic; ``assignment[p]`` is partition ``p``'s preferred leader, ``replicas[p]`` all its replicas.

    Without ``replicas`` (records written before replication) each partition has one replica.
    """

    name: str
    assignment: tuple[int, ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    replicas: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopic:
    """Remove a topic and, on the brokers hosting it, its data."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitions:
    """Grow a topic: ``assignment``/``replicas`` give the preferred leaders/replicas of the new partitions."""

    name: str
    assignment: tuple[int, ...]
    replicas: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartition:
    """A partition leader changes its ISR; refused unless the leader and partition epochs are current."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectLeader:
    """The controller moves leadership to ``leader_id`` (preferred-leader rebalancing); it must be an ISR member."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReassignPartition:
    """Move a partition to ``target_replicas``: they join as followers, catch up, then the others leave."""

    topic: str
    partition: int
    target_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterTopicConfigs:
    """Replace a topic's config overrides with ``configs``."""

    name: str
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterBrokerConfigs:
    """Replace the dynamic topic defaults of ``entity``: "" the whole cluster's, else broker ``entity``'s (its id).

    Keys are topic config keys (``retention.ms``, ``min.insync.replicas``); they override the brokers'
    static ``log.`` defaults (a broker's own over the cluster's) and yield to a topic's own overrides.
    """

    entity: str
    configs: Mapping[str, str]
    #: The controller's one-time write of the cluster's defaults (Kafka 4.1 writes ``min.insync.replicas`` at
    #: activation, KIP-966): applied only while the cluster has none, so it never undoes an operator's change.
    activation: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocateProducerIds:
    """Hand out ``count`` producer ids starting no lower than ``minimum``; the result is the first id."""

    count: int
    minimum: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PutGenericRecord:
    """Set (or, with ``value`` None, delete) the record ``key`` of a feature-defined ``kind``."""

    kind: str
    key: str
    value: Any = None


Record = (
    RegisterBroker
    | BrokerHeartbeat
    | FenceBroker
    | CreateTopic
    | DeleteTopic
    | CreatePartitions
    | AlterTopicConfigs
    | AlterBrokerConfigs
    | AllocateProducerIds
    | PutGenericRecord
    | AlterPartition
    | ElectLeader
    | ReassignPartition
)
_RECORD_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        RegisterBroker,
        BrokerHeartbeat,
        FenceBroker,
        CreateTopic,
        DeleteTopic,
        CreatePartitions,
        AlterTopicConfigs,
        AlterBrokerConfigs,
        AllocateProducerIds,
        PutGenericRecord,
        AlterPartition,
        ElectLeader,
        ReassignPartition,
    )
}


def encode_record(record: Record) -> bytes:
    """The bytes of one record, as proposed to the Raft log."""
    document = {"type": type(record).__name__}
    for item in dataclasses.fields(record):
        value = getattr(record, item.name)
        document[item.name] = dict(value) if isinstance(value, Mapping) else value
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def decode_record(data: bytes) -> Record:
    """Read what ``encode_record`` wrote; unreadable bytes raise ``CorruptMessageError``."""
    try:
        document = json.loads(data)
        cls = _RECORD_TYPES[document.pop("type")]
        for name in ("assignment", "isr", "target_replicas"):
            if name in document:
                document[name] = tuple(int(broker) for broker in document[name])
        if "replicas" in document:
            document["replicas"] = tuple(tuple(int(broker) for broker in replicas) for replicas in document["replicas"])
        record: Record = cls(**document)
        _check_field_types(record)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise errors.CorruptMessageError(f"a metadata record does not decode: {error!r}") from None
    return record


_FIELD_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "str": lambda value: isinstance(value, str),
    "bool": lambda value: isinstance(value, bool),
    "tuple[int, ...]": lambda value: True,  # converted (and so checked) by decode_record
    "tuple[tuple[int, ...], ...]": lambda value: True,
    "Mapping[str, str]": lambda value: isinstance(value, dict)
    and all(isinstance(key, str) and isinstance(item, str) for key, item in value.items()),
    "Mapping[str, int]": lambda value: isinstance(value, dict)
    and all(isinstance(key, str) and isinstance(item, int) and not isinstance(item, bool) for key, item in value.items()),
    "Any": lambda value: True,
}


def _check_field_types(record: Record) -> None:
    for item in dataclasses.fields(record):
        if not _FIELD_CHECKS[str(item.type)](getattr(record, item.name)):
            raise TypeError(f"{type(record).__name__}.{item.name} has the wrong type")


# ---- results --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyResult:
    """What applying a record gave: its log index (wait for it to read your write) and value."""

    index: int
    value: int | None = None


def encode_result(index: int, error: errors.BrokerError | None = None, value: int | None = None) -> bytes:
    """The apply result a proposer gets back: the index and an error code and message, or a value."""
    if error is None:
        return json.dumps({"index": index, "error": 0, "value": value}).encode()
    return json.dumps({"index": index, "error": int(error.code), "message": error.message}).encode()


def decode_result(data: bytes) -> ApplyResult:
    """The index and value of an apply result, or raise the typed error it carries."""
    document = json.loads(data)
    if document["error"]:
        raise errors.error_for_code(document["error"], document["message"])
    value = document["value"]
    return ApplyResult(index=int(document["index"]), value=None if value is None else int(value))
