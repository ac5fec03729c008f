"""Delivery outcomes of the blocking producer: ``RecordFuture``, and where its callbacks run.

Each batch gets a ``BatchDelivery`` (the core's "waiter"): an event set once the batch is
acknowledged or failed, and the callbacks of its records waiting for that. ``Deliveries``
runs them when the batch completes, in one of two modes:

* ``"immediate"`` (the default): on the producer's I/O thread, as each batch completes (as
  ``concurrent.futures`` runs done callbacks). Callbacks must be quick, and must not call
  ``flush`` or ``close``, which would wait for the very thread that runs them.
* ``"poll"`` (confluent-kafka's model): queued, and run in the caller's thread by
  ``producer.poll(timeout)``, ``flush`` and ``close``; a callback's exception propagates from there.

A callback added to a future that is already done runs at once (``"immediate"``) or at the
next poll (``"poll"``). Either way each callback runs exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from mqbroker.client.batch_records import RecordSlot
from mqbroker.client.producer_batch import ProducerBatch, RecordMetadata
from mqbroker.errors import BrokerError

IMMEDIATE = "immediate"
POLL = "poll"
DELIVERY_MODES = (IMMEDIATE, POLL)

#: A delivery report: ``(error, None)`` for a failed record, ``(None, metadata)`` for a written one.
DeliveryCallback = Callable[[BrokerError | None, RecordMetadata | None], None]

log = logging.getLogger(__name__)


class BatchDelivery:
    """The driver's waiter on one batch: set once it completes; record callbacks wait for that."""

    __slots__ = ("event", "callbacks", "deliveries")

    def __init__(self, deliveries: Deliveries) -> None:
        self.event = threading.Event()
        self.callbacks: list[Callable[[], None]] = []
        #: Where the callbacks of this batch run.
        self.deliveries = deliveries


class Deliveries:
    """Runs record callbacks when their batch completes: at once on the I/O thread, or queued for ``poll``."""

    def __init__(self, mode: str) -> None:
        if mode not in DELIVERY_MODES:
            raise ValueError(f"delivery_callbacks must be one of {', '.join(DELIVERY_MODES)}, not {mode!r}")
        self.mode = mode
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queued: deque[Callable[[], None]] = deque()

    @property
    def queued(self) -> int:
        """Callbacks waiting for ``run_queued`` (poll mode)."""
        return len(self._queued)

    def new_batch(self) -> BatchDelivery:
        """The waiter of a new batch (``ProducerCore``'s ``new_waiter``)."""
        return BatchDelivery(self)

    def add(self, delivery: BatchDelivery, callback: Callable[[], None]) -> None:
        """Run ``callback`` once ``delivery`` completes (now, if it has)."""
        with self._lock:
            if not delivery.event.is_set():
                delivery.callbacks.append(callback)
                return
        self._dispatch([callback])

    def completed(self, delivery: BatchDelivery) -> None:
        """The batch is acknowledged or failed (the I/O thread): wake its waiters, run or queue its callbacks."""
        with self._lock:
            delivery.event.set()
            callbacks, delivery.callbacks = delivery.callbacks, []
        if callbacks:
            self._dispatch(callbacks)

    def _dispatch(self, callbacks: list[Callable[[], None]]) -> None:
        if self.mode == POLL:
            with self._lock:
                self._queued.extend(callbacks)
                self._ready.notify_all()
            return
        for callback in callbacks:
            try:
                callback()
            except Exception:  # the I/O thread must go on: the error can only be logged
                log.exception("a delivery callback raised; it runs on the producer's I/O thread")

    def run_queued(self, timeout: float = 0.0) -> int:
        """Run the queued callbacks in this thread, waiting up to ``timeout`` seconds for the first;
        return how many ran. A callback's exception propagates; the ones after it stay queued."""
        with self._lock:
            if not self._queued and timeout > 0:
                self._ready.wait(timeout)
            count = len(self._queued)
        for _ in range(count):  # only those queued now: a steady stream must not keep the caller here
            with self._lock:
                callback = self._queued.popleft()
            callback()
        return count


class RecordFuture(RecordSlot):
    """The delivery outcome of one record: ``result()`` waits for its ``RecordMetadata``.

    ``RecordFuture(batch, index, timestamp_ms)``: its fields are a ``RecordSlot``'s, set without Python code when
    compiled (a ``send`` makes one per record)."""

    __slots__ = ()
    _batch: ProducerBatch
    _index: int
    _timestamp_ms: int

    def done(self) -> bool:
        """True once the record is acknowledged or failed."""
        return self._batch.done

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait (up to ``timeout`` seconds) and return where the record landed, or raise its error."""
        waiter = self._batch.waiter
        assert isinstance(waiter, BatchDelivery)
        if not waiter.event.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout}s")
        return self._batch.metadata(self._index, self._timestamp_ms)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait and return the record's error, or None if it was written."""
        try:
            self.result(timeout)
        except BrokerError as error:
            return error
        return None

    def add_done_callback(self, callback: Callable[[RecordFuture], None]) -> None:
        """Call ``callback(future)`` once the record is acknowledged or failed (see the module for which thread)."""
        waiter = self._batch.waiter
        assert isinstance(waiter, BatchDelivery)
        waiter.deliveries.add(waiter, lambda: callback(self))

    def add_delivery_callback(self, callback: DeliveryCallback) -> None:
        """Call ``callback(error, metadata)`` once the record is acknowledged or failed (``send``'s ``on_delivery``)."""
        self.add_done_callback(lambda future: future._report(callback))

    def _report(self, callback: DeliveryCallback) -> None:
        try:
            metadata = self._batch.metadata(self._index, self._timestamp_ms)
        except BrokerError as error:
            callback(error, None)
        else:
            callback(None, metadata)


class RecordsFuture:
    """The delivery outcome of the records of one ``send_many``: spans of one or more batches."""

    __slots__ = ("_spans", "_timestamp_ms")

    def __init__(self, spans: list[tuple[ProducerBatch, int, int]], timestamp_ms: int) -> None:
        """``spans``: (batch, index of the first record in it, record count), in the order of the values."""
        self._spans = spans
        self._timestamp_ms = timestamp_ms

    @property
    def record_count(self) -> int:
        """How many records the call sent."""
        return sum(count for _, _, count in self._spans)

    def done(self) -> bool:
        """True once every record is acknowledged or failed."""
        return all(batch.done for batch, _, _ in self._spans)

    def wait(self, timeout: float | None = None) -> None:
        """Wait until every record is acknowledged or failed; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for batch, _, _ in self._spans:
            waiter = batch.waiter
            assert isinstance(waiter, BatchDelivery)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not waiter.event.wait(remaining):
                raise TimeoutError(f"records not acknowledged within {timeout}s")

    def counts(self, timeout: float | None = None) -> tuple[int, int]:
        """Wait, then return (records acknowledged, records failed)."""
        self.wait(timeout)
        failed = sum(count for batch, _, count in self._spans if batch.error is not None)
        return self.record_count - failed, failed

    def exception(self, timeout: float | None = None) -> BrokerError | None:
        """Wait and return the first failed record's error, or None if every record was written."""
        self.wait(timeout)
        return next((batch.error for batch, _, _ in self._spans if batch.error is not None), None)

    def result(self, timeout: float | None = None) -> list[RecordMetadata]:
        """Wait and return where each record landed, in the order of the values; raise the first error."""
        error = self.exception(timeout)
        if error is not None:
            raise error
        return [batch.metadata(index, self._timestamp_ms)
                for batch, first, count in self._spans for index in range(first, first + count)]
