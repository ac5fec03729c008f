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
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Protocol

from mqbroker.raft import quorum
from mqbroker.raft.codec import decode_configuration, encode_configuration
from mqbroker.raft.errors import ConfigurationChangeRefusedError, ProposalDroppedError
from mqbroker.raft.log import IRaftStorage, RaftLog
from mqbroker.raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendEntriesResponse,
    Campaign,
    Configuration,
    ConfigurationChange,
    ConfigurationChangeKind,
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
from mqbroker.raft.progress import Progress, ProgressState


class RandomSource(Protocol):
    """What the core needs of its injected ``random.Random``: election jitter."""

    def randrange(self, stop: int) -> int:
        """A number in ``[0, stop)``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftSettings:
    """Tunables of one node; times are in ticks of the driving node's clock."""

    node_id: int
    #: A follower that hears from no leader for between this and twice this many ticks campaigns.
    election_ticks: int = 10
    #: A leader sends heartbeats this often.
    heartbeat_ticks: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    #: Entry bytes in one AppendEntries (at least one entry is always sent).
    append_bytes_max: int = 1024 * 1024
    #: Entries in one AppendEntries.
    append_entries_max: int = 1024
    #: Appends in flight to one follower before the leader waits for acknowledgements.
    inflight_messages_max: int = 256
    #: Heartbeat replies from a follower still installing a snapshot before it is offered again.
    snapshot_retry_heartbeats: int = 30

    def __post_init__(self) -> None:
        assert self.node_id != NO_NODE
        assert 0 < self.heartbeat_ticks < self.election_ticks


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
        #: (index, configuration) of the snapshot and of every configuration entry after it.
        self._configurations: list[tuple[int, Configuration]] = [(snapshot.index, snapshot.configuration)]
        self._record_configurations(self.log.entries(self.log.first_index(), self.log.last_index() + 1))
        self.role = Role.FOLLOWER
        self.leader_id = NO_NODE
        self.progress: dict[int, Progress] = {}
        self._votes: dict[int, bool] = {}
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._randomized_election_timeout = settings.election_ticks
        self._pending_configuration_index = 0
        #: Reads waiting for the leader to commit an entry of its own term.
        self._reads_awaiting_commit: list[bytes] = []
        #: Reads waiting for a quorum of heartbeat acknowledgements: context -> (index, acks).
        self._read_requests: collections.OrderedDict[bytes, tuple[int, set[int]]] = collections.OrderedDict()
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
        return self._configurations[-1][1]

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
        self._require_leader()
        if self._pending_configuration_index > self.log.committed:
            raise ConfigurationChangeRefusedError(
                f"the membership change at index {self._pending_configuration_index} (or this leader's first"
                " entry) is not committed yet; retry once it is"
            )
        configuration = _changed(self.configuration, change)
        index = self._append_and_broadcast(EntryKind.CONFIGURATION, encode_configuration(configuration))
        self._pending_configuration_index = index
        return index

    def read_index(self, context: bytes) -> None:
        """Ask for a ``ReadState`` (in a later ``Ready``) naming the index a linearizable read must wait for.

        ``context`` identifies the request and must be unique among reads in flight. If this node
        loses the leadership before answering, the read is dropped and the node must retry it.
        """
        self._require_leader()
        if self.configuration.voters == {self.node_id}:
            self._read_states.append(ReadState(index=self.log.committed, context=context))
        elif not self._committed_in_current_term():
            self._reads_awaiting_commit.append(context)
        else:
            self._start_reads([context])

    def create_snapshot(self, index: int, data: bytes) -> Snapshot:
        """Describe the application's state ``data`` after applying up to ``index``.

        The node stores it with ``IRaftStorage.compact``, which drops the entries it covers;
        lagging followers then get it through ``InstallSnapshot``.
        """
        assert self.log.first_index() - 1 <= index <= self.log.applied, (index, self.log)
        term = self.log.term(index)
        assert term is not None
        configuration = [config for config_index, config in self._configurations if config_index <= index][-1]
        metadata = SnapshotMetadata(index=index, term=term, configuration=configuration)
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
            progress={node_id: repr(progress) for node_id, progress in sorted(self.progress.items())}
            if self.role is Role.LEADER
            else {},
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
        self._heartbeat_elapsed = 0
        self._randomized_election_timeout = self.settings.election_ticks + self._random.randrange(
            self.settings.election_ticks
        )
        self._votes = {}
        self.progress = {}
        for node_id in sorted(self.configuration.members):
            self._add_progress(node_id)
        self._pending_configuration_index = 0
        self._reads_awaiting_commit = []
        self._read_requests.clear()

    def _add_progress(self, node_id: int) -> None:
        progress = Progress(
            next_index=self.log.last_index() + 1,
            inflight_messages_max=self.settings.inflight_messages_max,
            learner=node_id in self.configuration.learners,
        )
        if node_id == self.node_id:
            progress.match_index = self.log.last_index()
        self.progress[node_id] = progress

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
        own = self.progress.get(self.node_id)
        if own is not None:
            own.become_replicate()
            own.recently_active = True
        # Entries of earlier terms commit only through one of this term: append it now. Until it
        # commits, no membership change may start (the single-server change fix of Ongaro, 2015).
        self._pending_configuration_index = self._append_entry(EntryKind.NORMAL, b"")

    # ---- time ------------------------------------------------------------------------------

    def _promotable(self) -> bool:
        # A voter of the committed membership may still campaign after appending its own removal:
        # if the leader that appended it died, its log may be the only one that can win, and it
        # then commits the removal (counting votes and entries by the new membership) and stands down.
        committed = [config for index, config in self._configurations if index <= self.log.committed][-1]
        return self.node_id in self.configuration.voters or self.node_id in committed.voters

    def _tick_election(self) -> None:
        self._election_elapsed += 1
        if self._promotable() and self._election_elapsed >= self._randomized_election_timeout:
            self._election_elapsed = 0
            self.campaign()

    def _tick_heartbeat(self) -> None:
        self._heartbeat_elapsed += 1
        self._election_elapsed += 1
        if self._election_elapsed >= self.settings.election_ticks:
            self._election_elapsed = 0
            if self.settings.check_quorum and not self._check_quorum():
                return
        if self._heartbeat_elapsed >= self.settings.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._broadcast_heartbeat(next(reversed(self._read_requests), b""))

    def _check_quorum(self) -> bool:
        """Step down unless a majority was heard from since the last check; True if still leader."""
        active = {node_id for node_id, progress in self.progress.items() if progress.recently_active}
        active.add(self.node_id)
        for node_id, progress in self.progress.items():
            progress.recently_active = node_id == self.node_id
        if quorum.has_quorum(self.configuration.voters, active):
            return True
        self._become_follower(self.term, NO_NODE)
        return False

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
        last_index = self.log.last_index()
        last_term = self.log.last_term()
        for voter in sorted(self.configuration.voters - {self.node_id}):
            self._send(
                VoteRequest(
                    term=vote_term,
                    from_id=self.node_id,
                    to_id=voter,
                    last_log_index=last_index,
                    last_log_term=last_term,
                    pre_vote=pre_vote,
                )
            )

    def _poll(self, node_id: int, *, granted: bool) -> quorum.VoteResult:
        self._votes.setdefault(node_id, granted)
        return quorum.vote_result(self.configuration.voters, self._votes)

    def _election_won(self) -> None:
        if self.role is Role.PRE_CANDIDATE:
            self._campaign(pre_vote=False)
        else:
            self._become_leader()
            self._broadcast_append()

    def _handle_vote_request(self, message: VoteRequest) -> None:
        can_vote = (
            self.vote == message.from_id
            or (self.vote == NO_NODE and self.leader_id == NO_NODE)
            or (message.pre_vote and message.term > self.term)
        )
        if can_vote and self.log.is_up_to_date(message.last_log_index, message.last_log_term):
            # The reply carries the request's term: a granted pre-vote must not look stale.
            self._reply_vote(message, term=message.term, granted=True)
            if not message.pre_vote:
                self._election_elapsed = 0
                self.vote = message.from_id
        else:
            self._reply_vote(message, term=self.term, granted=False)

    def _reply_vote(self, request: VoteRequest, *, term: int, granted: bool) -> None:
        self._send(
            VoteResponse(term=term, from_id=self.node_id, to_id=request.from_id, granted=granted, pre_vote=request.pre_vote)
        )

    # ---- peer messages ---------------------------------------------------------------------

    def _step_peer(self, message: Message) -> None:
        if message.term > self.term:
            if not self._adopt_newer_term(message):
                return
        elif message.term < self.term:
            self._answer_stale(message)
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

    def _adopt_newer_term(self, message: Message) -> bool:
        """React to a message from a newer term; False if it is to be ignored."""
        if isinstance(message, VoteRequest):
            in_lease = (
                self.settings.check_quorum
                and self.leader_id != NO_NODE
                and self._election_elapsed < self.settings.election_ticks
            )
            if in_lease:
                return False  # a leader was heard from recently: do not let a stray node depose it
            if message.pre_vote:
                return True  # a pre-vote never changes our term
        if isinstance(message, VoteResponse) and message.pre_vote and message.granted:
            return True  # granted pre-votes carry the term we are about to campaign in
        leader_id = message.from_id if isinstance(message, (AppendEntries, Heartbeat, InstallSnapshot)) else NO_NODE
        self._become_follower(message.term, leader_id)
        return True

    def _answer_stale(self, message: Message) -> None:
        """Tell a node from an older term about this one, where that helps it recover."""
        if isinstance(message, (AppendEntries, Heartbeat)) and (self.settings.check_quorum or self.settings.pre_vote):
            # A leader cut off by a partition that our pre-vote or lease rejected would never learn
            # the new term otherwise: answer so that it steps down.
            self._send(AppendEntriesResponse(term=self.term, from_id=self.node_id, to_id=message.from_id, index=0))
        elif isinstance(message, VoteRequest) and message.pre_vote:
            self._reply_vote(message, term=self.term, granted=False)

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
        match message:
            case AppendEntries():
                self._handle_append(message)
            case Heartbeat():
                self.log.commit_to(message.commit_index)
                self._send(
                    HeartbeatResponse(
                        term=self.term, from_id=self.node_id, to_id=message.from_id, context=message.context
                    )
                )
            case InstallSnapshot():
                self._handle_snapshot(message)

    def _reply_append(self, leader_id: int, index: int, **rejection: int | bool) -> None:
        self._send(
            AppendEntriesResponse(term=self.term, from_id=self.node_id, to_id=leader_id, index=index, **rejection)
        )

    def _handle_append(self, message: AppendEntries) -> None:
        if message.previous_index < self.log.committed:
            self._reply_append(message.from_id, self.log.committed)
            return
        if not self.log.matches(message.previous_index, message.previous_term):
            hint_index, hint_term = self.log.find_conflict_by_term(
                min(message.previous_index, self.log.last_index()), message.previous_term
            )
            self._reply_append(
                message.from_id, message.previous_index, rejected=True, hint_index=hint_index, hint_term=hint_term
            )
            return
        for position, entry in enumerate(message.entries):
            if not self.log.matches(entry.index, entry.term):
                # Entries already held are skipped: a stale, shorter append must not truncate newer ones.
                self.log.append(message.entries[position:])
                self._entries_appended(message.entries[position:])
                break
        last_new_index = message.previous_index + len(message.entries)
        self.log.commit_to(min(message.commit_index, last_new_index))
        self._reply_append(message.from_id, last_new_index)

    def _handle_snapshot(self, message: InstallSnapshot) -> None:
        metadata = message.snapshot.metadata
        if metadata.index <= self.log.committed:
            self._reply_append(message.from_id, self.log.committed)
        elif self.log.matches(metadata.index, metadata.term):
            # This log already holds the snapshot's last entry: it only learns the commit point.
            self.log.commit_to(metadata.index)
            self._reply_append(message.from_id, self.log.committed)
        else:
            self.log.restore(message.snapshot)
            self._configurations = [(metadata.index, metadata.configuration)]
            self._reply_append(message.from_id, self.log.last_index())

    # ---- the leader --------------------------------------------------------------------------

    def _step_leader(self, message: Message) -> None:
        progress = self.progress.get(message.from_id)
        if progress is None:
            return  # no longer a member
        match message:
            case AppendEntriesResponse():
                progress.recently_active = True
                self._handle_append_response(message, progress)
            case HeartbeatResponse():
                progress.recently_active = True
                self._handle_heartbeat_response(message, progress)

    def _handle_append_response(self, message: AppendEntriesResponse, progress: Progress) -> None:
        if message.rejected:
            next_probe = message.hint_index
            if message.hint_term > 0:
                next_probe, _ = self.log.find_conflict_by_term(message.hint_index, message.hint_term)
            if progress.maybe_decrement_to(message.index, next_probe):
                if progress.state is ProgressState.REPLICATE:
                    progress.become_probe()
                self._send_append(message.from_id)
            return
        confirms_probe = progress.match_index == message.index and progress.state is ProgressState.PROBE
        if not (progress.maybe_update(message.index) or confirms_probe):
            return
        if progress.state is ProgressState.PROBE:
            progress.become_replicate()
        elif progress.state is ProgressState.SNAPSHOT:
            if progress.match_index + 1 >= self.log.first_index():
                progress.become_probe()
                progress.become_replicate()
        else:
            progress.inflights.free_up_to(message.index)
        if self._maybe_commit():
            if self.role is not Role.LEADER:
                return
            self._broadcast_append()
        sent = False
        while self._send_append(message.from_id, send_if_empty=False):
            sent = True
        if not sent and progress.commit_sent < min(self.log.committed, progress.match_index):
            self._send_append(message.from_id)  # only to tell it the commit index

    def _handle_heartbeat_response(self, message: HeartbeatResponse, progress: Progress) -> None:
        progress.probe_sent = False
        if progress.state is ProgressState.REPLICATE and progress.inflights.full():
            progress.inflights.free_first()  # an acknowledgement was lost: reopen the window
        if progress.state is ProgressState.SNAPSHOT:
            progress.snapshot_heartbeats += 1
            if progress.snapshot_heartbeats > self.settings.snapshot_retry_heartbeats:
                progress.become_probe()  # the snapshot was probably lost: offer it again
        if progress.match_index < self.log.last_index():
            self._send_append(message.from_id)
        if message.context:
            self._acknowledge_read(message.from_id, message.context)

    def _require_leader(self) -> None:
        if self.role is not Role.LEADER:
            raise ProposalDroppedError(
                f"node {self.node_id} is not the Raft leader (leader: {self.leader_id or 'unknown'}); retry there",
                self.leader_id,
            )
        if self.node_id not in self.configuration.voters:
            raise ProposalDroppedError(f"node {self.node_id} is leaving the cluster; retry on the next leader")

    def _append_entry(self, kind: EntryKind, data: bytes) -> int:
        index = self.log.last_index() + 1
        entry = Entry(term=self.term, index=index, kind=kind, data=data)
        self.log.append([entry])
        self._entries_appended([entry])
        own = self.progress.get(self.node_id)
        if own is not None:
            own.maybe_update(index)
        self._maybe_commit()
        return index

    def _append_and_broadcast(self, kind: EntryKind, data: bytes) -> int:
        index = self._append_entry(kind, data)
        self._broadcast_append()
        return index

    def _maybe_commit(self) -> bool:
        """Commit what a majority holds, if it is of this term; True if the commit index moved."""
        match_index = {node_id: progress.match_index for node_id, progress in self.progress.items()}
        index = quorum.committed_index(self.configuration.voters, match_index)
        if not self.log.maybe_commit(index, self.term):
            return False
        if self._reads_awaiting_commit and self._committed_in_current_term():
            contexts, self._reads_awaiting_commit = self._reads_awaiting_commit, []
            self._start_reads(contexts)
        if self.node_id not in self.configuration.voters and self.log.committed >= self._configurations[-1][0]:
            # The change that removed this leader is committed: tell the others, then stand down.
            self._broadcast_append()
            self._become_follower(self.term, NO_NODE)
        return True

    def _committed_in_current_term(self) -> bool:
        return self.log.term(self.log.committed) == self.term

    def _broadcast_append(self) -> None:
        for node_id in sorted(self.progress):
            if node_id != self.node_id:
                self._send_append(node_id)

    def _broadcast_heartbeat(self, context: bytes) -> None:
        for node_id, progress in sorted(self.progress.items()):
            if node_id != self.node_id:
                commit_index = min(progress.match_index, self.log.committed)
                self._send(
                    Heartbeat(
                        term=self.term, from_id=self.node_id, to_id=node_id, commit_index=commit_index, context=context
                    )
                )

    def _send_append(self, node_id: int, *, send_if_empty: bool = True) -> bool:
        """Send the entries ``node_id`` lacks (or a snapshot); False if nothing was sent."""
        progress = self.progress[node_id]
        if progress.paused():
            return False
        previous_index = progress.next_index - 1
        previous_term = self.log.term(previous_index)
        if previous_term is None:
            return self._send_snapshot(node_id, progress)
        entries = self._entries_to_send(progress.next_index)
        if not entries and not send_if_empty:
            return False
        self._send(
            AppendEntries(
                term=self.term,
                from_id=self.node_id,
                to_id=node_id,
                previous_index=previous_index,
                previous_term=previous_term,
                entries=entries,
                commit_index=self.log.committed,
            )
        )
        progress.sent_entries(entries[-1].index if entries else previous_index, self.log.committed)
        return True

    def _entries_to_send(self, next_index: int) -> tuple[Entry, ...]:
        selected: list[Entry] = []
        size_bytes = 0
        high = min(self.log.last_index() + 1, next_index + self.settings.append_entries_max)
        for entry in self.log.entries(next_index, high):
            size_bytes += len(entry.data)
            if selected and size_bytes > self.settings.append_bytes_max:
                break
            selected.append(entry)
        return tuple(selected)

    def _send_snapshot(self, node_id: int, progress: Progress) -> bool:
        if not progress.recently_active:
            return False  # do not ship a whole snapshot to a node that may be down
        snapshot = self.log.unstable_snapshot or self.log.storage.snapshot()
        self._send(InstallSnapshot(term=self.term, from_id=self.node_id, to_id=node_id, snapshot=snapshot))
        progress.become_snapshot(snapshot.metadata.index)
        return True

    # ---- reads -----------------------------------------------------------------------------

    def _start_reads(self, contexts: list[bytes]) -> None:
        for context in contexts:
            self._read_requests.setdefault(context, (self.log.committed, {self.node_id}))
        self._broadcast_heartbeat(contexts[-1])

    def _acknowledge_read(self, node_id: int, context: bytes) -> None:
        request = self._read_requests.get(context)
        if request is None:
            return
        request[1].add(node_id)
        if not quorum.has_quorum(self.configuration.voters, request[1]):
            return
        # A quorum confirmed this node still leads at this context: so it did for every earlier one.
        while self._read_requests:
            released_context, (index, _) = self._read_requests.popitem(last=False)
            self._read_states.append(ReadState(index=index, context=released_context))
            if released_context == context:
                break

    # ---- membership ------------------------------------------------------------------------

    def _record_configurations(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        for entry in entries:
            if entry.kind is EntryKind.CONFIGURATION:
                self._configurations.append((entry.index, decode_configuration(entry.data)))

    def _entries_appended(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        """Track membership through newly appended entries (which replaced any from their first index)."""
        before = self.configuration
        first = entries[0].index
        while self._configurations[-1][0] >= first:
            self._configurations.pop()
        assert self._configurations, "truncated below the snapshot's configuration"
        self._record_configurations(entries)
        if self.role is Role.LEADER and self.configuration != before:
            self._configuration_changed()

    def _configuration_changed(self) -> None:
        members = self.configuration.members
        for node_id in sorted(set(self.progress) - members):
            del self.progress[node_id]
        for node_id in sorted(members):
            if node_id not in self.progress:
                self._add_progress(node_id)
            self.progress[node_id].learner = node_id in self.configuration.learners


def _changed(configuration: Configuration, change: ConfigurationChange) -> Configuration:
    """Apply a one-server change, refusing no-ops and an empty voter set."""
    voters = set(configuration.voters)
    learners = set(configuration.learners)
    node_id = change.node_id
    match change.kind:
        case ConfigurationChangeKind.ADD_VOTER:
            refused = node_id in voters and f"node {node_id} is already a voter"
            voters.add(node_id)
            learners.discard(node_id)
        case ConfigurationChangeKind.ADD_LEARNER:
            refused = node_id in learners and f"node {node_id} is already a learner"
            learners.add(node_id)
            voters.discard(node_id)
        case ConfigurationChangeKind.REMOVE_NODE:
            refused = node_id not in voters | learners and f"node {node_id} is not a member"
            voters.discard(node_id)
            learners.discard(node_id)
    if refused:
        raise ConfigurationChangeRefusedError(refused)
    if not voters:
        raise ConfigurationChangeRefusedError(f"removing node {node_id} would leave no voters; add another first")
    return Configuration(voters=frozenset(voters), learners=frozenset(learners))
