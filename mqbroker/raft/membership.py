# -*- test-case-name: tests.unit.raft.test_membership -*-
"""Membership: the configurations a node's log holds, and the one-server change rule.

A configuration takes effect as soon as its entry is appended, committed or not (Ongaro's
single-server changes), so a node tracks every configuration entry after its snapshot: an
append that replaces entries may take newer configurations back, and a snapshot keeps the one
in force at its index.
"""

from __future__ import annotations

from collections.abc import Sequence

from mqbroker.raft.codec import decode_configuration
from mqbroker.raft.errors import ConfigurationChangeRefusedError
from mqbroker.raft.messages import Configuration, ConfigurationChange, ConfigurationChangeKind, Entry, EntryKind


class ConfigurationHistory:
    """(index, configuration) of the snapshot and of every configuration entry after it, oldest first."""

    def __init__(self, index: int, configuration: Configuration) -> None:
        self._configurations: list[tuple[int, Configuration]] = [(index, configuration)]

    @property
    def current(self) -> Configuration:
        """The membership in force: the newest one in the log, committed or not."""
        return self._configurations[-1][1]

    @property
    def current_index(self) -> int:
        """The index of the entry (or snapshot) that holds the current membership."""
        return self._configurations[-1][0]

    def at(self, index: int) -> Configuration:
        """The membership in force once the log up to ``index`` is applied."""
        return [configuration for at_index, configuration in self._configurations if at_index <= index][-1]

    def record(self, entries: Sequence[Entry]) -> None:
        """Take the configuration entries among ``entries``, which follow every entry seen so far."""
        for entry in entries:
            if entry.kind is EntryKind.CONFIGURATION:
                self._configurations.append((entry.index, decode_configuration(entry.data)))

    def replace_from(self, entries: Sequence[Entry]) -> None:
        """Take ``entries``, which replaced any entries from their first index on."""
        first = entries[0].index
        while self._configurations[-1][0] >= first:
            self._configurations.pop()
        assert self._configurations, "truncated below the snapshot's configuration"
        self.record(entries)

    def restart(self, index: int, configuration: Configuration) -> None:
        """Forget everything: a snapshot at ``index`` with ``configuration`` replaced the log."""
        self._configurations = [(index, configuration)]


def changed(configuration: Configuration, change: ConfigurationChange) -> Configuration:
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
