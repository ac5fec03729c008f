"""``mqbroker transactions``: list the transactional ids the coordinators know, describe one, abort one's transaction."""

from __future__ import annotations

import argparse
from typing import Any

from mqbroker.cli.common import add_client_options, client_security, reporting_errors
from mqbroker.cli.output import Column, Table, add_output_options, emit
from mqbroker.client.transaction_admin import TransactionAdmin, TransactionInfo

LIST_COLUMNS = (Column("transactional_id", "transactional id"), Column("producer_id", "producer id", numeric=True),
                Column("state", "state"))
DESCRIBE_COLUMNS = (
    Column("transactional_id", "transactional id"), Column("state", "state"),
    Column("producer_id", "producer id", numeric=True), Column("producer_epoch", "epoch", numeric=True),
    Column("timeout_ms", "timeout ms", numeric=True), Column("start_ms", "started (ms)", numeric=True),
    Column("partitions", "partitions"),
)
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead")


def add_parser(commands: Any) -> None:
    """Register ``transactions`` and its subcommands."""
    transactions = commands.add_parser("transactions", help="list, describe and abort transactions",
                                       description="What the transaction coordinators know; an operator's abort.")
    actions = transactions.add_subparsers(dest="transactions_command", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="every transactional id, its producer id and state")
    add_client_options(listing)
    listing.add_argument("--state", action="append", choices=STATES, default=[], help="only ids in this state")
    add_output_options(listing)
    listing.set_defaults(run=reporting_errors(_list))

    describe = actions.add_parser("describe", help="one transactional id: state, partitions, start, timeout")
    add_client_options(describe)
    describe.add_argument("transactional_id")
    add_output_options(describe)
    describe.set_defaults(run=reporting_errors(_describe))

    abort = actions.add_parser(
        "abort", help="abort a transactional id's ongoing transaction (fences its producer)",
        description="Abort the ongoing transaction of TRANSACTIONAL_ID, e.g. one that hangs because its producer "
                    "is gone, instead of waiting for its timeout: the coordinator bumps the producer epoch (the "
                    "producer is fenced and must be closed) and writes ABORT markers to every partition, so "
                    "read_committed readers move on. Prints the id's state afterwards. Needs WRITE on the id.")
    add_client_options(abort)
    abort.add_argument("transactional_id")
    add_output_options(abort)
    abort.set_defaults(run=reporting_errors(_abort))


def _admin(arguments: argparse.Namespace) -> TransactionAdmin:
    return TransactionAdmin(arguments.bootstrap, security=client_security(arguments))


def _list(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        records = [{"transactional_id": transactional_id, "producer_id": producer_id, "state": state}
                   for transactional_id, producer_id, state in admin.list_transactions(arguments.state)]
    emit(arguments, {"transactions": records}, [Table(columns=LIST_COLUMNS, records=records)])
    return 0


def _describe(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        info = admin.describe(arguments.transactional_id)
    _emit_info(arguments, info)
    return 0


def _abort(arguments: argparse.Namespace) -> int:
    with _admin(arguments) as admin:
        info = admin.abort(arguments.transactional_id)
    _emit_info(arguments, info)
    return 0


def _emit_info(arguments: argparse.Namespace, info: TransactionInfo) -> None:
    record = {"transactional_id": info.transactional_id, "state": info.state, "producer_id": info.producer_id,
              "producer_epoch": info.producer_epoch, "timeout_ms": info.timeout_ms, "start_ms": info.start_ms,
              "partitions": " ".join(f"{topic}-{partition}" for topic, partition in info.partitions)}
    document = {**record, "partitions": [[topic, partition] for topic, partition in info.partitions]}
    emit(arguments, document, [Table(columns=DESCRIBE_COLUMNS, records=[record])])
