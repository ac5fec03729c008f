"""A group rebuilt from its persisted metadata when a broker becomes its coordinator, pure."""

from __future__ import annotations

from collections.abc import Callable

from mqbroker.groups.group import Group, Member
from mqbroker.groups.messages import GroupState
from mqbroker.groups.offsets import GroupMetadata


def restore_group(group_id: str, metadata: GroupMetadata, now_ms: int,
                  partitions_per_topic: Callable[[str], int]) -> Group:
    """The group as ``metadata`` stored it; members get a full session timeout (from ``now_ms``) to come back."""
    group = Group(group_id, protocol_type=metadata.protocol_type, now_ms=metadata.state_timestamp_ms)
    group.generation_id = metadata.generation_id
    group.assignor = metadata.assignor
    for persisted in metadata.members:
        group.add_member(Member(
            member_id=persisted.member_id,
            group_instance_id=persisted.group_instance_id,
            client_id=persisted.client_id,
            client_host=persisted.client_host,
            session_timeout_ms=persisted.session_timeout_ms,
            rebalance_timeout_ms=persisted.rebalance_timeout_ms,
            topics=frozenset(persisted.topics),
            assignors=(metadata.assignor,),
            assignment=frozenset(persisted.assignment),
            synced_assignment=frozenset(persisted.assignment),
            last_heartbeat_ms=now_ms,
            last_poll_ms=now_ms,
            synced=True,
        ))
    if group.members:
        # Set directly, not through the transition table: the group resumes where it was persisted.
        group.state = GroupState.STABLE
        group.state_timestamp_ms = now_ms
        if not group.covers_all_partitions(partitions_per_topic):
            # The old coordinator died between the two phases of a cooperative move: finish it.
            group.prepare_rebalance(now_ms, delay_ms=0)
    return group
