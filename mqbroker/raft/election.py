# -*- test-case-name: tests.unit.raft.test_election -*-
"""Elections: the requests a campaign sends, whom a node votes for, and how it treats other terms' messages.

Beyond the paper: pre-vote (a campaign first asks whether it could win, without raising its
term, so a node cut off by a partition cannot inflate terms) and check-quorum leases (a node
that heard from a leader within an election timeout ignores vote requests from a newer term,
so a stray node cannot depose a healthy leader). ``RaftCore`` applies these decisions.
"""

from __future__ import annotations

import enum
from collections.abc import Collection

from mqbroker.raft.log import RaftLog
from mqbroker.raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    InstallSnapshot,
    Message,
    VoteRequest,
    VoteResponse,
)


class NewerTerm(enum.Enum):
    """What a message from a newer term makes a node do."""

    #: A vote request inside a leader's lease: drop it.
    IGNORE = "ignore"
    #: A pre-vote request, or a granted pre-vote: the term is only prospective, keep ours.
    KEEP_TERM = "keep-term"
    #: Adopt the term as a follower (of the sender, if it leads).
    FOLLOW = "follow"


def heed_newer_term(message: Message, *, in_lease: bool) -> NewerTerm:
    """How to treat ``message``, whose term is newer than ours; ``in_lease`` if a leader was heard from lately."""
    if isinstance(message, VoteRequest):
        if in_lease:
            return NewerTerm.IGNORE  # do not let a stray node depose the leader
        if message.pre_vote:
            return NewerTerm.KEEP_TERM
    if isinstance(message, VoteResponse) and message.pre_vote and message.granted:
        return NewerTerm.KEEP_TERM  # granted pre-votes carry the term we are about to campaign in
    return NewerTerm.FOLLOW


def leader_of(message: Message) -> int:
    """The sender if ``message`` is one only a leader sends, else ``NO_NODE``."""
    return message.from_id if isinstance(message, (AppendEntries, Heartbeat, InstallSnapshot)) else NO_NODE


def reply_to_stale(node_id: int, term: int, message: Message, *, check_quorum: bool, pre_vote: bool) -> Message | None:
    """What to tell a node whose ``message`` is from an older term, where that helps it recover (else None)."""
    if isinstance(message, (AppendEntries, Heartbeat)) and (check_quorum or pre_vote):
        # A leader cut off by a partition that our pre-vote or lease rejected would never learn
        # the new term otherwise: answer so that it steps down.
        return AppendEntriesResponse(term=term, from_id=node_id, to_id=message.from_id, index=0)
    if isinstance(message, VoteRequest) and message.pre_vote:
        return vote_response(node_id, message, term=term, granted=False)
    return None


def vote_requests(
    node_id: int, voters: Collection[int], vote_term: int, log: RaftLog, *, pre_vote: bool
) -> list[VoteRequest]:
    """A campaign's (pre-)vote requests in ``vote_term``, one per other voter."""
    last_index, last_term = log.last_index(), log.last_term()
    return [
        VoteRequest(
            term=vote_term,
            from_id=node_id,
            to_id=voter,
            last_log_index=last_index,
            last_log_term=last_term,
            pre_vote=pre_vote,
        )
        for voter in sorted(set(voters) - {node_id})
    ]


def grants_vote(request: VoteRequest, *, term: int, vote: int, leader_id: int, log: RaftLog) -> bool:
    """Whether a node (in ``term``, having voted ``vote``, following ``leader_id``) grants ``request``.

    It votes once per term (again for the same candidate), not while it follows a leader, and
    only for a log at least as up to date as its own; a pre-vote for a later term asks no promise.
    """
    can_vote = (
        vote == request.from_id
        or (vote == NO_NODE and leader_id == NO_NODE)
        or (request.pre_vote and request.term > term)
    )
    return can_vote and log.is_up_to_date(request.last_log_index, request.last_log_term)


def vote_response(node_id: int, request: VoteRequest, *, term: int, granted: bool) -> VoteResponse:
    """The answer to ``request``; a granted one carries the request's term, so a granted pre-vote is not stale."""
    return VoteResponse(term=term, from_id=node_id, to_id=request.from_id, granted=granted, pre_vote=request.pre_vote)
