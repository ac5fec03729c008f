"""Partition assignors: who in a group reads which partition (run by the coordinator, server side).

An assignor maps the members' subscriptions and the current partition counts to a *target*
assignment: every partition of a subscribed topic goes to exactly one member subscribed to that
topic. Moving a partition is the coordinator's job (``incremental_step``): it hands a member only
the partitions nobody else still owns, so a rebalance revokes exactly the partitions whose owner
changes and everything else keeps being consumed.

* ``range``: per topic, contiguous ranges over the members subscribed to it (Kafka's default of old;
  co-partitioned topics land on the same member).
* ``round-robin``: all partitions dealt out in turn; balanced across topics.
* ``cooperative-sticky`` (the default): keeps every partition where it is unless the balance needs
  it elsewhere, so a membership change moves the minimum number of partitions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from zope.interface import Attribute, Interface, implementer

from mqbroker.groups.model import Assignment, TopicPartition

DEFAULT_ASSIGNOR = "cooperative-sticky"


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberSubscription:
    """What an assignor knows of one member: its topics and the partitions it owns now."""

    topics: frozenset[str]
    owned: frozenset[TopicPartition] = frozenset()
    #: Orders members deterministically; the instance id of a static member keeps its rank across restarts.
    sort_key: str = ""


class IAssignor(Interface):
    """Computes a target assignment from subscriptions and partition counts."""

    name = Attribute("The name members ask for in their join request.")

    def assign(
        members: Mapping[str, MemberSubscription], partitions_per_topic: Mapping[str, int]
    ) -> Assignment:
        """Return member id -> partitions; every subscribed partition goes to exactly one subscriber."""


def _ranked(members: Mapping[str, MemberSubscription]) -> list[str]:
    """Member ids in a stable order (sort key, then member id)."""
    return sorted(members, key=lambda member_id: (members[member_id].sort_key, member_id))


def _subscribed_partitions(
    members: Mapping[str, MemberSubscription], partitions_per_topic: Mapping[str, int]
) -> list[TopicPartition]:
    """Every existing partition of every topic some member subscribes to, sorted."""
    topics = sorted({topic for subscription in members.values() for topic in subscription.topics})
    return [
        TopicPartition(topic, partition)
        for topic in topics
        for partition in range(partitions_per_topic.get(topic, 0))
    ]


@implementer(IAssignor)
class RangeAssignor:
    """Per topic, the first members get one more partition than the rest, in contiguous ranges."""

    name = "range"

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions_per_topic: Mapping[str, int]
    ) -> Assignment:
        """Split each topic's partitions into contiguous ranges over its subscribers."""
        result: dict[str, set[TopicPartition]] = {member_id: set() for member_id in members}
        ranked = _ranked(members)
        topics = sorted({topic for subscription in members.values() for topic in subscription.topics})
        for topic in topics:
            subscribers = [member_id for member_id in ranked if topic in members[member_id].topics]
            count = partitions_per_topic.get(topic, 0)
            share, extra = divmod(count, len(subscribers))
            start = 0
            for index, member_id in enumerate(subscribers):
                length = share + (1 if index < extra else 0)
                result[member_id].update(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return {member_id: frozenset(partitions) for member_id, partitions in result.items()}


@implementer(IAssignor)
class RoundRobinAssignor:
    """Deals all partitions out one at a time, skipping members not subscribed to the topic."""

    name = "round-robin"

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions_per_topic: Mapping[str, int]
    ) -> Assignment:
        """Deal sorted partitions to the ranked members in turn."""
        result: dict[str, set[TopicPartition]] = {member_id: set() for member_id in members}
        ranked = _ranked(members)
        turn = 0
        for partition in _subscribed_partitions(members, partitions_per_topic):
            # Some member subscribes to this topic, so the scan ends within one lap.
            while partition.topic not in members[ranked[turn % len(ranked)]].topics:
                turn += 1
            result[ranked[turn % len(ranked)]].add(partition)
            turn += 1
        return {member_id: frozenset(partitions) for member_id, partitions in result.items()}


@implementer(IAssignor)
class CooperativeStickyAssignor:
    """Keeps owned partitions in place; moves only what balance requires (counts within one)."""

    name = "cooperative-sticky"

    def assign(
        self, members: Mapping[str, MemberSubscription], partitions_per_topic: Mapping[str, int]
    ) -> Assignment:
        """Start from valid ownership, place orphans on the least loaded, then level the counts."""
        ranked = _ranked(members)
        rank = {member_id: index for index, member_id in enumerate(ranked)}
        owned_before = _valid_ownership(members, partitions_per_topic, ranked)
        result = {member_id: set(owned_before[member_id]) for member_id in ranked}
        taken = {partition for partitions in result.values() for partition in partitions}
        for partition in _subscribed_partitions(members, partitions_per_topic):
            if partition not in taken:
                eligible = [m for m in ranked if partition.topic in members[m].topics]
                receiver = min(eligible, key=lambda m: (len(result[m]), rank[m]))
                result[receiver].add(partition)
        _level(members, result, owned_before, rank)
        return {member_id: frozenset(partitions) for member_id, partitions in result.items()}


def _valid_ownership(
    members: Mapping[str, MemberSubscription], partitions_per_topic: Mapping[str, int], ranked: list[str]
) -> dict[str, set[TopicPartition]]:
    """Owned partitions that still exist and are still subscribed; a doubly claimed one stays with the first."""
    claimed: set[TopicPartition] = set()
    valid: dict[str, set[TopicPartition]] = {}
    for member_id in ranked:
        subscription = members[member_id]
        keep = {
            partition
            for partition in subscription.owned
            if partition.topic in subscription.topics
            and partition.partition < partitions_per_topic.get(partition.topic, 0)
            and partition not in claimed
        }
        claimed |= keep
        valid[member_id] = keep
    return valid


def _level(
    members: Mapping[str, MemberSubscription],
    result: dict[str, set[TopicPartition]],
    owned_before: Mapping[str, set[TopicPartition]],
    rank: Mapping[str, int],
) -> None:
    """Move partitions from the most to the least loaded eligible member until no move narrows the gap.

    A donor gives away a partition it was only just handed before one it owned, so levelling
    revokes an owned partition only when the counts leave no other way.
    """
    while True:
        move = _best_move(members, result, owned_before, rank)
        if move is None:
            return
        donor, receiver, partition = move
        result[donor].remove(partition)
        result[receiver].add(partition)


def _best_move(
    members: Mapping[str, MemberSubscription],
    result: Mapping[str, set[TopicPartition]],
    owned_before: Mapping[str, set[TopicPartition]],
    rank: Mapping[str, int],
) -> tuple[str, str, TopicPartition] | None:
    """The next levelling move, or None when every donor's partitions have no receiver two or more below it."""
    donors = sorted(result, key=lambda m: (-len(result[m]), result[m] <= owned_before[m], rank[m]))
    receivers = sorted(result, key=lambda m: (len(result[m]), rank[m]))
    for donor in donors:
        # Fresh partitions first (moving them revokes nothing), each group in a stable order.
        candidates = sorted(result[donor], key=lambda p: (p in owned_before[donor], p))
        for partition in candidates:
            for receiver in receivers:
                if len(result[receiver]) > len(result[donor]) - 2:
                    break
                if partition.topic in members[receiver].topics:
                    return donor, receiver, partition
    return None


ASSIGNORS: dict[str, IAssignor] = {
    assignor.name: assignor
    for assignor in (CooperativeStickyAssignor(), RangeAssignor(), RoundRobinAssignor())
}


def incremental_step(
    target: Mapping[str, frozenset[TopicPartition]], owned: Mapping[str, Iterable[TopicPartition]]
) -> tuple[Assignment, frozenset[TopicPartition]]:
    """First phase of a cooperative move: withhold a target partition while another member still owns it.

    Returns each member's assignment for this generation and the withheld partitions; when any are
    withheld, a follow-up rebalance (after the owners have revoked them) hands them to their targets.
    """
    owner_of = {partition: member_id for member_id, parts in owned.items() for partition in parts}
    assignment: Assignment = {}
    withheld: set[TopicPartition] = set()
    for member_id, partitions in target.items():
        moving = {p for p in partitions if owner_of.get(p, member_id) != member_id and owner_of[p] in target}
        withheld |= moving
        assignment[member_id] = partitions - moving
    return assignment, frozenset(withheld)
