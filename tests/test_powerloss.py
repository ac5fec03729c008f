"""The power-loss file system itself: what survives a simulated power loss, and what it throws away."""

from __future__ import annotations

import os
import pathlib
import random

import pytest
from zope.interface.verify import verifyObject

from mqbroker.storage import checkpoint, fs
from tests.powerloss import PowerCut, PowerLossFileSystem, SeamBypassedError, power_loss_disks

SEEDS = range(40)


def _write(path: pathlib.Path, data: bytes, mode: str = "wb", *, sync: bool = False) -> None:
    with fs.open_file(str(path), mode) as file:
        file.write(data)
        file.flush()
        if sync:
            fs.fsync(file.fileno())


def test_both_file_systems_provide_the_seam() -> None:
    assert verifyObject(fs.IFileSystem, fs.OsFileSystem())
    assert verifyObject(fs.IFileSystem, PowerLossFileSystem())


def test_fsynced_bytes_and_names_survive_and_nothing_else_does(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        _write(tmp_path / "kept", b"durable", sync=True)
        fs.fsync_path(str(tmp_path))
        _write(tmp_path / "kept", b" and not", "ab")
        _write(tmp_path / "new", b"never synced")
        disk.crash(random.Random(0), lose_everything=True)
    assert os.listdir(tmp_path) == ["kept"]
    assert (tmp_path / "kept").read_bytes() == b"durable"


def test_a_synced_file_whose_directory_was_not_synced_is_lost(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        _write(tmp_path / "orphan", b"synced bytes, unsynced name", sync=True)
        disk.crash(random.Random(0), lose_everything=True)
    assert os.listdir(tmp_path) == []


def test_a_rename_without_a_directory_fsync_is_lost_and_a_replace_is_not(tmp_path: pathlib.Path) -> None:
    file_system = PowerLossFileSystem()
    disk = file_system.add_disk(str(tmp_path))
    with fs.use(file_system):
        for name, data in (("a.tmp", b"new"), ("b.tmp", b"new"), ("a", b"old"), ("b", b"old")):
            _write(tmp_path / name, data, sync=True)
        fs.fsync_path(str(tmp_path))
        fs.replace(str(tmp_path / "b.tmp"), str(tmp_path / "b"))  # rename + directory fsync
        file_system.rename(str(tmp_path / "a.tmp"), str(tmp_path / "a"))  # a bare rename after it
        disk.crash(random.Random(0), lose_everything=True)
    assert sorted(os.listdir(tmp_path)) == ["a", "a.tmp", "b"]
    assert (tmp_path / "a").read_bytes() == b"old" and (tmp_path / "b").read_bytes() == b"new"


def test_an_unsynced_unlink_brings_the_file_back_with_its_durable_bytes(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        _write(tmp_path / "doomed", b"durable", sync=True)
        fs.fsync_path(str(tmp_path))
        fs.unlink(str(tmp_path / "doomed"))
        disk.crash(random.Random(0), lose_everything=True)
    assert (tmp_path / "doomed").read_bytes() == b"durable"


def test_atomic_writes_leave_the_old_or_the_new_file_whatever_the_power_loss(tmp_path: pathlib.Path) -> None:
    outcomes = set()
    for seed in SEEDS:
        directory = tmp_path / str(seed)
        with power_loss_disks(str(directory)) as (disk,):
            checkpoint.write_offset(str(directory / "c"), 1)
            checkpoint.write_offset(str(directory / "c"), 2)
            disk.cut_power_after(random.Random(seed).randint(1, 4))
            with pytest.raises(PowerCut):
                checkpoint.write_offset(str(directory / "c"), 3)
            disk.crash(random.Random(seed))
        outcomes.add(checkpoint.read_offset(str(directory / "c")))
    assert outcomes <= {2, 3} and len(outcomes) == 2


def test_unsynced_appends_are_torn_at_arbitrary_bytes_sectors_and_sizes(tmp_path: pathlib.Path) -> None:
    durable, appended = b"d" * 1000, b"n" * 3000
    survivors = []
    for seed in SEEDS:
        directory = tmp_path / str(seed)
        with power_loss_disks(str(directory)) as (disk,):
            _write(directory / "f", durable, sync=True)
            fs.fsync_path(str(directory))
            _write(directory / "f", appended, "ab")
            disk.crash(random.Random(seed))
        survivors.append((directory / "f").read_bytes())
    assert all(data.startswith(durable) for data in survivors), "fsynced bytes were lost"
    assert any(len(durable) < len(data) < len(durable + appended) for data in survivors), "no write was cut short"
    assert any(b"\x00" in data for data in survivors), "no size outran its data"
    assert any(data == durable for data in survivors) and any(data == durable + appended for data in survivors)


def test_a_power_cut_interrupts_the_chosen_call(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        disk.cut_power_after(2)
        _write(tmp_path / "first", b"x")
        with pytest.raises(PowerCut):
            _write(tmp_path / "second", b"y")
        assert not (tmp_path / "second").exists()
        disk.crash(random.Random(0), lose_everything=True)
    assert os.listdir(tmp_path) == []


def test_a_change_that_bypasses_the_seam_is_reported(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        (tmp_path / "sneaky").write_bytes(b"")
        with pytest.raises(SeamBypassedError, match="sneaky"):
            fs.fsync_path(str(tmp_path))
        with pytest.raises(SeamBypassedError):
            disk.crash(random.Random(0))


def test_with_a_no_op_fsync_nothing_unsynced_survives(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path), fsync_works=False) as (disk,):
        _write(tmp_path / "f", b"data", sync=True)
        fs.fsync_path(str(tmp_path))
        disk.crash(random.Random(0), lose_everything=True)
    assert os.listdir(tmp_path) == []


def test_paths_outside_every_disk_go_to_the_operating_system(tmp_path: pathlib.Path) -> None:
    (tmp_path / "disk").mkdir()
    with power_loss_disks(str(tmp_path / "disk")) as (disk,):
        _write(tmp_path / "outside", b"real", sync=True)
        fs.makedirs(str(tmp_path / "elsewhere" / "deep"))
        disk.crash(random.Random(0), lose_everything=True)
    assert (tmp_path / "outside").read_bytes() == b"real" and (tmp_path / "elsewhere" / "deep").is_dir()


def test_keeping_everything_is_what_a_killed_process_leaves(tmp_path: pathlib.Path) -> None:
    with power_loss_disks(str(tmp_path)) as (disk,):
        _write(tmp_path / "f", b"never synced")
        fs.unlink(str(tmp_path / "f"))
        _write(tmp_path / "g", b"written")
        disk.crash(random.Random(0), keep_everything=True)
    assert os.listdir(tmp_path) == ["g"] and (tmp_path / "g").read_bytes() == b"written"
