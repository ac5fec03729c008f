"""Causal routing in a cluster: a publish is routed only once this broker applied every declaration that was durable in
``__amqp_metadata`` when the publish arrived, so a binding is in force on every broker when its bind-ok is sent (as
in RabbitMQ).

A broker's definitions follower applies the others' declarations one fetch behind. A publish cannot wait for a
whole fetch each, nor ask the log's end each: the publishes that arrive meanwhile share **rounds**. A publish takes
a ticket when its bytes arrive (``ticket``); a round reads the end of ``__amqp_metadata`` (its high watermark, one
ListOffsets to its leader, local when this broker leads it) and waits until the follower applied up to there
(``DefinitionsFollower.caught_up``). A round that started after a publish's ticket was taken covers it: bind-ok
is sent only once the binding's record is below the high watermark, so a round started after the publish arrived
sees an end past every binding whose bind-ok could have reached the publisher. Everything that arrives while a
round runs waits for the next one: one round in flight at a time, one ListOffsets per round, whatever the rate.

A round that cannot read the end (no leader of ``__amqp_metadata`` for ``limits.reroute_ms_max``) or whose follower
does not get there within ``limits.reroute_ms_max`` (it cannot fetch) is logged and its publishes are routed by
what this broker knows: a broker keeps serving publishes while its definitions cannot be brought up to date.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from twisted.internet import defer
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits


class DefinitionsFence:
    """Holds publishes until the declarations made anywhere before they arrived are applied here, in shared rounds."""

    log = Logger()

    def __init__(self, catch_up: Callable[[], Awaitable[None]], reactor: IReactorTime) -> None:
        """``catch_up()`` returns once every declaration durable when it was called is applied."""
        self._catch_up = catch_up
        self._reactor = reactor
        #: The round a publish arriving now needs: rounds are numbered, and one starts by taking this number.
        self._next_round = 0
        #: Tickets below this are covered: a round that started after they were taken is over.
        self._covered_below = 0
        self._running = False
        self._waiters: list[tuple[int, Deferred[None]]] = []
        #: Rounds run so far (for tests and the log).
        self.rounds = 0

    def ticket(self) -> int:
        """The ticket of a publish arriving now."""
        return self._next_round

    def covers(self, ticket: int) -> bool:
        """Whether a publish with ``ticket`` may be routed now."""
        return ticket < self._covered_below

    def wait(self, ticket: int) -> Deferred[None]:
        """Fires once a round that started after ``ticket`` was taken is over (never fails)."""
        waiter: Deferred[None] = Deferred()
        self._waiters.append((ticket, waiter))
        if not self._running:
            Deferred.fromCoroutine(self._rounds()).addErrback(
                lambda failure: self.log.failure("the AMQP definitions fence failed", failure))
        return waiter

    async def _rounds(self) -> None:
        self._running = True
        try:
            while self._waiters:
                number = self._next_round
                self._next_round += 1
                try:
                    await defer.ensureDeferred(self._catch_up()).addTimeout(limits.reroute_ms_max / 1000, self._reactor)
                except (errors.BrokerError, defer.TimeoutError) as error:
                    self.log.warn("AMQP publishes routed without the newest declarations: {error}", error=error)
                except Exception:  # never strand the publishes waiting here
                    self.log.failure("AMQP publishes routed without the newest declarations", Failure())
                self.rounds += 1
                self._covered_below = number + 1
                ready = [waiter for ticket, waiter in self._waiters if ticket <= number]
                self._waiters = [(ticket, waiter) for ticket, waiter in self._waiters if ticket > number]
                for waiter in ready:
                    waiter.callback(None)
        finally:
            self._running = False
