"""A consumer's group membership, without I/O: join, sync, heartbeat, leave and commit requests.

The broker computes assignments (see ``mqbroker.groups.coordinator``), so a member only joins,
collects its assignment and heartbeats. Every rebalance is cooperative: a sync hands the member
its new assignment, and the ``AssignmentChange`` says what it gained and what it must revoke.
The driver must apply a change (call ``on_revoked`` and commit the revoked partitions) before it
sends the next join, and keeps fetching the partitions it retains meanwhile. The driver reports
each answer or error; ``failed`` decides whether the member rejoins, loses its partitions (it was
evicted or its generation is over) or is fenced for good.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mqbroker.client.consumer import ConsumerCore
from mqbroker.errors import BrokerError, ErrorCode, FencedInstanceIdError, error_for_code
from mqbroker.protocols.native import consumer_protocol
from mqbroker.protocols.native.messages import (
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeavingMember,
    MetadataResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
    SyncGroupRequest,
    SyncGroupResponse,
)

TopicPartition = tuple[str, int]
NO_GENERATION = -1
#: Longest a driver waits between steps when no heartbeat is due (it is woken early by changes).
IDLE_WAIT_MS = 100
STEP_WAIT_MAX_MS = 500
#: How often a pattern subscription looks for new matching topics.
PATTERN_REFRESH_MS = 5_000
#: Answers meaning "ask which broker coordinates the group again and retry there" (its offsets
#: partition moved, has no leader yet, or is still being loaded).
COORDINATOR_MOVED = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
})
#: How long a commit or committed-offset lookup keeps retrying while the coordinator moves.
COORDINATOR_RETRY_MS = 30_000


class Step(enum.Enum):
    """What a membership driver does next."""

    JOIN = "join"
    HEARTBEAT = "heartbeat"
    WAIT = "wait"


class MemberState(enum.Enum):
    """Where the member is in its membership cycle."""

    UNJOINED = "unjoined"
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
    #: A newer incarnation of this static member took over: terminal.
    FENCED = "fenced"


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSettings:
    """A member's group settings (Kafka's consumer property names, in milliseconds)."""

    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int = 10_000
    #: Also the rebalance timeout: how long the member has to rejoin.
    max_poll_interval_ms: int = 300_000
    heartbeat_interval_ms: int = 3_000
    assignors: tuple[str, ...] = ("cooperative-sticky",)

    def validated(self) -> GroupSettings:
        """Return self, or raise ValueError naming the bad setting."""
        if not self.group_id:
            raise ValueError("group_id must not be empty")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be positive and below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.max_poll_interval_ms <= 0:
            raise ValueError(f"max_poll_interval_ms must be positive, got {self.max_poll_interval_ms}")
        return self


@dataclass(frozen=True, slots=True, kw_only=True)
class AssignmentChange:
    """What a sync or a failure changed: partitions gained, revoked (commit them) and lost (do not)."""

    assigned: frozenset[TopicPartition] = frozenset()
    revoked: frozenset[TopicPartition] = frozenset()
    lost: frozenset[TopicPartition] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.assigned or self.revoked or self.lost)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupMetadata:
    """Who a consumer is in its group right now: a transactional producer commits offsets in its name, so the
    coordinator refuses them once the consumer was fenced by a rebalance (KIP-447)."""

    group_id: str
    generation_id: int = NO_GENERATION
    member_id: str = ""
    group_instance_id: str | None = None


class GroupMember:
    """One consumer's membership state machine; requests out, answers in."""

    def __init__(self, settings: GroupSettings, topics: Iterable[str]) -> None:
        self.settings = settings.validated()
        self.topics = frozenset(topics)
        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation_id = NO_GENERATION
        self.owned: frozenset[TopicPartition] = frozenset()
        self.last_heartbeat_ms: int | None = None
        #: Changes handed out by ``take_changes`` or waiting for it, not yet applied.
        self._pending: list[AssignmentChange] = []
        self._unapplied = 0
        self._polled = True

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The member's id and generation, for ``send_offsets_to_transaction``."""
        return ConsumerGroupMetadata(group_id=self.settings.group_id, generation_id=self.generation_id,
                                     member_id=self.member_id, group_instance_id=self.settings.group_instance_id)

    # -- the driver's loop -------------------------------------------------------------------

    def next_step(self, now_ms: int) -> tuple[Step, int]:
        """Join (only once every change is applied: cooperative), heartbeat when due, or wait so many ms."""
        if self.needs_join and self._unapplied == 0:
            return Step.JOIN, 0
        due_ms = self.heartbeat_due_ms()
        if due_ms is not None and now_ms >= due_ms:
            return Step.HEARTBEAT, 0
        wait_ms = IDLE_WAIT_MS if due_ms is None else due_ms - now_ms
        return Step.WAIT, min(wait_ms, STEP_WAIT_MAX_MS)

    def take_changes(self) -> list[AssignmentChange]:
        """The application polls: the changes to apply now (report them with ``changes_applied``)."""
        self._polled = True
        changes, self._pending = self._pending, []
        return changes

    def changes_applied(self, count: int) -> None:
        """The application applied ``count`` changes (revocations committed): the member may rejoin."""
        self._unapplied -= count
        assert self._unapplied >= 0, self._unapplied

    def _push(self, change: AssignmentChange) -> AssignmentChange:
        if change:
            self._pending.append(change)
            self._unapplied += 1
        return change

    # -- joining -----------------------------------------------------------------------------

    @property
    def needs_join(self) -> bool:
        """The member must (re)join before it can heartbeat."""
        return self.state is MemberState.UNJOINED

    def join_request(self) -> JoinGroupRequest:
        """The join to send now (the member keeps reading what it owns while it waits)."""
        assert self.state is MemberState.UNJOINED, self.state
        self.state = MemberState.JOINING
        subscription = consumer_protocol.ConsumerSubscription(
            topics=tuple(sorted(self.topics)),
            owned_partitions=_by_topic(self.owned),
            generation_id=self.generation_id,
        )
        metadata = consumer_protocol.encode_subscription(subscription)
        return JoinGroupRequest(
            group_id=self.settings.group_id,
            session_timeout_ms=self.settings.session_timeout_ms,
            rebalance_timeout_ms=self.settings.max_poll_interval_ms,
            member_id=self.member_id,
            group_instance_id=self.settings.group_instance_id,
            protocols=tuple(JoinGroupProtocol(name=name, metadata=metadata) for name in self.settings.assignors),
        )

    def join_completed(self, response: JoinGroupResponse) -> SyncGroupRequest:
        """Take the new generation; return the sync that collects the assignment."""
        assert self.state is MemberState.JOINING, self.state
        self.member_id = response.member_id
        self.generation_id = response.generation_id
        self.state = MemberState.SYNCING
        return SyncGroupRequest(
            group_id=self.settings.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.settings.group_instance_id,
        )

    def sync_completed(self, response: SyncGroupResponse, now_ms: int) -> AssignmentChange:
        """Take the assignment; the change says what to start reading and what to revoke."""
        assert self.state is MemberState.SYNCING, self.state
        decoded = consumer_protocol.decode_assignment(response.assignment)
        assignment = frozenset(
            (topic.topic, partition) for topic in decoded.assigned_partitions for partition in topic.partitions
        )
        change = AssignmentChange(assigned=assignment - self.owned, revoked=self.owned - assignment)
        self.owned = assignment
        self.state = MemberState.STABLE
        self.last_heartbeat_ms = now_ms
        return self._push(change)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Change the subscription (a pattern matched new topics): rejoin when it differs."""
        topics = frozenset(topics)
        if topics != self.topics:
            self.topics = topics
            if self.state is MemberState.STABLE:
                self.state = MemberState.UNJOINED

    # -- liveness ----------------------------------------------------------------------------

    def heartbeat_due_ms(self) -> int | None:
        """When the next heartbeat is due: while stable, and while a member waits to rejoin (keeps it alive)."""
        if not self._may_heartbeat() or self.last_heartbeat_ms is None:
            return None
        return self.last_heartbeat_ms + self.settings.heartbeat_interval_ms

    def _may_heartbeat(self) -> bool:
        if self.state is MemberState.STABLE:
            return True
        return self.state is MemberState.UNJOINED and bool(self.member_id) and self.generation_id != NO_GENERATION

    def heartbeat_request(self, now_ms: int) -> HeartbeatRequest:
        """The heartbeat to send now; it tells whether the application polled since the previous one."""
        assert self._may_heartbeat(), self.state
        self.last_heartbeat_ms = now_ms
        polled, self._polled = self._polled, False
        return HeartbeatRequest(
            group_id=self.settings.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.settings.group_instance_id,
            polled=polled,
        )

    def failed(self, error: BrokerError) -> AssignmentChange:
        """A join, sync or heartbeat failed: rejoin, and say which partitions were lost, if any.

        A rebalance in progress or a retriable error keeps the partitions (rejoin and carry on);
        an eviction or an ended generation loses them (another member may own them now); a
        fenced static instance raises ``FencedInstanceIdError`` and stays fenced.
        """
        if self.state is MemberState.FENCED:
            raise FencedInstanceIdError("this consumer was replaced by a newer instance with the same group_instance_id")
        self.state = MemberState.UNJOINED
        code = error.code
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self.state = MemberState.FENCED
            self.owned = frozenset()
            raise FencedInstanceIdError(
                f"consumer instance {self.settings.group_instance_id!r} was fenced by a newer incarnation: {error}"
            )
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            if code == ErrorCode.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation_id = NO_GENERATION
            lost, self.owned = self.owned, frozenset()
            return self._push(AssignmentChange(lost=lost))
        if code != ErrorCode.REBALANCE_IN_PROGRESS and not error.retriable:
            raise error
        return AssignmentChange()

    # -- leaving and committing --------------------------------------------------------------

    def leave_request(self) -> LeaveGroupRequest | None:
        """The leave to send on close; static members do not leave (a restart reclaims their slot)."""
        if self.settings.group_instance_id is not None or not self.member_id or self.state is MemberState.FENCED:
            return None
        return LeaveGroupRequest(group_id=self.settings.group_id, members=(LeavingMember(member_id=self.member_id),))

    def commit_request(self, offsets: Mapping[TopicPartition, int], metadata: str = "") -> OffsetCommitRequest:
        """Commit the next offsets to read, as this member in its generation."""
        by_topic: dict[str, list[OffsetCommitPartition]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                OffsetCommitPartition(partition_index=partition, committed_offset=offset, committed_metadata=metadata)
            )
        return OffsetCommitRequest(
            group_id=self.settings.group_id,
            generation_id=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.settings.group_instance_id,
            topics=tuple(OffsetCommitTopic(name=name, partitions=tuple(parts)) for name, parts in by_topic.items()),
        )


def coordinator_moved(error: BaseException) -> bool:
    """The group's coordinator moved or is not ready: find it again and retry."""
    return isinstance(error, BrokerError) and error.code in COORDINATOR_MOVED


def retry_commit_request(error: BaseException) -> bool:
    """A commit or offset fetch to retry: the coordinator moved or is not ready, or the offsets wait for a
    transaction to end (UNSTABLE_OFFSET_COMMIT)."""
    return coordinator_moved(error) or (isinstance(error, BrokerError)
                                        and error.code == ErrorCode.UNSTABLE_OFFSET_COMMIT)


def raise_for_commit(response: object) -> None:
    """Raise the typed error of the first partition whose commit was refused (``response``: an OffsetCommit answer)."""
    assert isinstance(response, OffsetCommitResponse), response
    for topic in response.topics:
        for partition in topic.partitions:
            if partition.error_code != ErrorCode.NONE:
                raise error_for_code(partition.error_code, partition.error_message or "offset commit refused")


def _by_topic(partitions: Iterable[TopicPartition]) -> tuple[consumer_protocol.TopicPartitions, ...]:
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        grouped.setdefault(topic, []).append(partition)
    return tuple(consumer_protocol.TopicPartitions(topic=t, partitions=tuple(p)) for t, p in grouped.items())


# -- the consumer's side: committing, applying changes, following a pattern -----------------


class AutoCommit:
    """When the next auto-commit is due; a None interval means manual commits only."""

    def __init__(self, interval_ms: int | None, now_ms: int) -> None:
        self.interval_ms = interval_ms
        self._next_ms = now_ms + (interval_ms or 0)

    @property
    def enabled(self) -> bool:
        """Positions are committed automatically (on the interval, on revocation and on close)."""
        return self.interval_ms is not None

    def due(self, now_ms: int) -> bool:
        """True (and the next one is scheduled) when an auto-commit is due now."""
        if self.interval_ms is None or now_ms < self._next_ms:
            return False
        self._next_ms = now_ms + self.interval_ms
        return True


def known_positions(core: ConsumerCore, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Positions of ``partitions`` that are known (a partition still being reset has nothing to commit)."""
    found = {}
    for partition in partitions:
        position = core.position(partition)
        if position is not None:
            found[partition] = position
    return found


def revoked_positions(core: ConsumerCore, change: AssignmentChange) -> dict[TopicPartition, int]:
    """What to commit before giving up the revoked partitions (lost ones are not ours to commit)."""
    return known_positions(core, change.revoked & core.assignment())


def apply_change(
    core: ConsumerCore, change: AssignmentChange, committed: Mapping[TopicPartition, int | None]
) -> None:
    """Drop revoked and lost partitions, read gained ones from their committed offsets (or the reset policy)."""
    core.assign((core.assignment() - change.revoked - change.lost) | change.assigned)
    for partition, offset in committed.items():
        if offset is not None and partition in change.assigned:
            core.seek(partition, offset)


def offset_fetch_request(group_id: str, partitions: Iterable[TopicPartition]) -> OffsetFetchRequest:
    """The request reading a group's committed offsets of ``partitions``."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return OffsetFetchRequest(
        group_id=group_id,
        require_stable=True,  # never start from an offset a transaction is still replacing (KIP-447)
        topics=tuple(OffsetFetchTopic(name=t, partition_indexes=tuple(p)) for t, p in by_topic.items()),
    )


def committed_offsets(
    response: OffsetFetchResponse, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """Committed offsets of ``partitions`` from an OffsetFetch answer (None where nothing is committed)."""
    found: dict[TopicPartition, int | None] = {partition: None for partition in partitions}
    for topic in response.topics:
        for result in topic.partitions:
            if result.committed_offset >= 0:
                found[topic.name, result.partition_index] = result.committed_offset
    return found


def matching_topics(pattern: re.Pattern[str], metadata: MetadataResponse) -> list[str]:
    """Topics a pattern subscription follows: every matching one but the internal topics."""
    return [t.name for t in metadata.topics if not t.name.startswith("__") and pattern.fullmatch(t.name)]
