"""Durable writes of one ``__share_group_state`` partition: one append in flight, the changes made meanwhile next.

An acknowledgement is answered only once the state that records it is on every in-sync replica,
so each caller waits for the first write that *starts* after its change. Writes are coalesced: a
change asks for a write, and everything changed until the write starts goes into it (snapshots are
whole, so the newest one of a partition is all that matters). A failed write's records are
written again first in the next one (retried after a pause), so order and content are kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker.records.builder import BatchBuilder
from mqbroker.shares.state_records import STATE_TOPIC, StateRecord

#: Bytes of one appended batch (the internal topic's batches stay well under the record size bound).
BATCH_BYTES_MAX = 512 * 1024
#: Pause before a failed write is tried again.
RETRY_DELAY_S = 1.0

#: Appends one batch to the state partition; fires once every in-sync replica has it.
StateAppend = Callable[[bytes], "Deferred[Any]"]


def build_batches(records: Sequence[StateRecord], now_ms: int) -> list[bytes]:
    """The records as batches of at most ``BATCH_BYTES_MAX`` bytes (a larger record gets a batch of its own)."""
    batches = []
    builder = BatchBuilder()
    for record in records:
        if builder.records_count and builder.size_bytes + len(record.key) + len(record.value or b"") > BATCH_BYTES_MAX:
            batches.append(builder.build())
            builder = BatchBuilder()
        builder.append(now_ms, record.key, record.value)
    if builder.records_count:
        batches.append(builder.build())
    return batches


class StateWriter:
    """Coalesces a state partition's changes into ordered, replicated appends."""

    log = Logger()

    def __init__(self, *, clock: IReactorTime, append: StateAppend, collect: Callable[[], list[StateRecord]]) -> None:
        """``collect()`` returns the records of everything changed since it was last called."""
        self._clock = clock
        self._append = append
        self._collect = collect
        self._waiting: list[Deferred[None]] = []  # for the next write
        self._writing = False
        self._unwritten: list[StateRecord] = []  # a failed write's records, written first next time
        self._scheduled: IDelayedCall | None = None
        self._stopped = False

    def request(self) -> Deferred[None]:
        """Write what changed; fires once a write started after this call is durable (fails if it failed)."""
        waiter: Deferred[None] = Deferred()
        self._waiting.append(waiter)
        self._schedule(0)
        return waiter

    def nudge(self) -> None:
        """Write what changed, without waiting for it."""
        self._schedule(0)

    def stop(self, error: Exception) -> None:
        """The state partition is no longer hosted here: fail whoever waits with ``error``."""
        self._stopped = True
        if self._scheduled is not None and self._scheduled.active():
            self._scheduled.cancel()
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            waiter.errback(error)

    def _schedule(self, delay_s: float) -> None:
        if self._writing or self._stopped or (self._scheduled is not None and self._scheduled.active()):
            return
        self._scheduled = self._clock.callLater(delay_s, self._write)

    def _write(self) -> None:
        self._scheduled = None
        if self._stopped:
            return
        records = self._unwritten + self._collect()
        self._unwritten = []
        waiters, self._waiting = self._waiting, []
        if not records:
            for waiter in waiters:
                waiter.callback(None)
            return
        self._writing = True
        now_ms = int(self._clock.seconds() * 1000)
        try:
            appends = [self._append(batch) for batch in build_batches(records, now_ms)]
        except Exception as error:  # an append refused at once (no longer leader, shutting down)
            self._written_badly(Failure(error), records, waiters)
            return
        written = gatherResults(appends, consumeErrors=True)
        written.addCallbacks(self._written, self._written_badly, callbackArgs=(waiters,),
                             errbackArgs=(records, waiters))

    def _written(self, _: object, waiters: list[Deferred[None]]) -> None:
        self._writing = False
        for waiter in waiters:
            waiter.callback(None)
        if self._waiting:
            self._schedule(0)

    def _written_badly(self, failure: Failure, records: list[StateRecord], waiters: list[Deferred[None]]) -> None:
        self._writing = False
        error = failure.value.subFailure.value if hasattr(failure.value, "subFailure") else failure.value
        self._unwritten = records + self._unwritten
        if not self._stopped:
            self.log.warn("writing share-group state to {topic} failed ({error}); retrying in {delay} s",
                          topic=STATE_TOPIC, error=error, delay=RETRY_DELAY_S)
        for waiter in waiters:
            waiter.errback(error)
        self._schedule(RETRY_DELAY_S)
