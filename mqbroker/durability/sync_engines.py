"""Where a group-commit round's fsyncs run without blocking the reactor: Linux AIO, a C thread, or a Python thread.

``AioSync`` hands a round's fsyncs to the kernel (``io_submit`` of ``IOCB_CMD_FSYNC``) and
hears of their completion through an eventfd the reactor watches like a socket. No Python
thread takes part, so a round costs no hand-over of the interpreter lock; on the 2-core
development machine it cut the median end-to-end latency of ``mqbroker bench e2e`` (acks=all,
``sync`` flush) by about a fifth against ``ThreadSync``. But ``io_submit`` of an fsync can block the
reactor in the kernel for milliseconds (it queues the fsync on a kernel worker bound to the
submitting CPU, which may take that CPU at once).

``WorkerSync`` hands a round's descriptors to a C thread (``_fsync_worker.c``) that never takes the
interpreter lock: the reactor's hand-over is a queue append and a condition signal (13 µs at p50 for
64 descriptors, against 106 µs for the ``io_submit`` of the same fsyncs; p99 58 µs against 4 ms). The
thread submits them as Linux AIO fsyncs, so the kernel runs them in parallel and they share the
journal's commits (one after another, 64 appended files took 180 ms here; together, 3 ms); ``io_submit``
blocks that thread, not the reactor. The thread runs as ``SCHED_BATCH`` so that waking it does not
preempt the reactor either. The kernel counts each finished fsync on an eventfd the reactor watches,
and the reactor reaps them itself (``io_getevents`` without waiting), as with ``AioSync``: no thread
stands between a finished fsync and the reactor. Without AIO the thread fsyncs one descriptor after another.

``ThreadSync`` runs each round on one dedicated Python thread (a plain queue hand-off: about 70 µs
cheaper per round than a Twisted pool job), one fsync after another. It serves where Linux AIO does not:
another OS, no ``libaio.so.1``, a sandbox that forbids ``io_setup``, a file system that refuses AIO fsync.

``start_sync_engine`` picks one from the ``fsync_engine`` setting.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorFDSet, IReactorThreads, IReadDescriptor
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Attribute, Interface, implementer

from mqbroker import limits


class SyncableLog(Protocol):
    """What an engine needs of a partition log (``PartitionLog`` provides it)."""

    directory: str

    @property
    def durable_end_offset(self) -> int: ...

    def flush(self) -> int: ...

    def has_unsynced(self) -> bool: ...

    def begin_flush(self) -> Any: ...

    def end_flush(self, ticket: Any, synced: bool) -> int: ...


#: A round's outcome for one log: the log and its fsync's failure, or None once it is durable.
Synced = tuple[SyncableLog, Failure | None]


class ISyncEngine(Interface):
    """Runs fsync rounds off the reactor thread."""

    name = Attribute("How the engine syncs, for logs: 'worker', 'aio' or 'thread'.")

    def sync(logs):
        """fsync everything appended to ``logs`` so far and publish their durable ends.

        Returns a Deferred that fires on the reactor thread with one ``(log, failure or None)``
        per log; it never fails. One round at a time: the caller waits for a round to fire
        before it starts the next (concurrent fsyncs of one file measured slower here).
        """

    def stop():
        """Wait for the round in flight, then release the engine's thread or kernel context."""


@implementer(ISyncEngine)
class ThreadSync:
    """Rounds on one daemon thread; each round's outcome fires its Deferred on the reactor."""

    name = "thread"

    def __init__(self, reactor: IReactorThreads, thread_name: str = "mqbroker-fsync") -> None:
        self._reactor = reactor
        self._rounds: queue.SimpleQueue[tuple[Sequence[SyncableLog], Deferred[list[Synced]]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._work, name=thread_name, daemon=True)
        self._thread.start()

    def sync(self, logs: Sequence[SyncableLog]) -> Deferred[list[Synced]]:
        done: Deferred[list[Synced]] = Deferred()
        self._rounds.put((logs, done))
        return done

    def stop(self) -> None:
        self._rounds.put(None)
        self._thread.join()

    def _work(self) -> None:
        call_from_thread = self._reactor.callFromThread
        while (job := self._rounds.get()) is not None:
            logs, done = job
            call_from_thread(done.callback, [flush_one(partition_log) for partition_log in logs])


def flush_one(partition_log: SyncableLog) -> Synced:
    """On the sync thread: fsync one log (it captures its own end first)."""
    try:
        partition_log.flush()
    except Exception:  # the log's waiters get it, on the reactor
        return partition_log, Failure()
    return partition_log, None


#: What ``AioSync`` calls of python-libaio's ctypes bindings (``libaio.libaio``).
_LIBAIO_BINDINGS = ("io_context_t", "io_queue_init", "io_queue_release", "io_submit", "io_getevents", "iocb", "iocb_p",
                    "io_event", "timespec", "io_prep_fsync", "io_set_eventfd")


@implementer(ISyncEngine, IReadDescriptor)
class AioSync:
    """Rounds as Linux AIO fsyncs; the reactor reads their completions from an eventfd."""

    name = "aio"

    def __init__(self, reactor: IReactorFDSet, probe_directory: str, slots: int = limits.aio_fsyncs_in_flight_max) -> None:
        """Open an AIO context and prove that an fsync through it works on ``probe_directory``.

        Raises ``OSError`` (or ``ImportError``) when Linux AIO cannot be used here.
        """
        from libaio import libaio  # Linux only; loading it fails without libaio.so.1

        missing = [name for name in _LIBAIO_BINDINGS if not hasattr(libaio, name)]
        if missing:
            raise ImportError(f"this python-libaio has no {', '.join(missing)}")
        self._aio = libaio
        self._reactor = reactor
        self._slots = slots
        self._context = libaio.io_context_t()
        libaio.io_queue_init(slots, ctypes.byref(self._context))
        try:
            self._eventfd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except BaseException:
            libaio.io_queue_release(self._context)
            raise
        self._in_flight = 0
        self._queued: list[int] = []  # descriptors waiting for a free slot in the ring
        #: The calls' buffers, allocated once, and libaio's functions called directly: python-libaio's ``AIOContext``
        #: built a ctypes array type, an array, a timespec and a Python event per call of ``submit`` and ``getEvents``
        #: (in a loop of single-fsync rounds, the reactor's CPU per round went from 69-79 µs to 37-42 µs).
        self._submitting = (libaio.iocb_p * slots)()
        self._events = (libaio.io_event * slots)()
        self._no_wait = ctypes.byref(libaio.timespec(0, 0))
        #: One fsync iocb per descriptor number, reused round after round (its ``data`` is the descriptor, which
        #: the kernel copies into the completion event). A block names only the number, so a reused number syncs
        #: whatever file holds it now; at most one per open descriptor.
        self._blocks: dict[int, Any] = {}
        #: What each submitted or queued descriptor reports its result to (one round at a time: a descriptor is in
        #: at most one of a round's tickets, so a block waits for one result).
        self._on_result: dict[int, Callable[[int, Failure | None], None]] = {}
        try:
            self._probe(probe_directory)
        except BaseException:
            self._release()
            raise
        reactor.addReader(self)

    # -- ISyncEngine ------------------------------------------------------------------------

    def sync(self, logs: Sequence[SyncableLog]) -> Deferred[list[Synced]]:
        aio_round = _DescriptorRound(logs)
        self._queued += aio_round.start(self._on_result)
        self._submit_queued()
        return aio_round.done

    def stop(self) -> None:
        """Called once the flusher has drained: nothing is in flight."""
        self._reactor.removeReader(self)
        self._release()

    # -- IReadDescriptor: the eventfd ---------------------------------------------------------

    def fileno(self) -> int:
        return self._eventfd

    def doRead(self) -> None:
        try:
            os.read(self._eventfd, 8)  # resets the counter; the events themselves follow
        except BlockingIOError:
            return
        # No more can have completed than are in flight: one call collects them all.
        if self._in_flight:
            events = self._events
            completed = self._aio.io_getevents(self._context, 0, self._in_flight, events, self._no_wait)
            self._in_flight -= completed
            on_result = self._on_result
            for index in range(completed):
                event = events[index]
                on_result.pop(event.data or 0)(event.res, None)
        self._submit_queued()

    def connectionLost(self, reason: Failure) -> None:
        """The reactor is shutting down; ``stop`` releases the context."""

    def logPrefix(self) -> str:
        return "aio-fsync"

    # -- inside -------------------------------------------------------------------------------

    def _block(self, handle: int) -> Any:
        """The reusable fsync iocb of descriptor ``handle``, as the pointer ``io_submit`` takes."""
        block = self._blocks.get(handle)
        if block is None:
            iocb = self._aio.iocb()
            self._aio.io_prep_fsync(iocb, handle)
            self._aio.io_set_eventfd(iocb, self._eventfd)
            iocb.data = handle
            block = self._blocks[handle] = ctypes.pointer(iocb)
        return block

    def _submit_queued(self) -> None:
        queued, submitting = self._queued, self._submitting
        while queued and self._in_flight < self._slots:
            count = min(len(queued), self._slots - self._in_flight)
            for index in range(count):
                submitting[index] = self._block(queued[index])
            try:
                submitted = self._aio.io_submit(self._context, count, submitting)
            except OSError as error:  # io_submit(2) refused the first block (a bad descriptor, say): it alone fails
                handle = queued.pop(0)
                self._on_result.pop(handle)(-(error.errno or errno.EIO), Failure(error))
                continue
            if not submitted:
                return
            self._in_flight += submitted
            del queued[:submitted]

    def _probe(self, directory: str) -> None:
        """Start-up, before the reactor runs: one AIO fsync of ``directory``, waited for."""
        handle = os.open(directory, os.O_RDONLY)
        try:
            self._submitting[0] = self._block(handle)
            self._aio.io_submit(self._context, 1, self._submitting)
            wait_s = limits.aio_probe_wait_s_max
            timeout = self._aio.timespec(int(wait_s), int(wait_s % 1 * 1e9))
            if not self._aio.io_getevents(self._context, 1, 1, self._events, ctypes.byref(timeout)):
                raise OSError(f"an AIO fsync of {directory} did not complete within {wait_s:.0f} s")
            result = self._events[0].res
            if result < 0:
                raise OSError(-result, f"AIO fsync of {directory}: {os.strerror(-result)}")
            os.read(self._eventfd, 8)
        finally:
            self._blocks.pop(handle, None)
            os.close(handle)

    def _release(self) -> None:
        self._aio.io_queue_release(self._context)
        os.close(self._eventfd)


@implementer(ISyncEngine, IReadDescriptor)
class WorkerSync:
    """Rounds on a C thread that never takes the interpreter lock (Linux AIO fsyncs where it can, submitted by that
    thread); the reactor reaps the finished fsyncs when its eventfd says so."""

    name = "worker"

    def __init__(self, reactor: IReactorFDSet) -> None:
        """Start the worker thread. Raises ``ImportError`` when the C extension was not built."""
        from mqbroker.durability._fsync_worker import FsyncWorker

        self._reactor = reactor
        self._worker = FsyncWorker()
        #: Whether the thread submits its fsyncs through Linux AIO (else it syncs one descriptor after another).
        self.aio: bool = self._worker.aio
        #: What each queued descriptor reports its result to (one round at a time, each descriptor once in it).
        self._on_result: dict[int, Callable[[int, Failure | None], None]] = {}
        reactor.addReader(self)

    # -- ISyncEngine ------------------------------------------------------------------------

    def sync(self, logs: Sequence[SyncableLog]) -> Deferred[list[Synced]]:
        worker_round = _DescriptorRound(logs)
        handles = worker_round.start(self._on_result)
        if handles:
            self._worker.submit(handles)
        return worker_round.done

    def stop(self) -> None:
        """Called once the flusher has drained: nothing is queued."""
        self._reactor.removeReader(self)
        self._worker.close()

    # -- IReadDescriptor: the eventfd ---------------------------------------------------------

    def fileno(self) -> int:
        return self._worker.fileno()

    def doRead(self) -> None:
        for handle, result in self._worker.completed():  # result: 0, or -errno (the round makes the failure)
            self._on_result.pop(handle)(result, None)

    def connectionLost(self, reason: Failure) -> None:
        """The reactor is shutting down; ``stop`` stops the thread."""

    def logPrefix(self) -> str:
        return "fsync-worker"


class _DescriptorRound:
    """One round's fsyncs by descriptor (AIO, worker): a log is durable once every descriptor its ticket named is synced."""

    def __init__(self, logs: Sequence[SyncableLog]) -> None:
        self._logs = list(logs)
        self._tickets: list[Any] = []
        self._failures: list[Failure | None] = []
        self._handles_left = 0
        self.done: Deferred[list[Synced]] = Deferred()

    def start(self, on_result: dict[int, Callable[[int, Failure | None], None]]) -> list[int]:
        """Capture each log's ticket; return the descriptors to fsync, each one's result callback put in
        ``on_result`` (the engine's, by descriptor: one round at a time, each descriptor once in it)."""
        to_sync: list[tuple[int, Callable[[int, Failure | None], None]]] = []
        for index, partition_log in enumerate(self._logs):
            try:
                ticket = partition_log.begin_flush()
            except Exception:  # e.g. the log was closed (its topic deleted)
                self._tickets.append(None)
                self._failures.append(Failure())
                continue
            self._tickets.append(ticket)
            self._failures.append(None)
            to_sync += [(handle, functools.partial(self._synced, index)) for handle in ticket.handles]
        self._handles_left = len(to_sync)
        for handle, synced in to_sync:
            assert handle not in on_result, f"descriptor {handle} is already being synced"
            on_result[handle] = synced
        if not to_sync:
            self._finish()
        return [handle for handle, _ in to_sync]

    def _synced(self, index: int, result: int, error: Failure | None) -> None:
        if result < 0 and self._failures[index] is None:
            self._failures[index] = error or Failure(OSError(-result, f"fsync: {os.strerror(-result)}"))
        self._handles_left -= 1
        if self._handles_left == 0:
            self._finish()

    def _finish(self) -> None:
        outcome: list[Synced] = []
        for partition_log, ticket, failure in zip(self._logs, self._tickets, self._failures):
            if ticket is not None:
                partition_log.end_flush(ticket, synced=failure is None)
            outcome.append((partition_log, failure))
        self.done.callback(outcome)


def start_sync_engine(reactor: IReactorFDSet, choice: str, data_directory: str, log: Logger) -> ISyncEngine:
    """The engine ``fsync_engine`` asks for: ``aio``, ``thread``, ``worker``, or ``auto`` (AIO where it works).

    ``worker`` without its C extension and ``aio`` that cannot work raise ``OSError``; ``auto`` then falls back
    to a thread and says why. A thread needs the reactor's ``IReactorThreads`` too (a real reactor has both).
    """
    if choice == "thread":
        return ThreadSync(IReactorThreads(reactor))
    if choice == "worker":
        try:
            worker = WorkerSync(reactor)
        except ImportError as error:
            raise OSError("fsync_engine=worker: the C extension mqbroker.durability._fsync_worker is not built; "
                          "run `python setup.py build_ext --inplace` or pick another engine") from error
        if not worker.aio:
            log.info("Linux AIO is not available here (io_setup refused): the fsync thread syncs one file after "
                     "another")
        return worker
    try:
        return AioSync(reactor, data_directory)
    except (ImportError, OSError) as error:
        if choice == "aio":
            raise OSError(f"fsync_engine=aio: Linux AIO fsync does not work here: {error}") from error
        log.info("Linux AIO is not available here ({error}); on Linux, install libaio1 for lower produce latency",
                 error=error)
        return ThreadSync(IReactorThreads(reactor))
