"""Election rules, one per behaviour: whom a node votes for, and what it makes of other terms' messages."""

from __future__ import annotations

import pytest

from mqbroker.raft.election import NewerTerm, grants_vote, heed_newer_term, leader_of, reply_to_stale, vote_requests
from mqbroker.raft.log import RaftLog
from mqbroker.raft.memory_storage import MemoryRaftStorage
from mqbroker.raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendEntriesResponse,
    Entry,
    EntryKind,
    Heartbeat,
    VoteRequest,
    VoteResponse,
)


def _log(*terms: int) -> RaftLog:
    """A log whose entries have these terms."""
    storage = MemoryRaftStorage()
    entries = [Entry(term=term, index=index, kind=EntryKind.NORMAL, data=b"") for index, term in enumerate(terms, 1)]
    storage.save(None, entries, None)
    return RaftLog(storage)


def _request(*, term: int = 3, last_index: int = 2, last_term: int = 2, pre_vote: bool = False) -> VoteRequest:
    return VoteRequest(
        term=term, from_id=2, to_id=1, last_log_index=last_index, last_log_term=last_term, pre_vote=pre_vote
    )


def test_a_node_votes_once_per_term_but_again_for_the_same_candidate() -> None:
    log = _log(1, 2)
    assert grants_vote(_request(), term=3, vote=NO_NODE, leader_id=NO_NODE, log=log)
    assert grants_vote(_request(), term=3, vote=2, leader_id=NO_NODE, log=log)
    assert not grants_vote(_request(), term=3, vote=3, leader_id=NO_NODE, log=log)


def test_a_node_following_a_leader_grants_no_vote_but_a_pre_vote_for_a_later_term() -> None:
    log = _log(1, 2)
    assert not grants_vote(_request(term=3), term=3, vote=NO_NODE, leader_id=4, log=log)
    assert grants_vote(_request(term=4, pre_vote=True), term=3, vote=NO_NODE, leader_id=4, log=log)


@pytest.mark.parametrize(("last_index", "last_term", "granted"), [(2, 2, True), (5, 2, True), (1, 2, False), (9, 1, False)])
def test_votes_go_only_to_logs_at_least_as_up_to_date(last_index: int, last_term: int, granted: bool) -> None:
    request = _request(last_index=last_index, last_term=last_term)
    assert grants_vote(request, term=3, vote=NO_NODE, leader_id=NO_NODE, log=_log(1, 2)) is granted


def test_a_vote_request_inside_a_lease_is_ignored_and_a_pre_vote_keeps_the_term() -> None:
    assert heed_newer_term(_request(), in_lease=True) is NewerTerm.IGNORE
    assert heed_newer_term(_request(pre_vote=True), in_lease=True) is NewerTerm.IGNORE
    assert heed_newer_term(_request(pre_vote=True), in_lease=False) is NewerTerm.KEEP_TERM
    assert heed_newer_term(_request(), in_lease=False) is NewerTerm.FOLLOW


def test_a_granted_pre_vote_keeps_the_term_and_anything_else_newer_is_followed() -> None:
    granted = VoteResponse(term=5, from_id=2, to_id=1, granted=True, pre_vote=True)
    refused = VoteResponse(term=5, from_id=2, to_id=1, granted=False, pre_vote=True)
    heartbeat = Heartbeat(term=5, from_id=2, to_id=1, commit_index=0, context=b"")
    assert heed_newer_term(granted, in_lease=True) is NewerTerm.KEEP_TERM
    assert heed_newer_term(refused, in_lease=True) is NewerTerm.FOLLOW
    assert heed_newer_term(heartbeat, in_lease=True) is NewerTerm.FOLLOW
    assert leader_of(heartbeat) == 2 and leader_of(refused) == NO_NODE


def test_a_stale_leader_is_told_the_new_term_and_a_stale_pre_vote_is_refused() -> None:
    append = AppendEntries(term=2, from_id=3, to_id=1, previous_index=0, previous_term=0, entries=(), commit_index=0)
    assert reply_to_stale(1, 4, append, check_quorum=True, pre_vote=False) == AppendEntriesResponse(
        term=4, from_id=1, to_id=3, index=0
    )
    assert reply_to_stale(1, 4, append, check_quorum=False, pre_vote=False) is None
    refusal = reply_to_stale(1, 4, _request(term=2, pre_vote=True), check_quorum=False, pre_vote=True)
    assert isinstance(refusal, VoteResponse) and not refusal.granted and refusal.term == 4
    assert reply_to_stale(1, 4, _request(term=2), check_quorum=True, pre_vote=True) is None


def test_a_campaign_asks_every_other_voter_with_its_last_entry() -> None:
    requests = vote_requests(1, {1, 2, 3}, 7, _log(1, 2, 2), pre_vote=True)
    assert [request.to_id for request in requests] == [2, 3]
    assert {(request.term, request.last_log_index, request.last_log_term, request.pre_vote) for request in requests} == {
        (7, 3, 2, True)
    }
