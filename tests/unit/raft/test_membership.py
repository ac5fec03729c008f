"""Membership: one-server changes and the history of configurations a log holds."""

from __future__ import annotations

import pytest

from mqbroker.raft.codec import encode_configuration
from mqbroker.raft.errors import ConfigurationChangeRefusedError
from mqbroker.raft.membership import ConfigurationHistory, changed
from mqbroker.raft.messages import Configuration, ConfigurationChange, ConfigurationChangeKind, Entry, EntryKind

THREE = Configuration(voters=frozenset({1, 2, 3}))


def _change(kind: ConfigurationChangeKind, node_id: int) -> ConfigurationChange:
    return ConfigurationChange(kind=kind, node_id=node_id)


def _entry(index: int, configuration: Configuration | None = None) -> Entry:
    if configuration is None:
        return Entry(term=1, index=index, kind=EntryKind.NORMAL, data=b"")
    return Entry(term=1, index=index, kind=EntryKind.CONFIGURATION, data=encode_configuration(configuration))


def test_a_learner_becomes_a_voter_and_a_voter_a_learner() -> None:
    with_learner = changed(THREE, _change(ConfigurationChangeKind.ADD_LEARNER, 4))
    assert with_learner == Configuration(voters=frozenset({1, 2, 3}), learners=frozenset({4}))
    promoted = changed(with_learner, _change(ConfigurationChangeKind.ADD_VOTER, 4))
    assert promoted == Configuration(voters=frozenset({1, 2, 3, 4}))
    assert changed(promoted, _change(ConfigurationChangeKind.ADD_LEARNER, 1)).learners == {1}


@pytest.mark.parametrize(
    ("kind", "node_id", "message"),
    [
        (ConfigurationChangeKind.ADD_VOTER, 2, "already a voter"),
        (ConfigurationChangeKind.REMOVE_NODE, 9, "not a member"),
    ],
)
def test_changes_that_change_nothing_are_refused(kind: ConfigurationChangeKind, node_id: int, message: str) -> None:
    with pytest.raises(ConfigurationChangeRefusedError, match=message):
        changed(THREE, _change(kind, node_id))


def test_removing_the_last_voter_is_refused() -> None:
    with pytest.raises(ConfigurationChangeRefusedError, match="no voters"):
        changed(Configuration(voters=frozenset({1})), _change(ConfigurationChangeKind.REMOVE_NODE, 1))


def test_the_history_knows_the_configuration_in_force_at_each_index() -> None:
    four = changed(THREE, _change(ConfigurationChangeKind.ADD_VOTER, 4))
    history = ConfigurationHistory(0, THREE)
    history.record([_entry(1), _entry(2, four), _entry(3)])
    assert history.current == four and history.current_index == 2
    assert history.at(1) == THREE and history.at(2) == four and history.at(3) == four


def test_replacing_entries_takes_their_configurations_back() -> None:
    four = changed(THREE, _change(ConfigurationChangeKind.ADD_VOTER, 4))
    history = ConfigurationHistory(0, THREE)
    history.record([_entry(1), _entry(2, four)])
    history.replace_from([_entry(2), _entry(3)])
    assert history.current == THREE and history.current_index == 0
    history.restart(10, four)
    assert history.current == four and history.at(10) == four
