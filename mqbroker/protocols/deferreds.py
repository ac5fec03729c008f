"""Deferred helpers the front ends share: settle a broker call into (result, error), gather in order."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred, FirstError, gatherResults
from twisted.python.failure import Failure

from mqbroker import errors


def settled(deferred: Deferred[Any]) -> Deferred[tuple[Any, BaseException | None]]:
    """Fires with (result, None) or (None, the broker error ``deferred`` failed with); other failures pass."""
    return deferred.addCallbacks(lambda result: (result, None), _broker_error)


async def settle(deferred: Deferred[Any]) -> tuple[Any, BaseException | None]:
    """``settled`` for coroutine handlers."""
    return await settled(deferred)


def _broker_error(failure: Failure) -> tuple[None, BaseException]:
    failure.trap(errors.BrokerError)
    return None, failure.value


def gathered(deferreds: list[Deferred[Any]]) -> Deferred[list[Any]]:
    """All results, in order; the first unexpected failure fails the whole (one Deferred needs no list)."""
    if len(deferreds) == 1:
        return deferreds[0].addCallback(lambda result: [result])
    return gatherResults(deferreds, consumeErrors=True).addErrback(
        lambda failure: failure.value.subFailure if failure.check(FirstError) else failure
    )
