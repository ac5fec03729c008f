"""Protocol-independent value types passed across the broker API (IBroker).

Front ends translate their wire formats to and from these; nothing here knows a protocol.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from mqbroker import errors, limits

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
#: ListOffsets: the record with the largest timestamp (KIP-734).
MAX_TIMESTAMP = -3


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: set by a front end's authentication, checked by the authorizer."""

    kind: str
    name: str
    host: str = ""

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


ANONYMOUS = Principal("User", "ANONYMOUS")
#: The cluster as an ACL resource (Kafka's name for it).
CLUSTER_RESOURCE = "kafka-cluster"


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerIdentity:
    """A verified client certificate, as the principal mapping sees it: subject and alternative names."""

    subject: str
    alternative_names: tuple[str, ...]


class Operation(enum.Enum):
    """What a principal wants to do to a resource (ACL operations)."""

    READ = "read"
    WRITE = "write"
    CREATE = "create"
    DELETE = "delete"
    ALTER = "alter"
    DESCRIBE = "describe"
    DESCRIBE_CONFIGS = "describe_configs"
    ALTER_CONFIGS = "alter_configs"


class ResourceType(enum.Enum):
    """Kinds of resources ACLs protect."""

    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"
    TRANSACTIONAL_ID = "transactional_id"
    #: An MQTT topic filter (``+``, ``#``; ``%c`` and ``%u`` stand for the client id and user name): read/write.
    MQTT_TOPIC = "mqtt_topic"


class Acks(enum.Enum):
    """When the broker answers a produce: how many replicas must hold the batch (Kafka's wire values)."""

    #: Once the batch is accepted (nothing waits; a native client gets no response at all).
    NONE = 0
    #: Once the batch is on the leader's disk (under the ``sync`` flush policy; at once under ``interval``).
    LEADER = 1
    #: Once every in-sync replica holds it; refused before anything is written while the ISR is too small.
    ALL = -1

    @classmethod
    def from_wire(cls, value: int) -> Acks:
        """The acks a client sent; ``InvalidRequiredAcksError`` for anything but 0, 1 and -1."""
        try:
            return cls(value)
        except ValueError:
            raise errors.InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {value}") from None


class AcknowledgeType(enum.IntEnum):
    """A share-group member's verdict on records leased to it (KIP-932's numbers, plus RENEW as in KIP-1222)."""

    ACCEPT = 1  # processed: done
    RELEASE = 2  # give back: available again at once (or at a not-before time)
    REJECT = 3  # unprocessable: dead-lettered
    RENEW = 4  # still working: the lease restarts from now


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResult:
    """Where a produced batch landed."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPosition:
    """One partition a fetch reads, from ``offset``, at most ``max_bytes``."""

    topic: str
    partition: int
    offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


class IsolationLevel(enum.IntEnum):
    """Which records a fetch may return (Kafka's numbers)."""

    #: Everything below the high watermark, aborted transactions included.
    READ_UNCOMMITTED = 0
    #: Below the last stable offset, with the aborted transactions listed so the reader drops them.
    READ_COMMITTED = 1


class AbortedTransaction(NamedTuple):
    """An aborted transaction a read_committed fetch lists: the producer's batches from ``first_offset`` up to
    its ABORT marker are to be dropped (``mqbroker.records.isolation``)."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest:
    """A long-poll read of whole record batches from several partitions.

    The broker answers once the partitions hold ``response_bytes_min`` bytes to return (or one
    has an error), at the latest after ``wait_ms_max`` (0: at once, with whatever is there); the
    answer holds at most ``response_bytes_max`` over all partitions (the first batch always
    fits), each partition at most its position's ``max_bytes``.
    """

    positions: tuple[FetchPosition, ...]
    wait_ms_max: int = 0
    response_bytes_min: int = 1
    response_bytes_max: int = limits.fetch_response_bytes_max
    #: READ_COMMITTED: stop at the last stable offset and list the aborted transactions (consumers only).
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResult:
    """What a fetch returns for one partition: whole record batches plus watermarks, or an error.

    To a follower whose log diverged, ``diverging_epoch``/``diverging_end_offset`` say where to cut.
    A read_committed fetch also says where the stable part ends (``last_stable_offset``) and lists
    the aborted transactions its batches overlap (None for a read_uncommitted fetch).
    """

    topic: str
    partition: int
    records: bytes = b""
    high_watermark: int = -1
    log_start_offset: int = -1
    error: Exception | None = None
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    last_stable_offset: int = -1
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetAndTimestamp:
    """An offset found by ListOffsets, with the timestamp that found it (-1 if none)."""

    offset: int
    timestamp_ms: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """A topic to create."""

    name: str
    partitions: int = -1  # -1: the broker default
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerEndpoint:
    """A broker of the cluster and where its listeners are (``port``: the native one)."""

    node_id: int
    host: str
    port: int
    #: Every listener's port by configuration key, e.g. ``{"kafka_port": 9092}`` (empty from older brokers).
    listeners: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionMetadata:
    """One partition's leader and replicas."""

    partition: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionReassignment:
    """A partition being moved: its replicas now, the target, the target replicas still catching up, the leaving ones."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    target_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicMetadata:
    """A topic's partitions, or the error that explains why it has none."""

    name: str
    partitions: tuple[PartitionMetadata, ...] = ()
    internal: bool = False
    error: Exception | None = None
    #: 16 bytes naming this incarnation of the topic (Kafka's topic id); zeros when unknown.
    topic_id: bytes = bytes(16)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterMetadata:
    """What a Metadata request returns."""

    cluster_id: str
    controller_id: int
    brokers: tuple[BrokerEndpoint, ...]
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProducerIdentity:
    """An idempotent producer's id and epoch."""

    producer_id: int
    producer_epoch: int
