"""``mqbroker cluster describe``: the controller quorum (voters, leader, term, commit index) and brokers;
``mqbroker cluster configs`` and ``alter-configs``: the cluster-wide dynamic topic defaults."""

from __future__ import annotations

import argparse
from typing import Any

from mqbroker.cli.common import UsageError, client_command, parse_key_values, reporting_errors
from mqbroker.cli.output import Column, Table, add_output_options, emit
from mqbroker.cli.topics import CONFIG_COLUMNS, admin_client

QUORUM_COLUMNS = (
    Column("leader", "controller leader", numeric=True), Column("term", "term", numeric=True),
    Column("commit_index", "commit index", numeric=True), Column("applied_index", "applied index", numeric=True),
    Column("voters", "voters"), Column("answered_by", "answered by", numeric=True),
)
BROKER_COLUMNS = (Column("node_id", "broker", numeric=True), Column("host", "host"),
                  Column("port", "port", numeric=True), Column("state", "state"))


def add_parser(commands: Any) -> None:
    """Register ``cluster describe``, ``configs`` and ``alter-configs``."""
    cluster = commands.add_parser("cluster", help="inspect the cluster", description="Inspect the cluster.")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = client_command(actions, "describe", "show the controller quorum and the brokers",
                              "Show the controller voters, leader, term and commit index, and every registered"
                              " broker with its state (active or fenced), as the bootstrap broker sees them."
                              " In JSON the leader's node id is under 'leader' (-1: none).")
    add_output_options(describe)
    describe.set_defaults(run=reporting_errors(_describe))
    configs = client_command(actions, "configs", "show the cluster-wide dynamic topic defaults",
                             "Show the topic defaults set for the whole cluster at run time (they win over every "
                             "broker's log. settings and yield to a topic's own configs).")
    add_output_options(configs)
    configs.set_defaults(run=reporting_errors(_configs))
    alter = client_command(actions, "alter-configs", "change the cluster-wide dynamic topic defaults",
                           "Set or reset topic defaults for the whole cluster, stored in the cluster metadata "
                           "(topic keys, e.g. --config retention.ms=3600000 or min.insync.replicas=2).")
    alter.add_argument("--config", action="append", metavar="KEY=VALUE", help="set a default (repeatable)")
    alter.add_argument("--delete-config", action="append", metavar="KEY", help="reset a default (repeatable)")
    alter.set_defaults(run=reporting_errors(_alter_configs))


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


def _configs(arguments: argparse.Namespace) -> int:
    with admin_client(arguments) as admin:
        configs = admin.describe_cluster_configs()
    emit(arguments, {"configs": configs}, [
        Table(columns=CONFIG_COLUMNS, records=[{"key": key, "value": value} for key, value in sorted(configs.items())],
              title="cluster-wide dynamic topic defaults")])
    return 0


def _alter_configs(arguments: argparse.Namespace) -> int:
    set_configs = parse_key_values(arguments.config, "--config")
    if not (set_configs or arguments.delete_config):
        raise UsageError("nothing to alter: give --config or --delete-config")
    with admin_client(arguments) as admin:
        admin.alter_cluster_configs(set_configs, arguments.delete_config or ())
    print("altered the cluster-wide dynamic topic defaults")
    return 0
