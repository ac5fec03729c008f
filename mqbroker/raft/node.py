"""The Twisted driver of one ``RaftCore``: clock ticks, durable storage, peer frames and proposals.

``RaftNode`` carries out ``Ready``'s duties in order: it persists the snapshot, entries and
hard state (fsync on a thread pool, never on the reactor thread), then sends the messages,
then applies committed entries to its ``IRaftStateMachine``, then advances the core. While a
Ready is being persisted, inputs (peer frames, ticks, proposals) wait in an inbox and are
stepped together afterwards: the core is never touched while its storage is being written,
and the proposals that arrive during one fsync share the next (group commit).

A proposal made on a follower is forwarded to the leader (``ForwardedProposal``), carrying
the principal it is made for; the leader answers once the entry is applied. The leader
accepts a forwarded proposal only for the forwarding broker's own principal
(``Broker:<from_id>``; the transport checked that the frame came from that broker): client
requests are authorized where they arrive, and what they propose is the broker's record. Proposals with no known leader wait, retried on
every tick, until one is elected or their timeout fires.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.raft.core import RaftCore, Ready
from mqbroker.raft.errors import ProposalDroppedError
from mqbroker.raft.forwarded_proposals import (
    ForwardedProposal,
    ForwardedResult,
    PeerFrame,
)
from mqbroker.raft.log import IRaftStorage
from mqbroker.raft.messages import NO_NODE, EntryKind, Role
from mqbroker.raft.state_machine import IRaftStateMachine
from mqbroker.raft.status import Status
from mqbroker.security.inter_broker import broker_principal


@dataclass(slots=True, eq=False)
class _Proposal:
    """A proposal waiting to be appended, forwarded or applied."""

    data: bytes
    deferred: Deferred[bytes] = field(default_factory=Deferred)
    timer: IDelayedCall | None = None
    #: The leader it was forwarded to (NO_NODE while it is not in flight to another node).
    forwarded_to: int = NO_NODE


class RaftNode:
    """Drives one Raft core from the reactor; ``propose`` returns the apply result of the entry."""

    log = Logger()

    def __init__(
        self,
        *,
        core: RaftCore,
        storage: IRaftStorage,
        state_machine: IRaftStateMachine,
        send: Callable[[PeerFrame], bool],
        reactor: IReactorTime,
        threadpool: Any,
        tick_ms: int = 50,
        snapshot_entries: int = 10_000,
        proposal_timeout_ms: int = 5_000,
        on_fatal: Callable[[Failure], None] | None = None,
    ) -> None:
        """``send`` returns False when a frame could not be sent (the peer is not connected)."""
        self.core = core
        self.storage = storage
        self.state_machine = state_machine
        self._send = send
        self._reactor = reactor
        self._threadpool = threadpool
        self._tick_ms = tick_ms
        self._snapshot_entries = snapshot_entries
        self._proposal_timeout_ms = proposal_timeout_ms
        self._on_fatal = on_fatal
        self._ticker = LoopingCall(self._enqueue, self._tick)
        self._ticker.clock = reactor
        self._inbox: list[Callable[[], None]] = []
        #: Proposals not yet handed to the core (they wait while a Ready is persisted).
        self._new_proposals: list[_Proposal] = []
        self._scheduled = False
        self._busy = False
        self._idle: list[Deferred[None]] = []
        self._stopping = False
        self._request_ids = itertools.count(1)
        #: Proposals appended here, by index: (term, proposal).
        self._awaiting_apply: dict[int, tuple[int, _Proposal]] = {}
        #: Proposals forwarded to the leader, by request id.
        self._forwarded: dict[int, _Proposal] = {}
        self._awaiting_leader: list[_Proposal] = []
        self._leader_listeners: list[Callable[[int, Role], None]] = []
        state_machine.restore(storage.snapshot().data)

    # ---- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start ticking."""
        self._ticker.start(self._tick_ms / 1000.0, now=False)

    def stop(self) -> Deferred[None]:
        """Stop ticking, refuse new proposals, fail waiting ones; fire once no write is in flight."""
        self._stopping = True
        if self._ticker.running:
            self._ticker.stop()
        shutting_down = errors.BrokerShuttingDownError("the controller is shutting down; retry on another broker")
        for proposal in self._all_waiting():
            self._settle(proposal, shutting_down)
        if not self._busy:
            return succeed(None)
        idle: Deferred[None] = Deferred()
        self._idle.append(idle)
        return idle

    def add_leader_listener(self, listener: Callable[[int, Role], None]) -> None:
        """Call ``listener(leader_id, role)`` whenever the known leader or this node's role changes."""
        self._leader_listeners.append(listener)

    # ---- inputs ----------------------------------------------------------------------------

    @property
    def leader_id(self) -> int:
        """The leader this node knows (NO_NODE if none)."""
        return self.core.leader_id

    @property
    def is_leader(self) -> bool:
        """Whether this node is the Raft leader now."""
        return self.core.role is Role.LEADER

    def status(self) -> Status:
        """The core's status, for ``cluster describe``."""
        return self.core.status()

    def receive(self, item: PeerFrame) -> None:
        """Take a frame from a peer (the transport's ``deliver``)."""
        match item:
            case ForwardedResult():
                self._forward_answered(item)
            case ForwardedProposal():
                self._enqueue(partial(self._propose_for_peer, item))
            case _:
                self._enqueue(partial(self.core.step, item))

    def propose(self, data: bytes) -> Deferred[bytes]:
        """Replicate ``data``; fire with the state machine's result once it is applied here or on the leader."""
        proposal = _Proposal(data=data)
        if self._stopping:
            self._settle(proposal, errors.BrokerShuttingDownError("the controller is shutting down"))
            return proposal.deferred
        if len(self._inbox) + len(self._new_proposals) >= limits.raft_inbox_items_max:
            self._settle(proposal, errors.RequestTimedOutError("the controller is overloaded; retry later"))
            return proposal.deferred
        proposal.timer = self._reactor.callLater(self._proposal_timeout_ms / 1000.0, self._expire, proposal)
        self._new_proposals.append(proposal)
        self._schedule()
        return proposal.deferred

    # ---- the drive loop --------------------------------------------------------------------

    def _enqueue(self, action: Callable[[], None]) -> None:
        if len(self._inbox) + len(self._new_proposals) >= limits.raft_inbox_items_max:
            return  # a peer frame or tick lost to overload: Raft retries
        self._inbox.append(action)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled and not self._busy:
            self._scheduled = True
            self._reactor.callLater(0, self._drive)

    def _drive(self) -> None:
        self._scheduled = False
        if self._busy or self._stopping:
            return  # a stopped node writes nothing more: its storage is closed once ``stop`` fires
        inbox, self._inbox = self._inbox, []
        for action in inbox:
            action()
        proposals, self._new_proposals = self._new_proposals, []
        for proposal in proposals:
            self._propose(proposal)
        if not self.core.has_ready():
            return
        ready = self.core.ready()
        if self._needs_fsync(ready):
            self._busy = True
            persisted = deferToThreadPool(
                self._reactor, self._threadpool, self.storage.save, ready.hard_state, ready.entries, ready.snapshot
            )
            persisted.addCallback(lambda _: self._persisted(ready))
            persisted.addErrback(self._fatal)
        else:
            self.storage.save(ready.hard_state, ready.entries, ready.snapshot)
            self._persisted(ready)

    def _needs_fsync(self, ready: Ready) -> bool:
        # A hard state that only moves the commit index is kept in memory by the storage (a
        # lagging commit index on disk is safe), so only entries, snapshots and votes cost a write.
        if ready.entries or ready.snapshot is not None:
            return True
        persisted = self.storage.hard_state()
        return ready.hard_state is not None and (ready.hard_state.term, ready.hard_state.vote) != (
            persisted.term,
            persisted.vote,
        )

    def _persisted(self, ready: Ready) -> None:
        """Duties 2-4 of ``Ready``: send, apply, advance; then compact or go on."""
        for message in ready.messages:
            self._send(message)
        if ready.snapshot is not None:
            self.state_machine.restore(ready.snapshot.data)
            self._drop_superseded(ready.snapshot.metadata.index)
        for entry in ready.committed_entries:
            result = b""
            if entry.kind is EntryKind.NORMAL and entry.data:
                result = self.state_machine.apply(entry.index, entry.data)
            waiting = self._awaiting_apply.pop(entry.index, None)
            if waiting is not None:
                term, proposal = waiting
                self._settle(proposal, result if term == entry.term else _dropped(self.core.leader_id))
        self.core.advance(ready)
        if ready.soft_state is not None:
            self._leader_changed(ready.soft_state.leader_id, ready.soft_state.role)
        if not self._compact_if_due():
            self._become_idle()

    def _compact_if_due(self) -> bool:
        applied = self.core.log.applied
        if applied - self.storage.first_index() + 1 < self._snapshot_entries:
            return False
        snapshot = self.core.create_snapshot(applied, self.state_machine.snapshot())
        self._busy = True
        compacted = deferToThreadPool(self._reactor, self._threadpool, self.storage.compact, snapshot)
        compacted.addCallback(lambda _: self._become_idle())
        compacted.addErrback(self._fatal)
        return True

    def _become_idle(self) -> None:
        self._busy = False
        idle, self._idle = self._idle, []
        for waiter in idle:
            waiter.callback(None)
        if self._inbox or self._new_proposals or self.core.has_ready():
            self._schedule()

    def _fatal(self, failure: Failure) -> None:
        self.log.failure("the Raft log could not be written; this node cannot go on", failure)
        if self._on_fatal is not None:
            self._on_fatal(failure)

    def _tick(self) -> None:
        self.core.tick()
        parked, self._awaiting_leader = self._awaiting_leader, []
        for proposal in parked:
            self._propose(proposal)

    # ---- proposals -------------------------------------------------------------------------

    def _propose(self, proposal: _Proposal) -> None:
        if proposal.deferred.called:
            return  # expired while it waited in the inbox
        if self.core.role is Role.LEADER:
            try:
                index = self.core.propose(proposal.data)
            except ProposalDroppedError as error:  # this leader is being removed from the cluster
                self._settle(proposal, error)
                return
            self._awaiting_apply[index] = (self.core.term, proposal)
            return
        leader_id = self.core.leader_id
        if leader_id != NO_NODE:
            request_id = next(self._request_ids)
            frame = ForwardedProposal(
                from_id=self.core.node_id, to_id=leader_id, request_id=request_id, data=proposal.data,
                principal=str(broker_principal(self.core.node_id)),
            )
            if self._send(frame):
                proposal.forwarded_to = leader_id
                self._forwarded[request_id] = proposal
                return
        self._awaiting_leader.append(proposal)

    def _propose_for_peer(self, request: ForwardedProposal) -> None:
        if request.principal != str(broker_principal(request.from_id)):
            self.log.warn("refusing a proposal node {node} forwarded for {principal}", node=request.from_id,
                          principal=request.principal or "nobody")
            error = errors.ClusterAuthorizationError(
                f"node {request.from_id} may forward proposals only as Broker:{request.from_id},"
                f" not {request.principal or 'without a principal'}")
            self._answer(request, error_code=int(error.code), data=error.message.encode())
            return
        proposal = _Proposal(data=request.data)
        proposal.timer = self._reactor.callLater(self._proposal_timeout_ms / 1000.0, self._expire, proposal)
        proposal.deferred.addCallbacks(
            lambda result: self._answer(request, data=result),
            lambda failure: self._answer_error(request, failure),
        )
        if self.core.role is not Role.LEADER:
            self._settle(proposal, _dropped(self.core.leader_id))
            return
        self._propose(proposal)

    def _answer(self, request: ForwardedProposal, **result: Any) -> None:
        self._send(ForwardedResult(from_id=self.core.node_id, to_id=request.from_id, request_id=request.request_id, **result))

    def _answer_error(self, request: ForwardedProposal, failure: Failure) -> None:
        error = failure.value
        if not isinstance(error, errors.BrokerError):
            failure.raiseException()
        leader_id = error.leader_id if isinstance(error, ProposalDroppedError) else NO_NODE
        self._answer(request, error_code=int(error.code), leader_id=leader_id, data=error.message.encode())

    def _forward_answered(self, answer: ForwardedResult) -> None:
        proposal = self._forwarded.pop(answer.request_id, None)
        if proposal is None:
            return  # it expired, or the leader changed and it was failed already
        if answer.error_code == 0:
            self._settle(proposal, answer.data)
        elif answer.error_code == errors.ErrorCode.NOT_LEADER_OR_FOLLOWER:
            self._settle(proposal, _dropped(answer.leader_id))
        else:
            self._settle(proposal, errors.error_for_code(answer.error_code, answer.data.decode(errors="replace")))

    def _leader_changed(self, leader_id: int, role: Role) -> None:
        self.log.info("raft node {node}: {role} in term {term}, leader {leader}",
                      node=self.core.node_id, role=role.value, term=self.core.term, leader=leader_id or "unknown")
        # A proposal forwarded to a former leader may or may not be committed: the proposer
        # must find out (and retry) rather than have it silently proposed twice.
        for request_id, proposal in list(self._forwarded.items()):
            if proposal.forwarded_to != leader_id:
                del self._forwarded[request_id]
                self._settle(proposal, _dropped(leader_id))
        for listener in self._leader_listeners:
            listener(leader_id, role)

    def _drop_superseded(self, index: int) -> None:
        for entry_index in [i for i in self._awaiting_apply if i <= index]:
            self._settle(self._awaiting_apply.pop(entry_index)[1], _dropped(self.core.leader_id))

    def _expire(self, proposal: _Proposal) -> None:
        proposal.timer = None
        self._settle(proposal, errors.RequestTimedOutError(
            f"the proposal was not committed within {self._proposal_timeout_ms} ms (no controller quorum?)"
        ))

    def _settle(self, proposal: _Proposal, outcome: bytes | Exception) -> None:
        if proposal.timer is not None and proposal.timer.active():
            proposal.timer.cancel()
        proposal.timer = None
        if proposal.deferred.called:
            return
        if isinstance(outcome, Exception):
            proposal.deferred.errback(Failure(outcome))
        else:
            proposal.deferred.callback(outcome)

    def _all_waiting(self) -> list[_Proposal]:
        waiting = [proposal for _, proposal in self._awaiting_apply.values()]
        waiting += list(self._forwarded.values()) + self._awaiting_leader + self._new_proposals
        self._awaiting_apply.clear()
        self._forwarded.clear()
        self._awaiting_leader = []
        self._new_proposals = []
        return waiting


def _dropped(leader_id: int) -> ProposalDroppedError:
    return ProposalDroppedError(
        f"the controller leadership changed before the proposal was committed (leader now: {leader_id or 'unknown'});"
        " retry",
        leader_id,
    )
