"""Majority arithmetic: commit index and vote outcomes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqbroker.raft.quorum import VoteResult, committed_index, has_quorum, majority, vote_result


def test_majority_of_odd_and_even_voter_sets() -> None:
    assert [majority(count) for count in range(1, 7)] == [1, 2, 2, 3, 3, 4]


def test_committed_index_is_the_highest_index_a_majority_holds() -> None:
    assert committed_index({1, 2, 3}, {1: 5, 2: 3, 3: 1}) == 3
    assert committed_index({1, 2, 3, 4}, {1: 5, 2: 3, 3: 1, 4: 9}) == 3


def test_voter_without_progress_counts_as_holding_nothing() -> None:
    assert committed_index({1, 2, 3}, {1: 7}) == 0


def test_non_voters_do_not_count_toward_the_commit_index() -> None:
    assert committed_index({1, 2, 3}, {1: 9, 4: 9, 5: 9, 2: 0, 3: 0}) == 0


@given(st.dictionaries(st.integers(1, 9), st.integers(0, 100), min_size=1))
def test_a_majority_holds_the_committed_index_and_no_majority_holds_more(match: dict[int, int]) -> None:
    voters = set(match)
    index = committed_index(voters, match)
    assert sum(1 for value in match.values() if value >= index) >= majority(len(voters))
    assert sum(1 for value in match.values() if value > index) < majority(len(voters))


def test_vote_is_won_with_a_majority_of_grants() -> None:
    assert vote_result({1, 2, 3}, {1: True, 2: True}) is VoteResult.WON


def test_vote_is_lost_once_a_majority_refused() -> None:
    assert vote_result({1, 2, 3}, {1: True, 2: False, 3: False}) is VoteResult.LOST


def test_vote_is_pending_while_either_outcome_is_possible() -> None:
    assert vote_result({1, 2, 3, 4}, {1: True, 2: False}) is VoteResult.PENDING


def test_votes_from_non_voters_are_ignored() -> None:
    assert vote_result({1, 2, 3}, {1: True, 7: True, 8: True}) is VoteResult.PENDING


def test_has_quorum_counts_only_voters() -> None:
    assert has_quorum({1, 2, 3}, {1, 2})
    assert not has_quorum({1, 2, 3}, {1, 4, 5})
