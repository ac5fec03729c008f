"""Majority arithmetic for one voter set: the committed index and the outcome of a vote."""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping


class VoteResult(enum.Enum):
    """Where an election stands."""

    PENDING = "pending"
    WON = "won"
    LOST = "lost"


def majority(voter_count: int) -> int:
    """How many voters make a quorum."""
    assert voter_count > 0, "an empty voter set has no quorum"
    return voter_count // 2 + 1


def committed_index(voters: Collection[int], match_index: Mapping[int, int]) -> int:
    """The highest index that a majority of ``voters`` have (a voter with no entry counts 0)."""
    matched = sorted((match_index.get(voter, 0) for voter in voters), reverse=True)
    return matched[majority(len(matched)) - 1]


def vote_result(voters: Collection[int], votes: Mapping[int, bool]) -> VoteResult:
    """Won once a majority granted, lost once a majority can no longer be reached."""
    granted = sum(1 for voter in voters if votes.get(voter) is True)
    refused = sum(1 for voter in voters if votes.get(voter) is False)
    needed = majority(len(voters))
    if granted >= needed:
        return VoteResult.WON
    if len(voters) - refused < needed:
        return VoteResult.LOST
    return VoteResult.PENDING


def has_quorum(voters: Collection[int], members: Collection[int]) -> bool:
    """Whether ``members`` include a majority of ``voters``."""
    return sum(1 for voter in voters if voter in members) >= majority(len(voters))
