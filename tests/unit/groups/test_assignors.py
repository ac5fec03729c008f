"""Assignor properties: exactly-once coverage, balance, and minimal movement for cooperative-sticky."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from zope.interface.verify import verifyObject

from mqbroker.groups.assignors import (
    ASSIGNORS,
    DEFAULT_ASSIGNOR,
    IAssignor,
    MemberSubscription,
    incremental_step,
)
from mqbroker.groups.model import TopicPartition

TOPICS = ["alpha", "beta", "gamma"]

partition_counts = st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 12), min_size=1)
member_ids = st.lists(st.from_regex(r"m[0-9]{1,3}", fullmatch=True), min_size=1, max_size=8, unique=True)


def everything(counts: dict[str, int]) -> set[TopicPartition]:
    """Every partition of the given topics."""
    return {TopicPartition(topic, p) for topic, count in counts.items() for p in range(count)}


def test_every_assignor_provides_the_interface() -> None:
    for assignor in ASSIGNORS.values():
        assert verifyObject(IAssignor, assignor)
    assert DEFAULT_ASSIGNOR == "cooperative-sticky"


@given(counts=partition_counts, ids=member_ids, data=st.data())
def test_every_subscribed_partition_goes_to_exactly_one_subscriber(counts, ids, data) -> None:
    members = {
        member_id: MemberSubscription(
            topics=frozenset(data.draw(st.sets(st.sampled_from(sorted(counts)), min_size=1)))
        )
        for member_id in ids
    }
    for assignor in ASSIGNORS.values():
        assignment = assignor.assign(members, counts)
        assert set(assignment) == set(members)
        handed_out = [p for parts in assignment.values() for p in parts]
        assert len(handed_out) == len(set(handed_out))
        subscribed = {t for m in members.values() for t in m.topics}
        assert set(handed_out) == {p for p in everything(counts) if p.topic in subscribed}
        for member_id, parts in assignment.items():
            assert all(p.topic in members[member_id].topics for p in parts)


@given(counts=partition_counts, ids=member_ids)
def test_identical_subscriptions_are_balanced_within_one(counts, ids) -> None:
    members = {m: MemberSubscription(topics=frozenset(counts)) for m in ids}
    for name in ("round-robin", "cooperative-sticky"):
        sizes = [len(parts) for parts in ASSIGNORS[name].assign(members, counts).values()]
        assert max(sizes) - min(sizes) <= 1, name
    by_range = ASSIGNORS["range"].assign(members, counts)
    for topic in counts:
        sizes = [sum(1 for p in parts if p.topic == topic) for parts in by_range.values()]
        assert max(sizes) - min(sizes) <= 1


@given(counts=partition_counts, ids=member_ids, data=st.data())
def test_cooperative_sticky_revokes_the_minimum(counts, ids, data) -> None:
    partitions = sorted(everything(counts))
    # Some partitions owned by a member that stays, some by one that left, some by nobody.
    owners = data.draw(st.lists(st.sampled_from([*ids, "departed", None]), min_size=len(partitions),
                                max_size=len(partitions)))
    owned = {m: frozenset(p for p, o in zip(partitions, owners) if o == m) for m in ids}
    members = {m: MemberSubscription(topics=frozenset(counts), owned=owned[m]) for m in ids}
    result = ASSIGNORS["cooperative-sticky"].assign(members, counts)
    revoked = sum(len(owned[m] - result[m]) for m in ids)
    share, extra = divmod(len(partitions), len(ids))
    by_size = sorted((len(owned[m]) for m in ids), reverse=True)
    caps = [share + 1] * extra + [share] * (len(ids) - extra)
    assert revoked == sum(max(0, size - cap) for size, cap in zip(by_size, caps))


@given(counts=partition_counts, ids=member_ids, data=st.data())
def test_cooperative_sticky_is_stable_once_balanced(counts, ids, data) -> None:
    members = {m: MemberSubscription(topics=frozenset(counts)) for m in ids}
    first = ASSIGNORS["cooperative-sticky"].assign(members, counts)
    again = {m: MemberSubscription(topics=frozenset(counts), owned=first[m]) for m in ids}
    assert ASSIGNORS["cooperative-sticky"].assign(again, counts) == first


@settings(max_examples=100)
@given(counts=partition_counts, ids=member_ids, data=st.data())
def test_incremental_step_never_hands_out_a_partition_someone_else_still_owns(counts, ids, data) -> None:
    partitions = sorted(everything(counts))
    owners = data.draw(st.lists(st.sampled_from([*ids, "departed", None]), min_size=len(partitions),
                                max_size=len(partitions)))
    owned = {m: frozenset(p for p, o in zip(partitions, owners) if o == m) for m in [*ids, "departed"]}
    members = {m: MemberSubscription(topics=frozenset(counts), owned=owned[m]) for m in ids}
    target = ASSIGNORS["cooperative-sticky"].assign(members, counts)
    first, withheld = incremental_step(target, owned)
    for member_id, parts in first.items():
        for partition in parts:
            owner = next((m for m in ids if partition in owned[m]), None)
            assert owner in (None, member_id)
    assert withheld == {p for m in ids for p in target[m] - first[m]}
    # Once the owners gave up what moves, the second step hands out the rest of the target.
    second, withheld_again = incremental_step(target, first)
    assert second == target and not withheld_again


def test_range_keeps_co_partitioned_topics_together() -> None:
    members = {m: MemberSubscription(topics=frozenset({"alpha", "beta"})) for m in ("a", "b")}
    result = ASSIGNORS["range"].assign(members, {"alpha": 3, "beta": 3})
    assert result["a"] == {TopicPartition("alpha", 0), TopicPartition("alpha", 1),
                           TopicPartition("beta", 0), TopicPartition("beta", 1)}


def test_static_sort_key_keeps_a_members_rank_across_restarts() -> None:
    counts = {"alpha": 4}
    before = {"zz-old": MemberSubscription(topics=frozenset(counts), sort_key="instance-1"),
              "b": MemberSubscription(topics=frozenset(counts), sort_key="instance-2")}
    after = {"aa-new": MemberSubscription(topics=frozenset(counts), sort_key="instance-1"),
             "b": MemberSubscription(topics=frozenset(counts), sort_key="instance-2")}
    assert ASSIGNORS["range"].assign(before, counts)["zz-old"] == ASSIGNORS["range"].assign(after, counts)["aa-new"]
