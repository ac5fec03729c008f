"""The tunables of one Raft node, and the random source its election jitter comes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mqbroker.raft.messages import NO_NODE


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
