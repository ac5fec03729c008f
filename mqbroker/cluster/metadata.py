"""The cluster metadata as a replicated state machine: committed records applied to an image in memory.

Pure: no Twisted, no clock. The controller commits each ``Record`` (``cluster.metadata_records``)
to the Raft log and every broker applies the committed records, in order, to its
``MetadataImage``. Applying is deterministic and validates again (a record proposed from a
stale image may be refused: the proposer gets the error back through the apply result).
``snapshot``/``restore`` turn the whole image into bytes and back, so snapshots bound the log.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zope.interface import implementer

from mqbroker import errors
from mqbroker.cluster.metadata_records import (
    AllocateProducerIds,
    AlterBrokerConfigs,
    AlterPartition,
    AlterTopicConfigs,
    BrokerHeartbeat,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    ElectLeader,
    FenceBroker,
    PutGenericRecord,
    ReassignPartition,
    Record,
    RegisterBroker,
    decode_record,
    encode_result,
)
from mqbroker.raft.state_machine import IRaftStateMachine
from mqbroker.replication.decisions import NO_LEADER, elect_leader, ordered_union

#: Topic config turning on election of out-of-sync replicas (may lose acknowledged records).
UNCLEAN_ELECTION_CONFIG = "unclean.leader.election.enable"
_SNAPSHOT_VERSION = 1
#: The entity of ``AlterBrokerConfigs`` holding the cluster-wide dynamic defaults (Kafka's ``--entity-default``).
CLUSTER_ENTITY = ""

# ---- the image ------------------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class BrokerState:
    """A registered broker: where clients reach it and whether it is fenced."""

    node_id: int
    host: str
    port: int
    fenced: bool = False
    #: Every listener's port by configuration key (see ``RegisterBroker.listeners``).
    listeners: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class PartitionState:
    """One partition: its replicas (the first is the preferred leader), ISR, leader (or NO_LEADER) and epochs.

    ``broker_id`` is the preferred leader (before replication, the one broker hosting the partition).
    ``partition_epoch`` grows with every change of leader, ISR or replicas; ``target_replicas`` is
    non-empty while a reassignment runs (``replicas`` then holds the old and the new ones).
    """

    broker_id: int
    leader_id: int
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    partition_epoch: int = 0
    target_replicas: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.replicas:
            self.replicas = [self.broker_id]
        if not self.isr:
            self.isr = [self.broker_id]  # a lone replica stays in its ISR even while fenced (last one standing)


@dataclass(slots=True, kw_only=True)
class TopicState:
    """A topic's partitions and config overrides."""

    name: str
    partitions: list[PartitionState]
    configs: dict[str, str] = field(default_factory=dict)
    #: 16 bytes naming this incarnation of the topic (Kafka's topic id): see ``topic_id_for``.
    topic_id: bytes = b""


def topic_id_for(name: str, created_index: int) -> bytes:
    """The id of topic ``name`` created by the record at log index ``created_index``.

    Derived, not drawn: every broker applying the record computes the same id, and a topic
    deleted and created again gets another one. (Snapshots older than topic ids give their
    topics the id of index 0.)
    """
    return uuid.uuid5(_TOPIC_ID_NAMESPACE, f"{created_index}/{name}").bytes


_TOPIC_ID_NAMESPACE = uuid.UUID("8f0c2a3e-5b7d-4c1e-9a6f-2d4b8e1c7a90")


@dataclass(slots=True)
class MetadataImage:
    """Everything the committed log says, as of ``applied_index``."""

    brokers: dict[int, BrokerState] = field(default_factory=dict)
    topics: dict[str, TopicState] = field(default_factory=dict)
    next_producer_id: int = 0
    generic: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Dynamic topic defaults by entity ("" the cluster's, else a broker id); see ``AlterBrokerConfigs``.
    #: The cluster's entry, once written, stays (possibly empty): the controller writes it once (``activation``).
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    applied_index: int = 0

    def live_brokers(self) -> list[int]:
        """Registered, unfenced brokers, by id."""
        return sorted(node_id for node_id, broker in self.brokers.items() if not broker.fenced)

    def partitions_hosted(self, node_id: int) -> list[tuple[str, int]]:
        """(topic, partition) of every partition with a replica on ``node_id``."""
        return [
            (topic.name, number)
            for topic in self.topics.values()
            for number, partition in enumerate(topic.partitions)
            if node_id in partition.replicas
        ]

    def dynamic_topic_default(self, node_id: int, key: str) -> str | None:
        """The dynamic default of topic config ``key`` in force on broker ``node_id``: its own, else the cluster's
        (None: neither sets it). A lookup, no merged dict: the produce path asks it per partition batch."""
        value = self.broker_configs.get(str(node_id), {}).get(key)
        return value if value is not None else self.broker_configs.get(CLUSTER_ENTITY, {}).get(key)

    def to_document(self) -> dict[str, Any]:
        """A JSON-ready form (snapshots, ``cluster describe`` and restart comparisons)."""
        return {
            "version": _SNAPSHOT_VERSION,
            "applied_index": self.applied_index,
            "brokers": [dataclasses.asdict(broker) for _, broker in sorted(self.brokers.items())],
            "topics": [
                {
                    "name": topic.name,
                    "topic_id": topic.topic_id.hex(),
                    "configs": dict(sorted(topic.configs.items())),
                    "partitions": [dataclasses.asdict(partition) for partition in topic.partitions],
                }
                for _, topic in sorted(self.topics.items())
            ],
            "next_producer_id": self.next_producer_id,
            "generic": {kind: dict(sorted(records.items())) for kind, records in sorted(self.generic.items())},
            "broker_configs": {entity: dict(sorted(configs.items())) for entity, configs in sorted(self.broker_configs.items())},
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
                    topic_id=bytes.fromhex(topic["topic_id"]) if "topic_id" in topic else topic_id_for(topic["name"], 0),
                    configs=dict(topic["configs"]),
                    partitions=[PartitionState(**partition) for partition in topic["partitions"]],
                )
                for topic in document["topics"]
            },
            next_producer_id=document["next_producer_id"],
            generic={kind: dict(records) for kind, records in document["generic"].items()},
            broker_configs={entity: dict(configs) for entity, configs in document.get("broker_configs", {}).items()},
            applied_index=document["applied_index"],
        )


def apply_record(image: MetadataImage, record: Record) -> int | None:
    """Apply one committed record to ``image``; return its value or raise the ``BrokerError`` refusing it."""
    match record:
        case RegisterBroker(node_id=node_id, host=host, port=port, unclean_election_default=unclean_default,
                            listeners=listeners):
            fenced = image.brokers[node_id].fenced if node_id in image.brokers else False
            image.brokers[node_id] = BrokerState(node_id=node_id, host=host, port=port, fenced=fenced,
                                                 listeners=dict(listeners))
            _unfence(image, node_id, unclean_default)
        case BrokerHeartbeat(node_id=node_id, unclean_election_default=unclean_default):
            if node_id not in image.brokers:
                raise errors.InvalidRequestError(f"broker {node_id} heartbeats before registering")
            _unfence(image, node_id, unclean_default)
        case FenceBroker(node_id=node_id, unclean_election_default=unclean_default):
            if node_id in image.brokers and not image.brokers[node_id].fenced:
                image.brokers[node_id].fenced = True
                for topic, partition in _hosted(image, node_id):
                    _fence_replica(image, topic, partition, node_id, unclean_default)
        case CreateTopic(name=name, assignment=assignment, configs=configs, replicas=replicas):
            if name in image.topics:
                raise errors.TopicAlreadyExistsError(f"topic {name!r} already exists")
            image.topics[name] = TopicState(
                name=name, partitions=_new_partitions(image, assignment, replicas), configs=dict(configs),
                topic_id=topic_id_for(name, image.applied_index),
            )
        case DeleteTopic(name=name):
            _topic(image, name)
            del image.topics[name]
        case CreatePartitions(name=name, assignment=assignment, replicas=replicas):
            _topic(image, name).partitions.extend(_new_partitions(image, assignment, replicas))
        case AlterPartition():
            _alter_partition(image, record)
        case ElectLeader(topic=topic, partition=number, leader_id=leader_id, leader_epoch=leader_epoch):
            partition = _partition(image, topic, number)
            if partition.leader_epoch != leader_epoch:
                raise errors.FencedLeaderEpochError(f"{topic}-{number} is at leader epoch {partition.leader_epoch}")
            if leader_id not in partition.isr or leader_id not in image.live_brokers():
                raise errors.NotLeaderError(f"broker {leader_id} is not a live in-sync replica of {topic}-{number}")
            _set_leader(partition, leader_id)
        case ReassignPartition(topic=topic, partition=number, target_replicas=target):
            _reassign(image, topic, number, target)
        case AlterTopicConfigs(name=name, configs=configs):
            _topic(image, name).configs = dict(configs)
        case AlterBrokerConfigs(entity=entity, configs=configs, activation=activation):
            if activation and (entity != CLUSTER_ENTITY or CLUSTER_ENTITY in image.broker_configs):
                return None
            if entity != CLUSTER_ENTITY and not (entity.isascii() and entity.isdigit() and int(entity) >= 1):
                raise errors.InvalidRequestError(f"broker configs belong to the cluster (\"\") or a broker id, "
                                                 f"not {entity!r}")
            if configs or entity == CLUSTER_ENTITY:
                image.broker_configs[entity] = dict(configs)
            else:
                image.broker_configs.pop(entity, None)
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


def _partition(image: MetadataImage, topic: str, number: int) -> PartitionState:
    partitions = _topic(image, topic).partitions
    if not 0 <= number < len(partitions):
        raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {number}")
    return partitions[number]


def _new_partitions(
    image: MetadataImage, assignment: tuple[int, ...], replicas: tuple[tuple[int, ...], ...]
) -> list[PartitionState]:
    replica_lists = replicas or tuple((broker,) for broker in assignment)
    unknown = sorted({broker for replica_list in replica_lists for broker in replica_list} - set(image.brokers))
    if unknown:
        raise errors.InvalidReplicationFactorError(f"partitions assigned to unregistered broker(s) {unknown}")
    if any(len(set(replica_list)) != len(replica_list) for replica_list in replica_lists):
        raise errors.InvalidReplicationFactorError("a partition's replicas must be distinct brokers")
    live = image.live_brokers()
    partitions = []
    for replica_list in replica_lists:
        leader, _ = elect_leader(replica_list, replica_list, live, unclean=False)
        partitions.append(PartitionState(broker_id=replica_list[0], leader_id=leader, replicas=list(replica_list),
                                         isr=list(replica_list)))
    return partitions


def _hosted(image: MetadataImage, node_id: int) -> list[tuple[TopicState, PartitionState]]:
    return [
        (topic, partition) for topic in image.topics.values() for partition in topic.partitions
        if node_id in partition.replicas
    ]


def _set_leader(partition: PartitionState, leader_id: int) -> None:
    partition.leader_id = leader_id
    partition.leader_epoch += 1
    partition.partition_epoch += 1


def _unclean_allowed(topic: TopicState, unclean_default: str) -> bool:
    """The topic's ``unclean.leader.election.enable``, else the broker-wide default the record carries."""
    return topic.configs.get(UNCLEAN_ELECTION_CONFIG, unclean_default) == "true"


def _fence_replica(
    image: MetadataImage, topic: TopicState, partition: PartitionState, node_id: int, unclean_default: str
) -> None:
    """A replica's broker is gone: move its leadership to a live ISR member and drop it from the ISR.

    The last ISR member stays in the ISR (Kafka's "last replica standing"): it is the only one
    known to hold every acknowledged record, so it must be the one to lead again.
    """
    others = [replica for replica in partition.isr if replica != node_id]
    if partition.leader_id == node_id:
        leader, out_of_sync = elect_leader(partition.replicas, partition.isr, image.live_brokers(),
                                           unclean=_unclean_allowed(topic, unclean_default))
        _set_leader(partition, leader)
        if out_of_sync:
            partition.isr = [leader]
        elif others:
            partition.isr = others
    elif node_id in partition.isr and others:
        partition.isr = others
        partition.partition_epoch += 1


def _unfence(image: MetadataImage, node_id: int, unclean_default: str) -> None:
    """A fenced broker is back: it leads again the leaderless partitions whose ISR it is in."""
    broker = image.brokers[node_id]
    if not broker.fenced:
        return
    broker.fenced = False
    live = image.live_brokers()
    for topic, partition in _hosted(image, node_id):
        if partition.leader_id != NO_LEADER:
            continue
        leader, out_of_sync = elect_leader(partition.replicas, partition.isr, live,
                                           unclean=_unclean_allowed(topic, unclean_default))
        if leader != NO_LEADER:
            _set_leader(partition, leader)
            if out_of_sync:
                partition.isr = [leader]


def _alter_partition(image: MetadataImage, record: AlterPartition) -> None:
    """The leader's ISR change, fenced by its leader and partition epochs; may finish a reassignment."""
    partition = _partition(image, record.topic, record.partition)
    name = f"{record.topic}-{record.partition}"
    if partition.leader_id != record.leader_id or partition.leader_epoch != record.leader_epoch:
        raise errors.FencedLeaderEpochError(
            f"{name}: broker {record.leader_id} at leader epoch {record.leader_epoch} no longer leads "
            f"(leader {partition.leader_id}, epoch {partition.leader_epoch})"
        )
    if partition.partition_epoch != record.partition_epoch:
        raise errors.FencedLeaderEpochError(f"{name}: the partition changed meanwhile (epoch {partition.partition_epoch})")
    if record.leader_id not in record.isr or not set(record.isr) <= set(partition.replicas):
        raise errors.InvalidRequestError(f"{name}: ISR {list(record.isr)} must hold the leader and only replicas")
    fenced = sorted(replica for replica in set(record.isr) - set(partition.isr)
                    if replica in image.brokers and image.brokers[replica].fenced)
    if fenced:  # as Kafka's INELIGIBLE_REPLICA (KIP-841): a leader's stale view of a dead follower
        raise errors.InvalidRequestError(f"{name}: ISR {list(record.isr)} adds fenced broker(s) {fenced}")
    partition.isr = [replica for replica in partition.replicas if replica in record.isr]
    partition.partition_epoch += 1
    _maybe_finish_reassignment(image, partition)


def _reassign(image: MetadataImage, topic: str, number: int, target: tuple[int, ...]) -> None:
    partition = _partition(image, topic, number)
    if not target or len(set(target)) != len(target) or not set(target) <= set(image.brokers):
        raise errors.InvalidReplicationFactorError(f"target replicas {list(target)} must be distinct registered brokers")
    partition.replicas = list(ordered_union(target, partition.replicas))
    partition.target_replicas = list(target)
    partition.partition_epoch += 1
    _maybe_finish_reassignment(image, partition)


def _maybe_finish_reassignment(image: MetadataImage, partition: PartitionState) -> None:
    """Once every target replica is in sync, the others leave (and leadership moves into the target)."""
    target = partition.target_replicas
    if not target or not set(target) <= set(partition.isr):
        return
    partition.replicas = list(target)
    partition.broker_id = target[0]
    partition.isr = [replica for replica in target if replica in partition.isr]
    partition.target_replicas = []
    if partition.leader_id not in target:
        leader, _ = elect_leader(target, partition.isr, image.live_brokers(), unclean=False)
        _set_leader(partition, leader)


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
