"""fsync rounds off the reactor thread: the engines (Linux AIO, a Python thread, a C thread) and the group-commit flusher over them.

Real partition logs on disk, the real reactor: an engine's round must publish every log's
durable end, report a failed or closed log without holding up the others, and the flusher must
give exactly the waiters of a failed log STORAGE_ERROR.
"""

from __future__ import annotations

import errno
import os
import select
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReadDescriptor
from twisted.logger import Logger
from zope.interface.verify import verifyObject

from mqbroker import limits
from mqbroker.errors import StorageError
from mqbroker.durability.flusher import Flusher
from mqbroker.storage.log import FlushTicket, PartitionLog
from mqbroker.durability.sync_engines import AioSync, ISyncEngine, ThreadSync, WorkerSync, start_sync_engine
from tests.unit.storage.logtools import open_log, payload_batch


@pytest.fixture(params=["aio", "thread", "worker"])
def engine(request: pytest.FixtureRequest, tmp_path) -> Iterator[Any]:
    started = start_sync_engine(reactor, request.param, str(tmp_path), Logger())
    yield started
    started.stop()


def _logs(tmp_path, count: int, appended: int = 3) -> list[PartitionLog]:
    logs = [open_log(tmp_path / f"log-{index}") for index in range(count)]
    for partition_log in logs:
        for tag in range(appended):
            partition_log.append(payload_batch(tag), now_ms=0)
    return logs


#: A descriptor number above any open-file limit: never open, so its fsync fails with EBADF.
_NOT_OPEN = 2**30


class _FailingLog:
    """A log whose fsync fails: its ticket names a descriptor that is not open."""

    directory = "/nowhere/failing-0"
    durable_end_offset = 0

    def begin_flush(self) -> FlushTicket:
        return FlushTicket([_NOT_OPEN], 5, 0)

    def end_flush(self, ticket: FlushTicket, synced: bool) -> int:
        self.ended = synced
        return 0

    def flush(self) -> int:
        raise OSError(5, "Input/output error")

    def has_unsynced(self) -> bool:
        return True


def test_every_engine_provides_the_engine_interface(engine) -> None:
    assert verifyObject(ISyncEngine, engine)
    if engine.name in ("aio", "worker"):  # the reactor watches its eventfd
        assert verifyObject(IReadDescriptor, engine)
    else:
        assert engine.name == "thread"


@pytest_twisted.ensureDeferred
async def test_a_round_makes_every_log_durable_up_to_its_end(engine, tmp_path) -> None:
    logs = _logs(tmp_path, 3)
    synced = await engine.sync(logs)
    assert [(partition_log, failure) for partition_log, failure in synced] == [(log, None) for log in logs]
    assert [partition_log.durable_end_offset for partition_log in logs] == [3, 3, 3]


@pytest_twisted.ensureDeferred
async def test_a_failed_and_a_closed_log_are_reported_and_the_others_still_made_durable(engine, tmp_path) -> None:
    before, after, closed = _logs(tmp_path, 3)
    closed.close()
    failing = _FailingLog()
    synced = dict(await engine.sync([before, failing, after, closed]))
    assert synced[before] is None and synced[after] is None
    assert before.durable_end_offset == after.durable_end_offset == 3
    assert synced[failing] is not None and synced[closed] is not None


@pytest_twisted.ensureDeferred
async def test_an_aio_round_larger_than_the_ring_waits_for_free_slots(tmp_path) -> None:
    engine = AioSync(reactor, str(tmp_path), slots=2)
    try:
        logs = _logs(tmp_path, 7)
        synced = await engine.sync(logs)
        assert all(failure is None for _, failure in synced)
        assert {partition_log.durable_end_offset for partition_log in logs} == {3}
    finally:
        engine.stop()


@pytest_twisted.ensureDeferred
async def test_rounds_after_rounds_sync_each_new_append_of_the_same_descriptors(engine, tmp_path) -> None:
    """The AIO engine reuses one fsync block per descriptor: every round still reports and publishes."""
    logs = _logs(tmp_path, 2, appended=1)
    for round_number in range(1, 4):
        synced = await engine.sync(logs)
        assert [failure for _, failure in synced] == [None, None]
        assert [partition_log.durable_end_offset for partition_log in logs] == [round_number] * 2
        for partition_log in logs:
            partition_log.append(payload_batch(round_number), now_ms=0)


def test_the_engine_is_chosen_from_fsync_engine(tmp_path) -> None:
    log = Logger()
    for choice, expected in [("auto", AioSync), ("aio", AioSync), ("thread", ThreadSync), ("worker", WorkerSync)]:
        chosen = start_sync_engine(reactor, choice, str(tmp_path), log)
        try:
            assert type(chosen) is expected
        finally:
            chosen.stop()


def test_auto_falls_back_to_a_thread_where_linux_aio_is_missing_and_aio_refuses_to_start(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "libaio", None)  # import libaio raises ImportError
    chosen = start_sync_engine(reactor, "auto", str(tmp_path), Logger())
    try:
        assert type(chosen) is ThreadSync
    finally:
        chosen.stop()
    with pytest.raises(OSError, match="fsync_engine=aio"):
        start_sync_engine(reactor, "aio", str(tmp_path), Logger())


def test_worker_refuses_to_start_without_its_c_extension(tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "mqbroker.durability._fsync_worker", None)
    with pytest.raises(OSError, match="fsync_engine=worker: the C extension"):
        start_sync_engine(reactor, "worker", str(tmp_path), Logger())


@pytest_twisted.ensureDeferred
async def test_the_flusher_commits_appends_in_rounds_and_fails_only_the_waiters_of_a_failed_log(engine, tmp_path) -> None:
    durable_reported: list[Any] = []
    flusher = Flusher(engine, lambda logs: durable_reported.extend(logs))
    (healthy,) = _logs(tmp_path, 1)
    failing = _FailingLog()
    waits = [flusher.wait_durable(healthy, offset) for offset in range(3)]
    failed = flusher.wait_durable(failing, 0)  # type: ignore[arg-type]
    healthy.append(payload_batch(3), now_ms=0)  # appended while a round may already run
    waits.append(flusher.wait_durable(healthy, 3))
    for waited in waits:
        assert await waited is None
    with pytest.raises(StorageError, match="could not make data durable"):
        await failed
    await flusher.drain()
    assert healthy.durable_end_offset == 4
    assert healthy in durable_reported and failing not in durable_reported
    assert 1 <= flusher.rounds <= 3  # group commit: not one round per waiter


@pytest_twisted.ensureDeferred
async def test_a_waiter_registered_from_another_waiters_callback_is_kept(engine, tmp_path) -> None:
    flusher = Flusher(engine, lambda logs: None)
    (partition_log,) = _logs(tmp_path, 1, appended=1)
    first = flusher.wait_durable(partition_log, 0)  # starts a round covering offset 0 (AIO: captured right here)
    partition_log.append(payload_batch(1), now_ms=0)
    second = flusher.wait_durable(partition_log, 1)  # left pending after that round
    registered: list[Any] = []

    def wait_for_one_more(_: object) -> None:  # as a front end might: append, then wait again, in the callback
        partition_log.append(payload_batch(2), now_ms=0)
        registered.append(flusher.wait_durable(partition_log, 2))

    first.addCallback(wait_for_one_more)
    await second.addTimeout(10, reactor)
    await registered[0].addTimeout(10, reactor)
    await flusher.drain()
    assert partition_log.durable_end_offset == 3


@pytest_twisted.ensureDeferred
async def test_a_round_that_covered_every_waiter_is_not_followed_by_an_empty_one(engine, tmp_path) -> None:
    flusher = Flusher(engine, lambda logs: None)
    (partition_log,) = _logs(tmp_path, 1, appended=1)
    flusher.request_flush(partition_log)  # as a produce does: the append asks for a round, then its ack waits
    await flusher.wait_durable(partition_log, 0)
    await flusher.drain()
    assert flusher.rounds == 1 and partition_log.durable_end_offset == 1
    flusher.request_flush(partition_log)  # nothing new since: no round at all
    await flusher.drain()
    assert flusher.rounds == 1
    partition_log.append(payload_batch(1), now_ms=0)
    flusher.request_flush(partition_log)
    await flusher.drain()
    assert flusher.rounds == 2 and partition_log.durable_end_offset == 2


async def _settle(flusher: Flusher, waits: list[Any]) -> None:
    """Wait for every durability wait, then for the flusher's last round."""
    for waited in waits:
        await waited
    await flusher.drain()


def _count_round_sizes(engine, monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """The number of logs of each round ``engine`` is asked to sync, as they come."""
    round_sizes: list[int] = []
    real_sync = engine.sync

    def counting_sync(logs):  # type: ignore[no-untyped-def]
        round_sizes.append(len(logs))
        return real_sync(logs)

    monkeypatch.setattr(engine, "sync", counting_sync)
    return round_sizes


@pytest_twisted.ensureDeferred
async def test_a_round_syncs_at_most_fsync_round_logs_max_logs_and_the_rest_follow_in_the_next(
    engine, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(limits, "fsync_round_logs_max", 3)
    round_sizes = _count_round_sizes(engine, monkeypatch)
    flusher = Flusher(engine, lambda logs: None)
    logs = _logs(tmp_path, 7, appended=1)
    waits = [flusher.wait_durable(partition_log, 0) for partition_log in logs]
    await _settle(flusher, waits)
    assert round_sizes == [1, 3, 3]  # the first waiter starts a round at once; the other six wait, three a round
    assert all(partition_log.durable_end_offset == 1 for partition_log in logs)


@pytest_twisted.ensureDeferred
async def test_appends_inside_one_round_share_one_fsync_round(engine, tmp_path, monkeypatch) -> None:
    round_sizes = _count_round_sizes(engine, monkeypatch)
    flusher = Flusher(engine, lambda logs: None)
    logs = _logs(tmp_path, 3, appended=1)
    with flusher.one_round():  # as a transaction's markers to three partitions are appended
        waits = [flusher.wait_durable(partition_log, 0) for partition_log in logs]
        assert round_sizes == []  # held until the block ends
    await _settle(flusher, waits)
    assert round_sizes == [3]  # without the block: [1, 2], the first alone
    assert all(partition_log.durable_end_offset == 1 for partition_log in logs)


@pytest_twisted.ensureDeferred
async def test_with_the_reactor_a_round_starts_when_the_turn_ends_so_the_turns_appends_share_it(
    engine, tmp_path, monkeypatch
) -> None:
    round_sizes = _count_round_sizes(engine, monkeypatch)
    flusher = Flusher(engine, lambda logs: None, reactor)
    logs = _logs(tmp_path, 3, appended=1)
    waits = [flusher.wait_durable(partition_log, 0) for partition_log in logs]  # three produces read in one turn
    assert round_sizes == []  # nothing submitted inside the turn
    await _settle(flusher, waits)
    assert round_sizes == [3]  # without the reactor: [1, 2], the first alone
    assert all(partition_log.durable_end_offset == 1 for partition_log in logs)


@pytest_twisted.ensureDeferred
async def test_with_the_reactor_the_next_round_is_handed_over_before_the_finished_rounds_waiters_are_answered(
    engine, tmp_path, monkeypatch
) -> None:
    round_sizes = _count_round_sizes(engine, monkeypatch)
    flusher = Flusher(engine, lambda logs: None, reactor)
    (partition_log,) = _logs(tmp_path, 1, appended=1)
    first = flusher.wait_durable(partition_log, 0)
    await _settle_turn()
    assert round_sizes == [1]  # the first round runs
    partition_log.append(payload_batch(1), now_ms=0)  # appended while it runs: waits for the next round
    second = flusher.wait_durable(partition_log, 1)
    rounds, durable = await first.addCallback(lambda _: (list(round_sizes), partition_log.durable_end_offset))
    # The second round was handed over before the first's waiter was answered (the thread engine captures on its
    # thread: its first round may have covered offset 1 as well, then nothing waits)
    assert rounds == [1, 1] or (engine.name == "thread" and durable == 2)
    await _settle(flusher, [second])
    assert partition_log.durable_end_offset == 2


async def _settle_turn() -> None:
    """Let the reactor end its turn (a round asked for in it starts)."""
    waited: Any = Deferred()
    reactor.callLater(0, waited.callback, None)
    await waited


# -- the C worker itself -------------------------------------------------------------------------------------

@pytest.fixture(params=[True, False], ids=["aio", "fsync"])
def fsync_worker(request: pytest.FixtureRequest) -> Iterator[Any]:
    from mqbroker.durability._fsync_worker import FsyncWorker

    worker = FsyncWorker(aio=request.param)
    assert worker.aio is request.param  # Linux AIO works here (AioSync's tests need it too)
    yield worker
    worker.close()


def _appended_files(directory: Path, count: int) -> list[int]:
    handles = []
    for index in range(count):
        handle = os.open(directory / f"file-{index}", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(handle, b"x" * 100)
        handles.append(handle)
    return handles


def _results(worker: Any, count: int) -> list[tuple[int, int]]:
    """Wait for ``count`` (descriptor, result) pairs from ``worker``, as the reactor would (woken by its eventfd)."""
    results: list[tuple[int, int]] = []
    while len(results) < count:
        assert select.select([worker.fileno()], [], [], 10)[0], f"{len(results)} of {count} fsyncs done after 10 s"
        results += worker.completed()
    assert len(results) == count
    return results


@pytest.mark.parametrize("files", [16, 1000])  # 1000: more than the AIO ring holds (256, doubled by the kernel)
def test_the_worker_reports_every_fsync_of_every_batch_once(fsync_worker, tmp_path, files) -> None:
    handles = _appended_files(tmp_path, files)
    try:
        for _ in range(3):
            fsync_worker.submit(handles)
            assert sorted(_results(fsync_worker, files)) == [(handle, 0) for handle in sorted(handles)]
            assert fsync_worker.completed() == []
    finally:
        for handle in handles:
            os.close(handle)


def test_a_descriptor_the_kernel_cannot_sync_fails_alone(fsync_worker, tmp_path) -> None:
    """A pipe has no fsync (EINVAL, refused by io_submit itself), a number not open gives EBADF; the rest are synced."""
    reading, writing = os.pipe()
    handles = _appended_files(tmp_path, 2)
    try:
        fsync_worker.submit([handles[0], reading, _NOT_OPEN, handles[1]])
        results = dict(_results(fsync_worker, 4))
        assert results == {handles[0]: 0, reading: -errno.EINVAL, _NOT_OPEN: -errno.EBADF, handles[1]: 0}
    finally:
        for handle in [reading, writing, *handles]:
            os.close(handle)


def test_the_worker_thread_runs_as_a_batch_thread_so_waking_it_does_not_preempt_the_reactor(fsync_worker,
                                                                                           tmp_path) -> None:
    (handle,) = _appended_files(tmp_path, 1)
    fsync_worker.submit([handle])  # once it answered, the thread has set its policy
    assert _results(fsync_worker, 1) == [(handle, 0)]
    os.close(handle)
    policies = {os.sched_getscheduler(int(task)) for task in os.listdir("/proc/self/task")}
    assert os.SCHED_BATCH in policies
