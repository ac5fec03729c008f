"""Starting a front end whose state lives in broker topics, while the cluster may still be forming.

The MQTT hub and the AMQP virtual host replay compacted internal topics before they serve.
Right after a cluster starts, or while a leader moves, those calls meet errors that pass on
their own: no leader elected yet, the partition led elsewhere than the metadata image said a
moment ago, a topic just created but not yet in this broker's image, a peer not yet reachable.
``start_with_retries`` runs one start attempt after another, with a growing pause, until one
succeeds; any other error ends it. An attempt must be safe to repeat: read first, change state
only once every read has succeeded. ``StartedSignal.run`` starts a front end that way and lets
connections that arrive meanwhile wait for the start, for a bounded time, and then be refused
with a clear error instead of hanging.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.defer import TimeoutError as DeferredTimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits

T = TypeVar("T")

#: Pause after the first failed attempt; it doubles after each failure up to ``limits.front_end_start_retry_s_max``.
RETRY_FIRST_S = 0.1


def passes_on_its_own(error: errors.BrokerError) -> bool:
    """Whether a start attempt that failed with ``error`` is worth repeating.

    Retriable errors (leader moving or not yet elected, broker unreachable, timeouts), and an
    unknown topic: the attempt itself just created it, so this broker's metadata image lags.
    """
    return error.retriable or isinstance(error, errors.UnknownTopicOrPartitionError)


async def start_with_retries(clock: IReactorTime, attempt: Callable[[], Awaitable[T]], log: Logger, what: str,
                             stopped: Callable[[], bool] = lambda: False) -> T:
    """Await ``attempt()`` until it succeeds; errors that pass on their own are logged and retried.

    Raises the first error that does not pass on its own, or the last one if ``stopped()`` turned true.
    """
    pause_s = RETRY_FIRST_S
    failures = 0
    while True:
        try:
            return await attempt()
        except errors.BrokerError as error:
            if not passes_on_its_own(error) or stopped():
                raise
            failures += 1
            log.warn("{what} not started yet (attempt {failures}): {error}; trying again in {pause:.1f} s",
                     what=what, failures=failures, error=error, pause=pause_s)
        await deferLater(clock, pause_s, lambda: None)
        pause_s = min(pause_s * 2, limits.front_end_start_retry_s_max)


class StartedSignal:
    """Tells waiting connections that their front end has started (or failed to)."""

    def __init__(self, clock: IReactorTime, what: str) -> None:
        self._clock = clock
        self._what = what
        self._waiters: list[Deferred[None]] | None = []
        self._failure: Failure | None = None

    @property
    def started(self) -> bool:
        """Whether the start succeeded."""
        return self._waiters is None and self._failure is None

    def wait(self, timeout_s: float = limits.front_end_ready_wait_s_max) -> Deferred[None]:
        """Fires once started; fails with the start's error, or ``LeaderNotAvailableError`` after ``timeout_s``."""
        if self._waiters is None:
            return fail(self._failure) if self._failure is not None else succeed(None)
        waiter: Deferred[None] = Deferred(self._forget)
        self._waiters.append(waiter)
        waiter.addTimeout(timeout_s, self._clock)
        waiter.addErrback(self._not_started_in_time, timeout_s)
        return waiter

    async def run(self, attempt: Callable[[], Awaitable[object]], log: Logger,
                  stopped: Callable[[], bool] = lambda: False) -> None:
        """Start the front end with ``start_with_retries`` and fire with the outcome.

        A failure is logged, unless ``stopped()`` says the front end was stopped while starting.
        """
        try:
            await start_with_retries(self._clock, attempt, log, self._what, stopped)
        except Exception:
            failure = Failure()
            if not stopped():
                log.failure("the {what} could not start", failure, what=self._what)
            self.fire(failure)
            return
        self.fire()

    def fire(self, failure: Failure | None = None) -> None:
        """The start finished: successfully, or with ``failure`` (which every waiter, now and later, gets)."""
        waiters, self._waiters, self._failure = self._waiters or [], None, failure
        for waiter in waiters:
            if failure is None:
                waiter.callback(None)
            else:
                waiter.errback(failure)

    def _forget(self, waiter: Deferred[None]) -> None:
        if self._waiters is not None:
            self._waiters.remove(waiter)

    def _not_started_in_time(self, failure: Failure, timeout_s: float) -> None:
        failure.trap(DeferredTimeoutError)
        raise errors.LeaderNotAvailableError(
            f"the {self._what} has not finished starting within {timeout_s:g} s (its internal topics are not "
            "readable yet: the cluster is still forming, see the broker log); try again")
