"""RaftNode on a task.Clock: three nodes wired directly, a synchronous "thread pool", memory storage."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from zope.interface import implementer
from zope.interface.verify import verifyObject

from mqbroker import errors
from mqbroker.raft.core import RaftCore
from mqbroker.raft.settings import RaftSettings
from mqbroker.raft.errors import ProposalDroppedError
from mqbroker.raft.forwarded_proposals import ForwardedProposal, ForwardedResult, PeerFrame
from mqbroker.raft.memory_storage import MemoryRaftStorage
from mqbroker.raft.messages import Configuration
from mqbroker.raft.node import RaftNode
from mqbroker.raft.state_machine import IRaftStateMachine
from tests.fakes import InlinePool, ThreadlessReactor

TICK_MS = 50


@implementer(IRaftStateMachine)
class ListMachine:
    """Applies entries by appending them; the result is the entry's index."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []

    def apply(self, index: int, data: bytes) -> bytes:
        self.applied.append(data)
        return str(index).encode()

    def snapshot(self) -> bytes:
        return b"\n".join(self.applied)

    def restore(self, data: bytes) -> None:
        self.applied = data.split(b"\n") if data else []


class Cluster:
    """Three nodes whose frames are delivered directly unless a node is cut off."""

    def __init__(self, snapshot_entries: int = 10_000) -> None:
        self.reactor = ThreadlessReactor()
        self.pool = InlinePool()
        self.down: set[int] = set()
        self.nodes: dict[int, RaftNode] = {}
        voters = Configuration(voters=frozenset({1, 2, 3}))
        for node_id in (1, 2, 3):
            storage = MemoryRaftStorage(voters)
            core = RaftCore(RaftSettings(node_id=node_id), storage, random.Random(node_id))
            self.nodes[node_id] = RaftNode(
                core=core, storage=storage, state_machine=ListMachine(), send=self._sender(node_id),
                reactor=self.reactor, threadpool=self.pool, tick_ms=TICK_MS, snapshot_entries=snapshot_entries,
            )
        for node in self.nodes.values():
            node.start()

    def _sender(self, from_id: int) -> Callable[[PeerFrame], bool]:
        def send(frame: PeerFrame) -> bool:
            if from_id in self.down or frame.to_id in self.down:
                return False
            self.nodes[frame.to_id].receive(frame)
            return True
        return send

    def run(self, seconds: float) -> None:
        for _ in range(int(seconds * 1000 / TICK_MS) * 2):
            self.reactor.advance(TICK_MS / 2000)

    def leader(self) -> RaftNode:
        leaders = [node for node_id, node in self.nodes.items() if node.is_leader and node_id not in self.down]
        assert len(leaders) == 1, leaders
        return leaders[0]


def test_node_implements_the_state_machine_seam() -> None:
    assert verifyObject(IRaftStateMachine, ListMachine())


def test_a_leader_is_elected_and_a_proposal_is_applied_everywhere() -> None:
    cluster = Cluster()
    cluster.run(2)
    results: list[bytes] = []
    cluster.leader().propose(b"hello").addCallback(results.append)
    cluster.run(0.2)
    assert results and int(results[0]) > 0
    assert all(node.state_machine.applied == [b"hello"] for node in cluster.nodes.values())


def test_a_proposal_on_a_follower_is_forwarded_to_the_leader() -> None:
    cluster = Cluster()
    cluster.run(2)
    follower = next(node for node in cluster.nodes.values() if not node.is_leader)
    results: list[bytes] = []
    follower.propose(b"via follower").addCallback(results.append)
    cluster.run(0.2)
    assert len(results) == 1
    assert cluster.leader().state_machine.applied == [b"via follower"]


@pytest.mark.parametrize("claimed", ["User:admin", "another broker", ""])
def test_a_forwarded_proposal_for_anyone_but_the_forwarding_broker_is_refused(claimed: str) -> None:
    cluster = Cluster()
    cluster.run(2)
    leader = cluster.leader()
    follower_id, other_id = [node_id for node_id, node in cluster.nodes.items() if not node.is_leader]
    principal = f"Broker:{other_id}" if claimed == "another broker" else claimed
    answers: list[ForwardedResult] = []
    follower = cluster.nodes[follower_id]
    follower.receive = lambda frame: answers.append(frame) if isinstance(frame, ForwardedResult) else None  # type: ignore[method-assign]
    leader.receive(ForwardedProposal(from_id=follower_id, to_id=leader.core.node_id, request_id=1,
                                     principal=principal, data=b"forged"))
    cluster.run(0.2)
    assert [answer.error_code for answer in answers] == [errors.ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert leader.state_machine.applied == []


def test_proposals_made_during_one_write_share_the_next_write() -> None:
    cluster = Cluster()
    cluster.run(2)
    leader = cluster.leader()
    for number in range(100):
        leader.propose(b"%d" % number)
    writes_before = cluster.pool.calls
    cluster.run(0.2)
    assert len(leader.state_machine.applied) == 100
    assert cluster.pool.calls - writes_before < 20  # one write per batch, not one per proposal


def test_a_new_leader_is_elected_when_the_leader_is_cut_off() -> None:
    cluster = Cluster()
    cluster.run(2)
    old = cluster.leader()
    cluster.down.add(old.core.node_id)
    cluster.run(3)
    new = cluster.leader()
    assert new is not old
    results: list[bytes] = []
    new.propose(b"after failover").addCallback(results.append)
    cluster.run(0.2)
    assert results


def test_a_proposal_without_a_quorum_times_out() -> None:
    cluster = Cluster()
    cluster.run(2)
    leader = cluster.leader()
    cluster.down.update(node_id for node_id in cluster.nodes if node_id != leader.core.node_id)
    failures: list[Any] = []
    leader.propose(b"lonely").addErrback(failures.append)
    cluster.run(6)
    assert failures and isinstance(failures[0].value, (errors.RequestTimedOutError, ProposalDroppedError))


def test_snapshots_bound_the_log_and_restore_the_state() -> None:
    cluster = Cluster(snapshot_entries=10)
    cluster.run(2)
    leader = cluster.leader()
    for number in range(35):
        leader.propose(b"%d" % number)
        cluster.run(0.05)
    cluster.run(0.5)
    assert leader.storage.first_index() > 10
    restored = ListMachine()
    restored.restore(leader.storage.snapshot().data)
    assert restored.applied == leader.state_machine.applied[: len(restored.applied)]


def test_stop_fails_waiting_proposals() -> None:
    cluster = Cluster()
    follower = cluster.nodes[1]  # no leader yet: the proposal waits for one
    failures: list[Any] = []
    follower.propose(b"early").addErrback(failures.append)
    stopped: list[None] = []
    follower.stop().addCallback(stopped.append)
    assert stopped and isinstance(failures[0].value, errors.BrokerShuttingDownError)


@pytest.mark.parametrize("node_id", [1, 2, 3])
def test_every_node_reports_the_same_leader(node_id: int) -> None:
    cluster = Cluster()
    cluster.run(2)
    assert cluster.nodes[node_id].leader_id == cluster.leader().core.node_id


class HeldPool:
    """A "thread pool" whose work runs only when the test releases it (a write still in flight)."""

    def __init__(self) -> None:
        self.held: list[Callable[[], None]] = []

    def callInThreadWithCallback(
        self, on_result: Callable[..., None], function: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        self.held.append(lambda: on_result(True, function(*args, **kwargs)))

    def release(self) -> None:
        held, self.held = self.held, []
        for work in held:
            work()


def test_no_write_starts_after_stop_even_if_frames_arrive_while_one_is_in_flight() -> None:
    cluster = Cluster()
    cluster.run(2)
    follower = next(node for node in cluster.nodes.values() if not node.is_leader)
    held = HeldPool()
    follower._threadpool = held  # from now on the follower's writes wait for the test
    cluster.leader().propose(b"in flight")
    cluster.run(0.2)  # heartbeats keep arriving while the append is held
    assert held.held, "the follower's append should be in flight"
    stopped: list[None] = []
    follower.stop().addCallback(stopped.append)
    cluster.leader().propose(b"after the stop")
    held.release()
    cluster.run(0.5)  # heartbeats and the new entry reach the stopped follower
    assert stopped and not held.held, "a stopped node started another write (its storage may be closed)"
