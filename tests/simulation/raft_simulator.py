"""A deterministic simulator: several RaftCores over a faulty network, checked after every step.

One seed fixes everything: the schedule of ticks, deliveries, proposals, crashes, partitions,
compactions, reads and membership changes, the network's loss, duplication and reordering,
and each node's election jitter. A crash throws the ``RaftCore`` away; the restart rebuilds
it from its storage (a ``MemoryRaftStorage``, or a ``FileRaftStorage`` reopened from its
directory), which holds exactly what the ``Ready`` values told the node to persist (a crash may also fall between persisting a ``Ready`` and sending its
messages). After every step the checker asserts election safety, log matching, leader
completeness, state-machine safety and read linearizability; ``check_liveness`` then heals
everything and demands a leader that commits a new proposal on every member.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable

from mqbroker.raft.core import RaftCore, Ready
from mqbroker.raft.settings import RaftSettings
from mqbroker.raft.errors import ConfigurationChangeRefusedError, ProposalDroppedError
from mqbroker.raft.log import RaftLog
from mqbroker.raft.log import IRaftStorage
from mqbroker.raft.memory_storage import MemoryRaftStorage
from mqbroker.raft.messages import (
    Configuration,
    ConfigurationChange,
    ConfigurationChangeKind,
    Entry,
    Message,
    Role,
)


@dataclasses.dataclass
class SimulatedNode:
    """A node: durable storage always, a core and an applied state only while it is up."""

    settings: RaftSettings
    storage: IRaftStorage
    core: RaftCore | None = None
    applied_index: int = 0
    applied_digest: str = ""
    starts: int = 0


@dataclasses.dataclass(frozen=True)
class Faults:
    """Probabilities of the network and node faults of one schedule."""

    loss: float
    duplication: float
    crash: float
    partition: float


#: Opens a node's storage: (node id, bootstrap configuration, the storage before a crash or None).
StorageOpener = Callable[[int, Configuration, "IRaftStorage | None"], IRaftStorage]


def memory_storage(node_id: int, configuration: Configuration, previous: IRaftStorage | None) -> IRaftStorage:
    """Storage that survives a crash as the very same object."""
    return previous if previous is not None else MemoryRaftStorage(configuration)


class Simulation:
    """One seeded schedule over ``node_count`` nodes (the first three are the initial voters)."""

    def __init__(
        self,
        seed: int,
        *,
        node_count: int = 5,
        membership_changes: bool = True,
        open_storage: StorageOpener = memory_storage,
    ) -> None:
        self.seed = seed
        self.open_storage = open_storage
        self.random = random.Random(seed)
        pre_vote = self.random.random() < 0.8
        check_quorum = self.random.random() < 0.8
        # Removed nodes that never learn of their removal disrupt elections unless both are on.
        self.membership_changes = membership_changes and pre_vote and check_quorum
        voters = frozenset(range(1, 4))
        self.nodes: dict[int, SimulatedNode] = {}
        for node_id in range(1, node_count + 1):
            settings = RaftSettings(
                node_id=node_id,
                election_ticks=5,
                heartbeat_ticks=1,
                pre_vote=pre_vote,
                check_quorum=check_quorum,
                append_entries_max=4,
                inflight_messages_max=4,
                snapshot_retry_heartbeats=6,
            )
            configuration = Configuration(voters=voters) if node_id in voters else Configuration()
            node = SimulatedNode(settings=settings, storage=open_storage(node_id, configuration, None))
            self.nodes[node_id] = node
            self._start(node)
        self.faults = Faults(
            loss=self.random.choice([0.0, 0.05, 0.2]),
            duplication=self.random.choice([0.0, 0.05]),
            crash=self.random.choice([0.0, 0.02, 0.04]),
            partition=self.random.choice([0.0, 0.02, 0.03]),
        )
        self.network: list[Message] = []
        self.groups: list[set[int]] = []
        self.leaders_by_term: dict[int, int] = {}
        #: index -> (term, data) of every entry known committed.
        self.committed: dict[int, tuple[int, bytes]] = {}
        #: index -> digest of the applied state after that index.
        self.digests: dict[int, str] = {0: ""}
        #: read context -> highest commit index known when the read was asked.
        self.reads: dict[bytes, int] = {}
        self.proposals = 0
        self.trace: list[str] = []

    # ---- node life ---------------------------------------------------------------------------

    def _start(self, node: SimulatedNode) -> None:
        node.starts += 1
        rng = random.Random(f"{self.seed}-{node.settings.node_id}-{node.starts}")
        node.core = RaftCore(node.settings, node.storage, rng)
        snapshot = node.storage.snapshot()
        node.applied_index = snapshot.metadata.index
        node.applied_digest = snapshot.data.decode()

    def crash(self, node_id: int) -> None:
        """Lose the core and everything it had not persisted."""
        self.nodes[node_id].core = None
        self.trace.append(f"crash {node_id}")

    def restart(self, node_id: int) -> None:
        """Rebuild the core from storage (reopened, for storage on files)."""
        node = self.nodes[node_id]
        node.storage = self.open_storage(node_id, Configuration(), node.storage)
        self._start(node)
        self.trace.append(f"restart {node_id}")

    # ---- the network -------------------------------------------------------------------------

    def _connected(self, first: int, second: int) -> bool:
        return not any((first in group) != (second in group) for group in self.groups)

    def _send(self, messages: tuple[Message, ...], *, reliable: bool) -> None:
        for message in messages:
            if not reliable and self.random.random() < self.faults.loss:
                continue
            self.network.append(message)
            if not reliable and self.random.random() < self.faults.duplication:
                self.network.append(message)

    def deliver(self, position: int) -> None:
        """Deliver one in-flight message (any of them: the network reorders)."""
        message = self.network.pop(position)
        target = self.nodes[message.to_id].core
        if target is None or not self._connected(message.from_id, message.to_id):
            return
        target.step(message)

    # ---- readiness ---------------------------------------------------------------------------

    def process_ready(self, *, reliable: bool = False) -> None:
        """Let every live node persist, send, apply and advance; check the invariants."""
        for node_id, node in self.nodes.items():
            core = node.core
            if core is None or not core.has_ready():
                continue
            ready = core.ready()
            node.storage.save(ready.hard_state, ready.entries, ready.snapshot)
            if not reliable and self.random.random() < self.faults.crash / 4:
                self.crash(node_id)  # persisted, but died before sending or applying
                continue
            self._send(ready.messages, reliable=reliable)
            self._apply(node, ready)
            core.advance(ready)
            self._check_node(node_id, core, ready)
        self._check_cluster()

    def _apply(self, node: SimulatedNode, ready: Ready) -> None:
        if ready.snapshot is not None:
            metadata = ready.snapshot.metadata
            assert ready.snapshot.data.decode() == self.digests[metadata.index], "snapshot of a diverged state"
            node.applied_index = metadata.index
            node.applied_digest = ready.snapshot.data.decode()
        for entry in ready.committed_entries:
            self._apply_entry(node, entry)
        for read_state in ready.read_states:
            asked_at = self.reads.pop(read_state.context)
            assert read_state.index >= asked_at, f"read index {read_state.index} misses commit {asked_at}"

    def _apply_entry(self, node: SimulatedNode, entry: Entry) -> None:
        assert entry.index == node.applied_index + 1, f"node {node.settings.node_id} applies {entry.index} out of order"
        known = self.committed.setdefault(entry.index, (entry.term, entry.data))
        assert known == (entry.term, entry.data), f"state machine safety: two entries applied at {entry.index}"
        digest = hashlib.sha1(f"{node.applied_digest}|{entry.term}|{entry.data!r}".encode()).hexdigest()[:16]
        assert self.digests.setdefault(entry.index, digest) == digest
        node.applied_index = entry.index
        node.applied_digest = digest

    # ---- invariants --------------------------------------------------------------------------

    def _check_node(self, node_id: int, core: RaftCore, ready: Ready) -> None:
        if core.role is Role.LEADER:
            leader = self.leaders_by_term.setdefault(core.term, node_id)
            assert leader == node_id, f"election safety: {leader} and {node_id} both lead term {core.term}"
            if ready.soft_state is not None:
                self._check_leader_completeness(node_id, core)
        self._record_committed(core)

    def _record_committed(self, core: RaftCore) -> None:
        log = core.log
        low = max(log.first_index(), max(self.committed, default=0) + 1)
        for entry in log.entries(low, log.committed + 1) if low <= log.committed else []:
            self.committed[entry.index] = (entry.term, entry.data)
        for index in range(max(log.first_index(), log.committed - 20), log.committed + 1):
            if index in self.committed:
                assert self.committed[index][0] == log.term(index), f"committed entry {index} differs"

    def _check_leader_completeness(self, node_id: int, core: RaftCore) -> None:
        for index, (term, data) in self.committed.items():
            if index >= core.log.first_index():
                assert core.log.term(index) == term, f"leader {node_id} of term {core.term} lacks committed {index}"
                assert core.log.entries(index, index + 1)[0].data == data

    def _logs(self) -> dict[int, RaftLog]:
        return {
            node_id: node.core.log if node.core is not None else RaftLog(node.storage)
            for node_id, node in self.nodes.items()
        }

    def _check_cluster(self) -> None:
        """Log matching: two logs with an entry of the same index and term agree up to it."""
        logs = list(self._logs().items())
        for position, (first_id, first) in enumerate(logs):
            for second_id, second in logs[position + 1 :]:
                low = max(first.first_index(), second.first_index())
                for index in range(min(first.last_index(), second.last_index()), low - 1, -1):
                    if first.term(index) == second.term(index):
                        assert first.entries(low, index + 1) == second.entries(low, index + 1), (
                            f"log matching: nodes {first_id} and {second_id} agree at {index} but differ before"
                        )
                        break

    # ---- the schedule ------------------------------------------------------------------------

    def _live(self) -> list[int]:
        return [node_id for node_id, node in self.nodes.items() if node.core is not None]

    def _leader(self) -> RaftCore | None:
        leaders = [node.core for node in self.nodes.values() if node.core is not None and node.core.role is Role.LEADER]
        return max(leaders, key=lambda core: core.term, default=None)

    def step(self) -> None:
        """One random event, then readiness and checks."""
        choice = self.random.random()
        live = self._live()
        if choice < 0.45 and self.network:
            self.deliver(self.random.randrange(len(self.network)))
        elif choice < 0.75 and live:
            self.nodes[self.random.choice(live)].core.tick()  # type: ignore[union-attr]
        elif choice < 0.85:
            self._propose()
        elif choice < 0.87:
            self._read()
        elif choice < 0.89:
            self._compact()
        elif choice < 0.90 and self.membership_changes:
            self._change_membership()
        elif choice < 0.90 + self.faults.crash and live:
            self.crash(self.random.choice(live))
        elif choice < 0.95:
            self._restart_one()
        elif choice < 0.95 + self.faults.partition:
            self._partition()
        elif choice < 0.98:
            self.groups = []
        self.process_ready()

    def _propose(self) -> None:
        leader = self._leader()
        if leader is not None:
            self.proposals += 1
            try:
                leader.propose(f"p{self.proposals}".encode())
            except ProposalDroppedError:
                pass  # a leader on its way out; the client would retry elsewhere

    def _read(self) -> None:
        leader = self._leader()
        if leader is None:
            return
        context = f"r{len(self.reads)}-{self.random.random()}".encode()
        self.reads[context] = max((index for index in self.committed), default=0)
        try:
            leader.read_index(context)
        except ProposalDroppedError:
            del self.reads[context]

    def _compact(self) -> None:
        live = self._live()
        if not live:
            return
        node = self.nodes[self.random.choice(live)]
        core = node.core
        assert core is not None
        if node.applied_index >= core.log.first_index() and core.log.applied == node.applied_index:
            node.storage.compact(core.create_snapshot(node.applied_index, node.applied_digest.encode()))

    def _change_membership(self) -> None:
        leader = self._leader()
        if leader is None:
            return
        node_id = self.random.choice(list(self.nodes))
        kind = self.random.choice(list(ConfigurationChangeKind))
        try:
            leader.propose_configuration_change(ConfigurationChange(kind=kind, node_id=node_id))
            self.trace.append(f"membership {kind.value} {node_id}")
        except (ProposalDroppedError, ConfigurationChangeRefusedError):
            pass

    def _restart_one(self) -> None:
        down = [node_id for node_id, node in self.nodes.items() if node.core is None]
        if down:
            self.restart(self.random.choice(down))

    def _partition(self) -> None:
        node_ids = list(self.nodes)
        self.random.shuffle(node_ids)
        cut = self.random.randrange(1, len(node_ids))
        self.groups = [set(node_ids[:cut]), set(node_ids[cut:])]
        self.trace.append(f"partition {self.groups}")

    # ---- liveness ----------------------------------------------------------------------------

    def check_liveness(self, rounds_max: int = 400) -> None:
        """Heal everything; a leader must emerge and commit a new proposal on every member."""
        self.groups = []
        for node_id, node in self.nodes.items():
            if node.core is None:
                self.restart(node_id)
        self.network = []
        proposed_in_term = None
        for _ in range(rounds_max):
            for node in self.nodes.values():
                assert node.core is not None
                node.core.tick()
            self.process_ready(reliable=True)
            while self.network:
                self.deliver(0)
                self.process_ready(reliable=True)
            leader = self._leader()
            if leader is None:
                continue
            if proposed_in_term != leader.term:
                # A proposal to an earlier leader may have been lost with its term: propose again.
                try:
                    leader.propose(b"final")
                    proposed_in_term = leader.term
                except ProposalDroppedError:
                    pass
                continue
            final = [index for index, (_, data) in self.committed.items() if data == b"final"]
            members = leader.configuration.members
            if final and all(self.nodes[node_id].applied_index >= final[0] for node_id in members):
                return
        raise AssertionError(f"no progress after healing: {[self.nodes[n].core for n in self.nodes]}")


def run_schedule(
    seed: int, steps: int, *, node_count: int = 5, open_storage: StorageOpener = memory_storage
) -> Simulation:
    """Run one seeded schedule and its liveness check; raise AssertionError naming the seed on failure."""
    simulation = Simulation(seed, node_count=node_count, open_storage=open_storage)
    try:
        for _ in range(steps):
            simulation.step()
        simulation.check_liveness()
    except AssertionError as error:
        trace = "\n".join(simulation.trace[-20:])
        raise AssertionError(
            f"Raft simulation failed with seed {seed}; replay with MQBROKER_RAFT_SEED={seed}\n{error}\n{trace}"
        ) from error
    return simulation
