"""One consumer group's membership state machine (driven by the coordinator; no I/O, no clock)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from mqbroker.errors import (
    BrokerError,
    FencedInstanceIdError,
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from mqbroker.groups.assignors import ASSIGNORS, MemberSubscription, incremental_step
from mqbroker.groups.messages import (
    TRANSITIONS,
    GroupDescription,
    GroupState,
    JoinReply,
    JoinRequest,
    JoinResponse,
    MemberDescription,
    MemberRequest,
)
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import GroupMetadata, MemberMetadata


@dataclass(slots=True, kw_only=True)
class Member:
    """A member's identity, subscription, assignment and liveness timestamps."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: frozenset[str]
    assignors: tuple[str, ...]
    assignment: frozenset[TopicPartition] = frozenset()
    #: The assignment the member last collected by syncing: what it may still be reading.
    synced_assignment: frozenset[TopicPartition] = frozenset()
    last_heartbeat_ms: int
    last_poll_ms: int
    #: The parked join request's key while the member waits for a rebalance to complete.
    join_key: Hashable | None = None
    synced: bool = False

    def session_deadline_ms(self) -> int:
        """When the member is presumed dead without a heartbeat."""
        return self.last_heartbeat_ms + self.session_timeout_ms

    def poll_deadline_ms(self) -> int:
        """When the member is presumed stuck without a poll."""
        return self.last_poll_ms + self.rebalance_timeout_ms


class Group:
    """Members, generation and state of one group; every public method returns the join replies it completed."""

    def __init__(self, group_id: str, *, protocol_type: str, now_ms: int) -> None:
        self.group_id = group_id
        self.protocol_type = protocol_type
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_ms
        self.generation_id = 0
        self.assignor = ""
        self.members: dict[str, Member] = {}
        self.by_instance: dict[str, Member] = {}
        #: Some partitions were withheld from their new owner: rebalance again once everyone synced.
        self.follow_up_needed = False
        self.rebalance_deadline_ms = 0
        #: A group formed from empty completes no earlier than this (gives other members time to join).
        self.join_window_ms: int | None = None
        self.persist_needed = False

    # -- state -------------------------------------------------------------------------------

    def transition(self, state: GroupState, now_ms: int) -> None:
        """Move to ``state``; an illegal move is a coordinator bug."""
        assert state in TRANSITIONS[self.state], f"invalid transition {self.state.name} -> {state.name}"
        self.state = state
        self.state_timestamp_ms = now_ms

    def member_for(self, request: MemberRequest) -> Member:
        """The member a request speaks for; a zombie or stranger gets a typed error."""
        if request.group_instance_id is not None:
            member = self.by_instance.get(request.group_instance_id)
            if member is None:
                raise UnknownMemberIdError(
                    f"static member {request.group_instance_id!r} is not in group {self.group_id!r}; rejoin"
                )
            if member.member_id != request.member_id:
                raise FencedInstanceIdError(
                    f"instance {request.group_instance_id!r} of group {self.group_id!r} is now member "
                    f"{member.member_id!r}; {request.member_id!r} was replaced by a newer incarnation"
                )
            return member
        member = self.members.get(request.member_id)
        if member is None:
            raise UnknownMemberIdError(
                f"member {request.member_id!r} is not in group {self.group_id!r} (it left or was evicted); rejoin"
            )
        return member

    def check_generation(self, request: MemberRequest) -> None:
        """Refuse a request made for another generation than the group's."""
        if request.generation_id < self.generation_id:
            raise IllegalGenerationError(
                f"generation {request.generation_id} of group {self.group_id!r} is over (now "
                f"{self.generation_id}); rejoin before committing or heartbeating"
            )
        if request.generation_id > self.generation_id:
            raise IllegalGenerationError(
                f"group {self.group_id!r} has no generation {request.generation_id} (it is at "
                f"{self.generation_id}); rejoin before committing or heartbeating"
            )

    # -- membership --------------------------------------------------------------------------

    def add_member(self, member: Member) -> None:
        """Take a new member in."""
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.by_instance[member.group_instance_id] = member

    def replace_static(self, member: Member, new_member_id: str) -> list[JoinReply]:
        """A restarted static member takes over its slot (and assignment) under a new member id."""
        replies = self._cancel_join(member, FencedInstanceIdError(
            f"instance {member.group_instance_id!r} rejoined as a new incarnation"
        ))
        del self.members[member.member_id]
        member.member_id = new_member_id
        self.members[new_member_id] = member
        # A coordinator taking over must know the new incarnation, or it would fence it.
        self.persist_needed = True
        return replies

    def remove_member(self, member: Member, error: BrokerError, now_ms: int) -> list[JoinReply]:
        """Drop a member (left, dead or stuck) and rebalance what it read."""
        replies = self._cancel_join(member, error)
        del self.members[member.member_id]
        if member.group_instance_id is not None:
            del self.by_instance[member.group_instance_id]
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(now_ms, delay_ms=0)
        return replies

    def _cancel_join(self, member: Member, error: BrokerError) -> list[JoinReply]:
        """Answer a member's parked join with ``error``."""
        if member.join_key is None:
            return []
        reply = JoinReply(request_key=member.join_key, error=error)
        member.join_key = None
        return [reply]

    def park_join(self, member: Member, request_key: Hashable) -> list[JoinReply]:
        """Hold a join until the rebalance completes; a second join from the same member supersedes the first."""
        replies = self._cancel_join(member, RebalanceInProgressError("superseded by a newer join request"))
        member.join_key = request_key
        return replies

    def join_reply(self, member: Member, request_key: Hashable) -> JoinReply:
        """The reply telling a member the current generation."""
        response = JoinResponse(member_id=member.member_id, generation_id=self.generation_id, assignor=self.assignor)
        return JoinReply(request_key=request_key, response=response)

    # -- rebalancing -------------------------------------------------------------------------

    def prepare_rebalance(self, now_ms: int, *, delay_ms: int) -> None:
        """Ask every member to rejoin; they keep reading what they own meanwhile."""
        if self.state is GroupState.EMPTY and delay_ms > 0:
            self.join_window_ms = now_ms + delay_ms
        self.transition(GroupState.PREPARING_REBALANCE, now_ms)
        self.follow_up_needed = False
        timeouts = [member.rebalance_timeout_ms for member in self.members.values()]
        self.rebalance_deadline_ms = now_ms + max(timeouts, default=0)

    def extend_join_window(self, now_ms: int, delay_ms: int) -> None:
        """A new member arrived while the group forms: wait a little longer, never past the rebalance deadline."""
        if self.join_window_ms is not None:
            self.join_window_ms = min(now_ms + delay_ms, self.rebalance_deadline_ms)

    def ready_to_complete(self, now_ms: int) -> bool:
        """Every member has rejoined and the initial join window is over."""
        window_open = self.join_window_ms is not None and now_ms < self.join_window_ms
        return not window_open and all(member.join_key is not None for member in self.members.values())

    def laggards(self) -> list[Member]:
        """Members that have not rejoined the rebalance in progress."""
        return [member for member in self.members.values() if member.join_key is None]

    def complete_rebalance(self, now_ms: int, partitions_per_topic: Callable[[str], int]) -> list[JoinReply]:
        """Compute the next generation's assignment and answer every parked join."""
        self.join_window_ms = None
        self.generation_id += 1
        self.persist_needed = True
        if not self.members:
            self.assignor = ""
            self.transition(GroupState.EMPTY, now_ms)
            return []
        self.assignor = self._common_assignor()
        owned = {member_id: member.synced_assignment for member_id, member in self.members.items()}
        target = ASSIGNORS[self.assignor].assign(self._subscriptions(), _counts(self.members, partitions_per_topic))
        assignment, withheld = incremental_step(target, owned)
        self.follow_up_needed = bool(withheld)
        self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        replies = []
        for member in self.members.values():
            member.assignment = assignment[member.member_id]
            member.synced = False
            # Waiting in a join is neither silence nor a stalled poll loop: both clocks restart here.
            member.last_heartbeat_ms = member.last_poll_ms = now_ms
            assert member.join_key is not None, "a rebalance completes only when every member has rejoined"
            replies.append(self.join_reply(member, member.join_key))
            member.join_key = None
        return replies

    def mark_synced(self, member: Member, now_ms: int) -> None:
        """A member collected its assignment; once all have, the group is stable (or starts the follow-up)."""
        member.synced = True
        member.synced_assignment = member.assignment
        if self.state is GroupState.COMPLETING_REBALANCE and all(m.synced for m in self.members.values()):
            self.transition(GroupState.STABLE, now_ms)
            if self.follow_up_needed:
                # Owners now know what to revoke; their rejoin hands those partitions on.
                self.prepare_rebalance(now_ms, delay_ms=0)

    def covers_all_partitions(self, partitions_per_topic: Callable[[str], int]) -> bool:
        """Whether every subscribed partition has an owner (false between the phases of a cooperative move)."""
        assigned = sum(len(member.assignment) for member in self.members.values())
        return assigned == sum(_counts(self.members, partitions_per_topic).values())

    def accepts_assignors(self, assignors: tuple[str, ...]) -> bool:
        """Whether a joining member shares at least one assignor with every current member."""
        common = set(assignors)
        for member in self.members.values():
            common &= set(member.assignors)
        return bool(common)

    def _common_assignor(self) -> str:
        """The first assignor, in the longest-standing member's order of preference, that every member accepts."""
        members = list(self.members.values())
        common = set(members[0].assignors).intersection(*(m.assignors for m in members[1:]))
        return next(name for name in members[0].assignors if name in common)

    def _subscriptions(self) -> dict[str, MemberSubscription]:
        """What the assignor needs to know of each member."""
        return {
            member_id: MemberSubscription(
                topics=member.topics,
                owned=member.synced_assignment,
                sort_key=member.group_instance_id or member_id,
            )
            for member_id, member in self.members.items()
        }

    # -- views -------------------------------------------------------------------------------

    def describe(self) -> GroupDescription:
        """The group as ``groups describe`` shows it."""
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                assignment=m.assignment,
                topics=m.topics,
            )
            for m in self.members.values()
        )
        return GroupDescription(
            group_id=self.group_id,
            state=self.state,
            protocol_type=self.protocol_type,
            assignor=self.assignor,
            generation_id=self.generation_id,
            members=members,
        )

    def metadata(self) -> GroupMetadata:
        """The membership to persist after a rebalance."""
        return GroupMetadata(
            protocol_type=self.protocol_type,
            generation_id=self.generation_id,
            assignor=self.assignor,
            state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    session_timeout_ms=m.session_timeout_ms,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    topics=tuple(sorted(m.topics)),
                    assignment=tuple(sorted(m.assignment)),
                )
                for m in self.members.values()
            ),
        )


def new_member(request: JoinRequest, member_id: str, now_ms: int) -> Member:
    """A member built from its first join request."""
    return Member(
        member_id=member_id,
        group_instance_id=request.group_instance_id,
        client_id=request.client_id,
        client_host=request.client_host,
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        topics=request.topics,
        assignors=request.assignors,
        last_heartbeat_ms=now_ms,
        last_poll_ms=now_ms,
    )


def _counts(members: Mapping[str, Member], partitions_per_topic: Callable[[str], int]) -> dict[str, int]:
    """Partition counts of every subscribed topic (0 for a topic that does not exist)."""
    topics = {topic for member in members.values() for topic in member.topics}
    return {topic: partitions_per_topic(topic) for topic in topics}
