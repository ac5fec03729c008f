"""Requests into the group coordinator, its replies, its configuration and its outputs."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass

from mqbroker.errors import BrokerError
from mqbroker.groups.assignors import DEFAULT_ASSIGNOR
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import OffsetsRecord

#: A generation id that means "not a member": offsets committed outside any group use it.
NO_GENERATION = -1
CONSUMER_PROTOCOL = "consumer"


class GroupState(enum.Enum):
    """Where a group is in its membership cycle (Kafka's classic states)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


#: Every legal transition; anything else is a coordinator bug and trips an assertion.
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.PREPARING_REBALANCE, GroupState.DEAD}
    ),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset(),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupConfig:
    """Coordinator settings (Kafka's names and defaults where Kafka has one)."""

    session_timeout_ms_min: int = 6_000
    session_timeout_ms_max: int = 1_800_000
    #: A group formed from empty waits this long for more members before the first assignment.
    initial_rebalance_delay_ms: int = 3_000
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000
    offsets_retention_check_interval_ms: int = 10 * 60 * 1000
    offset_metadata_bytes_max: int = 4096
    group_members_max: int = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinRequest:
    """A member (re)joins; an empty ``member_id`` asks the coordinator for one."""

    group_id: str
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    session_timeout_ms: int
    #: How long the member may go without polling (its max poll interval); also how long it has to rejoin.
    rebalance_timeout_ms: int
    protocol_type: str = CONSUMER_PROTOCOL
    topics: frozenset[str]
    #: Assignor names in order of preference; the group uses the first one every member accepts.
    assignors: tuple[str, ...] = (DEFAULT_ASSIGNOR,)


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinResponse:
    """The generation a member joined and the id it must use from now on."""

    member_id: str
    generation_id: int
    assignor: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinReply:
    """A join completed (response) or was refused after it was parked (error), for the request ``request_key``."""

    request_key: Hashable
    response: JoinResponse | None = None
    error: BrokerError | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberRequest:
    """Identifies a member and the generation it believes in (sync, heartbeat, leave)."""

    group_id: str
    member_id: str
    group_instance_id: str | None = None
    generation_id: int = NO_GENERATION


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncResponse:
    """The partitions a member reads in this generation; it revokes whatever it owned besides these."""

    generation_id: int
    assignment: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionCommit:
    """One partition's position in an offset commit."""

    topic_partition: TopicPartition
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequest:
    """Commit positions; members give their id and generation, standalone consumers leave the defaults."""

    group_id: str
    member_id: str = ""
    group_instance_id: str | None = None
    generation_id: int = NO_GENERATION
    offsets: tuple[PartitionCommit, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberDescription:
    """One member as ``groups describe`` shows it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: frozenset[TopicPartition]
    #: The topics the member subscribed to (empty where unknown: a description forwarded by another broker).
    topics: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupDescription:
    """A group's state, generation and members."""

    group_id: str
    state: GroupState
    protocol_type: str
    assignor: str
    generation_id: int
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupListing:
    """One line of ``groups list``."""

    group_id: str
    state: GroupState
    protocol_type: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberEvicted:
    """The coordinator removed a member that did not leave by itself, and why (for the operations log)."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    """What the coordinator needs done since the last call to ``ready()``.

    The caller's duties: append ``records`` to ``__consumer_offsets`` (they are already in the
    coordinator's cache; a lost append is repaired by the next rebalance or expiry check), and
    answer each parked join request named by a reply's ``request_key``; log ``evictions``.
    """

    replies: tuple[JoinReply, ...] = ()
    records: tuple[OffsetsRecord, ...] = ()
    evictions: tuple[MemberEvicted, ...] = ()
