"""The control plane in-process: Raft nodes on a Clock with memory storage, frames handed over directly."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from zope.interface.verify import verifyObject

from mqbroker import errors
from mqbroker.cluster.controlplane import ControlPlane
from mqbroker.cluster.metadata import MetadataImage, MetadataStateMachine
from mqbroker.cluster.metadata_records import AlterPartition, BrokerHeartbeat, CreateTopic, Record
from mqbroker.config import build_config
from mqbroker.interfaces import IClusterView, IGenericRecords
from mqbroker.raft.core import RaftCore, RaftSettings
from mqbroker.raft.forwarded_proposals import PeerFrame
from mqbroker.raft.memory_storage import MemoryRaftStorage
from mqbroker.raft.messages import Configuration
from mqbroker.raft.node import RaftNode
from tests.fakes import InlinePool, ThreadlessReactor, fired

SESSION_MS = 1_000


class MemoryRaftLog(MemoryRaftStorage):
    """Memory Raft storage that, like the file storage, is closed when its control plane stops."""

    closed = False

    def close(self) -> None:
        self.closed = True


class Quorum:
    """Control planes of brokers ``node_ids``, all voters, delivering frames to each other unless one is cut off."""

    def __init__(self, node_ids: tuple[int, ...]) -> None:
        self.reactor = ThreadlessReactor()
        self.pool = InlinePool()
        self.down: set[int] = set()
        self.planes: dict[int, ControlPlane] = {}
        self.told: dict[int, list[tuple[MetadataImage, Record | None]]] = {}
        quorum = ",".join(f"{node_id}@127.0.0.1:{9395 + node_id}" for node_id in node_ids)
        for node_id in node_ids:
            config = build_config({"node_id": node_id, "controller_quorum": quorum,
                                   "broker_session_timeout_ms": SESSION_MS, "broker_heartbeat_interval_ms": 100})
            storage = MemoryRaftLog(Configuration(voters=frozenset(node_ids)))
            machine = MetadataStateMachine()
            node = RaftNode(core=RaftCore(RaftSettings(node_id=node_id), storage, random.Random(node_id)),
                            storage=storage, state_machine=machine, send=self._sender(node_id), reactor=self.reactor,
                            threadpool=self.pool, tick_ms=50)
            voters = {n: ("127.0.0.1", 9395 + n) for n in node_ids}
            plane = ControlPlane(config=config, clock=self.reactor, voters=voters, machine=machine, node=node,
                                 storage=storage)
            self.told[node_id] = []
            plane.add_image_listener(lambda image, record, told=self.told[node_id]: told.append((image, record)))
            self.planes[node_id] = plane

    def _sender(self, from_id: int) -> Callable[[PeerFrame], bool]:
        def send(frame: PeerFrame) -> bool:
            if from_id in self.down or frame.to_id in self.down:
                return False
            self.planes[frame.to_id].node.receive(frame)
            return True

        return send

    def start(self) -> None:
        for plane in self.planes.values():
            plane.startService()

    def run(self, seconds: float) -> None:
        for _ in range(int(seconds * 1000 / 25)):
            self.reactor.advance(0.025)

    def leader(self) -> ControlPlane:
        [leader] = [plane for plane in self.planes.values() if plane.node.is_leader]
        return leader


def test_the_control_plane_is_a_cluster_view_and_keeps_the_generic_records() -> None:
    quorum = Quorum((1,))
    assert verifyObject(IClusterView, quorum.planes[1])
    assert verifyObject(IGenericRecords, quorum.planes[1])


def test_a_single_broker_registers_and_its_listeners_hear_once_it_caught_up() -> None:
    quorum = Quorum((1,))
    plane = quorum.planes[1]
    created = plane.create_topic("t", 2, {"retention.ms": "5"})  # admin writes wait until registered
    assert quorum.told[1] == [] and not created.called
    quorum.start()
    quorum.run(0.2)
    fired(created)
    assert plane.caught_up and plane.controller_id() == 1 and plane.image.live_brokers() == [1]
    assert [record for _, record in quorum.told[1]][:1] == [None]  # caught up: the whole image
    assert any(isinstance(record, CreateTopic) for _, record in quorum.told[1])
    assert plane.topic("t").configs == {"retention.ms": "5"}
    assert plane.stored_topic_configs() == {"t": {"retention.ms": "5"}}  # read back from the Raft log


def test_a_proposal_made_on_a_follower_is_committed_everywhere() -> None:
    quorum = Quorum((1, 2, 3))
    quorum.start()
    quorum.run(2.0)
    follower = next(plane for plane in quorum.planes.values() if not plane.node.is_leader)
    created = follower.create_topic("t", 3, {}, 3)
    quorum.run(0.5)
    fired(created)
    for plane in quorum.planes.values():
        assert [p.replicas for p in plane.image.topics["t"].partitions] == [p.replicas for p in
                                                                           follower.image.topics["t"].partitions]
        assert plane.controller_id() == quorum.leader().node_id


def test_producer_id_blocks_never_overlap() -> None:
    quorum = Quorum((1,))
    quorum.start()
    first, second = quorum.planes[1].allocate_producer_ids(1000), quorum.planes[1].allocate_producer_ids(1000)
    quorum.run(0.3)
    assert sorted([fired(first), fired(second)]) == [0, 1000]


def test_an_isr_change_from_a_stale_leader_epoch_is_refused() -> None:
    quorum = Quorum((1,))
    quorum.start()
    plane = quorum.planes[1]
    created = plane.create_topic("t", 1, {})
    quorum.run(0.3)
    fired(created)
    altered = plane.alter_partition(AlterPartition(topic="t", partition=0, leader_id=1, leader_epoch=7,
                                                   partition_epoch=0, isr=(1,)))
    quorum.run(0.1)
    with pytest.raises(errors.FencedLeaderEpochError):
        fired(altered)


def _three_voters_with_a_replicated_topic() -> tuple[Quorum, ControlPlane]:
    """Three voters with a leader elected and topic ``t`` (3 partitions on all three) created: (quorum, leader)."""
    quorum = Quorum((1, 2, 3))
    quorum.start()
    quorum.run(2.0)
    leader = quorum.leader()
    created = leader.create_topic("t", 3, {}, 3)
    quorum.run(0.5)
    fired(created)
    return quorum, leader


def test_the_leader_fences_a_broker_that_stops_heartbeating_and_moves_its_leaderships() -> None:
    quorum, leader = _three_voters_with_a_replicated_topic()
    gone = next(node_id for node_id in quorum.planes if node_id != leader.node_id)
    quorum.down.add(gone)
    quorum.run(3 * SESSION_MS / 1000)
    assert leader.image.brokers[gone].fenced
    assert all(p.leader_id != gone and gone not in p.isr for p in leader.image.topics["t"].partitions)


def test_a_controlled_shutdown_fences_the_broker_itself_and_stopping_closes_the_raft_log() -> None:
    quorum = Quorum((1,))
    quorum.start()
    quorum.run(0.2)
    plane = quorum.planes[1]
    shut = plane.controlled_shutdown()
    quorum.run(0.1)
    fired(shut)
    assert plane.image.brokers[1].fenced
    stopped = plane.stopService()
    quorum.run(0.1)
    fired(stopped)
    assert plane.node.storage.closed  # type: ignore[attr-defined]


def test_the_controller_writes_the_min_insync_replicas_cluster_default_once_and_keeps_an_operators_change() -> None:
    """As Kafka 4.1 at activation; deleted by an operator, it is not written again (nor by a new controller)."""
    quorum = Quorum((1, 2, 3))
    quorum.start()
    quorum.run(3)
    assert all(plane.image.broker_configs == {"": {"min.insync.replicas": "1"}} for plane in quorum.planes.values())
    follower = next(plane for plane in quorum.planes.values() if not plane.node.is_leader)
    altered = [follower.alter_broker_configs("", {"retention.ms": "100"}, ["min.insync.replicas"]),
               follower.alter_broker_configs("2", {"segment.bytes": "2000000"}, [])]
    quorum.run(0.5)
    for each in altered:
        fired(each)
    old_leader = quorum.leader()
    quorum.down.add(old_leader.node_id)
    quorum.run(5)
    assert quorum.leader() is not old_leader
    assert all(plane.image.broker_configs == {"": {"retention.ms": "100"}, "2": {"segment.bytes": "2000000"}}
               for plane in quorum.planes.values() if plane is not old_leader)


def test_listeners_hear_a_heartbeat_only_when_it_brings_a_fenced_broker_back() -> None:
    quorum, leader = _three_voters_with_a_replicated_topic()
    heard = quorum.told[leader.node_id]
    heard.clear()
    applied_before = leader.image.applied_index
    quorum.run(1.0)  # ten heartbeat intervals of three live brokers: the image does not change
    assert leader.image.applied_index > applied_before + 10
    assert not any(isinstance(record, BrokerHeartbeat) for _, record in heard)
    gone = next(node_id for node_id in quorum.planes if node_id != leader.node_id)
    quorum.down.add(gone)
    quorum.run(3 * SESSION_MS / 1000)
    assert leader.image.brokers[gone].fenced
    quorum.down.discard(gone)
    quorum.run(1.0)
    assert not leader.image.brokers[gone].fenced
    back = [record for _, record in heard if isinstance(record, BrokerHeartbeat)]
    assert [record.node_id for record in back] == [gone]  # the one that unfenced it, and none after
