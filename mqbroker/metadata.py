"""The cluster metadata as a replicated state machine: records in the Raft log, an image in memory.

Pure: no Twisted, no clock. Every admin operation becomes one ``Record``; the controller
commits it to the Raft log and every broker applies the committed records, in order, to its
``MetadataImage``. Applying is deterministic and validates again (a record proposed from a
stale image may be refused: the proposer gets the error back through the apply result).
``snapshot``/``restore`` turn the whole image into bytes and back, so snapshots bound the log.

Records are JSON objects with a ``type`` field. Besides brokers, topics, partition
assignments and leaders, ``PutGenericRecord`` holds typed key/value records (ACLs, users,
AMQP exchanges/queues/bindings, MQTT mappings) that other features define by ``kind``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zope.interface import implementer

from mqbroker import errors
from mqbroker.raft.state_machine import IRaftStateMachine

#: A partition whose only replica is fenced has no leader.
NO_LEADER = -1
_SNAPSHOT_VERSION = 1

# ---- records --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBroker:
    """A broker announces (or re-announces after a restart) where clients reach it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerHeartbeat:
    """A broker is alive; a fenced broker that heartbeats is unfenced."""

    node_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FenceBroker:
    """The controller saw no heartbeat from ``node_id`` for a whole session: its partitions lose their leader."""

    node_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopic:
    """A new topic; ``assignment[p]`` is the broker that hosts partition ``p``."""

    name: str
    assignment: tuple[int, ...]
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopic:
    """Remove a topic and, on the brokers hosting it, its data."""

    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitions:
    """Grow a topic: ``assignment`` lists the brokers of the new partitions, in order."""

    name: str
    assignment: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterTopicConfigs:
    """Replace a topic's config overrides with ``configs``."""

    name: str
    configs: Mapping[str, str]


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
    | AllocateProducerIds
    | PutGenericRecord
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
        AllocateProducerIds,
        PutGenericRecord,
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
        if "assignment" in document:
            document["assignment"] = tuple(int(broker) for broker in document["assignment"])
        record: Record = cls(**document)
        _check_field_types(record)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise errors.CorruptMessageError(f"a metadata record does not decode: {error!r}") from None
    return record


_FIELD_CHECKS: dict[str, Callable[[Any], bool]] = {
    "int": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "str": lambda value: isinstance(value, str),
    "tuple[int, ...]": lambda value: True,  # converted (and so checked) by decode_record
    "Mapping[str, str]": lambda value: isinstance(value, dict)
    and all(isinstance(key, str) and isinstance(item, str) for key, item in value.items()),
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


# ---- the image ------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class BrokerState:
    """A registered broker: where clients reach it and whether it is fenced."""

    node_id: int
    host: str
    port: int
    fenced: bool = False


@dataclass(slots=True, kw_only=True)
class PartitionState:
    """One partition: the broker hosting it, its leader (NO_LEADER when fenced) and leader epoch."""

    broker_id: int
    leader_id: int
    leader_epoch: int = 0


@dataclass(slots=True, kw_only=True)
class TopicState:
    """A topic's partitions and config overrides."""

    name: str
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class MetadataImage:
    """Everything the committed log says, as of ``applied_index``."""

    brokers: dict[int, BrokerState] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    next_producer_id: int = 0
    generic: dict[str, dict[str, Any]] = field(default_factory=dict)
    applied_index: int = 0

    def live_brokers(self) -> list[int]:
        """Registered, unfenced brokers, by id."""
        return sorted(node_id for node_id, broker in self.brokers.items() if not broker.fenced)

    def partitions_hosted(self, node_id: int) -> list[tuple[str, int]]:
        """(topic, partition) of every partition ``node_id`` hosts."""
        return [
            (topic.name, number)
            for topic in self.topics.values()
            for number, partition in enumerate(topic.partitions)
            if partition.broker_id == node_id
        ]

    def to_document(self) -> dict[str, Any]:
        """A JSON-ready form (snapshots, ``cluster describe`` and restart comparisons)."""
        return {
            "version": _SNAPSHOT_VERSION,
            "applied_index": self.applied_index,
            "brokers": [dataclasses.asdict(broker) for _, broker in sorted(self.brokers.items())],
            "topics": [
                {
                    "name": topic.name,
                    "configs": dict(sorted(topic.configs.items())),
                    "partitions": [dataclasses.asdict(partition) for partition in topic.partitions],
                }
                for _, topic in sorted(self.topics.items())
            ],
            "next_producer_id": self.next_producer_id,
            "generic": {kind: dict(sorted(records.items())) for kind, records in sorted(self.generic.items())},
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> MetadataImage:
        """Rebuild what ``to_document`` produced."""
        assert document["version"] == _SNAPSHOT_VERSION, document["version"]
        return cls(
            brokers={broker["node_id"]: BrokerState(**broker) for broker in document["brokers"]},
            topics={
                topic["name"]: TopicState(
                    name=topic["name"],
                    configs=dict(topic["configs"]),
                    partitions=[PartitionState(**partition) for partition in topic["partitions"]],
                )
                for topic in document["topics"]
            },
            next_producer_id=document["next_producer_id"],
            generic={kind: dict(records) for kind, records in document["generic"].items()},
            applied_index=document["applied_index"],
        )


def apply_record(image: MetadataImage, record: Record) -> int | None:
    """Apply one committed record to ``image``; return its value or raise the ``BrokerError`` refusing it."""
    match record:
        case RegisterBroker(node_id=node_id, host=host, port=port):
            fenced = image.brokers[node_id].fenced if node_id in image.brokers else False
            image.brokers[node_id] = BrokerState(node_id=node_id, host=host, port=port, fenced=fenced)
            _unfence(image, node_id)
        case BrokerHeartbeat(node_id=node_id):
            if node_id not in image.brokers:
                raise errors.InvalidRequestError(f"broker {node_id} heartbeats before registering")
            _unfence(image, node_id)
        case FenceBroker(node_id=node_id):
            if node_id in image.brokers and not image.brokers[node_id].fenced:
                image.brokers[node_id].fenced = True
                for partition in _hosted(image, node_id):
                    partition.leader_id = NO_LEADER
                    partition.leader_epoch += 1
        case CreateTopic(name=name, assignment=assignment, configs=configs):
            if name in image.topics:
                raise errors.TopicAlreadyExistsError(f"topic {name!r} already exists")
            image.topics[name] = TopicState(name=name, partitions=_new_partitions(image, assignment), configs=dict(configs))
        case DeleteTopic(name=name):
            _topic(image, name)
            del image.topics[name]
        case CreatePartitions(name=name, assignment=assignment):
            _topic(image, name).partitions.extend(_new_partitions(image, assignment))
        case AlterTopicConfigs(name=name, configs=configs):
            _topic(image, name).configs = dict(configs)
        case AllocateProducerIds(count=count, minimum=minimum):
            first = max(image.next_producer_id, minimum)
            image.next_producer_id = first + count
            return first
        case PutGenericRecord(kind=kind, key=key, value=value):
            records = image.generic.setdefault(kind, {})
            if value is None:
                records.pop(key, None)
            else:
                records[key] = value
    return None


def _topic(image: MetadataImage, name: str) -> TopicState:
    topic = image.topics.get(name)
    if topic is None:
        raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    return topic


def _new_partitions(image: MetadataImage, assignment: tuple[int, ...]) -> list[PartitionState]:
    unknown = sorted(set(assignment) - set(image.brokers))
    if unknown:
        raise errors.InvalidReplicationFactorError(f"partitions assigned to unregistered broker(s) {unknown}")
    return [
        PartitionState(broker_id=broker, leader_id=NO_LEADER if image.brokers[broker].fenced else broker)
        for broker in assignment
    ]


def _hosted(image: MetadataImage, node_id: int) -> list[PartitionState]:
    return [partition for topic in image.topics.values() for partition in topic.partitions if partition.broker_id == node_id]


def _unfence(image: MetadataImage, node_id: int) -> None:
    broker = image.brokers[node_id]
    if not broker.fenced:
        return
    broker.fenced = False
    for partition in _hosted(image, node_id):
        partition.leader_id = node_id
        partition.leader_epoch += 1


@implementer(IRaftStateMachine)
class MetadataStateMachine:
    """The image behind a Raft node: applies committed records and tells listeners what changed."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        #: Called with (record, image) after each record is applied successfully.
        self.record_listeners: list[Callable[[Record, MetadataImage], None]] = []
        #: Called with the image after a snapshot replaced it.
        self.restore_listeners: list[Callable[[MetadataImage], None]] = []
        #: Called with the applied index after every record (applied or refused) and restore.
        self.index_listeners: list[Callable[[int], None]] = []

    def apply(self, index: int, data: bytes) -> bytes:
        """Apply the committed record at ``index``; the result carries its value or error."""
        self.image.applied_index = index
        try:
            record = decode_record(data)
            value = apply_record(self.image, record)
        except errors.BrokerError as error:
            result = encode_result(index, error)
        else:
            for listener in self.record_listeners:
                listener(record, self.image)
            result = encode_result(index, value=value)
        for index_listener in self.index_listeners:
            index_listener(index)
        return result

    def snapshot(self) -> bytes:
        """The image as JSON."""
        return json.dumps(self.image.to_document(), separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        """Replace the image (b"": the empty image of a new cluster)."""
        self.image = MetadataImage.from_document(json.loads(data)) if data else MetadataImage()
        for listener in self.restore_listeners:
            listener(self.image)
        for index_listener in self.index_listeners:
            index_listener(self.image.applied_index)
