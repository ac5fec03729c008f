"""What an AMQP share queue's declaration and messages say, pure: when a plain declaration becomes a share queue,
its share group's configs, ``x-delay`` as a record header, and settled offsets as ranges."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mqbroker import limits
from mqbroker.protocols.amqp.codec import decode_properties
from mqbroker.protocols.amqp.queue_arguments import QueuePolicy
from mqbroker.protocols.amqp.spec import AmqpError
from mqbroker.protocols.amqp.stored import dead_letter_topic
from mqbroker.shares.delays import DELAY_HEADER


#: The ``headers`` property's bit in the first byte of the property flags (bit 13 of 15..2, content order).
_HEADERS_FLAG = 1 << (13 - 8)


def takes_share_default(*, durable: bool, exclusive: bool, auto_delete: bool, arguments: Mapping[str, Any]) -> bool:
    """Whether a declaration may become a share queue under ``amqp_default_queue_type = share``: it names no
    type, and nothing in it needs a classic queue (non-durable, exclusive or auto-deleted queues live with a
    connection on one broker)."""
    return arguments.get("x-queue-type") is None and durable and not exclusive and not auto_delete


def share_group_configs(queue: str, arguments: Mapping[str, Any]) -> dict[str, str]:
    """The configs of a share queue's share group, from its declaration's arguments (with a dead-letter exchange,
    the dead letters its host decides on go to the queue's dead-letter topic, for the exchange).

    Without ``x-delivery-limit`` a message may come back as often as a share group allows, not the group default
    of 5: a RabbitMQ classic queue redelivers a requeued message for ever, and a plain declaration must not start
    dropping messages because share queues are the default type.
    """
    configs = {"auto.offset.reset": "earliest"}
    policy = QueuePolicy.from_arguments(arguments)
    if policy.dead_letter_exchange is not None:
        configs["dead.letter.topic"] = dead_letter_topic(queue)
    configs["max.delivery.attempts"] = str(min(policy.delivery_limit or limits.share_delivery_attempts_max,
                                               limits.share_delivery_attempts_max))
    if policy.max_length is not None and not policy.overflow.rejects_publish:  # drop-head: the host drops heads
        configs["max.ready.records"] = str(policy.max_length)
    return configs


def delay_header(properties_raw: bytes) -> tuple[tuple[str, bytes], ...]:
    """The record header scheduling a message whose ``x-delay`` header is a positive number of ms (else none)."""
    if not properties_raw[:1] or not properties_raw[0] & _HEADERS_FLAG:
        return ()  # no headers property (nearly every message): nothing to decode
    try:
        headers = decode_properties(properties_raw).headers or {}
    except AmqpError:
        return ()
    delay = headers.get(DELAY_HEADER)
    if isinstance(delay, bytes):
        delay = delay.decode("ascii", "replace")
    if isinstance(delay, str) and delay.isdigit():
        delay = int(delay)
    if isinstance(delay, bool) or not isinstance(delay, int) or delay <= 0:
        return ()
    return ((DELAY_HEADER, str(delay).encode("ascii")),)


def ranges_of(offsets: list[int]) -> list[tuple[int, int]]:
    """Sorted offsets as consecutive ``(first, last)`` ranges."""
    unique = sorted(set(offsets))
    if unique and unique[-1] - unique[0] + 1 == len(unique):  # one run (a multiple ack): no walk
        return [(unique[0], unique[-1])]
    ranges: list[list[int]] = []
    for offset in unique:
        if ranges and ranges[-1][1] + 1 == offset:
            ranges[-1][1] = offset
        else:
            ranges.append([offset, offset])
    return [(first, last) for first, last in ranges]
