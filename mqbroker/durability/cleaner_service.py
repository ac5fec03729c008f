"""The log cleaner: compacts the dirtiest compacted partition in a worker thread, one pass at a time.

Compaction rewrites whole segments, so it never runs on the reactor thread; appends and reads
go on meanwhile (the storage library swaps cleaned segments in atomically). One pass at a time
keeps the disk for produce and fsync traffic, as Kafka's single default cleaner thread does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from twisted.internet.interfaces import IReactorTime
from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from mqbroker.storage import cleaner
from mqbroker.storage.cleaner import CleanResult
from mqbroker.storage.log import PartitionLog


class LogCleanerService(TimerService):
    """Every ``interval_s``, compacts the compacted log whose dirty ratio is highest (if due)."""

    log = Logger()

    def __init__(
        self,
        logs: Callable[[], Iterable[PartitionLog]],
        reactor: IReactorTime,
        threadpool: ThreadPool,
        interval_s: float,
    ) -> None:
        super().__init__(interval_s, self.clean_dirtiest)
        self.clock = reactor
        self._logs = logs
        self._reactor = reactor
        self._threadpool = threadpool
        self._pass: Deferred[CleanResult] | None = None
        self.passes = 0

    def dirtiest(self, now_ms: int) -> PartitionLog | None:
        """The compacted log most in need of cleaning, or None if none reached its ratio."""
        best: tuple[float, PartitionLog] | None = None
        for partition_log in self._logs():
            if not partition_log.config.compacts:
                continue
            ratio = cleaner.dirty_ratio(partition_log, now_ms)
            if ratio >= partition_log.config.min_cleanable_dirty_ratio and ratio > 0 and (best is None or ratio > best[0]):
                best = (ratio, partition_log)
        return None if best is None else best[1]

    def clean_dirtiest(self) -> Deferred[CleanResult] | None:
        """Start one compaction pass unless one is running; return its Deferred."""
        if self._pass is not None:
            return None
        now_ms = int(self._reactor.seconds() * 1000)
        partition_log = self.dirtiest(now_ms)
        if partition_log is None:
            return None
        self._pass = deferToThreadPool(self._reactor, self._threadpool, cleaner.clean, partition_log, now_ms)
        self._pass.addCallbacks(self._pass_done, self._pass_failed, callbackArgs=(partition_log,),
                                errbackArgs=(partition_log,))
        return self._pass

    def _pass_done(self, result: CleanResult, partition_log: PartitionLog) -> CleanResult:
        self._pass = None
        self.passes += 1
        if result.ran:
            self.log.info(
                "compacted {directory}: {segments} segment(s) rewritten, {records} record(s) removed, "
                "{before} -> {after} bytes",
                directory=partition_log.directory, segments=result.segments_rewritten,
                records=result.records_removed, before=result.bytes_before, after=result.bytes_after,
            )
        return result

    def _pass_failed(self, failure: Failure, partition_log: PartitionLog) -> None:
        self._pass = None
        self.log.failure("compacting {directory} failed; the log is left as it was (recovery completes any swap)",
                         failure, directory=partition_log.directory)
