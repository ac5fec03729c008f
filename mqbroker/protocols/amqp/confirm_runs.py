"""Publisher confirms in runs: pipelined confirmed publishes that went to the same batches, settled with one call."""

from __future__ import annotations

import functools
from collections.abc import Callable

from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.connection import Connection


class ConfirmRuns:
    """Groups confirmed publishes into runs that went to the same batches, settled with one call.

    pika and kombu pipeline publishes, so one read brings hundreds; they land in one batch per
    queue, and a run of them is answered with a single basic.ack (multiple) once that batch is
    durable. ``seal`` closes the open run (the session calls it whenever it flushes).
    """

    def __init__(self, connection: Connection, confirmed: Callable[[int, int, int, bool], None]) -> None:
        self._connection = connection
        self._confirmed = confirmed
        self._channel = 0
        self._first = 0
        self._last = -1  # the open run is first..last; empty while last < first
        self._batches: list[BatchStored] = []

    def add(self, channel: int, sequence: int, batches: list[BatchStored]) -> None:
        """A confirmed publish stored in ``batches`` (none: unroutable, settled at once)."""
        if channel == self._channel and sequence == self._last + 1 and batches == self._batches:
            self._last = sequence
            return
        self.seal()
        self._channel, self._first, self._last, self._batches = channel, sequence, sequence, batches

    def seal(self) -> None:
        """Hand the open run to its batches (or settle it now if nothing was stored)."""
        if self._last < self._first:
            return
        channel, first, last, batches = self._channel, self._first, self._last, self._batches
        self._first, self._last = 0, -1
        if not batches:
            self._connection.publish_settled_range(channel, first, last, stored=True)
        elif len(batches) == 1:
            batches[0].when_settled(functools.partial(self._confirmed, channel, first, last))
        else:
            outcomes: list[bool] = []

            def one_settled(stored: bool) -> None:
                outcomes.append(stored)
                if len(outcomes) == len(batches):
                    self._confirmed(channel, first, last, all(outcomes))

            for batch in batches:
                batch.when_settled(one_settled)
