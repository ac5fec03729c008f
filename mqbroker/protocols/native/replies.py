"""What every native-protocol handler shares: broker errors as wire codes, settled Deferreds, per-topic grouping."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.defer import Deferred, FirstError, gatherResults
from twisted.python.failure import Failure

from mqbroker import errors


def error_code(error: BaseException | None) -> tuple[int, str | None]:
    """Wire error code and message of a broker error (or none)."""
    if error is None:
        return 0, None
    if isinstance(error, errors.BrokerError):
        return int(error.code), error.message
    return int(errors.ErrorCode.UNKNOWN_SERVER_ERROR), "internal error; see the broker log"


def settled(deferred: Deferred[Any]) -> Deferred[tuple[Any, BaseException | None]]:
    """Fires with (result, None) or (None, the broker error ``deferred`` failed with)."""
    return deferred.addCallbacks(lambda result: (result, None), _broker_error)


async def settle(deferred: Deferred[Any]) -> tuple[Any, BaseException | None]:
    """``settled`` for the coroutine handlers."""
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


def per_topic(topic_result: Callable[..., Any], answers: Iterable[tuple[str, Any]]) -> tuple[Any, ...]:
    """(topic, partition result) pairs grouped into topic results, topics in first-seen order."""
    by_topic: dict[str, list[Any]] = {}
    for topic, result in answers:
        by_topic.setdefault(topic, []).append(result)
    return tuple(topic_result(name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items())
