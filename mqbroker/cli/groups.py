"""``mqbroker groups``: list, describe (with lag), reset offsets and delete consumer groups."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mqbroker.cli.common import add_client_options, client_security, reporting_errors
from mqbroker.cli.output import Column, Table, add_output_options, emit
from mqbroker.cli.topics import admin_client, parse_time_ms
from mqbroker.client import Admin
from mqbroker.client.group_admin import GroupAdmin
from mqbroker.errors import NonEmptyGroupError
from mqbroker.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

GROUP_COLUMNS = (Column("group", "group"), Column("state", "state"))
SUMMARY_COLUMNS = (Column("group", "group"), Column("state", "state"), Column("assignor", "assignor"),
                   Column("member_count", "members", numeric=True))
PARTITION_COLUMNS = (
    Column("group", "group"), Column("topic", "topic"), Column("partition", "partition", numeric=True),
    Column("committed", "committed", numeric=True), Column("log_end", "log end", numeric=True),
    Column("lag", "lag", numeric=True), Column("member_id", "member"), Column("client_id", "client id"),
    Column("host", "host"),
)
OFFSET_COLUMNS = (Column("group", "group"), Column("topic", "topic"), Column("partition", "partition", numeric=True),
                  Column("offset", "new offset", numeric=True))


def add_parser(commands: Any) -> None:
    """Register ``groups`` and its subcommands."""
    groups = commands.add_parser("groups", help="list, describe, reset and delete consumer groups",
                                 description="Consumer group operations.")
    actions = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every group and its state")
    add_client_options(listing)
    add_output_options(listing)
    listing.set_defaults(run=reporting_errors(_list))

    describe = actions.add_parser("describe", help="members, assignment, committed offsets and lag of a group")
    add_client_options(describe)
    describe.add_argument("group")
    add_output_options(describe)
    describe.set_defaults(run=reporting_errors(_describe))

    reset = actions.add_parser("reset-offsets", help="move a group's committed offsets (group must have no members)")
    add_client_options(reset)
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the first offset still in the log")
    target.add_argument("--to-latest", action="store_true", help="the end of the log (skip everything)")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N in every partition")
    target.add_argument("--to-datetime", metavar="ISO-8601",
                        help="the first record at or after this time, e.g. 2024-05-01T12:00:00+00:00")
    reset.add_argument("--dry-run", action="store_true", help="print the new offsets without committing them")
    add_output_options(reset)
    reset.set_defaults(run=reporting_errors(_reset))

    delete = actions.add_parser("delete", help="delete a group without members and its offsets")
    add_client_options(delete)
    delete.add_argument("group")
    delete.set_defaults(run=reporting_errors(_delete))


def _group_admin(arguments: argparse.Namespace) -> GroupAdmin:
    return GroupAdmin(arguments.bootstrap, security=client_security(arguments))


def _list(arguments: argparse.Namespace) -> int:
    with _group_admin(arguments) as admin:
        records = [{"group": group_id, "state": state} for group_id, state in admin.list_groups()]
    emit(arguments, {"groups": records}, [Table(columns=GROUP_COLUMNS, records=records)])
    return 0


def _describe(arguments: argparse.Namespace) -> int:
    with _group_admin(arguments) as groups, admin_client(arguments) as admin:
        info = groups.describe_group(arguments.group)
        committed = groups.committed_offsets(arguments.group)
        owners = {tp: member for member in info.members for tp in member.assignment}
        partitions = []
        for topic, partition in sorted(set(committed) | set(owners)):
            end = admin.list_offset(topic, partition, LATEST_TIMESTAMP)
            offset = committed.get((topic, partition))
            owner = owners.get((topic, partition))
            partitions.append({
                "group": info.group_id, "topic": topic, "partition": partition, "committed": offset, "log_end": end,
                "lag": end - offset if offset is not None else None,
                "member_id": owner.member_id if owner else None, "client_id": owner.client_id if owner else None,
                "host": owner.client_host if owner else None,
            })
    members = [
        {"member_id": member.member_id, "group_instance_id": member.group_instance_id, "client_id": member.client_id,
         "host": member.client_host,
         "assignment": [[topic, partition] for topic, partition in sorted(member.assignment)]}
        for member in info.members
    ]
    summary = {"group": info.group_id, "state": info.state, "assignor": info.assignor or None,
               "member_count": len(info.members)}
    document = {**summary, "members": members, "partitions": partitions}
    emit(arguments, document, [
        Table(columns=SUMMARY_COLUMNS, records=[summary]),
        Table(columns=PARTITION_COLUMNS, records=partitions),
    ])
    return 0


def _reset(arguments: argparse.Namespace) -> int:
    with _group_admin(arguments) as groups, admin_client(arguments) as admin:
        info = groups.describe_group(arguments.group)
        if info.members:
            raise NonEmptyGroupError(f"group {arguments.group!r} has {len(info.members)} active member(s); "
                                     "stop its consumers before resetting its offsets")
        partitions = admin.describe_topics([arguments.topic])[arguments.topic]
        offsets = {(arguments.topic, p): _target(arguments, admin, p) for p in range(partitions)}
        if not arguments.dry_run:
            groups.set_offsets(arguments.group, offsets)
    records = [{"group": arguments.group, "topic": topic, "partition": partition, "offset": offset}
               for (topic, partition), offset in sorted(offsets.items())]
    document = {"group": arguments.group, "dry_run": arguments.dry_run, "offsets": records}
    emit(arguments, document, [Table(columns=OFFSET_COLUMNS, records=records)])
    if arguments.dry_run:
        print("dry run: nothing committed", file=sys.stderr)
    return 0


def _target(arguments: argparse.Namespace, admin: Admin, partition: int) -> int:
    """The new offset of one partition."""
    topic = arguments.topic
    if arguments.to_offset is not None:
        low = admin.list_offset(topic, partition, EARLIEST_TIMESTAMP)
        high = admin.list_offset(topic, partition, LATEST_TIMESTAMP)
        return min(max(arguments.to_offset, low), high)  # clamp into the log, as Kafka does
    if arguments.to_earliest:
        return int(admin.list_offset(topic, partition, EARLIEST_TIMESTAMP))
    if arguments.to_latest:
        return int(admin.list_offset(topic, partition, LATEST_TIMESTAMP))
    found = admin.list_offset(topic, partition, parse_time_ms(arguments.to_datetime, "--to-datetime"))
    return int(found) if found >= 0 else int(admin.list_offset(topic, partition, LATEST_TIMESTAMP))


def _delete(arguments: argparse.Namespace) -> int:
    with _group_admin(arguments) as admin:
        admin.delete_group(arguments.group)
    print(f"deleted group {arguments.group}")
    return 0
