"""Builds a broker's control plane from its parts: Raft storage, core, node and transport (composition).

The one place (with ``service.py``, which calls it) where the control plane's concrete parts
are chosen: the Raft log on disk under the data directory, a random source seeded from the OS,
and the TCP (or TLS) transport to the other voters.
"""

from __future__ import annotations

import os
import pathlib
import random
from collections.abc import Callable
from typing import Any

from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.interfaces import (
    IReactorTime,
    IStreamClientEndpoint,
    IStreamServerEndpoint,
)
from twisted.python.failure import Failure

from mqbroker import limits
from mqbroker.cluster.controlplane import CONTROLLER_TICK_MS, ControlPlane, parse_quorum
from mqbroker.cluster.metadata import MetadataStateMachine
from mqbroker.config import BrokerConfig, dial_address
from mqbroker.raft.core import RaftCore
from mqbroker.raft.forwarded_proposals import PeerFrame
from mqbroker.raft.messages import Configuration, Snapshot, SnapshotMetadata
from mqbroker.raft.node import RaftNode
from mqbroker.raft.settings import RaftSettings
from mqbroker.raft.storage import FileRaftStorage
from mqbroker.raft.transport import RaftTransport

#: The Raft log's directory under the data directory (not a partition name: no "-N" suffix).
RAFT_DIRECTORY = "controller-raft"
CONTROLLER_ELECTION_TICKS = 10


def build_control_plane(
    *,
    config: BrokerConfig,
    reactor: IReactorTime,
    data_dir: pathlib.Path,
    threadpool: Any,
    listen_endpoint: Callable[[int], IStreamServerEndpoint],
    peer_endpoint: Callable[[str, int], IStreamClientEndpoint] | None = None,
    on_fatal: Callable[[Failure], None] | None = None,
) -> ControlPlane:
    """Open the Raft log, seed the Raft core, connect the voters (if more than this one) and wrap them.

    ``listen_endpoint(port)`` is where peers reach this controller, ``peer_endpoint(host, port)``
    how this broker dials them (plain TCP unless given; the service adds TLS with ``controller_tls``).
    """
    voters = parse_quorum(config)
    bootstrap = Snapshot(metadata=SnapshotMetadata(configuration=Configuration(voters=frozenset(voters))))
    storage = FileRaftStorage.open(str(data_dir / RAFT_DIRECTORY), bootstrap=bootstrap)
    core = RaftCore(
        RaftSettings(node_id=config.node_id, election_ticks=CONTROLLER_ELECTION_TICKS),
        storage,
        random.Random(int.from_bytes(os.urandom(8), "big")),
    )
    machine = MetadataStateMachine()
    transport: RaftTransport | None = None
    if len(voters) > 1:
        dial = peer_endpoint or (lambda host, port: TCP4ClientEndpoint(reactor, host, port))
        peers = {
            node_id: dial(dial_address(host), port)
            for node_id, (host, port) in voters.items()
            if node_id != config.node_id
        }
        transport = RaftTransport(
            node_id=config.node_id,
            server_endpoint=listen_endpoint(voters[config.node_id][1]),
            peer_endpoints=peers,
            deliver=lambda frame: node.receive(frame),  # the node is built next; frames arrive once started
            clock=reactor,
        )
    node = RaftNode(
        core=core,
        storage=storage,
        state_machine=machine,
        send=transport.send if transport is not None else _no_peers,
        reactor=reactor,
        threadpool=threadpool,
        tick_ms=CONTROLLER_TICK_MS,
        snapshot_entries=limits.controller_log_entries_max,
        on_fatal=on_fatal,
    )
    return ControlPlane(config=config, clock=reactor, voters=voters, machine=machine, node=node, storage=storage,
                        transport=transport)


def _no_peers(frame: PeerFrame) -> bool:
    """A quorum of one has nobody to send to."""
    return False
