"""Group commit: fsync partition logs off the reactor thread, one round at a time.

Every append made before a round starts is covered by that round's fsync, so however many
producers wait, the disk sees one fsync per partition per round. Appends go on on the
reactor thread while a round runs; they are covered by the next round. A log asked for again
while a round runs joins the next round only if something new was written to it meanwhile
(or a waiter is still short): a round never fsyncs what the previous one already covered. Where a round's
fsyncs run (Linux AIO or a thread) is the ``ISyncEngine``'s business (``sync_engines``). Appends
made inside ``one_round()`` (a transaction's markers to several partitions) wait for each other:
the round starts when the block ends, so they share it instead of the first going alone. A round
takes at most ``limits.fsync_round_logs_max`` logs, because each holds descriptors open while its
fsync runs; logs past that go in the next round, which starts as soon as this one ends.

Given the reactor as ``clock``, a round starts at the end of the reactor turn that asked for it
(``callLater(0)``), not inside the first request's handler: every produce read in the same turn
(a client's pipelined requests, several connections' data in one ``epoll`` batch) joins that
round instead of waiting a whole round for the next one, and the ``io_submit`` that wakes the
kernel's fsync worker (which takes the reactor's CPU from it for a while) comes after the turn's
replies are written. Without a clock (unit tests) a round starts at once. The round after a finished
one (appends made while it ran) starts as soon as the finished round is known, before its waiters
are answered: those appends have waited a whole round already, and the replies, high watermarks
and fetch answers the finished round releases take the reactor a while (measured with
``benchmarks/e2e_timeline.py``: a finished fsync to the next round's hand-over).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import limits
from mqbroker.durability.sync_engines import ISyncEngine, SyncableLog, Synced
from mqbroker.errors import StorageError
from mqbroker.storage.errors import LogClosedError


class Flusher:
    """Fsyncs logs off the reactor thread and fires durability waiters (group commit)."""

    log = Logger()

    def __init__(
        self, engine: ISyncEngine, on_durable: Callable[[Iterable[Any]], None], clock: IReactorTime | None = None,
    ) -> None:
        self._engine = engine
        self._on_durable = on_durable
        self._clock = clock
        #: The round asked for in this reactor turn, started when the turn ends (with a clock).
        self._start_call: IDelayedCall | None = None
        self._dirty: dict[int, SyncableLog] = {}
        self._waiters: dict[int, list[tuple[int, Deferred[None]]]] = {}
        self._round: Deferred[Any] | None = None
        self._drain_waiters: list[Deferred[None]] = []
        self._held = 0
        self.rounds = 0

    def wait_durable(self, partition_log: SyncableLog, offset: int) -> Deferred[None]:
        """Fire once ``offset`` of ``partition_log`` is on disk; schedule a round if needed."""
        if partition_log.durable_end_offset > offset:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._waiters.setdefault(id(partition_log), []).append((offset, waiter))
        self.request_flush(partition_log)
        return waiter

    def request_flush(self, partition_log: SyncableLog) -> None:
        """Make sure ``partition_log`` is fsynced in the current or next round."""
        self._dirty[id(partition_log)] = partition_log
        self._maybe_start_round()

    @contextmanager
    def one_round(self) -> Iterator[None]:
        """Hold the next round while the block runs: the logs it appends to are fsynced together."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            self._maybe_start_round()

    def drain(self) -> Deferred[None]:
        """Fire when no round is running and nothing is dirty (used at shutdown)."""
        drained: Deferred[None] = Deferred()
        self._drain_waiters.append(drained)
        self._fire_drain_waiters_if_idle()
        return drained

    def _fire_drain_waiters_if_idle(self) -> None:
        if self._round is None and not self._dirty:
            waiters, self._drain_waiters = self._drain_waiters, []
            for waiter in waiters:
                waiter.callback(None)

    def _round_may_start(self) -> bool:
        return self._round is None and not self._held and bool(self._dirty)

    def _maybe_start_round(self) -> None:
        if not self._round_may_start():
            return
        if self._clock is None:
            self._start_round()
        elif self._start_call is None:
            self._start_call = self._clock.callLater(0, self._start_round)

    def _start_round(self, waiters_answered: bool = True) -> None:
        """Hand the dirty logs (at most ``fsync_round_logs_max``) to the engine as one round.

        Before the waiters of the round that just finished are answered (``waiters_answered`` false), a log
        goes in only for what is not yet synced: its waiters may all be covered by that round.
        """
        self._start_call = None
        if not self._round_may_start():
            return  # a hold began since the turn asked for it; its end asks again
        logs = []
        for key in list(self._dirty):  # oldest request first; the rest wait for the next round
            log = self._dirty.pop(key)
            if (waiters_answered and key in self._waiters) or log.has_unsynced():
                logs.append(log)
                if len(logs) == limits.fsync_round_logs_max:
                    break
        if not logs:
            if waiters_answered:
                self._fire_drain_waiters_if_idle()
            return
        self.rounds += 1
        self._round = self._engine.sync(logs)
        self._round.addCallback(self._round_done)

    def _round_done(self, synced: list[Synced]) -> None:
        self._round = None
        if self._round_may_start():  # appends wait for the next round: hand it over before the replies go out
            self._start_round(waiters_answered=False)
        durable = []
        for partition_log, failure in synced:
            if failure is None:
                durable.append(partition_log)
                self._fire_waiters(partition_log)
            else:
                self._fail_waiters(partition_log, failure)
        if durable:
            self._on_durable(durable)
        self._maybe_start_round()
        self._fire_drain_waiters_if_idle()

    def _fail_waiters(self, partition_log: SyncableLog, failure: Failure) -> None:
        if failure.check(LogClosedError):  # deleted, or moved off this broker, while its fsync waited: no disk fault
            self.log.info("partition log {directory} was closed before its fsync; its waiters get STORAGE_ERROR",
                          directory=partition_log.directory)
        else:
            self.log.failure(
                "fsync of partition log {directory} failed; its waiting producers get STORAGE_ERROR. "
                "Check the data directory's disk (space, permissions, I/O errors).",
                failure,
                directory=partition_log.directory,
            )
        error = StorageError(f"could not make data durable: {failure.getErrorMessage()}")
        for _, waiter in self._waiters.pop(id(partition_log), []):
            waiter.errback(error)

    def _fire_waiters(self, partition_log: SyncableLog) -> None:
        waiters = self._waiters.pop(id(partition_log), [])
        durable = partition_log.durable_end_offset
        pending = []
        for offset, waiter in waiters:
            if offset < durable:
                waiter.callback(None)
            else:
                pending.append((offset, waiter))
        if pending:
            # A callback above may have registered new waiters for this log: keep them, behind these.
            self._waiters[id(partition_log)] = pending + self._waiters.get(id(partition_log), [])
            self.request_flush(partition_log)

