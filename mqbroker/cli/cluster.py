"""``mqbroker cluster describe``: the controller quorum (voters, leader, term, commit index) and brokers."""

from __future__ import annotations

import argparse
from typing import Any

from mqbroker.cli.common import client_command, reporting_errors
from mqbroker.cli.output import Column, Table, add_output_options, emit
from mqbroker.cli.topics import admin_client

QUORUM_COLUMNS = (
    Column("leader", "controller leader", numeric=True), Column("term", "term", numeric=True),
    Column("commit_index", "commit index", numeric=True), Column("applied_index", "applied index", numeric=True),
    Column("voters", "voters"), Column("answered_by", "answered by", numeric=True),
)
BROKER_COLUMNS = (Column("node_id", "broker", numeric=True), Column("host", "host"),
                  Column("port", "port", numeric=True), Column("state", "state"))


def add_parser(commands: Any) -> None:
    """Register ``cluster describe``."""
    cluster = commands.add_parser("cluster", help="inspect the cluster", description="Inspect the cluster.")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = client_command(actions, "describe", "show the controller quorum and the brokers",
                              "Show the controller voters, leader, term and commit index, and every registered"
                              " broker with its state (active or fenced), as the bootstrap broker sees them."
                              " In JSON the leader's node id is under 'leader' (-1: none).")
    add_output_options(describe)
    describe.set_defaults(run=reporting_errors(_describe))


def _describe(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        quorum = admin.describe_quorum()
    summary = {
        "answered_by": quorum.node_id,
        "leader": quorum.leader_id,
        "term": quorum.term,
        "commit_index": quorum.commit_index,
        "applied_index": quorum.applied_index,
        "voters": [voter.node_id for voter in quorum.voters],
    }
    brokers = [
        {"node_id": broker.node_id, "host": broker.host, "port": broker.port, "state": broker.state}
        for broker in quorum.brokers
    ]
    shown = {**summary, "leader": quorum.leader_id if quorum.leader_id >= 0 else None}
    emit(arguments, {**summary, "brokers": brokers}, [
        Table(columns=QUORUM_COLUMNS, records=[shown], title="controller quorum"),
        Table(columns=BROKER_COLUMNS, records=brokers, title="brokers"),
    ])
    return 0
