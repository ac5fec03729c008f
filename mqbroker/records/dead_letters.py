"""The headers a dead-lettered record carries: where it came from, how often it was tried, why it failed.

One convention for every dead-letter path: the client's ``DeadLetterHandler`` (a consumer that
gives up on a record), share groups (a record rejected or past its delivery limit), push
subscriptions (an endpoint that kept failing) and, through its ``x-death`` mapping, AMQP. The
record keeps its key, value, timestamp and own headers; these are appended.
"""

from __future__ import annotations

from mqbroker.records.record import RecordHeader

HEADER_ERROR = "dlq.error"
HEADER_ATTEMPTS = "dlq.attempts"
HEADER_TOPIC = "dlq.origin.topic"
HEADER_PARTITION = "dlq.origin.partition"
HEADER_OFFSET = "dlq.origin.offset"
#: Why it left (share groups: ``rejected`` or ``delivery_limit``, RabbitMQ's x-death reasons).
HEADER_REASON = "dlq.reason"
#: The share group (or push subscription) that gave up on it.
HEADER_GROUP = "dlq.group"
#: Longest error text kept in a header.
ERROR_TEXT_LENGTH_MAX = 1024


def dead_letter_headers(*, topic: str, partition: int, offset: int, attempts: int, error: str,
                        reason: str | None = None, group: str | None = None) -> list[RecordHeader]:
    """The headers appended to a record sent to a dead-letter topic."""
    headers: list[RecordHeader] = [
        (HEADER_ERROR, error[:ERROR_TEXT_LENGTH_MAX].encode("utf-8", "replace")),
        (HEADER_ATTEMPTS, str(attempts).encode()),
        (HEADER_TOPIC, topic.encode()),
        (HEADER_PARTITION, str(partition).encode()),
        (HEADER_OFFSET, str(offset).encode()),
    ]
    if reason is not None:
        headers.append((HEADER_REASON, reason.encode()))
    if group is not None:
        headers.append((HEADER_GROUP, group.encode("utf-8")))
    return headers
