# -*- test-case-name: tests.interaction.test_raft_scripts -*-
"""The follower's half of log replication: take a leader's append, heartbeat or snapshot and answer it.

An append is accepted only where this log matches the leader's at the previous index; a
rejection carries a hint (an index and term found by ``RaftLog.find_conflict_by_term``) so the
leader skips a whole conflicting term at once. Entries already held are never truncated by a
stale, shorter append, and the commit index only moves up to what the append proved matches.
"""

from __future__ import annotations

from mqbroker.raft.log import RaftLog
from mqbroker.raft.membership import ConfigurationHistory
from mqbroker.raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    Message,
)


def answer_leader(
    node_id: int,
    term: int,
    log: RaftLog,
    configurations: ConfigurationHistory,
    message: AppendEntries | Heartbeat | InstallSnapshot,
) -> Message:
    """Apply ``message`` from the leader of ``term`` to ``log`` (and its membership); return the reply to send."""
    match message:
        case AppendEntries():
            return _append(node_id, term, log, configurations, message)
        case Heartbeat():
            log.commit_to(message.commit_index)
            return HeartbeatResponse(term=term, from_id=node_id, to_id=message.from_id, context=message.context)
        case InstallSnapshot():
            return _install_snapshot(node_id, term, log, configurations, message)


def _append(
    node_id: int, term: int, log: RaftLog, configurations: ConfigurationHistory, message: AppendEntries
) -> AppendEntriesResponse:
    reply = AppendEntriesResponse(term=term, from_id=node_id, to_id=message.from_id, index=log.committed)
    if message.previous_index < log.committed:
        return reply
    if not log.matches(message.previous_index, message.previous_term):
        hint_index, hint_term = log.find_conflict_by_term(
            min(message.previous_index, log.last_index()), message.previous_term
        )
        return AppendEntriesResponse(
            term=term,
            from_id=node_id,
            to_id=message.from_id,
            index=message.previous_index,
            rejected=True,
            hint_index=hint_index,
            hint_term=hint_term,
        )
    for position, entry in enumerate(message.entries):
        if not log.matches(entry.index, entry.term):
            # Entries already held are skipped: a stale, shorter append must not truncate newer ones.
            log.append(message.entries[position:])
            configurations.replace_from(message.entries[position:])
            break
    last_new_index = message.previous_index + len(message.entries)
    log.commit_to(min(message.commit_index, last_new_index))
    return AppendEntriesResponse(term=term, from_id=node_id, to_id=message.from_id, index=last_new_index)


def _install_snapshot(
    node_id: int, term: int, log: RaftLog, configurations: ConfigurationHistory, message: InstallSnapshot
) -> AppendEntriesResponse:
    metadata = message.snapshot.metadata
    if metadata.index > log.committed:
        if log.matches(metadata.index, metadata.term):
            # This log already holds the snapshot's last entry: it only learns the commit point.
            log.commit_to(metadata.index)
        else:
            log.restore(message.snapshot)
            configurations.restart(metadata.index, metadata.configuration)
            return AppendEntriesResponse(term=term, from_id=node_id, to_id=message.from_id, index=log.last_index())
    return AppendEntriesResponse(term=term, from_id=node_id, to_id=message.from_id, index=log.committed)
