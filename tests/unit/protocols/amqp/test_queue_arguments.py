"""RabbitMQ's queue arguments, message expirations, x-death headers and stream offsets, parsed and written."""

from __future__ import annotations

import datetime

import pytest

from mqbroker.protocols.amqp.queue_arguments import (
    DeathReason,
    Overflow,
    QueuePolicy,
    QueueType,
    StreamOffset,
    StreamStart,
    parse_expiration,
    parse_stream_offset,
    x_death_headers,
)
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode


def test_policy_parses_rabbitmq_arguments() -> None:
    policy = QueuePolicy.from_arguments({
        "x-message-ttl": 5, "x-expires": 10, "x-max-length": 3, "x-delivery-limit": 4,
        "x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "dead", "x-queue-type": "stream",
    })
    assert policy == QueuePolicy(queue_type=QueueType.STREAM, message_ttl_ms=5, expires_ms=10, max_length=3,
                                 delivery_limit=4, dead_letter_exchange="dlx", dead_letter_routing_key="dead")


@pytest.mark.parametrize("arguments", [
    {"x-message-ttl": -1}, {"x-message-ttl": "5"}, {"x-expires": 0}, {"x-queue-type": "priority"},
    {"x-overflow": "reject-publish"}, {"x-overflow": "reject-publish-dlx", "x-queue-type": "stream"},
    {"x-overflow": "drop-tail", "x-queue-type": "share"}, {"x-max-length": 10**9}, {"x-dead-letter-exchange": 5},
])
def test_policy_refuses_bad_arguments_with_406(arguments: dict) -> None:
    with pytest.raises(AmqpError) as raised:
        QueuePolicy.from_arguments(arguments)
    assert raised.value.reply_code is ReplyCode.PRECONDITION_FAILED


def test_share_queues_take_every_overflow_mode_and_others_only_drop_head() -> None:
    for mode in Overflow:
        policy = QueuePolicy.from_arguments({"x-queue-type": "share", "x-overflow": mode.value})
        assert policy.overflow is mode and policy.overflow.rejects_publish is (mode is not Overflow.DROP_HEAD)
    assert QueuePolicy.from_arguments({"x-overflow": "drop-head"}).overflow is Overflow.DROP_HEAD
    assert QueuePolicy.from_arguments({}).overflow is Overflow.DROP_HEAD


def test_expiration_property_parsing() -> None:
    assert parse_expiration("1500") == 1500
    assert parse_expiration(None) is None and parse_expiration("soon") is None


def test_x_death_follows_rabbitmq_format_and_counts_repeat_deaths() -> None:
    first = x_death_headers({"app": 1}, queue="q", reason=DeathReason.REJECTED, exchange="ex",
                            routing_keys=["k"], now_ms=1_700_000_000_000)
    [entry] = first["x-death"]
    assert entry == {"count": 1, "reason": "rejected", "queue": "q", "exchange": "ex", "routing-keys": ["k"],
                     "time": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc)}
    assert first["app"] == 1 and first["x-first-death-queue"] == "q" and first["x-first-death-reason"] == "rejected"
    second = x_death_headers(first, queue="other", reason=DeathReason.EXPIRED, exchange="dlx", routing_keys=["k"],
                             now_ms=1_700_000_001_000)
    third = x_death_headers(second, queue="q", reason=DeathReason.REJECTED, exchange="ex", routing_keys=["k"],
                            now_ms=1_700_000_002_000)
    assert [(d["queue"], d["count"]) for d in third["x-death"]] == [("q", 2), ("other", 1)]
    assert third["x-first-death-queue"] == "q" and third["x-last-death-reason"] == "rejected"


@pytest.mark.parametrize(("value", "expected"), [
    (None, StreamOffset(start=StreamStart.NEXT)),
    ("first", StreamOffset(start=StreamStart.FIRST)),
    (b"last", StreamOffset(start=StreamStart.LAST)),
    (42, StreamOffset(start=StreamStart.OFFSET, value=42)),
    (datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc), StreamOffset(start=StreamStart.TIMESTAMP, value=1704067200000)),
])
def test_stream_offsets_parse(value: object, expected: StreamOffset) -> None:
    assert parse_stream_offset(value) == expected


@pytest.mark.parametrize("value", ["1h", -1, True, 1.5])
def test_unusable_stream_offset_is_406(value: object) -> None:
    with pytest.raises(AmqpError) as raised:
        parse_stream_offset(value)
    assert raised.value.reply_code is ReplyCode.PRECONDITION_FAILED
