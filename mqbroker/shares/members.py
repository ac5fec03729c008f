"""Who belongs to a share group: members join with a heartbeat, stay while they heartbeat, leave or expire. Pure.

Every member of a share group may fetch from every partition of the group's topics (the group's
own plus those its members subscribe to): records, not partitions, are what members share. A
member silent for the group's session timeout is removed; the caller releases its leases.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator

from mqbroker import errors, limits

#: The member epoch a member sends to join, and the one that says it leaves (KIP-848's conventions).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1


@dataclasses.dataclass(slots=True, kw_only=True)
class ShareMember:
    """One member of a share group."""

    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    topics: frozenset[str]
    last_heartbeat_ms: int


class ShareMembers:
    """The members of one share group."""

    def __init__(self, *, new_member_id: Callable[[str], str]) -> None:
        self._new_member_id = new_member_id
        self._members: dict[str, ShareMember] = {}

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[ShareMember]:
        return iter(list(self._members.values()))

    def get(self, member_id: str) -> ShareMember | None:
        """The member with this id, if it belongs."""
        return self._members.get(member_id)

    def require(self, group_id: str, member_id: str) -> ShareMember:
        """The member with this id; ``UnknownMemberIdError`` if it does not belong (it must heartbeat to join)."""
        member = self._members.get(member_id)
        if member is None:
            raise errors.UnknownMemberIdError(
                f"member {member_id!r} is not in share group {group_id!r} (it left, was evicted, or the group moved "
                "to another broker); heartbeat with member epoch 0 to join again"
            )
        return member

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, client_id: str, client_host: str,
                  topics: Iterable[str], now_ms: int) -> ShareMember | None:
        """Join (epoch 0), stay (the member's epoch) or leave (epoch -1, answered None)."""
        if member_epoch == LEAVE_EPOCH:
            self._members.pop(member_id, None)
            return None
        if member_epoch == JOIN_EPOCH and member_id not in self._members:
            if len(self._members) >= limits.share_group_members_max:
                raise errors.GroupMaxSizeReachedError(
                    f"share group {group_id!r} has {limits.share_group_members_max} members, its maximum"
                )
            member_id = member_id or self._new_member_id(client_id)
            member = ShareMember(member_id=member_id, member_epoch=1, client_id=client_id, client_host=client_host,
                                 topics=frozenset(topics), last_heartbeat_ms=now_ms)
            self._members[member_id] = member
            return member
        member = self.require(group_id, member_id)
        if member_epoch not in (JOIN_EPOCH, member.member_epoch):
            raise errors.UnknownMemberIdError(
                f"member {member_id!r} of share group {group_id!r} sent epoch {member_epoch}, its epoch is "
                f"{member.member_epoch}; heartbeat with member epoch 0 to join again"
            )
        member.last_heartbeat_ms = now_ms
        member.topics = frozenset(topics)
        return member

    def leave(self, member_id: str) -> bool:
        """Remove a member; whether it was one."""
        return self._members.pop(member_id, None) is not None

    def expire(self, now_ms: int, session_timeout_ms: int) -> list[str]:
        """Remove the members silent for ``session_timeout_ms``; their ids."""
        expired = [member.member_id for member in self._members.values()
                   if now_ms - member.last_heartbeat_ms >= session_timeout_ms]
        for member_id in expired:
            del self._members[member_id]
        return expired

    def next_deadline_ms(self, session_timeout_ms: int) -> int | None:
        """When the next member would expire without a heartbeat."""
        if not self._members:
            return None
        return min(member.last_heartbeat_ms for member in self._members.values()) + session_timeout_ms

    def topics(self) -> frozenset[str]:
        """Every topic some member subscribes to."""
        return frozenset(topic for member in self._members.values() for topic in member.topics)
