"""Raft's vocabulary: log entries, configurations, snapshots, peer messages and local inputs.

Every value is a frozen, slotted, keyword-only dataclass, so a message can be logged,
compared in a test and encoded by ``mqbroker.raft.codec`` without copying. Node ids start
at 1; ``NO_NODE`` (0) means "nobody" (no vote cast, no known leader).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

#: "Nobody": the vote of a node that has not voted, the leader of a node that knows none.
NO_NODE = 0


class EntryKind(enum.IntEnum):
    """What an entry's ``data`` holds."""

    NORMAL = 0  # application bytes (an empty NORMAL entry is a new leader's no-op)
    CONFIGURATION = 1  # an encoded ``Configuration``: the whole membership after the change


class Role(enum.Enum):
    """The role a node plays in its current term."""

    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"


class ConfigurationChangeKind(enum.Enum):
    """A single-server membership change."""

    ADD_VOTER = "add-voter"  # also promotes a learner
    ADD_LEARNER = "add-learner"  # also demotes a voter
    REMOVE_NODE = "remove-node"


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One log entry."""

    term: int
    index: int
    kind: EntryKind = EntryKind.NORMAL
    data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class Configuration:
    """Cluster membership: voters decide, learners only receive the log."""

    voters: frozenset[int] = frozenset()
    learners: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        assert not self.voters & self.learners, "a node is either a voter or a learner"
        assert NO_NODE not in self.voters | self.learners

    @property
    def members(self) -> frozenset[int]:
        """Every node that receives the log."""
        return self.voters | self.learners


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigurationChange:
    """A request to change membership by one server."""

    kind: ConfigurationChangeKind
    node_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotMetadata:
    """Where a snapshot sits in the log and the membership in force at that point."""

    index: int = 0
    term: int = 0
    configuration: Configuration = field(default_factory=Configuration)


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """The application's state after applying every entry up to ``metadata.index``."""

    metadata: SnapshotMetadata = field(default_factory=SnapshotMetadata)
    data: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class HardState:
    """What a node must persist before it sends any message: term, vote and commit index."""

    term: int = 0
    vote: int = NO_NODE
    commit: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SoftState:
    """Volatile state worth reporting when it changes: the known leader and this node's role."""

    leader_id: int
    role: Role


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadState:
    """A linearizable read may be served once the applied index reaches ``index``."""

    index: int
    context: bytes


# ---- messages between nodes -------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteRequest:
    """A (pre-)candidate asks for a vote; a pre-vote carries the term it would campaign in."""

    term: int
    from_id: int
    to_id: int
    last_log_index: int
    last_log_term: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class VoteResponse:
    """A vote granted or refused."""

    term: int
    from_id: int
    to_id: int
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEntries:
    """The leader's entries following (previous_index, previous_term), plus its commit index."""

    term: int
    from_id: int
    to_id: int
    previous_index: int
    previous_term: int
    entries: tuple[Entry, ...]
    commit_index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEntriesResponse:
    """Acknowledges entries (or a snapshot) up to ``index``, or rejects ``index`` with a hint.

    On rejection, (hint_index, hint_term) is the follower's best guess of the last entry that
    could match: the leader skips a whole term of conflicting entries per round trip.
    """

    term: int
    from_id: int
    to_id: int
    index: int
    rejected: bool = False
    hint_index: int = 0
    hint_term: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """The leader asserts itself; ``context`` is the newest read-index request it confirms."""

    term: int
    from_id: int
    to_id: int
    commit_index: int
    context: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponse:
    """A follower acknowledges a heartbeat, echoing its read context."""

    term: int
    from_id: int
    to_id: int
    context: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallSnapshot:
    """The leader replaces a lagging follower's log prefix with a whole snapshot."""

    term: int
    from_id: int
    to_id: int
    snapshot: Snapshot


Message = (
    VoteRequest
    | VoteResponse
    | AppendEntries
    | AppendEntriesResponse
    | Heartbeat
    | HeartbeatResponse
    | InstallSnapshot
)

# ---- local inputs (from the node that drives the core, never from the network) ----------


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """One unit of logical time has passed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Campaign:
    """Start an election now (with a pre-vote first if enabled)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Propose:
    """Append application data to the log (leader only)."""

    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ProposeConfigurationChange:
    """Change membership by one server (leader only, one change at a time)."""

    change: ConfigurationChange


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadIndex:
    """Ask for the commit index a linearizable read must wait for (leader only)."""

    context: bytes


LocalInput = Tick | Campaign | Propose | ProposeConfigurationChange | ReadIndex
