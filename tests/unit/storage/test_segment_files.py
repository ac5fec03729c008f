"""The bounded set of open segment files: opened on demand, least recently used closed, pinned ones never.

Real files and descriptors; the logs above it must read back every byte they wrote however
often their files were closed and reopened, from several threads at once, and every (re)open
must go through the storage ``fs`` seam the power-loss file system watches.
"""

from __future__ import annotations

import os
import random
import threading

import pytest

from mqbroker.storage import fs
from mqbroker.storage.manager import LogManager
from mqbroker.storage.segment_files import SegmentFiles
from tests.powerloss import PowerLossFileSystem
from tests.unit.storage.logtools import SMALL_SEGMENTS, open_log, payload_batch, read_all


def _files(tmp_path, names: list[str], open_max: int):
    files = SegmentFiles(open_max)
    made = []
    for name in names:
        path = tmp_path / name
        path.write_bytes(name.encode())
        made.append(files.file(str(path)))
    return files, made


def _use(log_file) -> bytes:
    fd = log_file.pin()
    try:
        return os.pread(fd, 16, 0)
    finally:
        log_file.unpin()


def test_files_open_on_demand_and_the_least_recently_used_close_beyond_the_bound(tmp_path):
    files, (a, b, c) = _files(tmp_path, ["a", "b", "c"], open_max=2)
    assert files.open_count == 0 and a.fd is None
    assert _use(a) == b"a" and _use(b) == b"b"
    _use(a)  # a is now more recently used than b
    assert _use(c) == b"c"
    assert files.open_count == 2 and b.fd is None and a.fd is not None and c.fd is not None
    assert _use(b) == b"b"  # a cold file reopens
    assert a.fd is None and files.opens == 4 and files.evictions == 2


def test_a_pinned_file_is_never_closed_and_the_bound_comes_back_when_it_is_unpinned(tmp_path):
    files, (a, b, c) = _files(tmp_path, ["a", "b", "c"], open_max=1)
    fd = a.pin()
    b.pin()
    assert files.open_count == 2  # over the bound while both are pinned
    b.unpin()
    assert files.open_count == 1 and b.fd is None  # the unpinned one goes at once
    assert _use(c) == b"c" and c.fd is None
    assert os.pread(fd, 1, 0) == b"a" and a.fd == fd  # still open: b, then c, were closed instead
    a.unpin()
    assert files.open_count == 1 and a.fd == fd  # within the bound again: a stays open


def test_closing_a_pinned_file_waits_for_its_last_unpin(tmp_path):
    files, (a,) = _files(tmp_path, ["a"], open_max=4)
    fd = a.pin()
    a.close()  # e.g. its segment deleted while an fsync of it is in flight
    os.fsync(fd)
    a.unpin()
    assert a.fd is None and files.open_count == 0
    with pytest.raises(OSError):
        os.fstat(fd)


def test_a_reopen_never_brings_back_a_file_that_is_gone(tmp_path):
    files, (a,) = _files(tmp_path, ["a"], open_max=1)
    _use(a)
    a.close()
    os.unlink(a.path)
    with pytest.raises(FileNotFoundError):
        a.pin()
    assert not os.path.exists(a.path) and files.open_count == 0


def test_a_log_reads_back_every_segment_with_two_files_open(tmp_path):
    files = SegmentFiles(2)
    log = open_log(tmp_path, SMALL_SEGMENTS, files=files)
    written = [payload_batch(tag, value_bytes=400) for tag in range(60)]
    for batch in written:
        log.append(batch, now_ms=0)
    assert len(log.segment_bases()) > 5
    log.flush()
    assert files.open_count <= 2
    assert len(read_all(log)) == 60
    assert files.open_count <= 2 and files.evictions > 0
    log.close()
    assert files.open_count == 0


def test_a_log_manager_holds_its_bound_over_many_partitions(tmp_path):
    manager = LogManager(str(tmp_path), SMALL_SEGMENTS, segment_files_open_max=8)
    before = len(os.listdir("/proc/self/fd"))
    for partition in range(40):
        manager.create("topic", partition).append(payload_batch(partition), now_ms=0)
    for partition in range(40):
        log = manager.get("topic", partition)
        log.flush()
        assert len(read_all(log)) == 1
    assert manager.segment_files.open_count <= 8
    assert len(os.listdir("/proc/self/fd")) - before <= 8
    manager.close()
    restarted = LogManager(str(tmp_path), SMALL_SEGMENTS, segment_files_open_max=8)
    restarted.open_all(now_ms=0)
    assert restarted.segment_files.open_count <= 8
    assert all(len(read_all(restarted.get("topic", partition))) == 1 for partition in range(40))
    restarted.close()


def test_logs_appended_and_read_from_several_threads_keep_their_bytes_through_reopens(tmp_path):
    manager = LogManager(str(tmp_path), SMALL_SEGMENTS, segment_files_open_max=3)
    logs = [manager.create("topic", partition) for partition in range(12)]
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        chooser = random.Random(seed)
        try:
            for step in range(300):
                log = chooser.choice(logs)
                tag = logs.index(log)
                if chooser.random() < 0.6:
                    log.append(payload_batch(tag, value_bytes=200), now_ms=0)
                elif chooser.random() < 0.5:
                    log.flush()
                else:
                    for batch in read_all(log):  # every batch of a log carries its own tag
                        assert tag.to_bytes(8, "big") * 4 in batch
        except BaseException as error:  # reported below, with the thread's seed
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert manager.segment_files.evictions > 0
    manager.close()


class _CountingOpens(PowerLossFileSystem):
    """The power-loss file system, counting the segment `.log` opens it is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.log_opens = 0

    def open(self, path: str, flags: int, mode: int) -> int:
        self.log_opens += path.endswith(".log")
        return super().open(path, flags, mode)


def test_every_reopen_goes_through_the_fs_seam_and_a_flush_through_a_reopened_file_is_durable(tmp_path):
    file_system = _CountingOpens()
    disk = file_system.add_disk(str(tmp_path / "disk"))
    with fs.use(file_system):
        manager = LogManager(str(tmp_path / "disk"), SMALL_SEGMENTS, segment_files_open_max=1)
        first, second = manager.create("topic", 0), manager.create("topic", 1)
        for tag in range(5):  # each append reopens the file the other log's append closed
            first.append(payload_batch(tag), now_ms=0)
            second.append(payload_batch(tag), now_ms=0)
        first.flush()
        second.flush()
        assert manager.segment_files.opens >= 10
        assert file_system.log_opens == manager.segment_files.opens  # not one open around the seam
        disk.crash(random.Random(1), lose_everything=True)
    restarted = LogManager(str(tmp_path / "disk"), SMALL_SEGMENTS)
    restarted.open_all(now_ms=0)
    assert [len(read_all(restarted.get("topic", partition))) for partition in (0, 1)] == [5, 5]
    restarted.close()
