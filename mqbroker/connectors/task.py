"""A connector task's life on the reactor: a supervised loop, its outages, its counters (Twisted).

A task type implements ``run()``: one coroutine that connects to the other system and copies
until it is cancelled. ``SupervisedTask`` runs it, and when it raises an *outage* (the other
system or a cluster unreachable, a refused request) moves to BACKOFF, counts and times the
outage, waits with exponential backoff and runs it again; any other exception is a failure
(logged with its traceback, state FAILED, retried slowly). Nothing here blocks the reactor: the
task's work happens between awaits.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from mqbroker import errors
from mqbroker.client.backoff import Backoff
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.connectors.broker_calls import ConnectorBroker
from mqbroker.connector_model import TaskMetrics, TaskState, TaskStatus
from mqbroker.connectors.state import CorruptConnectorStateError, decode_positions
from mqbroker.records.readable import SKIPPED_LOG_FORMAT, UnreadableBatch, UnreadableTally

#: Retry delays after an outage: 0.2 s doubling to 10 s.
OUTAGE_BACKOFF = Backoff(initial_ms=200, max_ms=10_000)
#: Retry delays after an unexpected failure: 1 s doubling to 60 s.
FAILURE_BACKOFF = Backoff(initial_ms=1_000, max_ms=60_000)
#: The shortest window a records-per-second figure is computed over.
_RATE_WINDOW_S = 1.0


class OutageError(Exception):
    """The other system (Redis, the source cluster) cannot be reached or refused the task's work; retry later."""


#: Exceptions after which a task backs off and runs again (an outage, not a bug).
OUTAGES: tuple[type[BaseException], ...] = (OutageError, errors.BrokerError, BrokerUnavailableError, ConnectionError)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskContext:
    """What the runtime gives a task: who it is, the broker, its last checkpoint and how to write the next."""

    name: str
    task: int
    tasks_count: int
    node_id: int
    broker: ConnectorBroker
    clock: IReactorTime
    #: The task's last checkpoint (None: it never wrote one).
    progress: Mapping[str, Any] | None
    #: Stores a checkpoint durably in ``__connectors`` (fails once this broker no longer owns the task).
    checkpoint: Callable[[Mapping[str, Any]], Deferred[None]]
    #: Fires with whether this broker still leads the task's partition at the epoch it claimed (asked of the
    #: broker's metadata now, not the last periodic check): a task asks before each write a successor could repeat.
    still_owner: Callable[[], Deferred[bool]]
    rng: random.Random
    #: The broker's count of skipped undecodable batches (``mqbroker_unreadable_batches_total``).
    unreadable: UnreadableTally = field(default_factory=UnreadableTally)


class TaskCounters:
    """A task's live counters; ``snapshot`` adds the rate and the outage time so far."""

    def __init__(self, now_s: float) -> None:
        self.records_total = 0
        self.errors_total = 0
        self.lag_records = 0
        self.lag_seconds = 0.0
        self.outages_total = 0
        self.outage_seconds = 0.0
        self.outage_started_s: float | None = None
        self.last_error: str | None = None
        self.last_error_ms = -1
        self._rate = 0.0
        self._rate_mark = (now_s, 0)

    def error(self, message: str, now_s: float) -> None:
        """Count an error and remember it as the last one."""
        self.errors_total += 1
        self.last_error = message[:1000]
        self.last_error_ms = int(now_s * 1000)

    def outage_started(self, now_s: float) -> bool:
        """An outage began (True) or goes on (False)."""
        if self.outage_started_s is not None:
            return False
        self.outage_started_s = now_s
        self.outages_total += 1
        return True

    def outage_ended(self, now_s: float) -> float | None:
        """The outage (if any) is over: add its length and return it."""
        if self.outage_started_s is None:
            return None
        length = now_s - self.outage_started_s
        self.outage_seconds += length
        self.outage_started_s = None
        return length

    def snapshot(self, now_s: float) -> TaskMetrics:
        """The counters now (records per second over the last window of at least a second)."""
        mark_s, mark_records = self._rate_mark
        if now_s - mark_s >= _RATE_WINDOW_S:
            self._rate = (self.records_total - mark_records) / (now_s - mark_s)
            self._rate_mark = (now_s, self.records_total)
        ongoing = now_s - self.outage_started_s if self.outage_started_s is not None else 0.0
        return TaskMetrics(
            records_total=self.records_total, errors_total=self.errors_total, lag_records=self.lag_records,
            lag_seconds=round(self.lag_seconds, 3), records_per_second=round(self._rate, 1),
            outages_total=self.outages_total, outage_seconds=round(self.outage_seconds + ongoing, 3),
            in_outage=self.outage_started_s is not None, last_error=self.last_error, last_error_ms=self.last_error_ms,
        )


class SupervisedTask:
    """Runs a task type's ``run()`` until stopped, through outages and failures."""

    log = Logger()
    #: The connector type's name (``redis-sink``...), for logs and metrics.
    type_name = "task"

    def __init__(self, context: TaskContext) -> None:
        self.context = context
        self.clock = context.clock
        self.counters = TaskCounters(context.clock.seconds())
        self.state = TaskState.RUNNING
        self._running: Deferred[None] | None = None
        self._stopping = False

    @property
    def label(self) -> str:
        """``name/task`` for log lines."""
        return f"{self.context.name}/{self.context.task}"

    def start(self) -> None:
        """Begin running (returns at once)."""
        assert self._running is None, "started once"
        self._running = Deferred.fromCoroutine(self._supervise())

    def stop(self) -> Deferred[None]:
        """Cancel the run and fire once it has finished (a final checkpoint included)."""
        self._stopping = True
        running = self._running
        if running is None:
            return succeed(None)  # never started (paused)
        running.cancel()
        return running

    def status(self) -> TaskStatus:
        """The task's status now, as its status record stores it."""
        now_s = self.clock.seconds()
        return TaskStatus(state=self.state, owner_id=self.context.node_id, updated_ms=int(now_s * 1000),
                          metrics=self.counters.snapshot(now_s))

    def healthy(self) -> None:
        """The task made progress: an outage, if one was going on, is over."""
        if self.state is not TaskState.RUNNING:
            self.state = TaskState.RUNNING
        ended = self.counters.outage_ended(self.clock.seconds())
        if ended is not None:
            self.log.info("connector {task}: working again after an outage of {seconds:.1f} s", task=self.label,
                          seconds=ended)

    def skipped(self, batches: list[UnreadableBatch]) -> None:
        """Count, log and report batches that did not decode (reading went on after them)."""
        reader = f"connector {self.label}"
        for batch in batches:
            fields = self.context.unreadable.skipped(reader, batch)
            self.log.warn(SKIPPED_LOG_FORMAT, **fields)
            self.counters.error(f"skipped an undecodable batch of {batch.topic}-{batch.partition} at offsets "
                                f"{batch.first_offset}..{batch.last_offset}: {batch.error}", self.clock.seconds())

    def sleep(self, seconds: float) -> Deferred[None]:
        """A cancellable pause on the task's clock."""
        return deferLater(self.clock, seconds, lambda: None)

    async def run(self) -> None:
        """Connect and copy until cancelled; raise an ``OUTAGES`` error to back off and be run again."""
        raise NotImplementedError

    async def finish(self) -> None:
        """After the last run: write a final checkpoint (best effort). Types override it."""

    async def _supervise(self) -> None:
        attempt = 0
        records_mark = -1
        try:
            while not self._stopping:
                try:
                    await self.run()
                    return
                except CancelledError:
                    return
                except OUTAGES as error:
                    if self._stopping:
                        return  # the cancellation surfaced as another error (a gathered call's)
                    state, backoff, message = TaskState.BACKOFF, OUTAGE_BACKOFF, f"{type(error).__name__}: {error}"
                except Exception as error:  # a bug, or a setting the other system refuses: keep the broker serving
                    if self._stopping:
                        return
                    self.log.failure("connector {task} failed", task=self.label)
                    state, backoff, message = TaskState.FAILED, FAILURE_BACKOFF, f"{type(error).__name__}: {error}"
                if self.counters.records_total != records_mark:  # it got somewhere since the last failure
                    attempt, records_mark = 0, self.counters.records_total
                attempt += 1
                delay_ms = backoff.delay_ms(attempt, self.context.rng)
                self._backing_off(state, message, delay_ms)
                try:
                    await self.sleep(delay_ms / 1000.0)
                except CancelledError:
                    return
        finally:
            await self.finish()

    def _backing_off(self, state: TaskState, message: str, delay_ms: int) -> None:
        now_s = self.clock.seconds()
        self.state = state
        self.counters.error(message, now_s)
        if state is TaskState.BACKOFF and self.counters.outage_started(now_s):
            self.log.warn("connector {task}: {error}; retrying in {delay_ms} ms (outage started)", task=self.label,
                          error=message, delay_ms=delay_ms)
        else:
            self.log.info("connector {task}: {error}; retrying in {delay_ms} ms", task=self.label, error=message,
                          delay_ms=delay_ms)


def partitions_lag(high_watermarks: Mapping[tuple[str, int], int], positions: Mapping[tuple[str, int], int],
                   newest_copied_ms: Mapping[tuple[str, int], int], now_ms: int) -> tuple[int, float]:
    """Records between each position and its high watermark, and the age (seconds) of the newest record copied
    from a partition still behind."""
    lag = 0
    age_ms = 0
    for tp, high_watermark in high_watermarks.items():
        behind = max(0, high_watermark - positions.get(tp, high_watermark))
        lag += behind
        if behind:
            age_ms = max(age_ms, now_ms - newest_copied_ms.get(tp, now_ms))
    return lag, age_ms / 1000.0


def checkpointed_positions(progress: Mapping[str, Any] | None, task_type: str) -> dict[tuple[str, int], int]:
    """The positions a task of ``task_type`` checkpointed (none if there is none, or it does not decode)."""
    if progress is None:
        return {}
    try:
        return decode_positions(progress.get("positions"))
    except CorruptConnectorStateError as error:
        SupervisedTask.log.warn("ignoring an unreadable {type} checkpoint: {error}", type=task_type, error=error)
        return {}
