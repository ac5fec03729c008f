"""What one Raft node reports of itself: role, term, log bounds, membership and, on a leader, its followers."""

from __future__ import annotations

from dataclasses import dataclass

from mqbroker.raft.messages import Configuration, Role


@dataclass(frozen=True, slots=True, kw_only=True)
class Status:
    """A snapshot of one node's Raft state, for operators and tests."""

    node_id: int
    role: Role
    term: int
    vote: int
    leader_id: int
    commit_index: int
    applied_index: int
    first_index: int
    last_index: int
    configuration: Configuration
    #: The leader's view of each member's replication (empty on other nodes).
    progress: dict[int, str]
