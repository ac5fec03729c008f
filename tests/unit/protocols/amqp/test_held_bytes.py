"""Message bytes an AMQP connection holds in memory (partial messages, open transactions) are bounded,
per connection and broker-wide; past a bound the channel is closed with 406 and a reply text saying why."""

from __future__ import annotations

import pytest

from mqbroker import limits
from mqbroker.protocols.amqp.held_bytes import ByteBudget
from tests.interaction.test_amqp_scripts import Script


def _connected() -> Script:
    script = Script()
    script.run("connect")
    return script


def _run(script: Script, *commands: str) -> list[str]:
    script.lines.clear()
    for command in commands:
        script.run(command)
    return list(script.lines)


def test_a_transaction_holding_more_than_the_connection_bound_closes_its_channel(monkeypatch) -> None:
    monkeypatch.setattr(limits, "amqp_held_bytes_per_connection_max", 10_000)
    script = _connected()
    _run(script, "send 1 TxSelect", "publish 1 6000 exchange='' routing_key='q'")
    assert script.connection.held_bytes == 6000
    output = _run(script, "publish 1 6000 exchange='' routing_key='q'")
    closed = [line for line in output if "ChannelClose" in line]
    assert closed and "reply_code=406" in closed[0] and "commit transactions sooner" in closed[0]
    assert script.connection.held_bytes == 0  # the channel's transaction was dropped with it


def test_commit_and_rollback_release_what_the_transaction_held(monkeypatch) -> None:
    monkeypatch.setattr(limits, "amqp_held_bytes_per_connection_max", 10_000)
    script = _connected()
    _run(script, "send 1 TxSelect", "publish 1 6000 exchange='' routing_key='q'", "send 1 TxRollback")
    assert script.connection.held_bytes == 0
    _run(script, "publish 1 6000 exchange='' routing_key='q'", "send 1 TxCommit")
    assert script.connection.held_bytes == 0
    output = _run(script, "publish 1 6000 exchange='' routing_key='q'", "publish 1 3000 exchange='' routing_key='q'")
    assert not [line for line in output if "ChannelClose" in line]


def test_the_broker_wide_bound_refuses_a_second_connection_while_the_first_holds_the_bytes() -> None:
    budget = ByteBudget(10_000)
    first, second = Script(), Script()
    for script in (first, second):
        script.run("connect")
        script.connection.held.broker_budget = budget
    _run(first, "send 1 TxSelect", "publish 1 8000 exchange='' routing_key='q'")
    assert budget.reserved_bytes == 8000
    output = _run(second, "send 1 TxSelect", "publish 1 8000 exchange='' routing_key='q'")
    closed = [line for line in output if "ChannelClose" in line]
    assert closed and "reply_code=406" in closed[0] and "retry later" in closed[0]
    _run(first, "send 1 TxCommit")
    assert budget.reserved_bytes == 0


@pytest.mark.parametrize("channels", [1, 3])
def test_plain_publishes_hold_nothing_once_complete(channels) -> None:
    budget = ByteBudget(1_000_000)
    script = Script()
    script.run("connect")
    script.connection.held.broker_budget = budget
    for number in range(2, channels + 1):
        _run(script, f"send {number} ChannelOpen")
    for number in range(1, channels + 1):
        _run(script, f"publish {number} 50000 exchange='' routing_key='q'")
    assert script.connection.held_bytes == 0 and budget.reserved_bytes == 0


def test_a_fetch_of_compressed_batches_decompresses_to_at_most_the_budget() -> None:
    """A zstd bomb: a few KiB that expand to megabytes each; the reader stops at the fetch's budget."""
    from mqbroker.protocols.amqp.queues import decode_fetched
    from mqbroker.protocols.amqp.stored import DecompressionBudget, append_message
    from mqbroker.records.builder import BatchBuilder
    from mqbroker.records.header import iter_batches
    from mqbroker.records.compression import Compression
    from mqbroker.records.errors import CorruptRecordError

    batches = b""
    for base_offset in range(0, 4):
        builder = BatchBuilder(compression=Compression.ZSTD, base_offset=base_offset)
        append_message(builder, 0, "", "q", b"", b"\0" * (4 * 1024 * 1024), None)
        batches += builder.build()
    assert len(batches) < 4 * 4096
    messages, unreadable = decode_fetched(batches)
    assert len(messages) == 4 and unreadable == []  # 16 MiB in all: within the default budget
    from mqbroker.protocols.amqp.stored import FetchBudgetSpent, queued_message

    def decode_with(budget: DecompressionBudget) -> int:
        decoded = 0
        view = memoryview(batches)
        for position, header in iter_batches(view):
            budget.decode(view[position:position + header.size_bytes], header, queued_message,
                          lambda message: len(message.payload.body))
            decoded += 1
        return decoded

    # 4 MiB each: two fit 10 MiB; the third may fit the next fetch's whole budget, so it waits for it
    with pytest.raises(FetchBudgetSpent):
        decode_with(budget := DecompressionBudget(10 * 1024 * 1024))
    assert budget.remaining_bytes == 2 * 1024 * 1024
    # a batch larger than a whole budget never fits: it is corrupt (a bomb)
    with pytest.raises(CorruptRecordError, match="decompresses to more than"):
        decode_with(DecompressionBudget(2 * 1024 * 1024))
