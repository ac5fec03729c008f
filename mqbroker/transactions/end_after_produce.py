# -*- test-case-name: tests.unit.transactions.test_end_after_produce -*-
"""An EndTxn sent right behind its transaction's last produce requests on one connection.

A transactional producer whose last records go to its coordinator's broker may send the commit's
EndTxn on the same connection right after them (native EndTxn version 2, ``after_produce``),
instead of waiting for their answers first: one client round trip less per transaction. The
broker may not decide before that data is durable, so such an EndTxn starts only once every
transactional produce request read before it on that connection has been answered (acks=all:
durable on the in-sync replicas). If one of them failed, or one failed since the connection's
last EndTxn (its answer may have crossed the EndTxn on the wire), nothing is decided: the EndTxn
is refused with CONCURRENT_TRANSACTIONS and the producer ends the transaction the usual way,
once its records are acknowledged or retried. Records a transaction sent to other brokers are
the producer's to wait for (acknowledged before it sends such an EndTxn): one connection's order
says nothing about another's.

Per connection, and only for transactional produce requests: no Python work per record.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypeVar

from twisted.internet.defer import Deferred, fail, gatherResults
from twisted.python.failure import Failure

from mqbroker import errors

T = TypeVar("T")


class EndAfterProduce:
    """One connection's transactional produce requests in flight, for the EndTxn that asks to follow them."""

    def __init__(self) -> None:
        self._in_flight: dict[int, Deferred[None]] = {}
        self._keys = itertools.count()
        #: A transactional produce request failed (any partition) since the connection's last EndTxn.
        self._failed = False

    def produce(self, answered: Deferred[T], refused: Callable[[T], bool]) -> Deferred[T]:
        """Track a transactional produce request until ``answered`` fires (``refused(answer)``: some partition
        failed); returns ``answered``, whose result passes through unchanged."""
        key = next(self._keys)
        settled: Deferred[None] = Deferred()
        self._in_flight[key] = settled

        def settle(result: Any) -> Any:
            del self._in_flight[key]
            if isinstance(result, Failure) or refused(result):
                self._failed = True
            settled.callback(None)
            return result

        return answered.addBoth(settle)

    def end_txn(self, after_produce: bool, start: Callable[[], Deferred[T]]) -> Deferred[T]:
        """Run ``start`` (the EndTxn): at once, or with ``after_produce`` once the produce requests in flight now
        are answered, refused if one of them (or one answered since the last EndTxn) failed."""
        if not after_produce:
            self._failed = False
            return start()
        waiting = list(self._in_flight.values())
        if not waiting:
            return self._decide(start)
        return gatherResults(waiting).addCallback(lambda _: self._decide(start))

    def _decide(self, start: Callable[[], Deferred[T]]) -> Deferred[T]:
        failed, self._failed = self._failed, False
        if failed:
            return fail(errors.ConcurrentTransactionsError(
                "a produce request of this transaction sent ahead of EndTxn failed, so nothing was decided; send "
                "EndTxn again once the transaction's records are acknowledged (or abort it)"))
        return start()
