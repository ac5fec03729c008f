"""What a consumed message costs a share queue's front end, counted deterministically: a share fetch's answer is
decoded, checked for expiry, delivered and held with no Python call per message (issue 24: the consume path's
per-message work is done by batch operations in C; a Python call per message shows up in every consumed
message's broker CPU)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from mqbroker.model import Principal
from mqbroker.protocols.amqp.queues import Consumer
from mqbroker.protocols.amqp.share_queue import ShareQueue
from mqbroker.protocols.amqp.stored import (
    EMPTY_PROPERTIES,
    MessageRow,
    QueueDeclaration,
    all_plain,
    append_message,
    is_plain,
    queue_topic,
)
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.header import stamp
from mqbroker.shares import messages as share
from mqbroker.shares.partition_values import AcquiredRange
from tests.fake_broker import FakeBroker


class _Host:
    """The virtual host side of a share queue: a fake broker whose share-group calls the test scripts."""

    def __init__(self) -> None:
        self.broker = FakeBroker()
        self.broker.add_topic(queue_topic("q"))
        self.principal = Principal("Service", "amqp")
        self.reactor = Clock()

    def now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)


class _Session:
    """A consumer's connection with a wide window; it keeps the rows it is given (nothing of it is counted)."""

    session_id = 1

    def __init__(self) -> None:
        self.connection = self
        self.delivered: list[int] = []

    def delivery_window(self, channel: int, tag: str) -> int:
        return 10_000

    def deliver_rows(self, channel: int, tag: str, queue: str, rows: list[MessageRow], redelivered: Any) -> None:
        self.delivered += [row.offset for row in rows]

    def flush(self) -> None:
        pass


def _batch(count: int) -> bytes:
    builder = BatchBuilder()
    for _ in range(count):
        append_message(builder, 0, "", "q", EMPTY_PROPERTIES, b"x" * 100, None)
    batch = bytearray(builder.build())
    stamp(batch, 0, 0, 0)
    return bytes(batch)


def _calls_of(run: Callable[[], None]) -> list[FrameType]:
    """The Python frames ``run`` called (every call, its callees' too)."""
    frames: list[FrameType] = []

    def profile(frame: FrameType, event: str, argument: object) -> None:
        if event == "call":
            frames.append(frame)

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return frames


def _front_end_calls_to_deliver(count: int) -> int:
    """Python calls under ``mqbroker/`` while a consumer's share fetch answer of ``count`` messages (one batch)
    is delivered."""
    host, session = _Host(), _Session()
    answer: Deferred[share.ShareFetchResponse] = Deferred()
    host.broker.script("create_share_group", None)
    host.broker.script("share_group_heartbeat", share.ShareHeartbeatResponse(
        member_id="m", member_epoch=1, heartbeat_interval_ms=60_000, assignment=()))
    host.broker.script("share_fetch", answer)
    queue = ShareQueue(host, QueueDeclaration(name="q"), None)  # type: ignore[arg-type]
    queue.add_consumer(Consumer(session=session, channel=1, tag="c", no_ack=False))  # type: ignore[arg-type]
    response = share.ShareFetchResponse(partitions=(share.SharePartitionRecords(
        topic=queue.topic, partition=0, records=_batch(count), acquired=(AcquiredRange(0, count - 1, 1),)),))
    frames = _calls_of(lambda: answer.callback(response))
    assert session.delivered == list(range(count))
    return len([frame for frame in frames if "/mqbroker/" in frame.f_code.co_filename])


def test_a_share_fetch_s_messages_reach_the_consumer_with_no_python_call_per_message() -> None:
    _front_end_calls_to_deliver(10)  # warm: caches and imports
    few, many = _front_end_calls_to_deliver(100), _front_end_calls_to_deliver(1_000)
    assert many - few <= 10  # not per message: 900 more messages once made 900 more calls (is_plain each)


_ROW = st.builds(MessageRow, offset=st.integers(0, 100), key=st.none(), value=st.just(b"x"), headers=st.lists(
    st.tuples(st.sampled_from(["amqp.exchange", "amqp.routing-key", "amqp.properties", "amqp.expiration", "x"]),
              st.just(b"v")), max_size=4).map(tuple), timestamp_ms=st.just(0))
_PLAIN_ROW = _ROW.map(lambda row: row._replace(headers=(
    ("amqp.exchange", b""), ("amqp.routing-key", b"q"), ("amqp.properties", b"\x00\x00"))))


@given(st.lists(st.one_of(_ROW, _PLAIN_ROW), max_size=8))
def test_all_plain_judges_rows_as_is_plain_does_each(rows: list[MessageRow]) -> None:
    assert all_plain(rows) is all(map(is_plain, rows))
