"""Data-driven MQTT session scripts: tests/interaction/testdata/mqtt_*.txt.

Each block is a command, a ``----`` line, and the expected output (the actions the session
returned, one per line), ended by a blank line. Regenerate the expected output after an
intended change with ``MQBROKER_REWRITE=1 python -m pytest tests/interaction/test_mqtt_scripts.py``
and review the diff.

Commands (Python expressions are evaluated with every packet class in scope):
  new [config_field=value ...]       a fresh MqttSession (clock at 0 ms)
  time MS                            set the clock
  recv EXPRESSION                    encode a packet at the session's level and feed it
  raw HEX                            feed raw bytes
  opened [NAME]                      session_opened with the state saved as NAME (default none)
  refused REASON                     connect_refused(ReasonCode.REASON)
  written TICKET [REASON]            log_write_completed
  deliver EXPRESSION [retained]      deliver an OutboundMessage to the session's matching subscriptions
  timer | lost | close REASON        on_timer, connection_lost, close
  save NAME                          keep the state of the last SessionEnded (through to_bytes/from_bytes)
"""

from __future__ import annotations

import dataclasses
import enum
import os
import pathlib

import pytest

from mqbroker.protocols.mqtt import packets
from mqbroker.protocols.mqtt.actions import Close, Send, SendPubAcks, SendPublishes, SessionEnded, StoreSession
from mqbroker.protocols.mqtt.codec import PacketDecoder, encode
from mqbroker.protocols.mqtt.connect import SessionConfig
from mqbroker.protocols.mqtt.packets import Connect, ReasonCode
from mqbroker.protocols.mqtt.session import MqttSession
from mqbroker.protocols.mqtt.state import OutboundMessage, SessionState
from mqbroker.protocols.mqtt.topics import (
    TopicMapping,
    parse_subscription_filter,
    topic_matches,
)

TESTDATA = pathlib.Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("mqtt_*.txt"))
REWRITE = os.environ.get("MQBROKER_REWRITE") == "1"
NAMESPACE = {name: getattr(packets, name) for name in dir(packets) if not name.startswith("_")}
NAMESPACE["OutboundMessage"] = OutboundMessage


def compact(value: object) -> str:
    """A dataclass as ``Name(field=value, ...)`` listing only fields that differ from defaults."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = []
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            default = field.default if field.default is not dataclasses.MISSING else dataclasses.MISSING
            if item == default or (field.name == "data" and isinstance(value, Send)):
                continue
            parts.append(f"{field.name}={compact(item)}")
        return f"{type(value).__name__}({', '.join(parts)})"
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, tuple):
        return "(" + ", ".join(compact(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, SessionState):
        return describe_state(value)
    return repr(value)


def describe_state(state: SessionState) -> str:
    """The durable parts of a session, briefly."""
    inflight = ", ".join(f"{packet_id}:{state.flow(packet_id).value}" for packet_id in state.inflight)  # type: ignore[union-attr]
    return (
        f"<session {state.client_id} expiry={state.expiry_interval_s}s subscriptions={sorted(state.subscriptions)} "
        f"inflight=[{inflight}] received_qos2={sorted(state.received_qos2)} pending={len(state.pending)}>"
    )


class Script:
    """Runs the commands of one script against one session at a time."""

    def __init__(self) -> None:
        self.session: MqttSession | None = None
        self.now_ms = 0
        self.saved: dict[str, SessionState] = {}
        self.last_state: SessionState | None = None
        self.generated = 0

    def new_client_id(self) -> str:
        self.generated += 1
        return f"auto-{self.generated}"

    def run(self, command: str) -> list[str]:
        verb, _, argument = command.partition(" ")
        session = self.session
        if verb == "new":
            overrides = {key: eval(value) for key, value in (item.split("=", 1) for item in argument.split())}
            self.session = MqttSession(config=SessionConfig(**overrides), mapping=TopicMapping(),
                                       generate_client_id=self.new_client_id)
            return []
        assert session is not None, "start with 'new'"
        state_before = session.state
        if verb == "time":
            self.now_ms = int(argument)
            return []
        if verb == "recv":
            packet = eval(argument, NAMESPACE)
            level = packet.protocol_level if isinstance(packet, Connect) else session.protocol_level
            actions = session.receive_data(encode(packet, level), self.now_ms)
        elif verb == "raw":
            actions = session.receive_data(bytes.fromhex(argument), self.now_ms)
        elif verb == "opened":
            stored = SessionState.from_bytes(self.saved[argument].to_bytes()) if argument else None
            actions = session.session_opened(stored, self.now_ms)
        elif verb == "refused":
            actions = session.connect_refused(ReasonCode[argument], self.now_ms)
        elif verb == "written":
            ticket, _, reason = argument.partition(" ")
            actions = session.log_write_completed(int(ticket), self.now_ms, ReasonCode[reason or "SUCCESS"])
        elif verb == "deliver":
            retained = argument.endswith(" retained")
            message = eval(argument.removesuffix(" retained"), NAMESPACE)
            assert session.session is not None
            matching = [s for s in session.session.subscriptions.values()
                        if topic_matches(parse_subscription_filter(s.topic_filter).topic_filter, message.topic)]
            actions = session.deliver(message, matching, self.now_ms, from_retained_store=retained)
        elif verb == "timer":
            actions = session.on_timer(self.now_ms)
        elif verb == "lost":
            actions = session.connection_lost(self.now_ms)
        elif verb == "close":
            actions = session.close(ReasonCode[argument], self.now_ms)
        elif verb == "save":
            assert self.last_state is not None, "no SessionEnded carried a state"
            self.saved[argument] = self.last_state
            return [describe_state(self.last_state)]
        else:
            raise AssertionError(f"unknown command {verb!r}")
        lines = []
        for action in actions:
            if isinstance(action, SessionEnded):
                self.last_state = action.state
            if isinstance(action, StoreSession):
                later = "" if action.blocking else ", blocking=False"
                lines.append(f"StoreSession({describe_state(SessionState.from_bytes(action.state.to_bytes()))}{later})")
            elif isinstance(action, Close):
                lines.append(f"Close: {action.reason}")
            elif isinstance(action, SendPubAcks):  # the bytes decoded: each PUBACK they carry, as a Send shows it
                decoded = PacketDecoder(packet_bytes_max=1 << 20, protocol_level=session.protocol_level).receive_data(
                    action.data)
                assert [packet.packet_id for packet in decoded] == action.packet_ids  # type: ignore[union-attr]
                lines += [f"send {compact(packet)}" for packet in decoded]
            elif isinstance(action, SendPublishes):  # a run of PUBLISHes, decoded: each, as a Send shows it
                publishes = PacketDecoder(packet_bytes_max=1 << 20, protocol_level=session.protocol_level).receive_data(
                    action.data)
                assert len(publishes) == action.count
                lines += [f"send {compact(publish)}" for publish in publishes]
            else:
                lines.append(f"send {compact(action.packet)}" if isinstance(action, Send) else compact(action))
        if session.state is not state_before:
            lines.append(f"-> {session.state.name}")
        return lines


def parse_blocks(text: str) -> list[tuple[list[str], str, list[str]]]:
    """(comment lines, command, expected output lines) for each block."""
    blocks = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        comments = []
        while index < len(lines) and (not lines[index].strip() or lines[index].startswith("#")):
            if lines[index].startswith("#"):
                comments.append(lines[index])
            index += 1
        if index >= len(lines):
            break
        command = lines[index]
        assert lines[index + 1] == "----", f"line {index + 2}: expected '----' after {command!r}"
        index += 2
        expected = []
        while index < len(lines) and lines[index].strip():
            expected.append(lines[index])
            index += 1
        blocks.append((comments, command, expected))
    return blocks


@pytest.mark.parametrize("path", SCRIPTS, ids=[path.stem for path in SCRIPTS])
def test_mqtt_session_script(path: pathlib.Path) -> None:
    blocks = parse_blocks(path.read_text())
    script = Script()
    rewritten = []
    mismatches = []
    for comments, command, expected in blocks:
        actual = script.run(command)
        rewritten.append("\n".join(comments + [command, "----"] + actual))
        if actual != expected:
            mismatches.append(f"{command}\n  expected: {expected}\n  actual:   {actual}")
    if REWRITE:
        path.write_text("\n\n".join(rewritten) + "\n")
        return
    assert not mismatches, f"{path.name}:\n" + "\n".join(mismatches)


def test_every_script_has_commands() -> None:
    assert SCRIPTS, "no tests/interaction/testdata/mqtt_*.txt scripts found"
    for path in SCRIPTS:
        assert parse_blocks(path.read_text()), path
