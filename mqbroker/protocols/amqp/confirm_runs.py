"""Publisher confirms in runs: pipelined confirmed publishes that went to the same batches, settled with one call."""

from __future__ import annotations

import functools
from collections.abc import Callable

from mqbroker.protocols.amqp.appender import AdmittedBatch, BatchStored
from mqbroker.protocols.amqp.connection import Connection
from mqbroker.protocols.amqp.publish_admission import split_run


class ConfirmRuns:
    """Groups confirmed publishes into runs that went to the same batches, settled with one call.

    pika and kombu pipeline publishes, so one read brings hundreds; they land in one batch per
    queue, and a run of them is answered with a single basic.ack (multiple) once that batch is
    durable. ``seal`` closes the open run (the session calls it whenever it flushes).

    A publish to a queue that rejects publishes when full goes into an ``AdmittedBatch`` that takes only its first
    messages: a run through one keeps its messages consecutive in it, and is acked up to where the batch stopped
    taking, nacked after.
    """

    def __init__(self, connection: Connection, confirmed: Callable[[int, int, int, bool], None]) -> None:
        self._connection = connection
        self._confirmed = confirmed
        self._channel = 0
        self._first = 0
        self._last = -1  # the open run is first..last; empty while last < first
        self._batches: list[BatchStored] = []
        #: The open run's admission rounds, each with the number of the run's first message in it.
        self._rounds: list[tuple[AdmittedBatch, int]] = []

    def add(self, channel: int, sequence: int, batches: list[BatchStored], last: int | None = None) -> None:
        """A confirmed publish stored in ``batches`` (none: unroutable, settled at once), called right after it was
        appended (its number in an admission round is the round's newest); with ``last``, the publishes
        ``sequence..last`` appended together to the same batches (never through an admission round)."""
        last = sequence if last is None else last
        if (channel == self._channel and sequence == self._last + 1 and batches == self._batches
                and (not self._rounds or self._follows_in_rounds(sequence))):
            self._last = last
            return
        self.seal()
        self._channel, self._first, self._last, self._batches = channel, sequence, last, batches
        self._rounds = [(batch, batch.size - 1) for batch in batches if isinstance(batch, AdmittedBatch)]

    def _follows_in_rounds(self, sequence: int) -> bool:
        """Whether the publish is next to the run's others in every admission round (another channel's may be
        between them)."""
        return all(batch.size - 1 == start + sequence - self._first for batch, start in self._rounds)

    def seal(self) -> None:
        """Hand the open run to its batches (or settle it now if nothing was stored)."""
        if self._last < self._first:
            return
        channel, first, last, batches = self._channel, self._first, self._last, self._batches
        self._first, self._last = 0, -1
        rounds, self._rounds = dict(self._rounds), []
        if not batches:
            self._connection.publish_settled_range(channel, first, last, stored=True)
        elif rounds:
            self._seal_judged(channel, first, last, batches, rounds)
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

    def _seal_judged(self, channel: int, first: int, last: int, batches: list[BatchStored],
                     rounds: dict[AdmittedBatch, int]) -> None:
        """Settle a run that went (also) through admission rounds: acked as far as every batch took it."""
        count = last - first + 1
        verdicts: list[tuple[int, bool]] = []

        def one_settled(batch: BatchStored, stored: bool) -> None:
            start = rounds.get(batch)  # type: ignore[call-overload]
            verdicts.append((count if start is None else batch.admitted - start, stored))  # type: ignore[attr-defined]
            if len(verdicts) == len(batches):
                for piece_first, piece_last, confirmed in split_run(count, verdicts):
                    self._confirmed(channel, first + piece_first, first + piece_last, confirmed)

        for batch in batches:
            batch.when_settled(functools.partial(one_settled, batch))
