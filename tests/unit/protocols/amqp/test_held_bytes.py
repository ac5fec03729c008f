"""Message bytes an AMQP connection holds in memory (partial messages, open transactions) are bounded,
per connection and broker-wide; past a bound the channel is closed with 406 and a reply text saying why."""

from __future__ import annotations

import pytest

from mqbroker import limits
from mqbroker.protocols.amqp.channel import ByteBudget
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
        script.connection._broker_budget = budget
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
    script.connection._broker_budget = budget
    for number in range(2, channels + 1):
        _run(script, f"send {number} ChannelOpen")
    for number in range(1, channels + 1):
        _run(script, f"publish {number} 50000 exchange='' routing_key='q'")
    assert script.connection.held_bytes == 0 and budget.reserved_bytes == 0
