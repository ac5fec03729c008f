"""Names clients choose are checked whole: printable, not empty, bounded.

Hypothesis generates topic names, group ids and user names and takes each through create →
checkpoint → restart: every name is either refused with the typed error or comes back unchanged
after the restart (a name ending in a newline used to split a line of the recovery checkpoint,
after which the broker could not start).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqbroker import errors
from mqbroker.core.topic_config import log_config_for
from mqbroker.groups.coordinator import GroupCoordinator
from mqbroker.groups.messages import GroupConfig, OffsetCommitRequest, PartitionCommit
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.offsets import OffsetStore
from mqbroker.model import ANONYMOUS, Acks, TopicSpec
from mqbroker.security.auth import CredentialStore, UserRecord
from mqbroker.security.names import name_problem
from mqbroker.storage.manager import LogManager
from tests.fakes import FakeClusterView, build_broker, fired

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
#: Names a client might send: plausible ones, the same with a newline or control character, anything.
names = st.one_of(
    st.from_regex(r"[A-Za-z0-9._-]{1,30}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9._-]{1,30}", fullmatch=True).map(lambda name: name + "\n"),
    st.tuples(st.from_regex(r"[a-z]{1,10}", fullmatch=True), st.sampled_from(["\n", "\r", "\x00", "\t", "\u2028"]),
              st.from_regex(r"[a-z]{0,10}", fullmatch=True)).map("".join),
    st.text(max_size=40),
)


def test_a_name_must_be_printable_not_empty_and_bounded() -> None:
    assert name_problem("orders-eu.1", 255) is None and name_problem("Zoë's group", 255) is None
    assert name_problem("", 255) == "is empty"
    assert name_problem("a" * 256, 255) == "has 256 characters; at most 255 are allowed"
    assert "'\\n' at position 6" in (name_problem("orders\n", 255) or "")
    assert name_problem("a\u200bb", 255) is not None  # a zero-width space (format character)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(wanted=st.lists(names, max_size=6, unique=True))
def test_topic_names_survive_create_checkpoint_and_restart_or_are_refused(wanted: list[str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        data_dir = Path(directory)
        rig = build_broker(data_dir, FakeClusterView())
        created = set()
        for name in wanted:
            try:
                fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name=name, partitions=1), False))
            except errors.InvalidTopicError:
                assert not (_TOPIC.fullmatch(name) and name not in (".", "..")) or name.startswith("__")
                continue
            assert _TOPIC.fullmatch(name), f"{name!r} was created"
            created.add((name, 0))
        rig.logs.checkpoint()
        rig.logs.close()
        restarted = LogManager(str(data_dir), log_config_for({}, {}))
        restarted.open_all(0)  # a torn checkpoint line would raise CorruptRecordError here
        assert set(restarted.partitions()) == created
        restarted.close()


@given(group_id=names)
def test_group_ids_survive_commit_and_replay_or_are_refused(group_id: str) -> None:
    coordinator = GroupCoordinator(config=GroupConfig(), partitions_per_topic=lambda topic: 1,
                                   new_member_id=lambda client_id: client_id, store=None, now_ms=0)
    commit = OffsetCommitRequest(group_id=group_id, offsets=(PartitionCommit(topic_partition=TopicPartition("t", 0), offset=7),))
    try:
        records = coordinator.commit_offsets(commit, 0)
    except errors.InvalidGroupIdError:
        assert name_problem(group_id, 255) is not None
        return
    assert name_problem(group_id, 255) is None
    replayed = OffsetStore.replay(records)  # the coordinator that takes over after a restart
    assert replayed.committed(group_id, TopicPartition("t", 0)).offset == 7


@given(user=names)
def test_user_names_survive_the_stored_record_or_are_refused(user: str) -> None:
    store = CredentialStore(lambda count: b"\x01" * count, iterations=4096)
    try:
        record = store.add(user, "a-password")
    except errors.InvalidRequestError as error:
        assert name_problem(user, 255) is not None and "user name" in str(error)
        return
    assert name_problem(user, 255) is None
    assert UserRecord.from_bytes(record.to_bytes()).name == user  # as the metadata snapshot restores it


@pytest.mark.parametrize("name", ["orders\n", "orders\r\n", "a\x00b", "", "a" * 250])
def test_the_names_that_broke_the_recovery_checkpoint_are_refused(tmp_path: Path, name: str) -> None:
    rig = build_broker(tmp_path, FakeClusterView())
    with pytest.raises(errors.InvalidTopicError):
        fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name=name), False))
    with pytest.raises(errors.InvalidTopicError):  # auto-creation by a produce checks the same way
        fired(rig.broker.produce(ANONYMOUS, name, 0, b"", Acks.LEADER, 1_000))
    assert rig.cluster.proposed == []
