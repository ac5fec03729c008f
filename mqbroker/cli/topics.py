"""``mqbroker topics`` (create, list, describe, alter, reassign, delete) and ``mqbroker offsets``."""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from mqbroker.cli.common import UsageError, client_command, client_security, parse_key_values, reporting_errors
from mqbroker.cli.output import Column, Table, add_output_options, emit
from mqbroker.client import Admin
from mqbroker.client.admin import raise_for_topic
from mqbroker.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

TOPIC_COLUMNS = (Column("name", "topic"), Column("partitions", "partitions", numeric=True),
                 Column("replication_factor", "replication factor", numeric=True))
PARTITION_COLUMNS = (
    Column("topic", "topic"), Column("partition", "partition", numeric=True), Column("leader", "leader", numeric=True),
    Column("replicas", "replicas"), Column("isr", "isr"), Column("earliest", "earliest", numeric=True),
    Column("latest", "latest", numeric=True),
)
CONFIG_COLUMNS = (Column("key", "key"), Column("value", "value"))
REASSIGNMENT_COLUMNS = (
    Column("topic", "topic"), Column("partition", "partition", numeric=True), Column("replicas", "replicas"),
    Column("target", "target"), Column("adding", "catching up"), Column("removing", "leaving"),
)


def add_parsers(commands: Any) -> None:
    """Register ``topics`` and ``offsets``."""
    topics = commands.add_parser("topics", help="create, list, describe, alter and delete topics",
                                 description="Administer topics.")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = client_command(actions, "create", "create a topic", "Create a topic.")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=-1, help="[default: the broker's default_partitions]")
    create.add_argument("--replication-factor", type=int, default=-1, help="[default: the broker's default]")
    create.add_argument("--config", action="append", metavar="KEY=VALUE", help="a topic config (repeatable)")
    create.set_defaults(run=reporting_errors(_create))
    listing = client_command(actions, "list", "list topics", "List every topic with its partition count.")
    add_output_options(listing)
    listing.set_defaults(run=reporting_errors(_list))
    describe = client_command(actions, "describe", "describe a topic",
                              "Show a topic's partitions, leaders, offsets and configuration.")
    describe.add_argument("name")
    add_output_options(describe)
    describe.set_defaults(run=reporting_errors(_describe))
    alter = client_command(actions, "alter", "change a topic's configs or partition count",
                           "Set or reset topic configs and grow the partition count.")
    alter.add_argument("name")
    alter.add_argument("--config", action="append", metavar="KEY=VALUE", help="set a config (repeatable)")
    alter.add_argument("--delete-config", action="append", metavar="KEY", help="reset a config (repeatable)")
    alter.add_argument("--partitions", type=int, help="grow to this many partitions")
    alter.set_defaults(run=reporting_errors(_alter))
    reassign = client_command(actions, "reassign", "move a partition's replicas to other brokers",
                              "Move a partition's replicas to the brokers of --replicas (the first is the "
                              "preferred leader) while producers and consumers go on; --status shows the "
                              "moves in progress.")
    reassign.add_argument("name")
    reassign.add_argument("--partition", type=int, help="the partition to move")
    reassign.add_argument("--replicas", metavar="ID,ID,...", help="the brokers that should hold its replicas")
    reassign.add_argument("--status", action="store_true", help="show the reassignments of the topic in progress")
    add_output_options(reassign)
    reassign.set_defaults(run=reporting_errors(_reassign))
    delete = client_command(actions, "delete", "delete a topic and its data", "Delete a topic and all its data.")
    delete.add_argument("name")
    delete.set_defaults(run=reporting_errors(_delete))

    offsets = client_command(commands, "offsets", "show a topic's offsets per partition",
                             "Show the earliest and latest offsets of every partition of TOPIC, "
                             "and with --time the first offset at or after a time.")
    offsets.add_argument("topic")
    offsets.add_argument("--time", help="an ISO 8601 datetime or milliseconds since the epoch")
    add_output_options(offsets)
    offsets.set_defaults(run=reporting_errors(_offsets))


def admin_client(arguments: argparse.Namespace) -> Admin:
    """An ``Admin`` for the command line's --bootstrap and security options."""
    return Admin(arguments.bootstrap, security=client_security(arguments))


def _create(arguments: argparse.Namespace) -> int:
    configs = parse_key_values(arguments.config, "--config")
    with admin_client(arguments) as admin:
        admin.create_topics([arguments.name], arguments.partitions, arguments.replication_factor, configs)
    print(f"created topic {arguments.name}")
    return 0


def _list(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        metadata = admin.metadata()
    records = [
        {"name": topic.name, "partitions": len(topic.partitions),
         "replication_factor": len(topic.partitions[0].replica_nodes) if topic.partitions else 0,
         "internal": topic.is_internal}
        for topic in sorted(metadata.topics, key=lambda topic: topic.name)
    ]
    emit(arguments, {"topics": records}, [Table(columns=TOPIC_COLUMNS, records=records)])
    return 0


def _describe(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        (topic,) = admin.metadata([arguments.name]).topics
        raise_for_topic(topic)
        partitions = [
            {"topic": topic.name, "partition": partition.partition_index, "leader": partition.leader_id,
             "replicas": list(partition.replica_nodes), "isr": list(partition.isr_nodes),
             "earliest": admin.list_offset(topic.name, partition.partition_index, EARLIEST_TIMESTAMP),
             "latest": admin.list_offset(topic.name, partition.partition_index, LATEST_TIMESTAMP)}
            for partition in sorted(topic.partitions, key=lambda partition: partition.partition_index)
        ]
        configs = admin.describe_configs(topic.name)
    document = {"name": topic.name, "internal": topic.is_internal, "partitions": partitions, "configs": configs}
    emit(arguments, document, [
        Table(columns=PARTITION_COLUMNS, records=partitions, title=f"topic {topic.name}"),
        Table(columns=CONFIG_COLUMNS, records=[{"key": key, "value": value} for key, value in sorted(configs.items())],
              title="configuration"),
    ])
    return 0


def _alter(arguments: argparse.Namespace) -> int:
    set_configs = parse_key_values(arguments.config, "--config")
    if not (set_configs or arguments.delete_config or arguments.partitions):
        raise UsageError("nothing to alter: give --config, --delete-config or --partitions")
    with admin_client(arguments) as admin:
        if set_configs or arguments.delete_config:
            admin.alter_configs(arguments.name, set_configs, arguments.delete_config or ())
        if arguments.partitions:
            admin.create_partitions(arguments.name, arguments.partitions)
    print(f"altered topic {arguments.name}")
    return 0


def _reassign(arguments: argparse.Namespace) -> int:
    if arguments.status:
        return _reassign_status(arguments)
    if arguments.partition is None or not arguments.replicas:
        raise UsageError("give --partition and --replicas (or --status)")
    try:
        replicas = [int(broker) for broker in arguments.replicas.split(",")]
    except ValueError:
        raise UsageError(f"--replicas wants broker ids separated by commas, got {arguments.replicas!r}") from None
    with admin_client(arguments) as admin:
        admin.reassign_partition(arguments.name, arguments.partition, replicas)
    print(f"moving {arguments.name}-{arguments.partition} to brokers {','.join(map(str, replicas))}; "
          f"follow it with `mqbroker topics reassign {arguments.name} --status`")
    return 0


def _reassign_status(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        ongoing = admin.list_reassignments([arguments.name])
    records = [
        {"topic": topic, "partition": partition, "replicas": list(item.replicas), "target": list(item.target_replicas),
         "adding": list(item.adding_replicas), "removing": list(item.removing_replicas)}
        for (topic, partition), item in sorted(ongoing.items())
    ]
    emit(arguments, {"topic": arguments.name, "reassignments": records}, [
        Table(columns=REASSIGNMENT_COLUMNS, records=records, title=f"reassignments of {arguments.name} in progress",
              empty=f"no reassignment of {arguments.name} in progress"),
    ])
    return 0


def _delete(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        admin.delete_topics([arguments.name])
    print(f"deleted topic {arguments.name}")
    return 0


def _offsets(arguments: argparse.Namespace) -> int:
    at_ms = parse_time_ms(arguments.time, "--time") if arguments.time else None
    with admin_client(arguments) as admin:
        count = admin.describe_topics([arguments.topic])[arguments.topic]
        records = []
        for partition in range(count):
            record = {"topic": arguments.topic, "partition": partition,
                      "earliest": admin.list_offset(arguments.topic, partition, EARLIEST_TIMESTAMP),
                      "latest": admin.list_offset(arguments.topic, partition, LATEST_TIMESTAMP)}
            if at_ms is not None:
                found = admin.list_offset(arguments.topic, partition, at_ms)
                record["at_time"] = found if found >= 0 else None
            records.append(record)
    columns = (Column("topic", "topic"), Column("partition", "partition", numeric=True),
               Column("earliest", "earliest", numeric=True), Column("latest", "latest", numeric=True))
    if at_ms is not None:
        columns += (Column("at_time", "at time", numeric=True),)
    document = {"topic": arguments.topic, "time_ms": at_ms, "partitions": records}
    emit(arguments, document, [Table(columns=columns, records=records, title=f"offsets of {arguments.topic}")])
    return 0


def parse_time_ms(text: str, option: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 datetime (UTC unless it names a zone)."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option} {text!r} is neither milliseconds nor an ISO 8601 datetime") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)
