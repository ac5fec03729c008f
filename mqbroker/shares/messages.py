"""The share-group calls of ``IBroker``: their requests and replies, protocol-independent.

A member heartbeats to join its group, fetches records (each acquired for a lease), and
acknowledges them by offset ranges, in a fetch (piggybacked, as KIP-932 does) or on their own.
Every partition answer and every acknowledgement carries its own error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from mqbroker.errors import BrokerError
from mqbroker.groups.model import TopicPartition
from mqbroker.model import AcknowledgeType
from mqbroker.shares.partition_values import AcquiredRange, PartitionStats

#: ``lease_ms`` value meaning "the group's lease".
GROUP_LEASE = -1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareHeartbeatRequest:
    """Join (``member_epoch`` 0, empty ``member_id``), stay, or leave (epoch -1) a share group."""

    group_id: str
    member_id: str = ""
    member_epoch: int = 0
    client_id: str = ""
    client_host: str = ""
    topics: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareHeartbeatResponse:
    """The member's id and epoch, when to heartbeat next, and the partitions it may fetch from."""

    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: tuple[TopicPartition, ...]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Acknowledgement:
    """A member's verdict on offsets ``first_offset..last_offset`` of one partition it holds leased."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    kind: AcknowledgeType
    #: Why (RELEASE and REJECT): kept as the record's last error, shown in dead-letter headers.
    error: str = ""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AcknowledgeResult:
    """The outcome of one acknowledgement: ``error`` None once it is durable."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    error: BrokerError | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareFetchRequest:
    """Acquire records from a group's partitions (long-poll), acknowledging earlier ones first."""

    group_id: str
    member_id: str
    #: Partitions to fetch from (empty: every partition of the member's assignment).
    partitions: tuple[TopicPartition, ...] = ()
    records_max: int = 500
    bytes_max: int = 16 * 1024 * 1024
    wait_ms_max: int = 500
    #: The lease of the records acquired (``GROUP_LEASE``: the group's ``lease.ms``).
    lease_ms: int = GROUP_LEASE
    acknowledgements: tuple[Acknowledgement, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SharePartitionRecords:
    """What one partition gave a fetch: whole batches holding the acquired records, and which those are."""

    topic: str
    partition: int
    records: bytes
    acquired: tuple[AcquiredRange, ...]
    error: BrokerError | None = None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareFetchResponse:
    """Records per partition (only partitions with records or an error) and the acknowledgements' outcomes."""

    partitions: tuple[SharePartitionRecords, ...]
    acknowledgements: tuple[AcknowledgeResult, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareAcknowledgeRequest:
    """Acknowledge records without fetching (``lease_ms`` is the new lease of RENEW acknowledgements)."""

    group_id: str
    member_id: str
    acknowledgements: tuple[Acknowledgement, ...]
    lease_ms: int = GROUP_LEASE


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareMemberDescription:
    """One member as ``describe`` shows it."""

    member_id: str
    client_id: str
    client_host: str
    topics: tuple[str, ...]
    acquired: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SharePartitionDescription:
    """One share partition: its region, its counts and its lag."""

    topic: str
    partition: int
    stats: PartitionStats
    #: Records waiting in the delay index (not yet due).
    scheduled: int
    #: Records not yet done: the log end minus the region's start, minus what is done inside it.
    lag: int


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupDescription:
    """A share group: its definition, members, partitions and dead letters."""

    group_id: str
    topics: tuple[str, ...]
    configs: Mapping[str, str]
    members: tuple[ShareMemberDescription, ...]
    partitions: tuple[SharePartitionDescription, ...]
    #: Records this host copied to the dead-letter topic (or dropped without one) since it took the group over.
    dead_lettered: int
    #: Records on the group's dead-letter topic (its log end offsets summed; -1 when it has none).
    dead_letter_depth: int
    #: How long the group has been without members (0: it has some; -1: not known, a host from before this
    #: was answered). Counted by its host from its last member's departure, a join or leave, or its hosting.
    unused_ms: int = -1


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ShareGroupListing:
    """One share group in a listing."""

    group_id: str
    topics: tuple[str, ...]
    members: int
    push_endpoint: str


@dataclasses.dataclass(slots=True)
class ShareMetrics:
    """What ``/metrics`` shows of the share groups hosted by a broker."""

    #: (group, topic, partition) -> (lag, records leased now).
    partitions: dict[tuple[str, str, int], tuple[int, int]] = dataclasses.field(default_factory=dict)
    #: group -> records dead-lettered since this broker took the group over.
    dead_lettered: dict[str, int] = dataclasses.field(default_factory=dict)
