"""The leader's view of one follower: how far it matches, what to send next, and how fast.

A follower starts in PROBE (one append in flight until it answers, to find where the logs
match), moves to REPLICATE (appends are pipelined, bounded by an in-flight window) once it
acknowledges, and to SNAPSHOT while it installs a snapshot because the entries it needs are
compacted away.
"""

from __future__ import annotations

import collections
import enum


class ProgressState(enum.Enum):
    """How the leader sends to one follower."""

    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Inflights:
    """The last index of each append in flight, oldest first, bounded by ``messages_max``."""

    def __init__(self, messages_max: int) -> None:
        assert messages_max > 0
        self.messages_max = messages_max
        self._last_indexes: collections.deque[int] = collections.deque()

    def __len__(self) -> int:
        return len(self._last_indexes)

    def full(self) -> bool:
        """Whether the window is closed until an acknowledgement frees a slot."""
        return len(self._last_indexes) >= self.messages_max

    def add(self, last_index: int) -> None:
        """Record an append whose last entry is ``last_index``."""
        assert not self.full(), "sent past the in-flight window"
        assert not self._last_indexes or self._last_indexes[-1] < last_index
        self._last_indexes.append(last_index)

    def free_up_to(self, index: int) -> None:
        """Forget every append acknowledged by an acknowledgement of ``index``."""
        while self._last_indexes and self._last_indexes[0] <= index:
            self._last_indexes.popleft()

    def free_first(self) -> None:
        """Free one slot without an acknowledgement (its append was probably lost)."""
        if self._last_indexes:
            self._last_indexes.popleft()

    def clear(self) -> None:
        """Forget every append in flight."""
        self._last_indexes.clear()


class Progress:
    """Replication progress of one follower, as tracked by the leader."""

    def __init__(self, *, next_index: int, inflight_messages_max: int, learner: bool) -> None:
        assert next_index >= 1
        self.match_index = 0
        self.next_index = next_index
        self.state = ProgressState.PROBE
        self.learner = learner
        #: In PROBE, an append is out and unanswered: send nothing more until a heartbeat reply.
        self.probe_sent = False
        #: The snapshot index being installed (SNAPSHOT state only).
        self.pending_snapshot_index = 0
        #: Heartbeat replies received while a snapshot is pending: too many means it was lost.
        self.snapshot_heartbeats = 0
        #: The highest commit index sent in an append (a follower may not know a newer one).
        self.commit_sent = 0
        #: Heard from since the last check-quorum round.
        self.recently_active = False
        self.inflights = Inflights(inflight_messages_max)

    def __repr__(self) -> str:
        return (
            f"Progress(state={self.state.value}, match={self.match_index}, next={self.next_index}, "
            f"inflight={len(self.inflights)})"
        )

    def _reset_state(self, state: ProgressState) -> None:
        self.state = state
        self.probe_sent = False
        self.pending_snapshot_index = 0
        self.snapshot_heartbeats = 0
        self.inflights.clear()

    def become_probe(self) -> None:
        """Send one append at a time until the follower's match point is known."""
        if self.state is ProgressState.SNAPSHOT:
            # The snapshot may or may not have arrived: probe just after it, at worst it is resent.
            next_index = max(self.match_index + 1, self.pending_snapshot_index + 1)
        else:
            next_index = self.match_index + 1
        self._reset_state(ProgressState.PROBE)
        self.next_index = next_index

    def become_replicate(self) -> None:
        """Pipeline appends right after the known match point."""
        self._reset_state(ProgressState.REPLICATE)
        self.next_index = self.match_index + 1

    def become_snapshot(self, snapshot_index: int) -> None:
        """Stop appending while the follower installs the snapshot at ``snapshot_index``."""
        self._reset_state(ProgressState.SNAPSHOT)
        self.pending_snapshot_index = snapshot_index

    def maybe_update(self, index: int) -> bool:
        """Record an acknowledgement of ``index``; False if it is stale."""
        updated = index > self.match_index
        if updated:
            self.match_index = index
            self.probe_sent = False
        self.next_index = max(self.next_index, index + 1)
        return updated

    def sent_entries(self, last_index: int, commit_index: int) -> None:
        """Account for an append just sent; ``last_index`` is its last entry (its previous index if empty)."""
        self.commit_sent = max(self.commit_sent, commit_index)
        if self.state is ProgressState.REPLICATE:
            if last_index >= self.next_index:
                self.next_index = last_index + 1
                self.inflights.add(last_index)
        else:
            assert self.state is ProgressState.PROBE
            self.probe_sent = True

    def maybe_decrement_to(self, rejected_index: int, hint_index: int) -> bool:
        """Back off after the follower rejected ``rejected_index``; False if the rejection is stale."""
        if self.state is ProgressState.REPLICATE:
            if rejected_index <= self.match_index:
                return False  # an old append that was rejected before the follower caught up
            self.next_index = self.match_index + 1
            return True
        if self.next_index - 1 != rejected_index:
            return False  # not a reply to the probe we have out
        self.next_index = max(min(rejected_index, hint_index + 1), self.match_index + 1)
        self.probe_sent = False
        return True

    def paused(self) -> bool:
        """Whether the leader must not send appends now."""
        if self.state is ProgressState.PROBE:
            return self.probe_sent
        if self.state is ProgressState.REPLICATE:
            return self.inflights.full()
        return True
