"""The Raft consensus algorithm as a deterministic state machine (after etcd-io/raft).

``RaftCore`` does no I/O and reads no clock: the node that drives it feeds it peer messages
(``step``), logical time (``tick``) and requests (``propose``, ``read_index``, ``campaign``),
and after each batch of inputs collects a ``Ready`` — what to persist, send and apply — and
calls ``advance`` once it has done so. Randomness (election jitter) comes from the injected
``random.Random``, so a seed replays a whole cluster.

Beyond the paper's core: pre-vote (a partitioned node cannot inflate terms), check-quorum
(a leader that hears from no majority for an election timeout steps down, and followers
that hear from a live leader ignore vote requests), fast log back-off by term hints,
linearizable reads by read-index, snapshots, and single-server membership changes that
take effect when appended.

This module keeps the roles and the logical clock and turns everything into ``Ready`` values;
the rules live beside it: `election.py` (vote requests and grants, other terms' messages),
`follower.py` (answering a leader), `leader.py` (a ``Leader`` that exists while the node leads:
each member's progress, appends, heartbeats, read confirmations) and `membership.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mqbroker.raft import quorum
from mqbroker.raft.codec import encode_configuration
from mqbroker.raft.election import (
    NewerTerm,
    grants_vote,
    heed_newer_term,
    leader_of,
    reply_to_stale,
    vote_requests,
    vote_response,
)
from mqbroker.raft.errors import ProposalDroppedError
from mqbroker.raft.follower import answer_leader
from mqbroker.raft.leader import Leader
from mqbroker.raft.log import IRaftStorage, RaftLog
from mqbroker.raft.membership import ConfigurationHistory, changed
from mqbroker.raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendEntriesResponse,
    Campaign,
    Configuration,
    ConfigurationChange,
    Entry,
    EntryKind,
    HardState,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    LocalInput,
    Message,
    Propose,
    ProposeConfigurationChange,
    ReadIndex,
    ReadState,
    Role,
    Snapshot,
    SnapshotMetadata,
    SoftState,
    Tick,
    VoteRequest,
    VoteResponse,
)
from mqbroker.raft.settings import RaftSettings, RandomSource
from mqbroker.raft.status import Status


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    """Everything the core asks of its node after a batch of inputs. The node's duties, in order:

    1. Persist ``snapshot`` (if any), then ``entries`` (replacing any stored entries at the same
       or later indexes), then ``hard_state`` (if any) — ``IRaftStorage.save`` does exactly
       this — and wait until they are durable. Term and vote must be on disk before any
       message that depends on them leaves the node.
    2. Only then send ``messages`` (losing some is fine: Raft retries).
    3. Restore the application from ``snapshot`` (if any), then apply ``committed_entries``
       in order, and answer the reads in ``read_states`` once the applied index reaches theirs.
    4. Call ``RaftCore.advance(ready)`` with this very value before asking for the next one.

    ``soft_state`` (leader and role), when not None, reports a change worth logging.
    """

    soft_state: SoftState | None
    hard_state: HardState | None
    snapshot: Snapshot | None
    entries: tuple[Entry, ...]
    messages: tuple[Message, ...]
    committed_entries: tuple[Entry, ...]
    read_states: tuple[ReadState, ...]


class RaftCore:
    """One node's Raft state machine: inputs in, ``Ready`` out."""

    def __init__(self, settings: RaftSettings, storage: IRaftStorage, rng: RandomSource) -> None:
        """Resume from whatever ``storage`` holds (a new node starts from an empty storage).

        ``rng`` is a seeded ``random.Random`` (never the global one), so a seed replays a cluster.
        """
        self.settings = settings
        self.node_id = settings.node_id
        self.log = RaftLog(storage)
        self._random = rng
        hard_state = storage.hard_state()
        self.term = hard_state.term
        self.vote = hard_state.vote
        self.log.commit_to(hard_state.commit)
        snapshot = storage.snapshot().metadata
        self._configurations = ConfigurationHistory(snapshot.index, snapshot.configuration)
        self._configurations.record(self.log.entries(self.log.first_index(), self.log.last_index() + 1))
        self.role = Role.FOLLOWER
        self.leader_id = NO_NODE
        #: The leader's own state, while this node leads.
        self._leader: Leader | None = None
        self._votes: dict[int, bool] = {}
        self._election_elapsed = 0
        self._randomized_election_timeout = settings.election_ticks
        self._messages: list[Message] = []
        self._read_states: list[ReadState] = []
        self._persisted_hard_state = hard_state
        self._reported_soft_state = SoftState(leader_id=NO_NODE, role=Role.FOLLOWER)
        self._awaiting_advance = False
        self._become_follower(self.term, NO_NODE)

    def __repr__(self) -> str:
        return (
            f"RaftCore(node={self.node_id}, {self.role.value}, term={self.term}, leader={self.leader_id}, {self.log})"
        )

    # ---- inputs ----------------------------------------------------------------------------

    @property
    def configuration(self) -> Configuration:
        """The membership in force: the newest one in the log, committed or not."""
        return self._configurations.current

    def step(self, message: Message | LocalInput) -> None:
        """Take one input: a message from a peer, or a local input from the node."""
        match message:
            case Tick():
                self.tick()
            case Campaign():
                self.campaign()
            case Propose(data=data):
                self.propose(data)
            case ProposeConfigurationChange(change=change):
                self.propose_configuration_change(change)
            case ReadIndex(context=context):
                self.read_index(context)
            case _:
                self._step_peer(message)

    def tick(self) -> None:
        """Advance logical time by one tick."""
        if self.role is Role.LEADER:
            self._tick_heartbeat()
        else:
            self._tick_election()

    def campaign(self) -> None:
        """Start an election now (a pre-vote first, if enabled); ignored by leaders and non-voters."""
        if self.role is Role.LEADER or not self._promotable():
            return
        self._campaign(pre_vote=self.settings.pre_vote)

    def propose(self, data: bytes) -> int:
        """Append ``data`` to the log and return its index; only the leader takes proposals."""
        self._require_leader()
        return self._append_and_broadcast(EntryKind.NORMAL, data)

    def propose_configuration_change(self, change: ConfigurationChange) -> int:
        """Append a one-server membership change and return its index; it takes effect at once."""
        leader = self._require_leader()
        leader.check_no_change_pending()
        configuration = changed(self.configuration, change)
        index = self._append_and_broadcast(EntryKind.CONFIGURATION, encode_configuration(configuration))
        leader.pending_configuration_index = index
        return index

    def read_index(self, context: bytes) -> None:
        """Ask for a ``ReadState`` (in a later ``Ready``) naming the index a linearizable read must wait for.

        ``context`` identifies the request and must be unique among reads in flight. If this node
        loses the leadership before answering, the read is dropped and the node must retry it.
        """
        read_state = self._require_leader().read_index(context)
        if read_state is not None:
            self._read_states.append(read_state)

    def create_snapshot(self, index: int, data: bytes) -> Snapshot:
        """Describe the application's state ``data`` after applying up to ``index``.

        The node stores it with ``IRaftStorage.compact``, which drops the entries it covers;
        lagging followers then get it through ``InstallSnapshot``.
        """
        assert self.log.first_index() - 1 <= index <= self.log.applied, (index, self.log)
        term = self.log.term(index)
        assert term is not None
        metadata = SnapshotMetadata(index=index, term=term, configuration=self._configurations.at(index))
        return Snapshot(metadata=metadata, data=data)

    # ---- outputs ---------------------------------------------------------------------------

    def has_ready(self) -> bool:
        """Whether ``ready()`` would return anything to do."""
        return bool(
            self._soft_state() != self._reported_soft_state
            or self._hard_state() != self._persisted_hard_state
            or self.log.unstable_snapshot is not None
            or self.log.unstable_entries
            or self._messages
            or self._read_states
            or self.log.committed > max(self.log.applied, self.log.first_index() - 1)
        )

    def ready(self) -> Ready:
        """Collect what the node must now persist, send and apply (see ``Ready``)."""
        assert not self._awaiting_advance, "advance() the previous Ready before asking for another"
        soft_state = self._soft_state()
        hard_state = self._hard_state()
        ready = Ready(
            soft_state=soft_state if soft_state != self._reported_soft_state else None,
            hard_state=hard_state if hard_state != self._persisted_hard_state else None,
            snapshot=self.log.unstable_snapshot,
            entries=tuple(self.log.unstable_entries),
            messages=tuple(self._messages),
            committed_entries=tuple(self.log.next_committed_entries()),
            read_states=tuple(self._read_states),
        )
        self._messages = []
        self._read_states = []
        self._reported_soft_state = soft_state
        self._awaiting_advance = True
        return ready

    def advance(self, ready: Ready) -> None:
        """Record that the node has done everything ``ready`` asked."""
        assert self._awaiting_advance, "advance() without a Ready"
        self._awaiting_advance = False
        if ready.hard_state is not None:
            self._persisted_hard_state = ready.hard_state
        if ready.entries:
            self.log.stable_to(ready.entries[-1].index, ready.entries[-1].term)
        if ready.snapshot is not None:
            self.log.stable_snapshot_to(ready.snapshot.metadata.index)
            self.log.applied_to(max(self.log.applied, ready.snapshot.metadata.index))
        if ready.committed_entries:
            self.log.applied_to(ready.committed_entries[-1].index)

    def status(self) -> Status:
        """Where this node stands, for ``cluster describe`` and tests."""
        return Status(
            node_id=self.node_id,
            role=self.role,
            term=self.term,
            vote=self.vote,
            leader_id=self.leader_id,
            commit_index=self.log.committed,
            applied_index=self.log.applied,
            first_index=self.log.first_index(),
            last_index=self.log.last_index(),
            configuration=self.configuration,
            progress=self._leader.progress_report() if self._leader is not None else {},
        )

    def _soft_state(self) -> SoftState:
        return SoftState(leader_id=self.leader_id, role=self.role)

    def _hard_state(self) -> HardState:
        return HardState(term=self.term, vote=self.vote, commit=self.log.committed)

    def _send(self, message: Message) -> None:
        assert message.from_id == self.node_id and message.to_id != self.node_id
        self._messages.append(message)

    # ---- role changes ----------------------------------------------------------------------

    def _reset(self, term: int) -> None:
        if term != self.term:
            assert term > self.term, f"term going back from {self.term} to {term}"
            self.term = term
            self.vote = NO_NODE
        self.leader_id = NO_NODE
        self._election_elapsed = 0
        self._randomized_election_timeout = self.settings.election_ticks + self._random.randrange(
            self.settings.election_ticks
        )
        self._votes = {}
        self._leader = None

    def _become_follower(self, term: int, leader_id: int) -> None:
        self._reset(term)
        self.role = Role.FOLLOWER
        self.leader_id = leader_id

    def _become_pre_candidate(self) -> None:
        # A pre-candidate changes neither term nor vote: it only asks whether it could win.
        assert self.role is not Role.LEADER, "invalid transition: leader -> pre-candidate"
        self.role = Role.PRE_CANDIDATE
        self.leader_id = NO_NODE
        self._votes = {}

    def _become_candidate(self) -> None:
        assert self.role is not Role.LEADER, "invalid transition: leader -> candidate"
        self._reset(self.term + 1)
        self.vote = self.node_id
        self.role = Role.CANDIDATE

    def _become_leader(self) -> None:
        assert self.role is Role.CANDIDATE, f"invalid transition: {self.role.value} -> leader"
        self._reset(self.term)
        self.role = Role.LEADER
        self.leader_id = self.node_id
        leader = self._leader = Leader(self.settings, self.term, self.log, self._configurations, self._send)
        # Entries of earlier terms commit only through one of this term: append it now. Until it
        # commits, no membership change may start (the single-server change fix of Ongaro, 2015).
        leader.pending_configuration_index = self._append_entry(EntryKind.NORMAL, b"")

    # ---- time ------------------------------------------------------------------------------

    def _promotable(self) -> bool:
        # A voter of the committed membership may still campaign after appending its own removal:
        # if the leader that appended it died, its log may be the only one that can win, and it
        # then commits the removal (counting votes and entries by the new membership) and stands down.
        committed = self._configurations.at(self.log.committed)
        return self.node_id in self.configuration.voters or self.node_id in committed.voters

    def _tick_election(self) -> None:
        self._election_elapsed += 1
        if self._promotable() and self._election_elapsed >= self._randomized_election_timeout:
            self._election_elapsed = 0
            self.campaign()

    def _tick_heartbeat(self) -> None:
        leader = self._leading
        self._election_elapsed += 1
        if self._election_elapsed >= self.settings.election_ticks:
            self._election_elapsed = 0
            if self.settings.check_quorum and not leader.quorum_active():
                self._become_follower(self.term, NO_NODE)  # no majority heard from for an election timeout
                return
        leader.tick()

    # ---- elections -------------------------------------------------------------------------

    def _campaign(self, *, pre_vote: bool) -> None:
        if pre_vote:
            self._become_pre_candidate()
            vote_term = self.term + 1
        else:
            self._become_candidate()
            vote_term = self.term
        if self._poll(self.node_id, granted=True) is quorum.VoteResult.WON:
            self._election_won()
            return
        for request in vote_requests(self.node_id, self.configuration.voters, vote_term, self.log, pre_vote=pre_vote):
            self._send(request)

    def _poll(self, node_id: int, *, granted: bool) -> quorum.VoteResult:
        self._votes.setdefault(node_id, granted)
        return quorum.vote_result(self.configuration.voters, self._votes)

    def _election_won(self) -> None:
        if self.role is Role.PRE_CANDIDATE:
            self._campaign(pre_vote=False)
        else:
            self._become_leader()
            self._leading.broadcast_append()

    def _handle_vote_request(self, message: VoteRequest) -> None:
        if grants_vote(message, term=self.term, vote=self.vote, leader_id=self.leader_id, log=self.log):
            self._send(vote_response(self.node_id, message, term=message.term, granted=True))
            if not message.pre_vote:
                self._election_elapsed = 0
                self.vote = message.from_id
        else:
            self._send(vote_response(self.node_id, message, term=self.term, granted=False))

    # ---- peer messages ---------------------------------------------------------------------

    def _step_peer(self, message: Message) -> None:
        settings = self.settings
        if message.term > self.term:
            in_lease = (
                settings.check_quorum and self.leader_id != NO_NODE and self._election_elapsed < settings.election_ticks
            )
            reaction = heed_newer_term(message, in_lease=in_lease)
            if reaction is NewerTerm.IGNORE:
                return
            if reaction is NewerTerm.FOLLOW:
                self._become_follower(message.term, leader_of(message))
        elif message.term < self.term:
            reply = reply_to_stale(
                self.node_id, self.term, message, check_quorum=settings.check_quorum, pre_vote=settings.pre_vote
            )
            if reply is not None:
                self._send(reply)
            return
        match message:
            case VoteRequest():
                self._handle_vote_request(message)
            case _ if self.role is Role.LEADER:
                self._step_leader(message)
            case _ if self.role is Role.FOLLOWER:
                self._step_follower(message)
            case _:
                self._step_candidate(message)

    def _step_follower(self, message: Message) -> None:
        if isinstance(message, (AppendEntries, Heartbeat, InstallSnapshot)):
            self._election_elapsed = 0
            self.leader_id = message.from_id
            self._handle_from_leader(message)

    def _step_candidate(self, message: Message) -> None:
        if isinstance(message, (AppendEntries, Heartbeat, InstallSnapshot)):
            self._become_follower(message.term, message.from_id)
            self._handle_from_leader(message)
        elif isinstance(message, VoteResponse) and message.pre_vote == (self.role is Role.PRE_CANDIDATE):
            result = self._poll(message.from_id, granted=message.granted)
            if result is quorum.VoteResult.WON:
                self._election_won()
            elif result is quorum.VoteResult.LOST:
                self._become_follower(self.term, NO_NODE)

    def _handle_from_leader(self, message: AppendEntries | Heartbeat | InstallSnapshot) -> None:
        self._send(answer_leader(self.node_id, self.term, self.log, self._configurations, message))

    # ---- the leader --------------------------------------------------------------------------

    def _step_leader(self, message: Message) -> None:
        leader = self._leading
        match message:
            case AppendEntriesResponse():
                if not leader.handle_append_response(message):
                    return
                if self._maybe_commit():
                    if self.role is not Role.LEADER:
                        return
                    leader.broadcast_append()
                leader.send_more(message.from_id)
            case HeartbeatResponse():
                self._read_states += leader.handle_heartbeat_response(message)

    def _require_leader(self) -> Leader:
        """This node's leader state for a request; ``ProposalDroppedError`` (naming where to retry) otherwise."""
        if self._leader is None:
            raise ProposalDroppedError(
                f"node {self.node_id} is not the Raft leader (leader: {self.leader_id or 'unknown'}); retry there",
                self.leader_id,
            )
        if self.node_id not in self.configuration.voters:
            raise ProposalDroppedError(f"node {self.node_id} is leaving the cluster; retry on the next leader")
        return self._leader

    @property
    def _leading(self) -> Leader:
        assert self._leader is not None, "only a leader replicates"
        return self._leader

    def _append_entry(self, kind: EntryKind, data: bytes) -> int:
        index = self.log.last_index() + 1
        entry = Entry(term=self.term, index=index, kind=kind, data=data)
        self.log.append([entry])
        self._entries_appended([entry])
        self._leading.appended(index)
        self._maybe_commit()
        return index

    def _append_and_broadcast(self, kind: EntryKind, data: bytes) -> int:
        index = self._append_entry(kind, data)
        self._leading.broadcast_append()
        return index

    def _maybe_commit(self) -> bool:
        """Commit what a majority holds, if it is of this term; True if the commit index moved."""
        leader = self._leading
        if not self.log.maybe_commit(leader.committed_index(), self.term):
            return False
        if leader.committed_in_term():
            leader.release_reads_awaiting_commit()
        if self.node_id not in self.configuration.voters and self.log.committed >= self._configurations.current_index:
            # The change that removed this leader is committed: tell the others, then stand down.
            leader.broadcast_append()
            self._become_follower(self.term, NO_NODE)
        return True

    # ---- membership ------------------------------------------------------------------------

    def _entries_appended(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        """Track membership through newly appended entries (which replaced any from their first index)."""
        before = self.configuration
        self._configurations.replace_from(entries)
        if self._leader is not None and self.configuration != before:
            self._leader.configuration_changed()
