"""The group coordinator: a pure state machine over every group whose offsets this broker leads.

Design choice — server-side, incremental assignment (KIP-848's idea inside the classic verbs):
members join, sync, heartbeat and leave as in Kafka's classic protocol, but the coordinator
computes the assignment itself when the last member has rejoined. There is no leader round
trip, so a slow or stuck leader cannot hold the whole group in CompletingRebalance, and sync
always answers at once. Every rebalance is cooperative (KIP-429) whatever the assignor: a member
keeps reading what it owns while the group rebalances; a partition that moves is first revoked
from its owner (the owner's new assignment lacks it) and handed to its new owner only by a
follow-up rebalance that starts once every member has collected its assignment, i.e. after the
owner revoked it and committed. Nothing stops the world; only moving partitions pause.

Static members (``group_instance_id``, KIP-345) that restart within their session timeout take
their old slot and assignment back under a new member id without a rebalance; the previous
incarnation is fenced (FENCED_INSTANCE_ID). Liveness has two separate clocks per member: the
session timeout (no heartbeat: presumed dead) and the rebalance timeout, i.e. the client's max
poll interval (heartbeats arrive but the application stopped polling: presumed stuck).

The caller (the broker adapter) duties: pass ``now_ms`` to every call; call ``tick(now_ms)`` at
``next_deadline_ms()``; after every call drain ``ready()``, answer the parked join requests it
names and append its records; append the records ``commit_offsets`` returns and call
``offsets_written`` once they are durable, then acknowledge the commit.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Protocol

from mqbroker.errors import (
    BrokerError,
    ErrorCode,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    GroupSubscribedToTopicError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    UnstableOffsetCommitError,
)
from mqbroker.groups.assignors import ASSIGNORS
from mqbroker.groups.group import Group, Member, new_member
from mqbroker.groups.messages import (
    NO_GENERATION,
    GroupConfig,
    GroupDescription,
    GroupListing,
    GroupState,
    JoinReply,
    JoinRequest,
    MemberEvicted,
    MemberRequest,
    OffsetCommitRequest,
    Ready,
    SyncResponse,
)
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import (
    CommittedOffset,
    OffsetsRecord,
    OffsetStore,
    group_key,
    group_metadata_record,
    offset_commit_record,
    tombstone,
)
from mqbroker.groups.restore import restore_group
from mqbroker.limits import group_id_length_max
from mqbroker.security.names import name_problem


class RandomBits(Protocol):
    """The part of a seeded ``random.Random`` the member-id generator needs."""

    def getrandbits(self, k: int, /) -> int:
        """Return an integer of ``k`` random bits."""


class MemberIdGenerator:
    """Member ids in Kafka's shape, ``<client id>-<random hex>``, from an injected seeded source."""

    def __init__(self, source: RandomBits) -> None:
        self.source = source

    def __call__(self, client_id: str) -> str:
        """A fresh member id for a member with ``client_id``."""
        return f"{client_id or 'member'}-{self.source.getrandbits(64):016x}"


class GroupCoordinator:
    """Joins, syncs, heartbeats, leaves, offsets and admin for many groups; time comes in as ``now_ms``."""

    def __init__(
        self,
        *,
        config: GroupConfig,
        partitions_per_topic: Callable[[str], int],
        new_member_id: Callable[[str], str],
        store: OffsetStore | None = None,
        now_ms: int,
    ) -> None:
        self.config = config
        self.partitions_per_topic = partitions_per_topic
        self.new_member_id = new_member_id
        self.store = store if store is not None else OffsetStore()
        self.groups: dict[str, Group] = {}
        self.next_expiry_check_ms = now_ms + config.offsets_retention_check_interval_ms
        self._replies: list[JoinReply] = []
        self._records: list[OffsetsRecord] = []
        self._evictions: list[MemberEvicted] = []
        for group_id in sorted(self.store.group_ids()):
            self._restore(group_id, now_ms)

    # -- outputs -----------------------------------------------------------------------------

    def ready(self) -> Ready:
        """Drain the join replies and records produced since the last call (see the module docstring)."""
        for group in self.groups.values():
            if group.persist_needed:
                group.persist_needed = False
                self._emit(group_metadata_record(group.group_id, group.metadata()))
        ready = Ready(replies=tuple(self._replies), records=tuple(self._records), evictions=tuple(self._evictions))
        self._replies, self._records, self._evictions = [], [], []
        return ready

    def _emit(self, record: OffsetsRecord) -> None:
        """Apply a coordinator-made record to the cache and queue it for the log."""
        self.store.apply(record)
        self._records.append(record)

    # -- membership --------------------------------------------------------------------------

    def join(self, request: JoinRequest, request_key: Hashable, now_ms: int) -> None:
        """Park a join until its rebalance completes (the reply comes out of ``ready()``); bad joins raise."""
        self._validate_join(request)
        group = self.groups.get(request.group_id)
        if group is None:
            group = Group(request.group_id, protocol_type=request.protocol_type, now_ms=now_ms)
            self.groups[request.group_id] = group
        if group.members and (
            request.protocol_type != group.protocol_type or not group.accepts_assignors(request.assignors)
        ):
            raise InconsistentGroupProtocolError(
                f"group {request.group_id!r} uses protocol {group.protocol_type!r} with assignors none of "
                f"which is in {list(request.assignors)}; use a compatible client configuration"
            )
        if request.group_instance_id is not None:
            self._join_static(group, request, request_key, now_ms)
        elif request.member_id == "":
            self._join_new(group, request, request_key, now_ms)
        else:
            self._rejoin(group, group.member_for(_identity(request)), request, request_key, now_ms)
        self._maybe_complete(group, now_ms)

    def _validate_join(self, request: JoinRequest) -> None:
        """Refuse a join whose settings the coordinator cannot honour."""
        _check_group_id(request.group_id)
        low, high = self.config.session_timeout_ms_min, self.config.session_timeout_ms_max
        if not low <= request.session_timeout_ms <= high:
            raise InvalidSessionTimeoutError(
                f"session timeout {request.session_timeout_ms} ms is outside the broker's range [{low}, {high}] ms"
            )
        if request.rebalance_timeout_ms <= 0:
            raise InvalidRequestError(f"rebalance timeout {request.rebalance_timeout_ms} ms must be positive")
        known = [name for name in request.assignors if name in ASSIGNORS]
        if not known:
            raise InconsistentGroupProtocolError(
                f"no known assignor in {list(request.assignors)}; this broker offers {sorted(ASSIGNORS)}"
            )

    def _join_new(self, group: Group, request: JoinRequest, request_key: Hashable, now_ms: int) -> None:
        """A member without an id enters: it gets one and the group rebalances."""
        if len(group.members) >= self.config.group_members_max:
            raise GroupMaxSizeReachedError(
                f"group {group.group_id!r} already has {len(group.members)} members, the most allowed"
            )
        member = new_member(request, self.new_member_id(request.client_id), now_ms)
        group.add_member(member)
        self._replies += group.park_join(member, request_key)
        if group.state is GroupState.PREPARING_REBALANCE:
            group.extend_join_window(now_ms, self.config.initial_rebalance_delay_ms)
        else:
            group.prepare_rebalance(now_ms, delay_ms=self.config.initial_rebalance_delay_ms)

    def _join_static(self, group: Group, request: JoinRequest, request_key: Hashable, now_ms: int) -> None:
        """A static member joins: a restart reclaims its slot, a known member rejoins, a zombie is fenced."""
        assert request.group_instance_id is not None
        member = group.by_instance.get(request.group_instance_id)
        if member is None:
            if request.member_id != "":
                raise UnknownMemberIdError(
                    f"static member {request.group_instance_id!r} is not in group {group.group_id!r}; "
                    "join with an empty member id"
                )
            self._join_new(group, request, request_key, now_ms)
        elif request.member_id == "":
            self._replies += group.replace_static(member, self.new_member_id(request.client_id))
            self._rejoin(group, member, request, request_key, now_ms)
        else:
            self._rejoin(group, group.member_for(_identity(request)), request, request_key, now_ms)

    def _rejoin(self, group: Group, member: Member, request: JoinRequest, request_key: Hashable, now_ms: int) -> None:
        """A known member joins again: same subscription in a settled group means no rebalance."""
        unchanged = member.topics == request.topics and member.assignors == request.assignors
        member.topics, member.assignors = request.topics, request.assignors
        member.client_id, member.client_host = request.client_id, request.client_host
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.last_heartbeat_ms = member.last_poll_ms = now_ms
        if unchanged and group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._replies.append(group.join_reply(member, request_key))
            return
        self._replies += group.park_join(member, request_key)
        if group.state is not GroupState.PREPARING_REBALANCE:
            group.prepare_rebalance(now_ms, delay_ms=0)

    def sync(self, request: MemberRequest, now_ms: int) -> SyncResponse:
        """Hand a member its assignment for the generation it joined."""
        group = self._group(request.group_id)
        member = group.member_for(request)
        group.check_generation(request)
        if group.state is GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group.group_id!r} is rebalancing; rejoin")
        member.last_heartbeat_ms = member.last_poll_ms = now_ms
        group.mark_synced(member, now_ms)
        return SyncResponse(generation_id=group.generation_id, assignment=member.assignment)

    def heartbeat(self, request: MemberRequest, *, polled: bool, now_ms: int) -> ErrorCode:
        """Keep a member alive; REBALANCE_IN_PROGRESS tells it to rejoin (it keeps reading meanwhile).

        ``polled`` says whether the application polled since the previous heartbeat; a member that
        heartbeats without polling for longer than its rebalance timeout is evicted as stuck.
        """
        group = self._group(request.group_id)
        member = group.member_for(request)
        group.check_generation(request)
        member.last_heartbeat_ms = now_ms
        if polled:
            member.last_poll_ms = now_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, request: MemberRequest, now_ms: int) -> None:
        """A member leaves; its partitions are rebalanced to the others at once."""
        group = self._group(request.group_id)
        member = group.member_for(request)
        self._replies += group.remove_member(
            member, UnknownMemberIdError(f"member {member.member_id!r} left the group"), now_ms
        )
        self._maybe_complete(group, now_ms)

    def topics_changed(self, topics: Iterable[str], now_ms: int) -> None:
        """Partitions were added to (or topics created/deleted among) ``topics``: rebalance their groups."""
        changed = set(topics)
        for group in self.groups.values():
            subscribed = any(member.topics & changed for member in group.members.values())
            if subscribed and group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                group.prepare_rebalance(now_ms, delay_ms=0)

    def _maybe_complete(self, group: Group, now_ms: int) -> None:
        """Finish a rebalance when every member has rejoined."""
        if group.state is GroupState.PREPARING_REBALANCE and group.ready_to_complete(now_ms):
            self._replies += group.complete_rebalance(now_ms, self.partitions_per_topic)

    # -- timers ------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Evict dead and stuck members, end overdue rebalances and expire old offsets."""
        for group in list(self.groups.values()):
            self._expire_members(group, now_ms)
            if group.state is GroupState.PREPARING_REBALANCE and now_ms >= group.rebalance_deadline_ms:
                for member in group.laggards():
                    self._evict(group, member, f"did not rejoin within {member.rebalance_timeout_ms} ms "
                                               "(rebalance timeout)", now_ms)
            self._maybe_complete(group, now_ms)
        if now_ms >= self.next_expiry_check_ms:
            self._expire_offsets(now_ms)
            self.next_expiry_check_ms = now_ms + self.config.offsets_retention_check_interval_ms

    def _expire_members(self, group: Group, now_ms: int) -> None:
        """Remove members past their session deadline, or (outside a rebalance) past their poll deadline."""
        for member in list(group.members.values()):
            if member.join_key is not None:
                continue  # a member waiting for the rebalance it joined is alive by definition
            if now_ms >= member.session_deadline_ms():
                self._evict(group, member, f"no heartbeat for {member.session_timeout_ms} ms (session timeout)",
                            now_ms)
            elif group.state is not GroupState.PREPARING_REBALANCE and now_ms >= member.poll_deadline_ms():
                self._evict(group, member, f"no poll for {member.rebalance_timeout_ms} ms (max poll interval)",
                            now_ms)

    def _evict(self, group: Group, member: Member, reason: str, now_ms: int) -> None:
        """Remove a member that did not leave by itself, and say why."""
        self._evictions.append(MemberEvicted(group_id=group.group_id, member_id=member.member_id,
                                             group_instance_id=member.group_instance_id, reason=reason))
        error = UnknownMemberIdError(f"member {member.member_id!r} was evicted from group {group.group_id!r}: "
                                     f"{reason}; rejoin")
        self._replies += group.remove_member(member, error, now_ms)

    def next_deadline_ms(self) -> int:
        """The earliest time ``tick`` has work to do."""
        deadlines = [self.next_expiry_check_ms]
        for group in self.groups.values():
            if group.state is GroupState.PREPARING_REBALANCE:
                deadlines.append(group.rebalance_deadline_ms)
                if group.join_window_ms is not None:
                    deadlines.append(group.join_window_ms)
            for member in group.members.values():
                if member.join_key is None:
                    deadlines.append(member.session_deadline_ms())
                    if group.state is not GroupState.PREPARING_REBALANCE:
                        deadlines.append(member.poll_deadline_ms())
        return min(deadlines)

    # -- offsets -----------------------------------------------------------------------------

    def commit_offsets(self, request: OffsetCommitRequest, now_ms: int) -> list[OffsetsRecord]:
        """Check a commit and return the records to append; a zombie's commit raises (fencing)."""
        _check_group_id(request.group_id)
        group = self.groups.get(request.group_id)
        standalone = request.member_id == "" and request.generation_id == NO_GENERATION
        if standalone:
            if group is not None and group.members:
                raise UnknownMemberIdError(
                    f"group {request.group_id!r} has active members; commit as a member with its generation"
                )
        else:
            group = self._group(request.group_id)
            member = group.member_for(_identity(request))
            group.check_generation(_identity(request))
            member.last_poll_ms = now_ms
        limit = self.config.offset_metadata_bytes_max
        records = []
        for commit in request.offsets:
            if len(commit.metadata.encode("utf-8")) > limit:
                raise OffsetMetadataTooLargeError(
                    f"metadata for {commit.topic_partition} is longer than {limit} bytes"
                )
            committed = CommittedOffset(offset=commit.offset, metadata=commit.metadata,
                                        commit_timestamp_ms=now_ms, leader_epoch=commit.leader_epoch)
            records.append(offset_commit_record(request.group_id, commit.topic_partition, committed))
        return records

    def offsets_written(self, records: Iterable[OffsetsRecord]) -> None:
        """The commit's records are durable: make them visible to ``fetch_offsets``."""
        for record in records:
            self.store.apply(record)

    def txn_offsets_written(self, producer_id: int, records: Iterable[OffsetsRecord]) -> None:
        """A transaction's offset records are durable: pending until the transaction ends."""
        self.store.add_pending(producer_id, records)

    def transaction_ended(self, producer_id: int, committed: bool) -> None:
        """The transaction's marker is durable here: its offsets become visible, or go."""
        self.store.end_transaction(producer_id, committed)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None = None, require_stable: bool = False
    ) -> dict[TopicPartition, CommittedOffset | None]:
        """Committed offsets of a group: of ``partitions``, or all it has when None.

        ``require_stable``: UNSTABLE_OFFSET_COMMIT while a transaction's offsets for them are pending.
        """
        _check_group_id(group_id)
        if require_stable:
            pending = self.store.pending_partitions(group_id)
            if pending and (partitions is None or pending & set(partitions)):
                raise UnstableOffsetCommitError(
                    f"group {group_id!r} has offsets of an unfinished transaction for "
                    f"{', '.join(sorted(map(str, pending)))}; retry once it commits or aborts"
                )
        if partitions is None:
            return dict(self.store.offsets(group_id))
        return {tp: self.store.committed(group_id, tp) for tp in partitions}

    def _expire_offsets(self, now_ms: int) -> None:
        """Tombstone offsets past retention, then drop empty groups left with nothing."""
        empty_since = {g.group_id: g.state_timestamp_ms for g in self.groups.values() if g.state is GroupState.EMPTY}
        active = {g.group_id for g in self.groups.values() if g.state is not GroupState.EMPTY}
        self._records += self.store.expire(
            now_ms=now_ms,
            retention_ms=self.config.offsets_retention_ms,
            empty_since_ms=empty_since,
            active_group_ids=active,
        )
        for group_id in empty_since:
            if not self.store.offsets(group_id):
                self._records += self._drop(group_id, now_ms)

    # -- admin -------------------------------------------------------------------------------

    def list_groups(self) -> list[GroupListing]:
        """Every group known here, including those that only have offsets (listed as Empty)."""
        listings = {
            group_id: GroupListing(group_id=group_id, state=group.state, protocol_type=group.protocol_type)
            for group_id, group in self.groups.items()
        }
        for group_id in self.store.group_ids() - set(listings):
            listings[group_id] = GroupListing(group_id=group_id, state=GroupState.EMPTY, protocol_type="")
        return [listings[group_id] for group_id in sorted(listings)]

    def describe_group(self, group_id: str) -> GroupDescription:
        """A group's state and members; an unknown group is described as Dead."""
        _check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is not None:
            return group.describe()
        state = GroupState.EMPTY if group_id in self.store.group_ids() else GroupState.DEAD
        return GroupDescription(group_id=group_id, state=state, protocol_type="", assignor="",
                                generation_id=0, members=())

    def delete_group(self, group_id: str, now_ms: int) -> list[OffsetsRecord]:
        """Delete a group without members and its offsets; returns the tombstones (also in ``ready()``)."""
        _check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is not None and group.members:
            raise NonEmptyGroupError(
                f"group {group_id!r} has {len(group.members)} active members; stop them before deleting it"
            )
        if group is None and group_id not in self.store.group_ids():
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        records = self._drop(group_id, now_ms)
        self._records += records
        return records

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]
                       ) -> dict[TopicPartition, BrokerError | None]:
        """Delete committed offsets of topics no member subscribes to (Kafka's OffsetDelete); each partition's outcome.

        The tombstones are queued in ``ready()``. A partition of a subscribed topic keeps its offset and gets
        ``GroupSubscribedToTopicError``; a partition without a committed offset is simply done.
        """
        _check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is None and group_id not in self.store.group_ids():
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        subscribed = {topic for member in group.members.values() for topic in member.topics} if group else set()
        outcomes: dict[TopicPartition, BrokerError | None] = {}
        for tp in partitions:
            outcomes[tp] = GroupSubscribedToTopicError(
                f"a member of group {group_id!r} subscribes to {tp.topic!r}; its offsets can be deleted once no "
                f"member does") if tp.topic in subscribed else None
        self._records += self.store.delete_offsets(group_id, [tp for tp, error in outcomes.items() if error is None])
        return outcomes

    def _drop(self, group_id: str, now_ms: int) -> list[OffsetsRecord]:
        """Forget an empty group and its offsets; the group's metadata key gets a tombstone."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            group.persist_needed = False
            group.transition(GroupState.DEAD, now_ms)
        records = self.store.delete_group(group_id)
        if group is not None and not any(r.key == group_key(group_id) for r in records):
            records.append(tombstone(group_key(group_id)))
        return records

    # -- recovery ----------------------------------------------------------------------------

    def _restore(self, group_id: str, now_ms: int) -> None:
        """Rebuild a group from its persisted metadata; members get a full session timeout to come back."""
        metadata = self.store.group_metadata(group_id)
        if metadata is not None:
            self.groups[group_id] = restore_group(group_id, metadata, now_ms, self.partitions_per_topic)

    def _group(self, group_id: str) -> Group:
        """The group a member request names; a group this coordinator does not know has no such member."""
        _check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is None:
            raise UnknownMemberIdError(f"group {group_id!r} has no members here; join it first")
        return group


def _identity(request: JoinRequest | OffsetCommitRequest) -> MemberRequest:
    """The member identity and generation carried by a join or commit."""
    generation_id = request.generation_id if isinstance(request, OffsetCommitRequest) else NO_GENERATION
    return MemberRequest(group_id=request.group_id, member_id=request.member_id,
                         group_instance_id=request.group_instance_id, generation_id=generation_id)


def _check_group_id(group_id: str) -> None:
    """Refuse a group id that is empty, too long or not printable."""
    problem = name_problem(group_id, group_id_length_max)
    if problem is not None:
        raise InvalidGroupIdError(f"group id {group_id[:64]!r} {problem}; use printable characters")
