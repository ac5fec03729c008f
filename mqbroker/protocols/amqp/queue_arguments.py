"""What a queue's x-arguments and a message's properties say, parsed (pure): RabbitMQ's vocabulary.

``QueuePolicy`` reads queue.declare's arguments (``x-queue-type``, ``x-message-ttl``,
``x-expires``, ``x-max-length``, ``x-overflow``, ``x-delivery-limit``, ``x-dead-letter-*``), refusing what it
cannot honour with 406 PRECONDITION_FAILED; ``parse_expiration`` reads a message's
``expiration``; ``x_death_headers`` writes a dead-lettered message's ``x-death`` headers; and
``parse_stream_offset`` reads where a stream consumer starts (``x-stream-offset``).
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Mapping
from typing import Any

from mqbroker import limits
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode


class DeathReason(enum.Enum):
    """Why a message left its queue other than by an ack (RabbitMQ's x-death reasons)."""

    REJECTED = "rejected"
    EXPIRED = "expired"
    MAXLEN = "maxlen"
    DELIVERY_LIMIT = "delivery_limit"


class QueueType(enum.Enum):
    """A classic queue, an append-only stream read from an offset, or a queue served by a share group."""

    CLASSIC = "classic"
    STREAM = "stream"
    SHARE = "share"  # served by the share group over its log (share_queue.py)


class Overflow(enum.Enum):
    """What a full queue (``x-max-length`` ready messages) does with one more (RabbitMQ's ``x-overflow``)."""

    DROP_HEAD = "drop-head"  # the oldest ready message goes (dead-lettered, reason maxlen)
    REJECT_PUBLISH = "reject-publish"  # the new one is not stored: nacked with confirms, dropped without
    REJECT_PUBLISH_DLX = "reject-publish-dlx"  # the same, and the new one is dead-lettered (reason maxlen)

    @property
    def rejects_publish(self) -> bool:
        """Whether a full queue refuses new messages rather than dropping its head."""
        return self is not Overflow.DROP_HEAD


def _precondition(text: str) -> AmqpError:
    return AmqpError(ReplyCode.PRECONDITION_FAILED, text, class_id=50, method_id=10)


def _non_negative_int(arguments: Mapping[str, Any], name: str) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _precondition(f"{name} must be a non-negative integer, not {value!r}")
    return value


def _optional_str(arguments: Mapping[str, Any], name: str) -> str | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", "surrogateescape")
    if not isinstance(value, str):
        raise _precondition(f"{name} must be a string, not {value!r}")
    return value


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueuePolicy:
    """The queue arguments that shape message handling."""

    queue_type: QueueType = QueueType.CLASSIC
    message_ttl_ms: int | None = None
    expires_ms: int | None = None
    max_length: int | None = None
    overflow: Overflow = Overflow.DROP_HEAD
    delivery_limit: int | None = None
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> QueuePolicy:
        """Parse queue.declare arguments; 406 PRECONDITION_FAILED names a bad one."""
        queue_type_name = _optional_str(arguments, "x-queue-type") or "classic"
        if queue_type_name == "quorum":
            queue_type_name = "classic"  # same semantics here: every queue is durable and replicated by the log
        try:
            queue_type = QueueType(queue_type_name)
        except ValueError:
            raise _precondition(f"x-queue-type {queue_type_name!r} is not supported; use classic, stream or share") from None
        overflow_name = _optional_str(arguments, "x-overflow") or "drop-head"
        try:
            overflow = Overflow(overflow_name)
        except ValueError:
            raise _precondition(f"x-overflow {overflow_name!r} is not supported; use drop-head, reject-publish or "
                                "reject-publish-dlx") from None
        if overflow.rejects_publish and queue_type is not QueueType.SHARE:
            # A classic queue's state lives in the broker consuming it: a publish through another broker could not
            # be judged against it (docs/queues.md "AMQP share queues").
            raise _precondition(f"x-overflow {overflow_name!r} needs a share queue (durable, neither exclusive nor "
                                f"auto-delete, without x-queue-type, or x-queue-type share); a "
                                f"{queue_type.value} queue only drops its head")
        expires_ms = _non_negative_int(arguments, "x-expires")
        if expires_ms == 0:
            raise _precondition("x-expires must be at least 1 ms")
        max_length = _non_negative_int(arguments, "x-max-length")
        if max_length is not None and max_length > limits.amqp_queue_length_max:
            raise _precondition(f"x-max-length {max_length} exceeds this broker's bound of {limits.amqp_queue_length_max}")
        return cls(
            queue_type=queue_type,
            message_ttl_ms=_non_negative_int(arguments, "x-message-ttl"),
            expires_ms=expires_ms,
            max_length=max_length,
            overflow=overflow,
            delivery_limit=_non_negative_int(arguments, "x-delivery-limit"),
            dead_letter_exchange=_optional_str(arguments, "x-dead-letter-exchange"),
            dead_letter_routing_key=_optional_str(arguments, "x-dead-letter-routing-key"),
        )


def parse_expiration(value: str | None) -> int | None:
    """The ``expiration`` property (milliseconds as a decimal string) or None if absent or invalid."""
    if value is None or not value.isdigit():
        return None
    return int(value)


# --- dead-letter headers ---------------------------------------------------------------------


def x_death_headers(
    headers: Mapping[str, Any] | None,
    *,
    queue: str,
    reason: DeathReason,
    exchange: str,
    routing_keys: list[str],
    now_ms: int,
    original_expiration: str | None = None,
) -> dict[str, Any]:
    """A dead-lettered message's headers in RabbitMQ's format.

    ``x-death`` is a list of tables, most recent first, one per (queue, reason) with a
    ``count``; ``x-first-death-*`` name the first death and never change.
    """
    result = dict(headers or {})
    deaths = [dict(entry) for entry in result.get("x-death", []) if isinstance(entry, Mapping)]
    now = datetime.datetime.fromtimestamp(now_ms // 1000, tz=datetime.timezone.utc)
    previous = next((d for d in deaths if d.get("queue") == queue and d.get("reason") == reason.value), None)
    if previous is not None:
        deaths.remove(previous)
        entry = {**previous, "count": int(previous.get("count", 0)) + 1, "time": now}
    else:
        entry = {"count": 1, "reason": reason.value, "queue": queue, "time": now, "exchange": exchange,
                 "routing-keys": list(routing_keys)}
        if original_expiration is not None:
            entry["original-expiration"] = original_expiration
    result["x-death"] = [entry, *deaths]
    result.setdefault("x-first-death-exchange", exchange)
    result.setdefault("x-first-death-queue", queue)
    result.setdefault("x-first-death-reason", reason.value)
    result["x-last-death-exchange"] = exchange
    result["x-last-death-queue"] = queue
    result["x-last-death-reason"] = reason.value
    return result


# --- stream queues -----------------------------------------------------------------------------


class StreamStart(enum.Enum):
    """Where a stream consumer starts (``x-stream-offset``)."""

    FIRST = "first"
    LAST = "last"
    NEXT = "next"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StreamOffset:
    """A parsed ``x-stream-offset``: a named position, an offset, or a timestamp in ms."""

    start: StreamStart
    value: int = 0


def parse_stream_offset(value: Any) -> StreamOffset:
    """``x-stream-offset`` → where to start (default ``next``); 406 on a value it cannot use.

    Integers are offsets; a timestamp field (a datetime) is a point in time. RabbitMQ also
    accepts intervals like "1h" ago; mqbroker does not.
    """
    if value is None:
        return StreamOffset(start=StreamStart.NEXT)
    if isinstance(value, bytes):
        value = value.decode("utf-8", "surrogateescape")
    if isinstance(value, str) and value in ("first", "last", "next"):
        return StreamOffset(start=StreamStart(value))
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return StreamOffset(start=StreamStart.TIMESTAMP, value=int(aware.timestamp() * 1000))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return StreamOffset(start=StreamStart.OFFSET, value=value)
    raise AmqpError(ReplyCode.PRECONDITION_FAILED,
                    f"x-stream-offset {value!r} is not first, last, next, an offset or a timestamp",
                    class_id=60, method_id=20)
