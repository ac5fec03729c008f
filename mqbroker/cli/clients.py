"""Client commands: ``topics``, ``produce``, ``consume`` and ``offsets``."""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from mqbroker.cli.common import client_security, client_command, parse_key_values, reporting_errors
from mqbroker.errors import InvalidRequestError

FORMAT_FIELDS = "{topic} {partition} {offset} {timestamp} {key} {value} {headers}"


def add_parsers(commands: Any) -> None:
    """Register the client commands."""
    _add_topics(commands)
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
                               "Print messages of TOPIC, one per line, as they arrive.")
    consume.add_argument("topic")
    consume.add_argument("--group", help="consumer group (commits offsets); default: none")
    consume.add_argument("--from-beginning", action="store_true", help="start at the earliest offset, not the end")
    consume.add_argument("--partition", type=int, help="read only this partition")
    consume.add_argument("--offset", type=int, help="with --partition: start at this offset")
    consume.add_argument("--max-messages", type=int, help="exit after this many messages")
    consume.add_argument("--timeout-ms", type=int, help="exit when no message arrives for this long")
    consume.add_argument("--format", default="{value}",
                         help=f"output format; fields: {FORMAT_FIELDS} [default: {{value}}]")
    consume.set_defaults(run=reporting_errors(_consume))

    offsets = client_command(commands, "offsets", "show a topic's offsets per partition",
                               "Show the earliest and latest offsets of every partition of TOPIC, "
                               "and with --time the first offset at or after a time.")
    offsets.add_argument("topic")
    offsets.add_argument("--time", help="an ISO 8601 datetime or milliseconds since the epoch")
    offsets.set_defaults(run=reporting_errors(_offsets))


def _add_topics(commands: Any) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, alter and delete topics",
                                 description="Administer topics.")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = client_command(actions, "create", "create a topic", "Create a topic.")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1, help="[default: the broker's default_partitions]")
    create.add_argument("--replication-factor", type=int, default=-1, help="[default: the broker's default]")
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
    create.set_defaults(run=reporting_errors(_topics_create))
    listing = client_command(actions, "list", "list topics", "List every topic.")
    listing.set_defaults(run=reporting_errors(_topics_list))
    describe = client_command(actions, "describe", "describe a topic",
                                "Show a topic's partitions, leaders, offsets and configuration.")
    describe.add_argument("name")
    describe.set_defaults(run=reporting_errors(_topics_describe))
    alter = client_command(actions, "alter", "change a topic's configs or partition count",
                             "Set or reset topic configs and grow the partition count.")
    alter.add_argument("name")
    alter.add_argument("--config", action="append", metavar="KEY=VALUE", help="set a config (repeatable)")
    alter.add_argument("--delete-config", action="append", metavar="KEY", help="reset a config (repeatable)")
    alter.add_argument("--partitions", type=int, help="grow to this many partitions")
    alter.set_defaults(run=reporting_errors(_topics_alter))
    reassign = client_command(actions, "reassign", "move a partition's replicas to other brokers",
                                "Move a partition's replicas to the brokers of --replicas (the first is the "
                                "preferred leader) while producers and consumers go on; --status shows the "
                                "moves in progress.")
    reassign.add_argument("name")
    reassign.add_argument("--partition", type=int, help="the partition to move")
    reassign.add_argument("--replicas", metavar="ID,ID,...", help="the brokers that should hold its replicas")
    reassign.add_argument("--status", action="store_true", help="show the reassignments of the topic in progress")
    reassign.set_defaults(run=reporting_errors(_topics_reassign))
    delete = client_command(actions, "delete", "delete a topic and its data", "Delete a topic and all its data.")
    delete.add_argument("name")
    delete.set_defaults(run=reporting_errors(_topics_delete))


def _admin(arguments: argparse.Namespace) -> Any:
    from mqbroker.client import Admin

    return Admin(arguments.bootstrap, security=client_security(arguments))


def _topics_create(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        admin.create_topics([arguments.name], arguments.partitions, arguments.replication_factor,
                            parse_key_values(arguments.config, "--config"))
    print(f"created topic {arguments.name}")
    return 0


def _topics_list(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        for name in admin.list_topics():
            print(name)
    return 0


def _topics_describe(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        metadata = admin.metadata([arguments.name])
        topic = metadata.topics[0]
        from mqbroker.client.admin import raise_for_topic

        raise_for_topic(topic)
        table = Table(title=f"topic {topic.name}")
        for column in ("partition", "leader", "replicas", "isr", "earliest", "latest"):
            table.add_column(column, justify="right")
        for partition in topic.partitions:
            index = partition.partition_index
            table.add_row(str(index), str(partition.leader_id), ",".join(map(str, partition.replica_nodes)),
                          ",".join(map(str, partition.isr_nodes)),
                          str(admin.list_offset(topic.name, index, -2)), str(admin.list_offset(topic.name, index, -1)))
        configs = admin.describe_configs(topic.name)
    console = Console()
    console.print(table)
    config_table = Table(title="configuration")
    config_table.add_column("key")
    config_table.add_column("value")
    for key, value in sorted(configs.items()):
        config_table.add_row(key, str(value))
    console.print(config_table)
    return 0


def _topics_alter(arguments: argparse.Namespace) -> int:
    set_configs = parse_key_values(arguments.config, "--config")
    if not (set_configs or arguments.delete_config or arguments.partitions):
        raise InvalidRequestError("nothing to alter: give --config, --delete-config or --partitions")
    with _admin(arguments) as admin:
        if set_configs or arguments.delete_config:
            admin.alter_configs(arguments.name, set_configs, arguments.delete_config or ())
        if arguments.partitions:
            admin.create_partitions(arguments.name, arguments.partitions)
    print(f"altered topic {arguments.name}")
    return 0


def _topics_reassign(arguments: argparse.Namespace) -> int:
    if arguments.status:
        with _admin(arguments) as admin:
            ongoing = admin.list_reassignments([arguments.name])
        table = Table(title=f"reassignments of {arguments.name} in progress")
        for column in ("partition", "replicas", "target", "catching up", "leaving"):
            table.add_column(column, justify="right")
        for (_, partition), item in sorted(ongoing.items()):
            table.add_row(str(partition), *(",".join(map(str, brokers)) for brokers in (
                item.replicas, item.target_replicas, item.adding_replicas, item.removing_replicas)))
        Console().print(table if ongoing else f"no reassignment of {arguments.name} in progress")
        return 0
    if arguments.partition is None or not arguments.replicas:
        raise InvalidRequestError("give --partition and --replicas (or --status)")
    try:
        replicas = [int(broker) for broker in arguments.replicas.split(",")]
    except ValueError:
        raise InvalidRequestError(f"--replicas wants broker ids separated by commas, got {arguments.replicas!r}") from None
    with _admin(arguments) as admin:
        admin.reassign_partition(arguments.name, arguments.partition, replicas)
    print(f"moving {arguments.name}-{arguments.partition} to brokers {','.join(map(str, replicas))}; "
          f"follow it with `mqbroker topics reassign {arguments.name} --status`")
    return 0


def _topics_delete(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        admin.delete_topics([arguments.name])
    print(f"deleted topic {arguments.name}")
    return 0


def _produce(arguments: argparse.Namespace) -> int:
    from mqbroker.client import Producer

    producer = Producer(arguments.bootstrap, security=client_security(arguments), acks=arguments.acks, compression=arguments.compression, linger_ms=5)
    futures = []
    count = 0
    try:
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if arguments.key_separator is not None:
                key, _, line = line.partition(arguments.key_separator.encode())
            futures.append(producer.send(arguments.topic, value=line, key=key, partition=arguments.partition))
            count += 1
            if len(futures) >= 10_000:
                _check_delivered(futures)
        producer.flush()
        _check_delivered(futures)
    finally:
        producer.close()
    print(f"produced {count} message(s) to {arguments.topic}", file=sys.stderr)
    return 0


def _check_delivered(futures: list[Any]) -> None:
    """Raise the first delivery error (acks=0 futures resolve without an offset)."""
    for future in futures:
        future.result()
    futures.clear()


def _consume(arguments: argparse.Namespace) -> int:
    from mqbroker.client import Consumer

    if arguments.group is not None and arguments.partition is not None:
        raise InvalidRequestError("--group and --partition exclude each other: the group assigns partitions")
    if arguments.offset is not None and arguments.partition is None:
        raise InvalidRequestError("--offset needs --partition")
    reset = "earliest" if arguments.from_beginning else "latest"
    topics = [arguments.topic] if arguments.partition is None else []
    #: With a group: the next offset after each printed message, committed after printing (at-least-once).
    printed_up_to: dict[tuple[str, int], int] = {}

    def commit_revoked(partitions: set[tuple[str, int]]) -> None:
        consumer.commit({p: printed_up_to.pop(p) for p in partitions if p in printed_up_to})

    if arguments.group is not None:
        consumer = Consumer(arguments.bootstrap, security=client_security(arguments), group_id=arguments.group, topics=topics, auto_offset_reset=reset,
                            enable_auto_commit=False, on_revoked=commit_revoked)
    else:
        consumer = Consumer(arguments.bootstrap, security=client_security(arguments), topics=topics, auto_offset_reset=reset)
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
                output.write(_format(arguments.format, message) + "\n")
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


def _format(template: str, message: Any) -> str:
    def text(value: bytes | None) -> str:
        return "null" if value is None else value.decode("utf-8", errors="backslashreplace")

    return template.format(
        topic=message.topic, partition=message.partition, offset=message.offset, timestamp=message.timestamp,
        key=text(message.key), value=text(message.value),
        headers=",".join(f"{k}={text(v)}" for k, v in message.headers),
    )


def _offsets(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        count = admin.describe_topics([arguments.topic])[arguments.topic]
        table = Table(title=f"offsets of {arguments.topic}")
        columns = ["partition", "earliest", "latest"] + (["at time"] if arguments.time else [])
        for column in columns:
            table.add_column(column, justify="right")
        at_ms = _parse_time_ms(arguments.time) if arguments.time else None
        for partition in range(count):
            row = [str(partition), str(admin.list_offset(arguments.topic, partition, -2)),
                   str(admin.list_offset(arguments.topic, partition, -1))]
            if at_ms is not None:
                row.append(str(admin.list_offset(arguments.topic, partition, at_ms)))
            table.add_row(*row)
    Console().print(table)
    return 0


def _parse_time_ms(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRequestError(f"--time {text!r} is neither milliseconds nor an ISO 8601 datetime") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)
