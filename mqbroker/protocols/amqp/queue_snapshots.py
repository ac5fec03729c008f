"""Writing classic queues' state snapshots to ``__amqp_queue_state``, a moment after they change.

Changes are batched (``STATE_WRITE_DELAY_S``). A snapshot marks messages done that a crash could
still take back while the appends they depend on (dead letters' copies, messages delivered before
they were durable) are not yet durable: the write waits for those appends, so a crash in between
redelivers, never loses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.queues import ClassicQueue
from mqbroker.protocols.amqp.stored import QUEUE_STATE_TOPIC

#: How long queue-state changes wait before they are written (they are batched).
STATE_WRITE_DELAY_S = 0.2

WriteRecords = Callable[[str, Iterable[tuple[bytes, bytes | None]]], Awaitable[None]]


class QueueSnapshots:
    """The queue states changed since the last write, and the appends the next write waits for."""

    log = Logger()

    def __init__(self, reactor: IReactorTime, queues: Mapping[str, Any], write: WriteRecords) -> None:
        """``queues``: the virtual host's queues by name; ``write``: stores records in a compacted topic."""
        self.reactor = reactor
        self.queues = queues
        self._write = write
        self._dirty_states: set[str] = set()
        self._state_write: IDelayedCall | None = None
        self._dead_letter_batches: list[BatchStored] = []  # dead letters' copies not yet known durable

    def changed(self, name: str) -> None:
        """Schedule a write of queue ``name``'s state snapshot."""
        self._dirty_states.add(name)
        if self._state_write is None:
            self._state_write = self.reactor.callLater(STATE_WRITE_DELAY_S, self._write_states)

    def forget(self, name: str) -> None:
        """Queue ``name`` is gone: no snapshot of it is written."""
        self._dirty_states.discard(name)

    def dead_lettered(self, batches: list[BatchStored]) -> None:
        """Dead letters' copies were appended: the next snapshots wait until they are durable."""
        self._dead_letter_batches += batches

    def write_changed_states(self) -> Deferred[None]:
        """Write every changed queue state now (at shutdown: acks made just before it stick)."""
        if self._state_write is None:
            return succeed(None)
        self._state_write.cancel()
        return self._write_states()

    def _write_states(self) -> Deferred[None]:
        self._state_write = None
        written: Deferred[None] = Deferred()
        names, self._dirty_states = self._dirty_states, set()
        entries = [(name.encode("utf-8", "surrogateescape"), queue.state.snapshot())
                   for name in names if isinstance(queue := self.queues.get(name), ClassicQueue)]
        # A snapshot marks dead-lettered messages done: it is written only once their copies on
        # the dead-letter exchange are durable, so a crash in between redelivers, never loses.
        # Later snapshots wait for the same batches, so they cannot overtake this one.
        pending = [batch for batch in self._dead_letter_batches if batch.outcome is None]
        self._dead_letter_batches = pending
        # Consumers get messages before they are durable, so a snapshot may mark done offsets a crash
        # could still take back (and hand to new messages): it too waits for those appends.
        pending = pending + [batch for name in names if isinstance(queue := self.queues.get(name), ClassicQueue)
                             for batch in queue.unsettled_appends]
        remaining = [len(pending)]

        def one_settled(stored: bool) -> None:
            if not stored:
                self.log.error("an append this queue state depends on was not stored (a dead letter may be lost)")
            remaining[0] -= 1
            if remaining[0] == 0:
                self._write_snapshots(entries).chainDeferred(written)

        if not pending:
            self._write_snapshots(entries).chainDeferred(written)
        for batch in pending:
            batch.when_settled(one_settled)
        return written

    def _write_snapshots(self, entries: list[tuple[bytes, bytes | None]]) -> Deferred[None]:
        written = Deferred.fromCoroutine(self._write(QUEUE_STATE_TOPIC, entries))  # type: ignore[arg-type]
        written.addErrback(lambda failure: self.log.failure("writing AMQP queue states failed", failure))
        return written
