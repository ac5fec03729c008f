"""One channel on its own: prefetch windows, settling, transactions and coalesced confirms."""

from __future__ import annotations

import dataclasses

import pytest

from mqbroker.protocols.amqp import codec, spec
from mqbroker.protocols.amqp.actions import ConsumersReady, Delivery, Execute, Outcome, Publish, Settle
from mqbroker.protocols.amqp.channel import Channel, FrameOutput
from mqbroker.protocols.amqp.held_bytes import ByteBudget, HeldBytes
from mqbroker.protocols.amqp.spec import AmqpError
from mqbroker.protocols.amqp.stored import MessageRow


def _channel() -> tuple[Channel, FrameOutput]:
    output = FrameOutput(frame_max=131_072)
    return Channel(1, output, HeldBytes()), output


def _sent_methods(output: FrameOutput) -> list[spec.Method]:
    decoder = codec.FrameDecoder(131_072, expect_protocol_header=False)
    frames = decoder.receive_data(bytes(output.data))
    output.data.clear()
    return [frame.method for frame in frames if isinstance(frame, codec.MethodFrame)]


def _delivery(ref: int) -> Delivery:
    return Delivery(queue="q", message_ref=ref, redelivered=False, exchange="", routing_key="q", properties_raw=b"",
                    body=b"x")


def test_the_channel_window_is_shared_and_an_ack_reopens_it_for_every_consumer() -> None:
    channel, _ = _channel()
    channel.receive_method(spec.BasicQos(prefetch_count=2, global_=True))
    for tag in ("a", "b"):
        channel.receive_method(spec.BasicConsume(queue="q", consumer_tag=tag))
    channel.deliver("a", _delivery(10))
    channel.deliver("b", _delivery(11))
    assert channel.delivery_window("a") == channel.delivery_window("b") == 0
    settle, ready = channel.receive_method(spec.BasicAck(delivery_tag=1))
    assert isinstance(settle, Settle) and settle.outcome is Outcome.ACK and len(settle.deliveries) == 1
    assert ready == ConsumersReady(channel=1, consumer_tags=("a", "b"))
    assert channel.delivery_window("a") == 1


def test_a_transaction_hands_over_its_acks_at_commit_followed_by_the_commit() -> None:
    channel, _ = _channel()
    channel.receive_method(spec.BasicConsume(queue="q", consumer_tag="a"))
    channel.deliver("a", _delivery(10))
    channel.receive_method(spec.TxSelect())
    assert channel.receive_method(spec.BasicAck(delivery_tag=1)) == []
    settle, ready, commit = channel.receive_method(spec.TxCommit())
    assert isinstance(settle, Settle) and isinstance(ready, ConsumersReady) and isinstance(commit, Execute)


def test_an_unknown_delivery_tag_is_a_precondition_failure_naming_the_method() -> None:
    channel, _ = _channel()
    with pytest.raises(AmqpError) as raised:
        channel.receive_method(spec.BasicAck(delivery_tag=7))
    assert (raised.value.reply_code, raised.value.class_id, raised.value.method_id) == (406, 60, 80)


def _confirming_channel(published: int) -> tuple[Channel, FrameOutput]:
    """A channel in confirm mode that has sent nothing yet and took ``published`` confirmed publishes."""
    channel, output = _channel()
    channel.receive_method(spec.ConfirmSelect())
    _sent_methods(output)
    channel.next_publish_sequence = published + 1
    return channel, output


def test_confirms_are_sent_in_order_as_runs_of_equal_outcomes() -> None:
    channel, output = _confirming_channel(4)
    channel.publish_settled_range(2, 3, stored=True)
    assert _sent_methods(output) == []  # 1 is not settled yet: nothing may be confirmed past it
    channel.publish_settled_range(4, 4, stored=False)
    channel.publish_settled_range(1, 1, stored=True)
    assert _sent_methods(output) == [spec.BasicAck(delivery_tag=3, multiple=True),
                                     spec.BasicNack(delivery_tag=4, multiple=False, requeue=False)]


def _rows(*offsets: int) -> list[MessageRow]:
    headers = (("amqp.exchange", b""), ("amqp.routing-key", b"q"), ("amqp.properties", b"\x00\x00"))
    return [MessageRow(offset, b"q", b"x", headers, 0) for offset in offsets]


def test_rows_delivered_at_once_are_tracked_like_single_deliveries_and_a_multiple_ack_settles_a_prefix() -> None:
    channel, output = _channel()
    channel.receive_method(spec.BasicQos(prefetch_count=10))
    channel.receive_method(spec.BasicConsume(queue="q", consumer_tag="a"))
    _sent_methods(output)
    channel.deliver("a", dataclasses.replace(_delivery(7), properties_raw=b"\x00\x00"))
    channel.deliver_rows("a", "q", _rows(10, 11, 12), {11})
    channel.deliver_rows("a", "q", [], set())
    channel.deliver_rows("a", "q", _rows(13), set())
    assert [(method.delivery_tag, method.redelivered) for method in _sent_methods(output)] == [
        (1, False), (2, False), (3, True), (4, False), (5, False)]
    assert channel.delivery_window("a") == 5
    settle, ready = channel.receive_method(spec.BasicAck(delivery_tag=3, multiple=True))
    assert [(unacked.delivery_tag, unacked.consumer_tag, unacked.queue, unacked.message_ref)
            for unacked in settle.deliveries] == [(1, "a", "q", 7), (2, "a", "q", 10), (3, "a", "q", 11)]
    assert ready == ConsumersReady(channel=1, consumer_tags=("a",)) and channel.delivery_window("a") == 8
    assert list(channel.unacked) == [4, 5]
    settle, _ = channel.receive_method(spec.BasicNack(delivery_tag=5, multiple=False, requeue=True))
    assert [unacked.message_ref for unacked in settle.deliveries] == [13] and settle.outcome is Outcome.REQUEUE
    settle, _ = channel.receive_method(spec.BasicAck(delivery_tag=0, multiple=True))
    assert [unacked.message_ref for unacked in settle.deliveries] == [12]


def test_rows_delivered_to_a_no_ack_consumer_are_not_tracked() -> None:
    channel, output = _channel()
    channel.receive_method(spec.BasicConsume(queue="q", consumer_tag="a", no_ack=True))
    channel.deliver_rows("a", "q", _rows(1, 2), set())
    assert channel.unacked == {} and channel.next_delivery_tag == 3
    assert output.delivered_bytes == len(output.data) > 0


def test_confirms_settled_ahead_wait_for_the_runs_before_them_and_coalesce() -> None:
    channel, output = _confirming_channel(10)
    channel.publish_settled_range(7, 10, stored=True)
    channel.publish_settled_range(4, 6, stored=True)
    channel.publish_settled_range(3, 3, stored=False)
    assert _sent_methods(output) == []
    channel.publish_settled_range(1, 2, stored=False)
    assert _sent_methods(output) == [spec.BasicNack(delivery_tag=3, multiple=True, requeue=False),
                                     spec.BasicAck(delivery_tag=10, multiple=True)]
    channel.publish_settled_range(5, 12, stored=True)  # confirmed already, or never published: nothing more
    assert _sent_methods(output) == []


def _whole_publish(body: bytes) -> codec.PublishFrames:
    header = codec.HeaderFrame(channel=1, class_id=60, body_size=len(body), properties=spec.BasicProperties(),
                               properties_raw=b"\x00\x00")
    return codec.PublishFrames(channel=1, method=spec.BasicPublish(routing_key="q"), header=header, bodies=[body])


def test_a_whole_message_is_checked_against_the_held_bytes_bounds_but_never_held() -> None:
    budget = ByteBudget(10_000)
    budget.reserve(8_000)  # another connection's open transaction
    channel = Channel(1, FrameOutput(frame_max=131_072), HeldBytes(broker_budget=budget))
    [publish] = channel.receive_publish(_whole_publish(b"x" * 1_000))
    assert isinstance(publish, Publish) and publish.body == b"x" * 1_000
    assert (budget.reserved_bytes, channel.held_bytes) == (8_000, 0)
    with pytest.raises(AmqpError) as raised:
        channel.receive_publish(_whole_publish(b"x" * 3_000))
    assert (raised.value.reply_code, raised.value.class_id, raised.value.method_id) == (406, 60, 40)
    assert "retry later" in raised.value.reply_text and budget.reserved_bytes == 8_000
