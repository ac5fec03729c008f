"""Data-driven AMQP connection scripts: ``tests/interaction/testdata/amqp_*.txt``.

Each case is command lines, ``----``, then what the server did: frames it sent (``S<channel>``)
and actions for the adapter (``A``). Set ``MQBROKER_REWRITE=1`` to rewrite the expected parts.

Commands (arguments are Python literals):
  header | header-raw <bytes literal>              a new connection; the client's protocol header
  connect                                           a new connection, handshake done, channel 1 open (output hidden)
  send <channel> <MethodClass> [name=value ...]     a client method frame
  publish <channel> <body literal | size> [name=value ...]  basic.publish + header + body in 4096-byte frames
  raw <bytes literal>                               raw bytes from the client
  auth ok | auth fail <text>                        the authenticator's answer
  deliver <channel> <consumer_tag> <ref> [redelivered] | get-ok <channel> <ref> <count>
  window <channel> <consumer_tag>                   print delivery_window
  confirm <channel> <sequence> ok|nack              the broker stored / refused a confirmed publish
  complete <channel> <MethodClass> [name=value ...] | fail <channel> <code> <text>
  cancel <channel> <consumer_tag> | tick <now_ms> | close <code> <text>
"""

from __future__ import annotations

import ast
import os
import pathlib
import shlex

import pytest

from mqbroker.protocols.amqp import codec, spec
from mqbroker.protocols.amqp.actions import Delivery, Publish
from mqbroker.protocols.amqp.connection import Connection

TESTDATA = pathlib.Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("amqp_*.txt"))
REWRITE = os.environ.get("MQBROKER_REWRITE") == "1"
CONNECT = [
    "header",
    r"send 0 ConnectionStartOk mechanism='PLAIN' response=b'\x00guest\x00guest'",
    "auth ok",
    "send 0 ConnectionTuneOk channel_max=0 frame_max=0 heartbeat=0",
    "send 0 ConnectionOpen virtual_host='/'",
    "send 1 ChannelOpen",
]
CLIENT_CAPABILITIES = {"capabilities": {"consumer_cancel_notify": True, "connection.blocked": True}}


def keywords(words: list[str]) -> dict[str, object]:
    """``name=literal`` words → a dict."""
    return {name: ast.literal_eval(value) for name, value in (word.split("=", 1) for word in words)}


def method_named(name: str, words: list[str]) -> spec.Method:
    method_class = getattr(spec, name)
    assert issubclass(method_class, spec.Method), name
    return method_class(**keywords(words))


class Script:
    """One connection driven by script commands; renders what came out."""

    def __init__(self) -> None:
        self.now_ms = 0
        self.connection = Connection(now_ms=0, version="test")
        self.client = codec.FrameDecoder(spec.FRAME_MIN_BYTES * 64, expect_protocol_header=False)
        self.lines: list[str] = []

    def run(self, command: str) -> None:
        words = shlex.split(command, posix=False)
        verb, arguments = words[0], words[1:]
        connection = self.connection
        actions: list[object] = []
        if verb in ("header", "header-raw", "connect"):
            self.__init__()  # type: ignore[misc]
            connection = self.connection
        if verb == "header":
            actions = connection.receive_data(spec.PROTOCOL_HEADER, self.now_ms)
        elif verb == "connect":
            for line in CONNECT:
                self.run(line)
            self.lines.clear()
        elif verb in ("header-raw", "raw"):
            actions = connection.receive_data(ast.literal_eval(arguments[0]), self.now_ms)
        elif verb == "send":
            method = method_named(arguments[1], arguments[2:])
            if isinstance(method, spec.ConnectionStartOk) and not method.client_properties:
                method = spec.ConnectionStartOk(**{**keywords(arguments[2:]), "client_properties": CLIENT_CAPABILITIES})
            actions = connection.receive_data(codec.encode_method(int(arguments[0]), method), self.now_ms)
        elif verb == "publish":
            channel, body = int(arguments[0]), ast.literal_eval(arguments[1])
            body = b"y" * body if isinstance(body, int) else body
            data = codec.encode_message(channel, spec.BasicPublish(**keywords(arguments[2:])),
                                        codec.encode_properties(spec.BasicProperties(delivery_mode=2)), body, 4096)
            actions = connection.receive_data(data, self.now_ms)
        elif verb == "auth":
            if arguments[0] == "ok":
                actions = connection.authentication_succeeded()
            else:
                actions = connection.authentication_failed(" ".join(arguments[1:]), self.now_ms)
        elif verb == "deliver":
            channel, tag, ref = int(arguments[0]), arguments[1], int(arguments[2])
            connection.deliver(channel, tag, self.delivery(ref, "redelivered" in arguments))
        elif verb == "get-ok":
            connection.get_ok(int(arguments[0]), self.delivery(int(arguments[1]), False), int(arguments[2]), no_ack=False)
        elif verb == "window":
            self.lines.append(f"window {connection.delivery_window(int(arguments[0]), arguments[1])}")
        elif verb == "confirm":
            connection.publish_settled(int(arguments[0]), int(arguments[1]), stored=arguments[2] == "ok")
        elif verb == "complete":
            connection.complete(int(arguments[0]), method_named(arguments[1], arguments[2:]))
        elif verb == "fail":
            error = spec.AmqpError(spec.ReplyCode(int(arguments[1])), " ".join(arguments[2:]))
            actions = connection.fail(int(arguments[0]), error, self.now_ms)
        elif verb == "cancel":
            connection.cancel_consumer(int(arguments[0]), arguments[1])
        elif verb == "tick":
            self.now_ms = int(arguments[0])
            actions = connection.tick(self.now_ms)
        elif verb == "close":
            actions = connection.close(spec.ReplyCode(int(arguments[0])), " ".join(arguments[1:]), self.now_ms)
        else:
            raise AssertionError(f"unknown command {verb!r}")
        self.render_output()
        self.lines += [f"A {render_action(action)}" for action in actions]
        if verb == "tick":
            self.lines.append(f"next deadline {connection.next_deadline_ms()}")

    def delivery(self, ref: int, redelivered: bool) -> Delivery:
        return Delivery(queue="q", message_ref=ref, redelivered=redelivered, exchange="", routing_key="q",
                        properties_raw=codec.encode_properties(spec.BasicProperties()), body=f"m{ref}".encode())

    def render_output(self) -> None:
        data = self.connection.data_to_send()
        if data.startswith(spec.PROTOCOL_HEADER):
            self.lines.append("S protocol header")
            data = data[len(spec.PROTOCOL_HEADER):]
        for frame in self.client.receive_data(data):
            if isinstance(frame, codec.MethodFrame):
                method = frame.method
                shown = "ConnectionStart(...)" if isinstance(method, spec.ConnectionStart) else repr(method)
                self.lines.append(f"S{frame.channel} {shown}")
            elif isinstance(frame, codec.HeaderFrame):
                self.lines.append(f"S{frame.channel} header body_size={frame.body_size}")
            elif isinstance(frame, codec.BodyFrame):
                self.lines.append(f"S{frame.channel} body {frame.payload!r}")
            else:
                self.lines.append("S heartbeat")


def render_action(action: object) -> str:
    """Actions as their repr, except a publish, shown without its properties and full body."""
    if isinstance(action, Publish):
        return (f"Publish(channel={action.channel}, exchange={action.exchange!r}, routing_key={action.routing_key!r}, "
                f"mandatory={action.mandatory}, body_bytes={len(action.body)}, confirm_sequence={action.confirm_sequence})")
    return repr(action)


def parse_cases(text: str) -> list[tuple[list[str], list[str]]]:
    """Blank-line separated cases of commands, ``----``, expected output."""
    cases = []
    for block in text.strip().split("\n\n"):
        commands, _, expected = block.partition("\n----\n")
        if block.rstrip().endswith("----"):
            commands, expected = block.rstrip()[: -len("----")].rstrip("\n"), ""
        cases.append((commands.splitlines(), expected.splitlines()))
    return cases


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.stem)
def test_amqp_script(path: pathlib.Path) -> None:
    script = Script()
    rendered, mismatches = [], []
    for commands, expected in parse_cases(path.read_text()):
        script.lines = []
        for command in commands:
            if not command.startswith("#"):
                script.run(command)
        rendered.append("\n".join(commands) + "\n----\n" + "\n".join(script.lines))
        if script.lines != expected:
            mismatches.append("\n".join(commands) + "\n--- expected\n" + "\n".join(expected)
                              + "\n--- actual\n" + "\n".join(script.lines))
    if REWRITE:
        path.write_text("\n\n".join(rendered).replace("\n----\n\n", "\n----\n") + "\n")
        return
    assert not mismatches, "\n\n".join(mismatches)
