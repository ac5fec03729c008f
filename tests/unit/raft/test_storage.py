"""Raft storage: the in-memory and file implementations keep the IRaftStorage contract; files recover."""

from __future__ import annotations

import os
import pathlib
import random

import pytest
from zope.interface.verify import verifyObject

from mqbroker.raft.log import IRaftStorage
from mqbroker.raft.memory_storage import MemoryRaftStorage
from mqbroker.raft.messages import Configuration, Entry, EntryKind, HardState, Snapshot, SnapshotMetadata
from mqbroker.raft.storage import ENTRIES_FILE, HARD_STATE_FILE, SNAPSHOT_FILE, FileRaftStorage
from mqbroker.storage.errors import CorruptFileError
from tests.powerloss import power_loss_disks

VOTERS = Configuration(voters=frozenset({1, 2, 3}))


def entries(first: int, last: int, term: int = 1) -> list[Entry]:
    return [Entry(term=term, index=index, data=f"e{index}".encode()) for index in range(first, last + 1)]


def snapshot_at(index: int, term: int = 1) -> Snapshot:
    return Snapshot(metadata=SnapshotMetadata(index=index, term=term, configuration=VOTERS), data=b"state")


@pytest.fixture(params=["memory", "file"])
def storage(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> IRaftStorage:
    if request.param == "memory":
        return MemoryRaftStorage(VOTERS)
    return FileRaftStorage.open(str(tmp_path / "raft"), bootstrap=Snapshot(metadata=SnapshotMetadata(configuration=VOTERS)))


def test_implementations_provide_the_interface(storage: IRaftStorage) -> None:
    assert verifyObject(IRaftStorage, storage)


def test_new_storage_is_empty_with_its_bootstrap_configuration(storage: IRaftStorage) -> None:
    assert (storage.first_index(), storage.last_index(), storage.term(0)) == (1, 0, 0)
    assert storage.snapshot().metadata.configuration == VOTERS
    assert storage.hard_state() == HardState()


def test_saved_entries_are_read_back_by_range(storage: IRaftStorage) -> None:
    storage.save(HardState(term=1, vote=2, commit=0), entries(1, 5), None)
    assert storage.entries(2, 4) == entries(2, 3)
    assert (storage.last_index(), storage.term(5)) == (5, 1)
    assert storage.hard_state() == HardState(term=1, vote=2, commit=0)


def test_entries_saved_at_an_existing_index_replace_it_and_the_rest(storage: IRaftStorage) -> None:
    storage.save(None, entries(1, 5), None)
    storage.save(None, entries(3, 4, term=2), None)
    assert storage.last_index() == 4
    assert [entry.term for entry in storage.entries(1, 5)] == [1, 1, 2, 2]


def test_compaction_keeps_the_snapshot_term_at_the_boundary(storage: IRaftStorage) -> None:
    storage.save(None, entries(1, 5), None)
    storage.compact(snapshot_at(3))
    assert (storage.first_index(), storage.last_index(), storage.term(3)) == (4, 5, 1)
    assert storage.entries(4, 6) == entries(4, 5)


def test_saved_snapshot_replaces_the_whole_log(storage: IRaftStorage) -> None:
    storage.save(None, entries(1, 3), None)
    storage.save(HardState(term=2, commit=10), entries(11, 12, term=2), snapshot_at(10, term=2))
    assert (storage.first_index(), storage.last_index(), storage.term(10)) == (11, 12, 2)
    assert storage.snapshot().data == b"state"


def reopen(storage: FileRaftStorage) -> FileRaftStorage:
    storage.close()
    return FileRaftStorage.open(storage.directory)


def test_file_storage_recovers_everything_saved(tmp_path: pathlib.Path) -> None:
    storage = FileRaftStorage.open(str(tmp_path))
    storage.save(HardState(term=3, vote=1, commit=2), entries(1, 4), None)
    storage.save(None, [Entry(term=3, index=5, kind=EntryKind.CONFIGURATION, data=b"\x00\x00\x00\x00")], None)
    storage.compact(snapshot_at(2))
    recovered = reopen(storage)
    assert recovered.hard_state() == HardState(term=3, vote=1, commit=2)
    assert recovered.snapshot() == snapshot_at(2)
    assert recovered.entries(3, 6) == storage.entries(3, 6)


def test_file_storage_recovers_after_a_conflicting_overwrite(tmp_path: pathlib.Path) -> None:
    storage = FileRaftStorage.open(str(tmp_path))
    storage.save(None, entries(1, 5), None)
    storage.save(None, entries(3, 3, term=2), None)
    storage.save(None, entries(4, 4, term=2), None)
    recovered = reopen(storage)
    assert [entry.term for entry in recovered.entries(1, 5)] == [1, 1, 2, 2]


def test_torn_tail_is_truncated_on_recovery(tmp_path: pathlib.Path) -> None:
    storage = FileRaftStorage.open(str(tmp_path))
    storage.save(None, entries(1, 3), None)
    storage.close()
    path = tmp_path / ENTRIES_FILE
    size = path.stat().st_size
    with open(path, "ab") as file:
        file.write(b"\x00\x00\x00\x30garbage")  # a record header promising more than was written
    recovered = FileRaftStorage.open(str(tmp_path))
    assert recovered.last_index() == 3
    assert path.stat().st_size == size
    recovered.save(None, entries(4, 4), None)
    assert reopen(recovered).entries(1, 5) == entries(1, 4)


def test_corrupt_record_ends_the_log(tmp_path: pathlib.Path) -> None:
    storage = FileRaftStorage.open(str(tmp_path))
    storage.save(None, entries(1, 3), None)
    storage.close()
    path = tmp_path / ENTRIES_FILE
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last entry's data no longer matches its CRC
    path.write_bytes(bytes(data))
    assert FileRaftStorage.open(str(tmp_path)).last_index() == 2


def test_entries_left_behind_by_an_interrupted_snapshot_install_are_dropped(tmp_path: pathlib.Path) -> None:
    storage = FileRaftStorage.open(str(tmp_path))
    storage.save(None, entries(1, 5), None)
    storage.close()
    # As if the node died after writing a leader's snapshot (index 4, term 2) but before clearing the log.
    other = FileRaftStorage.open(str(tmp_path / "other"))
    other.save(None, [], snapshot_at(4, term=2))
    other.close()
    os.replace(tmp_path / "other" / SNAPSHOT_FILE, tmp_path / SNAPSHOT_FILE)
    recovered = FileRaftStorage.open(str(tmp_path))
    assert (recovered.first_index(), recovered.last_index()) == (5, 4)
    recovered.save(None, entries(5, 6, term=2), None)
    assert reopen(recovered).entries(5, 7) == entries(5, 6, term=2)


def test_corrupt_hard_state_is_an_error_not_a_silent_reset(tmp_path: pathlib.Path) -> None:
    storage = FileRaftStorage.open(str(tmp_path))
    storage.save(HardState(term=5, vote=2), [], None)
    storage.close()
    path = tmp_path / HARD_STATE_FILE
    path.write_bytes(b"\x00" + path.read_bytes()[1:])
    with pytest.raises(CorruptFileError, match="fails its CRC"):
        FileRaftStorage.open(str(tmp_path))


def test_term_and_vote_reach_the_disk_while_the_commit_index_may_lag(tmp_path: pathlib.Path) -> None:
    storage = FileRaftStorage.open(str(tmp_path))
    storage.save(HardState(term=2, vote=3, commit=0), entries(1, 2, term=2), None)
    storage.save(HardState(term=2, vote=3, commit=2), [], None)
    recovered = reopen(storage)
    assert (recovered.hard_state().term, recovered.hard_state().vote) == (2, 3)
    assert recovered.hard_state().commit in (0, 2)  # a lagging commit index is relearned from the leader


def test_raft_files_are_private_whatever_the_umask(tmp_path) -> None:
    """The metadata log holds users' SCRAM keys: 0600 files in a 0700 directory, even under umask 000."""
    import stat

    from mqbroker.raft.messages import Entry, HardState

    previous = os.umask(0)
    try:
        directory = tmp_path / "raft"
        storage = FileRaftStorage.open(str(directory))
        storage.save(HardState(term=1, vote=1, commit=0), [Entry(term=1, index=1, data=b"user")], None)
        storage.close()
    finally:
        os.umask(previous)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for path in directory.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path.name


def test_raft_files_written_world_readable_before_are_made_private_on_open(tmp_path) -> None:
    import stat

    directory = tmp_path / "raft"
    FileRaftStorage.open(str(directory)).close()
    os.chmod(directory, 0o755)
    for path in directory.iterdir():
        os.chmod(path, 0o644)
    FileRaftStorage.open(str(directory)).close()
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert {stat.S_IMODE(path.stat().st_mode) for path in directory.iterdir()} == {0o600}


def test_a_new_node_remembers_its_first_vote_through_a_power_loss(tmp_path: pathlib.Path) -> None:
    directory = tmp_path / "data" / "raft"  # made by the node's first start
    with power_loss_disks(str(tmp_path)) as (disk,):
        storage = FileRaftStorage.open(str(directory))
        storage.save(HardState(term=3, vote=2), entries(1, 2, term=3), None)  # durable when save returns
        disk.crash(random.Random(0), lose_everything=True)
        recovered = FileRaftStorage.open(str(directory))
    assert (recovered.hard_state().term, recovered.hard_state().vote) == (3, 2)
    assert recovered.entries(1, 3) == entries(1, 2, term=3)
