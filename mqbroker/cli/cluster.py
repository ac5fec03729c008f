"""``mqbroker cluster describe``: the controller quorum (voters, leader, term, commit index) and brokers."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mqbroker.cli.common import client_security, client_command, reporting_errors
from mqbroker.client import Admin


def add_parser(commands: Any) -> None:
    """Register ``cluster describe``."""
    cluster = commands.add_parser("cluster", help="inspect the cluster", description="Inspect the cluster.")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    describe = client_command(actions, "describe", "show the controller quorum and the brokers",
                                "Show the controller voters, leader, term and commit index, and every registered"
                                " broker with its state (active or fenced), as the bootstrap broker sees them.")
    describe.add_argument("--json", action="store_true", help="print JSON (the leader's node id under 'leader')")
    describe.set_defaults(run=reporting_errors(_describe))


def _describe(arguments: argparse.Namespace) -> int:
    with Admin(arguments.bootstrap, security=client_security(arguments)) as admin:
        quorum = admin.describe_quorum()
    document = {
        "answered_by": quorum.node_id,
        "leader": quorum.leader_id,
        "term": quorum.term,
        "commit_index": quorum.commit_index,
        "applied_index": quorum.applied_index,
        "voters": [voter.node_id for voter in quorum.voters],
        "brokers": [
            {"node_id": broker.node_id, "host": broker.host, "port": broker.port, "state": broker.state}
            for broker in quorum.brokers
        ],
    }
    if arguments.json:
        print(json.dumps(document, indent=2))
        return 0
    leader = quorum.leader_id if quorum.leader_id >= 0 else "none"
    print(f"controller leader: {leader}   term: {quorum.term}   commit index: {quorum.commit_index}"
          f"   voters: {', '.join(str(v) for v in document['voters'])}   (answered by broker {quorum.node_id})")
    print(f"{'BROKER':>6}  {'ADDRESS':<24} STATE")
    for broker in document["brokers"]:
        print(f"{broker['node_id']:>6}  {broker['host'] + ':' + str(broker['port']):<24} {broker['state']}")
    return 0
