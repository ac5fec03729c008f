"""``mqbroker groups``: list, describe (with lag), reset offsets and delete consumer groups."""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from mqbroker.cli.common import add_client_options, client_security, reporting_errors
from mqbroker.errors import InvalidRequestError, NonEmptyGroupError
from mqbroker.model import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP


def add_parser(commands: Any) -> None:
    """Register ``groups`` and its subcommands."""
    groups = commands.add_parser("groups", help="list, describe, reset and delete consumer groups",
                                 description="Consumer group operations.")
    actions = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every group and its state")
    add_client_options(listing)
    listing.set_defaults(run=reporting_errors(_list))

    describe = actions.add_parser("describe", help="members, assignment, committed offsets and lag of a group")
    add_client_options(describe)
    describe.add_argument("group")
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
    reset.set_defaults(run=reporting_errors(_reset))

    delete = actions.add_parser("delete", help="delete a group without members and its offsets")
    add_client_options(delete)
    delete.add_argument("group")
    delete.set_defaults(run=reporting_errors(_delete))


def _list(arguments: argparse.Namespace) -> int:
    from mqbroker.client.group_admin import GroupAdmin

    with GroupAdmin(arguments.bootstrap, security=client_security(arguments)) as admin:
        for group_id, state in admin.list_groups():
            print(f"{group_id}\t{state}")
    return 0


def _describe(arguments: argparse.Namespace) -> int:
    from mqbroker.client import Admin
    from mqbroker.client.group_admin import GroupAdmin

    with GroupAdmin(arguments.bootstrap, security=client_security(arguments)) as groups, Admin(arguments.bootstrap, security=client_security(arguments)) as admin:
        info = groups.describe_group(arguments.group)
        committed = groups.committed_offsets(arguments.group)
        owners = {tp: member for member in info.members for tp in member.assignment}
        console = Console()
        console.print(f"group {info.group_id}: state {info.state}, assignor {info.assignor or '-'}, "
                      f"{len(info.members)} member(s)")
        table = Table()
        for column in ("topic", "partition", "committed", "log end", "lag", "member", "client id", "host"):
            table.add_column(column)
        for topic, partition in sorted(set(committed) | set(owners)):
            end = admin.list_offset(topic, partition, LATEST_TIMESTAMP)
            offset = committed.get((topic, partition))
            lag = end - offset if offset is not None else None
            owner = owners.get((topic, partition))
            table.add_row(topic, str(partition), _or_dash(offset), str(end), _or_dash(lag),
                          owner.member_id if owner else "-", owner.client_id if owner else "-",
                          owner.client_host if owner else "-")
        console.print(table)
    return 0


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)


def _reset(arguments: argparse.Namespace) -> int:
    from mqbroker.client import Admin
    from mqbroker.client.group_admin import GroupAdmin

    with GroupAdmin(arguments.bootstrap, security=client_security(arguments)) as groups, Admin(arguments.bootstrap, security=client_security(arguments)) as admin:
        info = groups.describe_group(arguments.group)
        if info.members:
            raise NonEmptyGroupError(f"group {arguments.group!r} has {len(info.members)} active member(s); "
                                     "stop its consumers before resetting its offsets")
        partitions = admin.describe_topics([arguments.topic])[arguments.topic]
        offsets = {(arguments.topic, p): _target(arguments, admin, p) for p in range(partitions)}
        for (topic, partition), offset in sorted(offsets.items()):
            print(f"{topic}\t{partition}\t{offset}")
        if arguments.dry_run:
            print("dry run: nothing committed", file=sys.stderr)
        else:
            groups.set_offsets(arguments.group, offsets)
    return 0


def _target(arguments: argparse.Namespace, admin: Any, partition: int) -> int:
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
    try:
        moment = datetime.datetime.fromisoformat(arguments.to_datetime)
    except ValueError:
        raise InvalidRequestError(f"--to-datetime {arguments.to_datetime!r} is not an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    found = admin.list_offset(topic, partition, int(moment.timestamp() * 1000))
    return int(found) if found >= 0 else int(admin.list_offset(topic, partition, LATEST_TIMESTAMP))


def _delete(arguments: argparse.Namespace) -> int:
    from mqbroker.client.group_admin import GroupAdmin

    with GroupAdmin(arguments.bootstrap, security=client_security(arguments)) as admin:
        admin.delete_group(arguments.group)
    print(f"deleted group {arguments.group}")
    return 0
