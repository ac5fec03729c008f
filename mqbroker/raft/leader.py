# -*- test-case-name: tests.interaction.test_raft_scripts -*-
"""The leader's half of Raft: each member's replication progress, appends, snapshots, heartbeats and read-index.

A ``Leader`` lives while its node leads one term (``RaftCore`` makes one when it wins an
election and drops it when it steps down), so nothing here survives a change of leadership.
It decides what to send each member and records what they acknowledged; the core keeps the
role changes and the commit decision, and asks ``committed_index`` what a quorum holds.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from mqbroker.raft import quorum
from mqbroker.raft.errors import ConfigurationChangeRefusedError
from mqbroker.raft.log import RaftLog
from mqbroker.raft.membership import ConfigurationHistory
from mqbroker.raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Entry,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
    ReadState,
)
from mqbroker.raft.progress import Progress, ProgressState
from mqbroker.raft.settings import RaftSettings


class Leader:
    """What a node keeps only while it leads: followers' progress, reads awaiting a quorum, the pending change."""

    def __init__(
        self,
        settings: RaftSettings,
        term: int,
        log: RaftLog,
        configurations: ConfigurationHistory,
        send: Callable[[Message], None],
    ) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.term = term
        self.log = log
        self._configurations = configurations
        self._send = send
        self.progress: dict[int, Progress] = {}
        for node_id in sorted(configurations.current.members):
            self._add_progress(node_id)
        own = self.progress.get(self.node_id)
        if own is not None:
            own.become_replicate()
            own.recently_active = True
        #: The membership change (or this leader's first entry) that must commit before another may start.
        self.pending_configuration_index = 0
        self._heartbeat_elapsed = 0
        #: Reads waiting for the leader to commit an entry of its own term.
        self._reads_awaiting_commit: list[bytes] = []
        #: Reads waiting for a quorum of heartbeat acknowledgements: context -> (index, acks).
        self._read_requests: collections.OrderedDict[bytes, tuple[int, set[int]]] = collections.OrderedDict()

    def _add_progress(self, node_id: int) -> None:
        progress = Progress(
            next_index=self.log.last_index() + 1,
            inflight_messages_max=self.settings.inflight_messages_max,
            learner=node_id in self._configurations.current.learners,
        )
        if node_id == self.node_id:
            progress.match_index = self.log.last_index()
        self.progress[node_id] = progress

    def progress_report(self) -> dict[int, str]:
        """Each member's replication, for ``RaftCore.status``."""
        return {node_id: repr(progress) for node_id, progress in sorted(self.progress.items())}

    # ---- time and quorum ---------------------------------------------------------------------

    def tick(self) -> None:
        """One tick of logical time: heartbeat every ``heartbeat_ticks``."""
        self._heartbeat_elapsed += 1
        if self._heartbeat_elapsed >= self.settings.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._broadcast_heartbeat(next(reversed(self._read_requests), b""))

    def quorum_active(self) -> bool:
        """Whether a majority was heard from since the last call (check-quorum); starts the next round."""
        active = {node_id for node_id, progress in self.progress.items() if progress.recently_active}
        active.add(self.node_id)
        for node_id, progress in self.progress.items():
            progress.recently_active = node_id == self.node_id
        return quorum.has_quorum(self._configurations.current.voters, active)

    def committed_index(self) -> int:
        """The highest index a quorum of voters holds."""
        match_index = {node_id: progress.match_index for node_id, progress in self.progress.items()}
        return quorum.committed_index(self._configurations.current.voters, match_index)

    def committed_in_term(self) -> bool:
        """Whether an entry of this leader's term is committed (reads and membership changes wait for one)."""
        return self.log.term(self.log.committed) == self.term

    # ---- membership ----------------------------------------------------------------------------

    def check_no_change_pending(self) -> None:
        """Refuse a membership change while the previous one (or this leader's first entry) is uncommitted."""
        if self.pending_configuration_index > self.log.committed:
            raise ConfigurationChangeRefusedError(
                f"the membership change at index {self.pending_configuration_index} (or this leader's first"
                " entry) is not committed yet; retry once it is"
            )

    def appended(self, index: int) -> None:
        """This leader appended up to ``index``: it holds it itself."""
        own = self.progress.get(self.node_id)
        if own is not None:
            own.maybe_update(index)

    def configuration_changed(self) -> None:
        """Track the members of the new configuration, and only them."""
        configuration = self._configurations.current
        members = configuration.members
        for node_id in sorted(set(self.progress) - members):
            del self.progress[node_id]
        for node_id in sorted(members):
            if node_id not in self.progress:
                self._add_progress(node_id)
            self.progress[node_id].learner = node_id in configuration.learners

    # ---- replies from followers ------------------------------------------------------------

    def handle_append_response(self, message: AppendEntriesResponse) -> bool:
        """Take a follower's answer to an append; True when it acknowledged more (the commit may move).

        The caller then commits what it can and calls ``send_more`` for that follower.
        """
        progress = self.progress.get(message.from_id)
        if progress is None:
            return False  # no longer a member
        progress.recently_active = True
        if message.rejected:
            next_probe = message.hint_index
            if message.hint_term > 0:
                next_probe, _ = self.log.find_conflict_by_term(message.hint_index, message.hint_term)
            if progress.maybe_decrement_to(message.index, next_probe):
                if progress.state is ProgressState.REPLICATE:
                    progress.become_probe()
                self.send_append(message.from_id)
            return False
        confirms_probe = progress.match_index == message.index and progress.state is ProgressState.PROBE
        if not (progress.maybe_update(message.index) or confirms_probe):
            return False
        if progress.state is ProgressState.PROBE:
            progress.become_replicate()
        elif progress.state is ProgressState.SNAPSHOT:
            if progress.match_index + 1 >= self.log.first_index():
                progress.become_probe()
                progress.become_replicate()
        else:
            progress.inflights.free_up_to(message.index)
        return True

    def send_more(self, node_id: int) -> None:
        """Fill ``node_id``'s window with the entries it lacks, or at least tell it the commit index."""
        progress = self.progress[node_id]
        sent = False
        while self.send_append(node_id, send_if_empty=False):
            sent = True
        if not sent and progress.commit_sent < min(self.log.committed, progress.match_index):
            self.send_append(node_id)  # only to tell it the commit index

    def handle_heartbeat_response(self, message: HeartbeatResponse) -> list[ReadState]:
        """Take a heartbeat reply; return the reads it confirmed."""
        progress = self.progress.get(message.from_id)
        if progress is None:
            return []  # no longer a member
        progress.recently_active = True
        progress.probe_sent = False
        if progress.state is ProgressState.REPLICATE and progress.inflights.full():
            progress.inflights.free_first()  # an acknowledgement was lost: reopen the window
        if progress.state is ProgressState.SNAPSHOT:
            progress.snapshot_heartbeats += 1
            if progress.snapshot_heartbeats > self.settings.snapshot_retry_heartbeats:
                progress.become_probe()  # the snapshot was probably lost: offer it again
        if progress.match_index < self.log.last_index():
            self.send_append(message.from_id)
        if message.context:
            return self._acknowledge_read(message.from_id, message.context)
        return []

    # ---- sending ---------------------------------------------------------------------------

    def broadcast_append(self) -> None:
        """Send every other member what it lacks."""
        for node_id in sorted(self.progress):
            if node_id != self.node_id:
                self.send_append(node_id)

    def _broadcast_heartbeat(self, context: bytes) -> None:
        for node_id, progress in sorted(self.progress.items()):
            if node_id != self.node_id:
                commit_index = min(progress.match_index, self.log.committed)
                self._send(
                    Heartbeat(
                        term=self.term, from_id=self.node_id, to_id=node_id, commit_index=commit_index, context=context
                    )
                )

    def send_append(self, node_id: int, *, send_if_empty: bool = True) -> bool:
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

    def read_index(self, context: bytes) -> ReadState | None:
        """Start a linearizable read; its ``ReadState`` now if this node is the only voter, else later."""
        if self._configurations.current.voters == {self.node_id}:
            return ReadState(index=self.log.committed, context=context)
        if not self.committed_in_term():
            self._reads_awaiting_commit.append(context)
        else:
            self._start_reads([context])
        return None

    def release_reads_awaiting_commit(self) -> None:
        """An entry of this term committed: confirm the reads that waited for it."""
        if self._reads_awaiting_commit:
            contexts, self._reads_awaiting_commit = self._reads_awaiting_commit, []
            self._start_reads(contexts)

    def _start_reads(self, contexts: list[bytes]) -> None:
        for context in contexts:
            self._read_requests.setdefault(context, (self.log.committed, {self.node_id}))
        self._broadcast_heartbeat(contexts[-1])

    def _acknowledge_read(self, node_id: int, context: bytes) -> list[ReadState]:
        request = self._read_requests.get(context)
        if request is None:
            return []
        request[1].add(node_id)
        if not quorum.has_quorum(self._configurations.current.voters, request[1]):
            return []
        # A quorum confirmed this node still leads at this context: so it did for every earlier one.
        released = []
        while self._read_requests:
            released_context, (index, _) = self._read_requests.popitem(last=False)
            released.append(ReadState(index=index, context=released_context))
            if released_context == context:
                break
        return released
