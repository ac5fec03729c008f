"""What every native-protocol handler shares: broker errors as wire codes, per-topic grouping (settling broker
calls is ``protocols.deferreds``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mqbroker import errors


def error_code(error: BaseException | None) -> tuple[int, str | None]:
    """Wire error code and message of a broker error (or none)."""
    if error is None:
        return 0, None
    if isinstance(error, errors.BrokerError):
        return int(error.code), error.message
    return int(errors.ErrorCode.UNKNOWN_SERVER_ERROR), "internal error; see the broker log"


def per_topic(topic_result: Callable[..., Any], answers: Iterable[tuple[str, Any]]) -> tuple[Any, ...]:
    """(topic, partition result) pairs grouped into topic results, topics in first-seen order."""
    by_topic: dict[str, list[Any]] = {}
    for topic, result in answers:
        by_topic.setdefault(topic, []).append(result)
    return tuple(topic_result(name=name, partitions=tuple(partitions)) for name, partitions in by_topic.items())
