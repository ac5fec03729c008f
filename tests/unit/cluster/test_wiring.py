"""Building the control plane: the Raft log on disk, a transport only when there are other voters."""

from __future__ import annotations

from pathlib import Path

from twisted.internet.endpoints import TCP4ClientEndpoint, TCP4ServerEndpoint
from twisted.internet.testing import MemoryReactorClock

from mqbroker.cluster.wiring import RAFT_DIRECTORY, build_control_plane
from mqbroker.config import build_config
from mqbroker.raft.transport import RaftTransport
from tests.fakes import InlinePool


def test_a_quorum_of_one_gets_its_raft_log_on_disk_and_no_transport(tmp_path: Path) -> None:
    reactor = MemoryReactorClock()
    plane = build_control_plane(config=build_config({"node_id": 1}), reactor=reactor, data_dir=tmp_path,
                                threadpool=InlinePool(), listen_endpoint=lambda port: TCP4ServerEndpoint(reactor, port))
    assert (tmp_path / RAFT_DIRECTORY).is_dir() and plane.transport is None
    assert plane.voters == {1: ("localhost", 9395)}
    assert plane.node.storage.snapshot().metadata.configuration.voters == {1}


def test_with_other_voters_the_transport_listens_on_this_voters_port_and_dials_the_others(tmp_path: Path) -> None:
    reactor = MemoryReactorClock()
    listened: list[int] = []
    dialed: list[tuple[str, int]] = []
    config = build_config({"node_id": 2, "controller_quorum": "1@localhost:7001,2@localhost:7002,3@h3:7003"})

    def listen(port: int) -> TCP4ServerEndpoint:
        listened.append(port)
        return TCP4ServerEndpoint(reactor, port)

    def dial(host: str, port: int) -> TCP4ClientEndpoint:
        dialed.append((host, port))
        return TCP4ClientEndpoint(reactor, host, port)

    plane = build_control_plane(config=config, reactor=reactor, data_dir=tmp_path, threadpool=InlinePool(),
                                listen_endpoint=listen, peer_endpoint=dial)
    assert isinstance(plane.transport, RaftTransport) and plane.transport.parent is plane
    assert listened == [7002] and sorted(dialed) == [("127.0.0.1", 7001), ("h3", 7003)]
