"""``mqbroker produce`` (one message per line of standard input) and ``mqbroker consume``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mqbroker.cli.common import UsageError, client_command, client_security, reporting_errors
from mqbroker.cli.output import JSON, PLAIN, add_output_options
from mqbroker.client import Consumer, Message, Producer, RecordMetadata
from mqbroker.errors import BrokerError

FORMAT_FIELDS = "{topic} {partition} {offset} {timestamp} {key} {value} {headers}"


def add_parsers(commands: Any) -> None:
    """Register ``produce`` and ``consume``."""
    produce = client_command(commands, "produce", "produce one message per line of standard input",
                             "Read standard input and produce one message per line to TOPIC.")
    produce.add_argument("topic")
    produce.add_argument("--key-separator", metavar="SEP",
                         help="split each line at the first SEP into key and value (no key otherwise)")
    produce.add_argument("--acks", default="all", choices=["0", "1", "all"], help="[default: all]")
    produce.add_argument("--partition", type=int, help="send every message to this partition")
    produce.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    produce.set_defaults(run=reporting_errors(_produce))

    consume = client_command(commands, "consume", "print messages of a topic",
                             "Print messages of TOPIC, one per line, as they arrive (-o json: JSON Lines).")
    consume.add_argument("topic")
    consume.add_argument("--group", help="consumer group (commits offsets); default: none")
    consume.add_argument("--from-beginning", action="store_true", help="start at the earliest offset, not the end")
    consume.add_argument("--partition", type=int, help="read only this partition")
    consume.add_argument("--offset", type=int, help="with --partition: start at this offset")
    consume.add_argument("--max-messages", type=int, help="exit after this many messages")
    consume.add_argument("--timeout-ms", type=int, help="exit when no message arrives for this long")
    consume.add_argument("--format", default="{value}",
                         help=f"how -o plain prints a message; fields: {FORMAT_FIELDS} [default: {{value}}]")
    add_output_options(consume, formats=(PLAIN, JSON),
                       help_text="plain (each message as --format says; the default) or json (JSON Lines)")
    consume.set_defaults(run=reporting_errors(_consume))


def _produce(arguments: argparse.Namespace) -> int:
    failures: list[BrokerError] = []

    def delivered(error: BrokerError | None, metadata: RecordMetadata | None) -> None:
        if error is not None:
            failures.append(error)

    count = 0
    with Producer(arguments.bootstrap, security=client_security(arguments), acks=arguments.acks,
                  compression=arguments.compression, linger_ms=5) as producer:
        for line in sys.stdin.buffer:
            if failures:
                break  # stop reading: the first failure is reported below
            line = line.rstrip(b"\r\n")
            key = None
            if arguments.key_separator is not None:
                key, _, line = line.partition(arguments.key_separator.encode())
            producer.send(arguments.topic, value=line, key=key, partition=arguments.partition, on_delivery=delivered)
            count += 1
        producer.flush()
    if failures:
        raise failures[0]
    print(f"produced {count} message(s) to {arguments.topic}", file=sys.stderr)
    return 0


def _consume(arguments: argparse.Namespace) -> int:
    if arguments.group is not None and arguments.partition is not None:
        raise UsageError("--group and --partition exclude each other: the group assigns partitions")
    if arguments.offset is not None and arguments.partition is None:
        raise UsageError("--offset needs --partition")
    show = _as_json if arguments.output == JSON else lambda message: _format(arguments.format, message)
    reset = "earliest" if arguments.from_beginning else "latest"
    topics = [arguments.topic] if arguments.partition is None else []
    #: With a group: the next offset after each printed message, committed after printing (at-least-once).
    printed_up_to: dict[tuple[str, int], int] = {}

    def commit_revoked(partitions: set[tuple[str, int]]) -> None:
        consumer.commit({p: printed_up_to.pop(p) for p in partitions if p in printed_up_to})

    security = client_security(arguments)
    if arguments.group is not None:
        consumer = Consumer(arguments.bootstrap, security=security, group_id=arguments.group, topics=topics,
                            auto_offset_reset=reset, enable_auto_commit=False, on_revoked=commit_revoked)
    else:
        consumer = Consumer(arguments.bootstrap, security=security, topics=topics, auto_offset_reset=reset)
    printed = 0
    try:
        if arguments.partition is not None:
            partition = (arguments.topic, arguments.partition)
            consumer.assign([partition])
            if arguments.offset is not None:
                consumer.seek(partition, arguments.offset)
        idle_s = 0.0
        output = sys.stdout
        while arguments.max_messages is None or printed < arguments.max_messages:
            messages = consumer.poll(timeout=0.5)
            idle_s = 0.0 if messages else idle_s + 0.5
            for message in messages:
                output.write(show(message) + "\n")
                printed_up_to[message.topic, message.partition] = message.offset + 1
                printed += 1
                if arguments.max_messages is not None and printed >= arguments.max_messages:
                    break
            output.flush()
            if arguments.group is not None and messages:
                consumer.commit(printed_up_to)
            if arguments.timeout_ms is not None and idle_s * 1000 >= arguments.timeout_ms:
                break
    finally:
        consumer.close()
    return 0


def _text(value: bytes | None) -> str | None:
    """Bytes as UTF-8 text; bytes that are not UTF-8 show as backslash escapes."""
    return None if value is None else value.decode("utf-8", errors="backslashreplace")


def _format(template: str, message: Message) -> str:
    def text(value: bytes | None) -> str:
        decoded = _text(value)
        return "null" if decoded is None else decoded

    return template.format(
        topic=message.topic, partition=message.partition, offset=message.offset, timestamp=message.timestamp,
        key=text(message.key), value=text(message.value),
        headers=",".join(f"{k}={text(v)}" for k, v in message.headers),
    )


def _as_json(message: Message) -> str:
    """One line of JSON Lines: every field of the message (key, value and headers as text; null when absent)."""
    return json.dumps({
        "topic": message.topic, "partition": message.partition, "offset": message.offset,
        "timestamp": message.timestamp, "key": _text(message.key), "value": _text(message.value),
        "headers": [[key, _text(value)] for key, value in message.headers],
    })
