"""One channel on its own: prefetch windows, settling, transactions and coalesced confirms."""

from __future__ import annotations

import pytest

from mqbroker.protocols.amqp import codec, spec
from mqbroker.protocols.amqp.actions import ConsumersReady, Delivery, Execute, Outcome, Settle
from mqbroker.protocols.amqp.channel import Channel, FrameOutput
from mqbroker.protocols.amqp.held_bytes import HeldBytes
from mqbroker.protocols.amqp.spec import AmqpError


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


def test_confirms_are_sent_in_order_as_runs_of_equal_outcomes() -> None:
    channel, output = _channel()
    channel.receive_method(spec.ConfirmSelect())
    _sent_methods(output)
    channel.confirm_outcomes = {1: None, 2: None, 3: None, 4: None}
    channel.publish_settled_range(2, 3, stored=True)
    assert _sent_methods(output) == []  # 1 is not settled yet: nothing may be confirmed past it
    channel.publish_settled_range(4, 4, stored=False)
    channel.publish_settled_range(1, 1, stored=True)
    assert _sent_methods(output) == [spec.BasicAck(delivery_tag=3, multiple=True),
                                     spec.BasicNack(delivery_tag=4, multiple=False, requeue=False)]
