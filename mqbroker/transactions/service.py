# -*- test-case-name: tests.unit.transactions.test_service -*-
"""Runs the pure ``TransactionCoordinator`` of one ``__transaction_state`` partition inside the broker.

"tx-light", like the group service: it returns Deferreds, schedules through the injected clock
and does no I/O of its own. It answers the coordinator's parked requests, appends its records
to the partition (acks=all: a change is durable once every in-sync replica has it; the writes
of one turn go out as one batch) and reports each back, has the markers written by the partition
leaders (``MarkerWriter``, which retries until every partition has its marker) and reports them
back, and ticks the coordinator at its deadlines.

What the coordinator made ready goes out writes first (their fsync round starts sooner), then
answers, then markers (an EndTxn's answer does not wait for its markers' appends). The answers of
one turn fire inside the flusher's ``one_round``: the appends they release (a version 2 produce
that opened the transaction in three partitions, held for the coordinator's addition) share one
fsync round instead of the first going alone and the others waiting for the next.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.service import answer_parked
from mqbroker.records.builder import BatchBuilder
from mqbroker.transactions.coordinator import TransactionCoordinator
from mqbroker.transactions.log_records import TransactionLogRecord
from mqbroker.transactions.messages import (
    AddOffsetsRequest,
    AddPartitionsRequest,
    EndTxnRequest,
    InitTransactionsRequest,
    ProducerIdAndEpoch,
    TransactionDescription,
    TransactionListing,
    TransactionMarker,
    TransactionState,
)
from mqbroker.transactions.stats import TransactionStats

#: Appends one batch to this coordinator's ``__transaction_state`` partition; fires once it is replicated.
Appender = Callable[[bytes], "Deferred[Any]"]
#: Ticks never come closer than this (a write that keeps failing must not spin the reactor).
TICK_INTERVAL_MS_MIN = 50


class MarkerWriter(Protocol):
    """Has the partition leaders append a transaction's markers; fires once every partition has its marker."""

    def write(self, marker: TransactionMarker) -> Deferred[None]:
        """Retry until done; the Deferred may be cancelled when the coordinator resigns."""


class TransactionService:
    """The broker's transaction coordinator for one partition: Deferred answers over the pure state machine."""

    log = Logger()

    def __init__(
        self, *, coordinator: TransactionCoordinator, clock: IReactorTime, append: Appender, markers: MarkerWriter,
        allocate_producer_id: Callable[[], Deferred[int]], stats: TransactionStats | None = None,
        one_round: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        """``stats``: where decisions and commit latencies are counted (shared by a broker's services);
        ``one_round``: the flusher's, held while a turn's answers fire."""
        self._coordinator = coordinator
        self._stats = stats if stats is not None else TransactionStats()
        self._clock = clock
        self._append = append
        self._markers = markers
        self._allocate_producer_id = allocate_producer_id
        self._one_round = one_round
        self._parked: dict[int, Deferred[Any]] = {}
        self._keys = itertools.count()
        self._marking: dict[str, Deferred[None]] = {}
        self._timer: IDelayedCall | None = None
        #: Additions asked this reactor turn, per (transactional id, producer id, epoch): partitions, answers.
        self._gathered_additions: dict[tuple[str, int, int], tuple[set[TopicPartition], list[Deferred[None]]]] = {}
        self._gathered_call: IDelayedCall | None = None
        self._timer_deadline_ms: int | None = None
        self._stopped = False
        self._drain()

    def now_ms(self) -> int:
        """The clock in milliseconds."""
        return int(self._clock.seconds() * 1000)

    # -- requests ----------------------------------------------------------------------------

    def init_producer_id(self, request: InitTransactionsRequest) -> Deferred[ProducerIdAndEpoch]:
        """Fence the previous incarnation; fires with the producer id and its new epoch once durable."""
        if not self._coordinator.needs_producer_id(request.transactional_id):
            return self._park(lambda key: self._coordinator.init_producer_id(request, key, self.now_ms()))
        allocated = self._allocate_producer_id()
        return allocated.addCallback(lambda producer_id: self._park(
            lambda key: self._coordinator.init_producer_id(request, key, self.now_ms(), producer_id)))

    def add_partitions(self, request: AddPartitionsRequest) -> Deferred[None]:
        """Add partitions to the ongoing transaction (or, ``verify_only``, check they are in it).

        Additions for one producer id and epoch asked in the same reactor turn go to the coordinator as
        one (one write): a produce opening a transaction in several partitions asks once per partition
        (transaction version 2), and the first alone would otherwise make the rest wait for its write.
        """
        if request.verify_only:
            return self._now(lambda: self._coordinator.verify(request))
        answer: Deferred[None] = Deferred()
        key = (request.transactional_id, request.producer_id, request.producer_epoch)
        partitions, answers = self._gathered_additions.setdefault(key, (set(), []))
        partitions.update(request.partitions)
        answers.append(answer)
        if self._gathered_call is None:
            self._gathered_call = self._clock.callLater(0, self._add_gathered)
        return answer

    def _add_gathered(self) -> None:
        """Send this turn's gathered additions: one coordinator call per producer id and epoch."""
        self._gathered_call = None
        gathered, self._gathered_additions = self._gathered_additions, {}
        with self._one_round():  # additions answered at once (listed already) release their appends into one round
            for (transactional_id, producer_id, producer_epoch), (partitions, answers) in gathered.items():
                request = AddPartitionsRequest(transactional_id=transactional_id, producer_id=producer_id,
                                               producer_epoch=producer_epoch, partitions=frozenset(partitions))
                added = self._park(lambda key, request=request: self._coordinator.add_partitions(  # type: ignore[misc]
                    request, key, self.now_ms()))
                added.addBoth(_answer_each, answers)

    def add_offsets(self, request: AddOffsetsRequest) -> Deferred[None]:
        """Add a group's offsets partition to the ongoing transaction."""
        return self._park(lambda key: self._coordinator.add_offsets(request, key, self.now_ms()))

    def end_txn(self, request: EndTxnRequest) -> Deferred[ProducerIdAndEpoch | None]:
        """Commit or abort; fires once the decision is durable (the markers follow), with the producer's next
        epoch when ``request.bump_epoch``."""
        arrived_s = self._clock.seconds()
        if self._coordinator.needs_fresh_producer_id(request):
            allocated = self._allocate_producer_id()
            answer = allocated.addCallback(lambda producer_id: self._park(lambda key: self._coordinator.end_txn(
                dataclasses.replace(request, fresh_producer_id=producer_id), key, self.now_ms())))
        else:
            answer = self._park(lambda key: self._coordinator.end_txn(request, key, self.now_ms()))
        if request.committed:
            answer.addCallback(self._commit_answered, arrived_s)
        return answer

    def _commit_answered(self, result: ProducerIdAndEpoch | None, arrived_s: float) -> ProducerIdAndEpoch | None:
        self._stats.commit_answered((self._clock.seconds() - arrived_s) * 1000)
        return result

    def describe(self, transactional_id: str) -> Deferred[TransactionDescription]:
        """A transactional id's persisted state."""
        return self._now(lambda: self._coordinator.describe(transactional_id))

    def list_transactions(
        self, states: frozenset[TransactionState], producer_ids: frozenset[int]
    ) -> list[TransactionListing]:
        """The transactional ids coordinated here, filtered."""
        return self._coordinator.list_transactions(states, producer_ids)

    def open_count(self) -> int:
        """Transactions ongoing or deciding (a metric)."""
        return self._coordinator.open_count()

    # -- plumbing ----------------------------------------------------------------------------

    def _now(self, action: Callable[[], Any]) -> Deferred[Any]:
        """Run a read-only coordinator call (a partition leader's verification, once per transaction and partition;
        a describe), which answers at once and leaves nothing to drain; a typed error fails the Deferred."""
        try:
            return succeed(action())
        except errors.BrokerError as error:
            return fail(error)

    def _park(self, action: Callable[[int], None]) -> Deferred[Any]:
        """Run a coordinator call whose answer comes out of ``ready()`` (now, or once durable)."""
        if self._stopped:
            return fail(errors.NotCoordinatorError("this transaction coordinator stopped; find it again"))
        key = next(self._keys)
        answer: Deferred[Any] = Deferred()
        self._parked[key] = answer
        try:
            action(key)
        except errors.BrokerError as error:
            del self._parked[key]
            return fail(error)
        finally:
            self._drain()
        return answer

    def _drain(self) -> None:
        """Append writes (one batch), answer replies (one fsync round), have markers written, re-arm the timer."""
        if self._stopped:
            return
        ready = self._coordinator.ready()
        if ready.writes:  # an id with two records (a completion and the next start) is reported once
            self._write(list(dict.fromkeys(transactional_id for transactional_id, _ in ready.writes)),
                        [record for _, record in ready.writes])  # type: ignore[misc]
        with self._one_round():
            answer_parked(self._parked, ready.replies)
        for request in ready.markers:
            self._write_markers(request.transactional_id, request.marker)
        self._schedule()

    def _write(self, transactional_ids: list[str], records: list[TransactionLogRecord]) -> None:
        builder = BatchBuilder()
        now_ms = self.now_ms()
        for record in records:
            builder.append(now_ms, record.key, record.value)
        appended = self._append(builder.build())
        appended.addCallbacks(self._written, self._write_failed, callbackArgs=(transactional_ids,),
                              errbackArgs=(transactional_ids,))

    def _written(self, _: Any, transactional_ids: list[str]) -> None:
        if self._stopped:
            return
        for transactional_id in transactional_ids:
            self._coordinator.written(transactional_id, self.now_ms())
        self._drain()

    def _write_failed(self, failure: Failure, transactional_ids: list[str]) -> None:
        if self._stopped:
            return
        error = failure.value if failure.check(errors.BrokerError) else errors.UnknownServerError(
            f"appending to __transaction_state failed: {failure.getErrorMessage()}")
        if not failure.check(errors.BrokerError):
            self.log.failure("appending to __transaction_state failed", failure)
        for transactional_id in transactional_ids:
            self._coordinator.written(transactional_id, self.now_ms(), error)
        self._drain()

    def _write_markers(self, transactional_id: str, marker: TransactionMarker) -> None:
        if transactional_id in self._marking:
            return  # already being written; the same decision
        written = self._markers.write(marker)
        self._marking[transactional_id] = written
        written.addCallbacks(self._markers_written, self._markers_failed, callbackArgs=(transactional_id, marker),
                             errbackArgs=(transactional_id,))

    def _markers_written(self, _: Any, transactional_id: str, marker: TransactionMarker) -> None:
        self._marking.pop(transactional_id, None)
        if not self._stopped:
            self._stats.decided(marker.committed)
            self._coordinator.markers_written(transactional_id, self.now_ms())
            self._drain()

    def _markers_failed(self, failure: Failure, transactional_id: str) -> None:
        self._marking.pop(transactional_id, None)
        if not self._stopped:  # a writer only gives up when the partitions' leaders fenced this coordinator
            self.log.warn("markers of {id} not written: {error}", id=transactional_id, error=failure.getErrorMessage())

    def _schedule(self) -> None:
        """Arm the timer for the coordinator's next deadline (no closer than ``TICK_INTERVAL_MS_MIN``)."""
        if self._stopped:
            return
        now_ms = self.now_ms()
        deadline_ms = max(self._coordinator.next_deadline_ms(), now_ms + TICK_INTERVAL_MS_MIN)
        if self._timer is not None and self._timer.active():
            if self._timer_deadline_ms is not None and self._timer_deadline_ms <= deadline_ms:
                return
            self._timer.cancel()
        self._timer_deadline_ms = deadline_ms
        self._timer = self._clock.callLater((deadline_ms - now_ms) / 1000.0, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._timer_deadline_ms = None
        if self._stopped:
            return
        self._coordinator.tick(self.now_ms())
        self._drain()

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel the timer and the marker writes (shutdown); parked requests are answered by ``resign``."""
        self._stopped = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        if self._gathered_call is not None:
            self._gathered_call.cancel()
            self._add_gathered()  # refused: this coordinator stopped
        marking, self._marking = self._marking, {}
        for written in marking.values():
            written.cancel()

    def resign(self, error: errors.BrokerError) -> None:
        """Another broker coordinates these ids now: stop, and fail the parked requests with ``error``."""
        self.stop()
        parked, self._parked = self._parked, {}
        for answer in parked.values():
            answer.errback(error)


def _answer_each(result: object, answers: list[Deferred[None]]) -> None:
    """Fire every gathered addition's answer with the one call's outcome."""
    for answer in answers:
        if isinstance(result, Failure):
            answer.errback(result)
        else:
            answer.callback(None)
