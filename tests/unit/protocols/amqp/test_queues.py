"""Classic queues over a fake broker and clock: delivery before the fsync, confirms only once durable."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from mqbroker import errors, limits
from mqbroker.model import Acks, Principal
from mqbroker.protocols.amqp.actions import Delivery, Outcome
from mqbroker.protocols.amqp.queue_arguments import QueuePolicy
from mqbroker.protocols.amqp.queue_state import QueueState
from mqbroker.protocols.amqp.queues import ClassicQueue, Consumer, decode_fetched
from mqbroker.protocols.amqp.stored import (
    EMPTY_PROPERTIES,
    QueueDeclaration,
    append_message,
    queue_topic,
)
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.header import stamp
from tests.fake_broker import FakeBroker


class Host:
    """The virtual host side of a queue."""

    def __init__(self) -> None:
        self.broker = FakeBroker(durable_at_once=False)  # appends are durable at ``sync`` (the fsync)
        self.broker.add_topic(queue_topic("q"))
        self.principal = Principal("Service", "amqp")
        self.reactor = Clock()
        self.skipped: list[tuple[str, str, int, int]] = []

    def now_ms(self) -> int:
        return int(self.reactor.seconds() * 1000)

    def state_changed(self, queue: ClassicQueue) -> None:
        pass  # snapshots are the virtual host's business

    def dead_letter(self, queue: ClassicQueue, dead: Any) -> None:
        raise AssertionError("nothing is dead-lettered here")

    def skip_unreadable(self, reader: str, batch: Any) -> None:
        self.skipped.append((reader, batch.topic, batch.first_offset, batch.last_offset))


class Session:
    """A consumer's connection, with an open window."""

    session_id = 1

    def __init__(self) -> None:
        self.connection = self
        self.delivered: list[Delivery] = []

    def delivery_window(self, channel: int, tag: str) -> int:
        return 100

    def deliver(self, channel: int, tag: str, delivery: Delivery) -> None:
        self.delivered.append(delivery)

    def flush(self) -> None:
        pass


def consumed_queue() -> tuple[ClassicQueue, Host, Session]:
    host, session = Host(), Session()
    queue = ClassicQueue(host, QueueDeclaration(name="q"), None, QueueState(policy=QueuePolicy(), now_ms=0))
    queue.add_consumer(Consumer(session=session, channel=1, tag="c", no_ack=False))
    return queue, host, session


def test_a_consumer_gets_a_message_before_it_is_durable_and_its_publisher_hears_only_after() -> None:
    queue, host, session = consumed_queue()
    stored = queue.append(0, "", "q", b"\x00\x00", b"hello", None)
    host.reactor.advance(0)  # the turn's batch goes to the broker
    assert [call[4] for call in host.broker.calls_of("produce")] == [Acks.NONE]
    assert [delivery.body for delivery in session.delivered] == [b"hello"]
    assert stored.outcome is None and queue.unsettled_appends == [stored]
    host.broker.sync()
    assert stored.outcome is True and queue.unsettled_appends == []


def test_messages_appended_while_the_cursor_lags_are_left_to_the_fetch() -> None:
    queue, host, session = consumed_queue()
    host.broker.append(queue.topic, _message_batches([0, 2], corrupt=set()))  # not read yet (produced natively)
    stored = queue.append(0, "", "q", b"\x00\x00", b"late", None)
    host.reactor.advance(0)
    assert session.delivered == [] and queue.state.cursor == 0
    host.broker.sync()
    assert stored.outcome is True


def test_a_batch_never_seen_durable_is_refused_after_the_produce_timeout() -> None:
    queue, host, _ = consumed_queue()
    stored = queue.append(0, "", "q", b"\x00\x00", b"x", None)
    host.reactor.advance(0)
    queue.housekeep(host.now_ms() + limits.produce_timeout_ms_default - 1)
    assert stored.outcome is None
    queue.housekeep(host.now_ms() + limits.produce_timeout_ms_default)
    assert stored.outcome is False


def test_a_refused_append_is_neither_delivered_nor_confirmed() -> None:
    queue, host, session = consumed_queue()
    host.broker.script("produce", errors.NotLeaderError("leadership moved"))
    stored = queue.append(0, "", "q", b"\x00\x00", b"x", None)
    host.reactor.advance(0)
    assert stored.outcome is False and session.delivered == []


def test_a_multiple_ack_settles_the_leases() -> None:
    queue, host, session = consumed_queue()
    for index in range(3):
        queue.append(0, "", "q", b"\x00\x00", b"m%d" % index, None)
    host.reactor.advance(0)
    queue.settle([delivery.message_ref for delivery in session.delivered], Outcome.ACK)
    assert queue.state.leased_count == 0 and queue.state.low_watermark == 3


def _message_batches(base_offsets: list[int], corrupt: set[int]) -> bytes:
    """One two-message batch per base offset, stamped; the batches at ``corrupt`` indexes fail their CRC."""
    chunk = bytearray()
    for index, base in enumerate(base_offsets):
        builder = BatchBuilder()
        for number in range(2):
            append_message(builder, 0, "", "q", EMPTY_PROPERTIES, b"m%d" % (base + number), None)
        batch = bytearray(builder.build())
        stamp(batch, 0, base, 0)
        if index in corrupt:
            batch[-1] ^= 0xFF  # inside the records, covered by the CRC
        chunk += batch
    return bytes(chunk)


def test_a_batch_that_does_not_decode_is_reported_and_the_others_are_read() -> None:
    messages, unreadable = decode_fetched(_message_batches([0, 2, 4], corrupt={1}))
    assert [message.offset for message in messages] == [0, 1, 4, 5]
    assert [(batch.first_offset, batch.last_offset) for batch in unreadable] == [(2, 3)]
    assert "CRC" in str(unreadable[0].error)


@given(st.binary(max_size=300) | st.builds(lambda chunk, position, byte: chunk[:position] + bytes([byte]) + chunk[position + 1:],
                                             st.just(_message_batches([0, 2], corrupt=set())), st.integers(0, 200),
                                             st.integers(0, 255)))
@settings(max_examples=300)
def test_garbage_fetches_raise_only_corrupt_record(chunk: bytes) -> None:
    try:
        decode_fetched(chunk)
    except CorruptRecordError:
        pass


def test_a_queue_reads_past_a_batch_that_does_not_decode_and_delivers_the_rest() -> None:
    queue, host, session = consumed_queue()
    host.broker.append(queue.topic, _message_batches([0, 2, 4], corrupt={2}))
    host.broker.sync()  # the queue's long poll answers with the three batches
    assert [delivery.body for delivery in session.delivered] == [b"m0", b"m1", b"m2", b"m3"]
    assert queue.state.cursor == 6 and queue.state.unread_count == 0
    assert host.skipped == [("AMQP queue", queue.topic, 4, 5)]



class PrefetchSession(Session):
    """A consumer's connection whose window closes as deliveries go out and opens as they are settled."""

    def __init__(self, prefetch: int) -> None:
        super().__init__()
        self.prefetch = prefetch
        self.settled = 0

    def delivery_window(self, channel: int, tag: str) -> int:
        return self.prefetch - (len(self.delivered) - self.settled)

    def settle_all(self, queue: ClassicQueue) -> None:
        queue.settle([delivery.message_ref for delivery in self.delivered[self.settled:]], Outcome.ACK)
        self.settled = len(self.delivered)


def test_a_backlog_is_decoded_no_further_than_the_read_ahead_and_refilled_at_half() -> None:
    host, session = Host(), PrefetchSession(prefetch=100)
    queue = ClassicQueue(host, QueueDeclaration(name="q"), None, QueueState(policy=QueuePolicy(), now_ms=0))
    read_ahead = limits.amqp_queue_read_ahead_messages_max
    backlog = 2 * read_ahead + 10  # two-message batches: 2 * backlog messages, all within one fetch's bytes
    host.broker.append(queue.topic, _message_batches(list(range(0, 2 * backlog, 2)), corrupt=set()))
    host.broker.sync()
    queue.add_consumer(Consumer(session=session, channel=1, tag="c", no_ack=False))
    host.reactor.advance(0)
    assert len(session.delivered) == 100  # the consumer's window
    assert queue.state.ready_in_memory + 100 in (read_ahead, read_ahead + 1)  # one batch may pass the bound
    fetches = len(host.broker.calls_of("fetch"))
    while queue.state.ready_in_memory - 100 > read_ahead // 2:
        session.settle_all(queue)
        host.reactor.advance(0)
        assert len(host.broker.calls_of("fetch")) == fetches  # no read while more than half is in memory
    session.settle_all(queue)
    host.reactor.advance(0)
    assert len(host.broker.calls_of("fetch")) == fetches + 1
    assert queue.state.ready_in_memory in (read_ahead, read_ahead + 1)
    assert [delivery.message_ref for delivery in session.delivered] == list(range(len(session.delivered)))
