"""A deterministic simulation of one replicated partition on power-loss disks: leader, followers, ISR, acks=all.

Three brokers hold the partition in a ``LogManager`` each, on their own disk of a
``PowerLossFileSystem``. They act as ``mqbroker.core`` and the replica fetcher do, without
Twisted: the leader appends and flushes and keeps a ``LeaderReplicas`` (high watermark from
durable ends, ISR changes); a follower fetches from its log end with its last leader epoch, the
leader answers with batches or with where their logs diverge (``diverging_epoch``), the
follower truncates (``truncation_offset``) or appends, and flushes before it fetches again (the
sync policy). A produce is acknowledged once the high watermark passes it with the ISR at
``min.insync.replicas`` or more. The controller (the Raft metadata, reliable here) keeps the
leader, its epoch and the ISR: a broker that loses power is fenced (out of the ISR, unless it is
the last member) and a new leader is the first live ISR member (clean elections only).

One seeded random source picks every step: produce, flush, a follower's fetch, ISR checks,
checkpoints, a power loss of any subset of the brokers, a power cut in the middle of a
broker's next calls, restarts. After every step every acknowledged batch must be in the
leader's log byte for byte, and below the high watermark every ISR member must hold the
leader's batches (what it holds of them); after healing (all brokers up, replication run until it
settles) every replica must hold exactly the leader's batches (no divergence) and every
acknowledged one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
from collections.abc import Callable

from mqbroker.records.header import read_header, stamp
from mqbroker.replication.decisions import NO_LEADER, LeaderReplicas, diverging_epoch, elect_leader, truncation_offset
from mqbroker.storage import fs
from mqbroker.storage.config import LogConfig
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager
from tests.powerloss import Disk, PowerCut, PowerLossFileSystem
from tests.unit.storage.logtools import make_batch, read_all

TOPIC, PARTITION = "events", 0
REPLICAS = (1, 2, 3)
MIN_INSYNC_REPLICAS = 2
REPLICA_LAG_TIME_MAX_MS = 400
FETCH_BYTES_MAX = 2048
CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=256)
#: Steps the healed cluster may take to settle before that counts as a liveness failure.
SETTLE_ROUNDS_MAX = 500


@dataclasses.dataclass
class SimulatedBroker:
    """One broker: its disk always, its logs and leader state only while it is up."""

    node_id: int
    data_dir: str
    disk: Disk
    manager: LogManager | None = None
    #: While it leads: the replicas' progress, and where its epoch started in its log.
    replicas: LeaderReplicas | None = None
    epoch_start_offset: int = 0
    #: Its last view of the leader's high watermark, as a follower.
    high_watermark: int = 0

    @property
    def log(self) -> PartitionLog:
        """The partition's log (the broker must be up)."""
        assert self.manager is not None, f"broker {self.node_id} is down"
        return self.manager.get(TOPIC, PARTITION)


class ReplicationSimulation:
    """Three brokers, a reliable controller, a producer with acks=all, and power losses."""

    def __init__(self, seed: int, root: str, file_system: PowerLossFileSystem) -> None:
        self.seed = seed
        self.chooser = random.Random(seed)
        self.now_ms = 0
        self.trace: list[str] = []
        self.brokers = {
            node_id: SimulatedBroker(node_id, os.path.join(root, f"broker-{node_id}", "data"),
                                     file_system.add_disk(os.path.join(root, f"broker-{node_id}")))
            for node_id in REPLICAS
        }
        self.leader_id = NO_LEADER
        self.leader_epoch = 0
        self.isr = set(REPLICAS)
        self.live: set[int] = set()
        #: base offset -> the batch as stored, for every acknowledged produce.
        self.acknowledged: dict[int, bytes] = {}
        #: The leader's produces waiting for the high watermark: (last offset, base offset, stored batch).
        self._waiting: list[tuple[int, int, bytes]] = []
        self._produced = 0
        for node_id in REPLICAS:
            self._on(node_id, lambda broker: self._start(broker))
        self._elect()

    # ---- running ----------------------------------------------------------------------------

    def step(self) -> None:
        """One seeded step of the schedule, then the safety check."""
        self.now_ms += self.chooser.randint(0, 30)
        up = sorted(self.live)
        followers = [node_id for node_id in up if node_id != self.leader_id]
        actions: list[tuple[str, Callable[[], None], int]] = [
            ("produce", self._produce, 25),
            ("leader flush", self._leader_flush, 15),
            ("isr check", self._isr_check, 6),
        ]
        for node_id in followers:
            actions += [(f"fetch {node_id}", lambda node_id=node_id: self._fetch(node_id), 12),
                        (f"flush {node_id}", lambda node_id=node_id: self._on(node_id, self._flush), 6)]
        for node_id in up:
            actions.append((f"checkpoint {node_id}", lambda node_id=node_id: self._on(node_id, self._checkpoint), 2))
            actions.append((f"cut power of {node_id} soon", lambda node_id=node_id: self._arm_cut(node_id), 1))
        down = [node_id for node_id in REPLICAS if node_id not in self.live]
        for node_id in down:
            actions.append((f"restart {node_id}", lambda node_id=node_id: self._restart(node_id), 6))
        if up:
            actions.append(("power loss", self._power_loss, 2))
        name, action, _ = self.chooser.choices(actions, [weight for _, _, weight in actions])[0]
        self.trace.append(f"{self.now_ms} {name}")
        action()
        self._elect()
        with contextlib.ExitStack() as checking:
            for broker in self.brokers.values():
                checking.enter_context(broker.disk.power_cuts_held())
            self.check_acknowledged_on_leader()
            self.check_committed_prefixes_agree()

    def heal(self) -> None:
        """Restart every broker, stop cutting power, and replicate until the replicas settle."""
        for broker in self.brokers.values():
            broker.disk.cut_power_after(None)
        for node_id in REPLICAS:
            if node_id not in self.live:
                self._restart(node_id)
        self._elect()
        for _ in range(SETTLE_ROUNDS_MAX):
            self.now_ms += 10
            for node_id in REPLICAS:
                if node_id != self.leader_id:
                    self._on(node_id, self._flush)
                    self._fetch(node_id)
            self._leader_flush()
            self._isr_check()
            if self._settled():
                return
        raise AssertionError(f"replication did not settle: ISR {sorted(self.isr)}, {self._positions()}")

    def _settled(self) -> bool:
        if self.leader_id == NO_LEADER or self.isr != set(REPLICAS):
            return False
        leader = self.brokers[self.leader_id]
        assert leader.replicas is not None
        end = leader.log.log_end_offset
        return leader.replicas.high_watermark == end and all(
            broker.log.log_end_offset == broker.log.durable_end_offset == end for broker in self.brokers.values()
        )

    def _positions(self) -> str:
        return ", ".join(
            f"{node_id}: end {broker.log.log_end_offset} durable {broker.log.durable_end_offset}"
            for node_id, broker in sorted(self.brokers.items()) if broker.manager is not None
        )

    # ---- checks -----------------------------------------------------------------------------

    def check_acknowledged_on_leader(self) -> None:
        """Every acknowledged batch is in the leader's log, byte for byte."""
        if self.leader_id == NO_LEADER:
            return
        stored = {read_header(batch).base_offset: batch for batch in read_all(self.brokers[self.leader_id].log)}
        for base_offset, batch in sorted(self.acknowledged.items()):
            assert stored.get(base_offset) == batch, (
                f"the acknowledged batch at {base_offset} is not in leader {self.leader_id}'s log"
            )

    def check_committed_prefixes_agree(self) -> None:
        """Below the high watermark every live ISR member holds the leader's batches (what it holds of them).

        A replica out of the ISR may still hold batches of an old epoch there, until it truncates.
        """
        if self.leader_id == NO_LEADER or self.brokers[self.leader_id].replicas is None:
            return
        leader = self.brokers[self.leader_id]
        assert leader.replicas is not None
        high_watermark = leader.replicas.high_watermark
        committed = [batch for batch in read_all(leader.log) if read_header(batch).last_offset < high_watermark]
        for node_id in sorted(self.live & self.isr - {self.leader_id}):
            held = [batch for batch in read_all(self.brokers[node_id].log) if read_header(batch).last_offset < high_watermark]
            assert held == committed[: len(held)], f"broker {node_id} diverges from leader {self.leader_id} below {high_watermark}"

    def check_replicas_agree(self) -> None:
        """After healing: every replica holds the leader's batches exactly, and every acknowledged one."""
        self.check_acknowledged_on_leader()
        leader_batches = read_all(self.brokers[self.leader_id].log)
        for node_id, broker in sorted(self.brokers.items()):
            batches = read_all(broker.log)
            assert batches == leader_batches, (
                f"broker {node_id}'s log diverges from leader {self.leader_id}'s at batch "
                f"{next((slot for slot, pair in enumerate(zip(batches, leader_batches)) if pair[0] != pair[1]), None)}"
                f" ({len(batches)} against {len(leader_batches)} batches)"
            )

    # ---- brokers ----------------------------------------------------------------------------

    def _on(self, node_id: int, action: Callable[[SimulatedBroker], None]) -> bool:
        """Run ``action`` on a live broker; a power cut in it takes the broker down. True if it ran through."""
        broker = self.brokers[node_id]
        try:
            action(broker)
        except PowerCut:
            self.trace.append(f"{self.now_ms} power cut in broker {node_id}")
            self._crash(node_id)
            return False
        return True

    def _start(self, broker: SimulatedBroker) -> None:
        manager = LogManager(broker.data_dir, CONFIG)
        manager.open_all(self.now_ms)
        if (TOPIC, PARTITION) not in manager.partitions():
            manager.create(TOPIC, PARTITION, now_ms=self.now_ms)
        broker.manager = manager
        broker.high_watermark = 0
        self.live.add(broker.node_id)

    def _restart(self, node_id: int) -> None:
        self._on(node_id, self._start)

    def _crash(self, node_id: int) -> None:
        """The broker loses power: its disk keeps what was fsynced; the controller fences it."""
        broker = self.brokers[node_id]
        broker.disk.crash(self.chooser, lose_everything=self.chooser.random() < 0.3)
        broker.manager = None
        broker.replicas = None
        self.live.discard(node_id)
        if node_id in self.isr and len(self.isr) > 1:
            self._commit_isr(self.isr - {node_id})
        if node_id == self.leader_id:
            self.leader_id = NO_LEADER
            self._waiting = []  # the producer is told its batches failed; it may send them again

    def _power_loss(self) -> None:
        """Any subset of the live brokers loses power at once."""
        up = sorted(self.live)
        for node_id in self.chooser.sample(up, self.chooser.randint(1, len(up))):
            self.trace.append(f"{self.now_ms} power loss of broker {node_id}")
            self._crash(node_id)

    def _arm_cut(self, node_id: int) -> None:
        self.brokers[node_id].disk.cut_power_after(self.chooser.randint(1, 40))

    def _flush(self, broker: SimulatedBroker) -> None:
        broker.log.flush()

    def _checkpoint(self, broker: SimulatedBroker) -> None:
        assert broker.manager is not None
        broker.manager.checkpoint()

    # ---- the controller ---------------------------------------------------------------------

    def _elect(self) -> None:
        """No leader: the first live ISR member leads in a new epoch (never an out-of-sync replica)."""
        while self.leader_id == NO_LEADER:
            leader_id, _ = elect_leader(REPLICAS, self.isr, self.live, unclean=False)
            if leader_id == NO_LEADER:
                return
            self.leader_epoch += 1
            self.leader_id = leader_id
            self.trace.append(f"{self.now_ms} broker {leader_id} leads epoch {self.leader_epoch}")
            self._on(leader_id, self._become_leader)

    def _become_leader(self, broker: SimulatedBroker) -> None:
        log = broker.log
        log.start_leader_epoch(self.leader_epoch)
        broker.epoch_start_offset = log.log_end_offset
        broker.replicas = LeaderReplicas(
            node_id=broker.node_id, replicas=REPLICAS, isr=self.isr,
            high_watermark=min(broker.high_watermark, log.log_end_offset), now_ms=self.now_ms,
        )
        self._progress()

    def _commit_isr(self, isr: set[int]) -> None:
        self.trace.append(f"{self.now_ms} ISR {sorted(isr)}")
        self.isr = set(isr)
        if self.leader_id != NO_LEADER:
            replicas = self.brokers[self.leader_id].replicas
            if replicas is not None:
                replicas.update_assignment(REPLICAS, self.isr, self.now_ms)
                self._progress()

    # ---- the leader -------------------------------------------------------------------------

    def _produce(self) -> None:
        if self.leader_id == NO_LEADER:
            return
        if len(self.isr) < MIN_INSYNC_REPLICAS:
            return  # acks=all is refused: NOT_ENOUGH_REPLICAS
        self._produced += 1
        values = [b"%d-%d-%d" % (self.seed, self._produced, slot) for slot in range(self.chooser.randint(1, 3))]
        client_batch = make_batch(values, timestamp_ms=self.now_ms)

        def append(broker: SimulatedBroker) -> None:
            result = broker.log.append(client_batch, self.now_ms, leader_epoch=self.leader_epoch)
            stored = bytearray(client_batch)
            stamp(stored, 0, result.base_offset, self.leader_epoch)
            self._waiting.append((result.last_offset, result.base_offset, bytes(stored)))

        self._on(self.leader_id, append)

    def _leader_flush(self) -> None:
        if self.leader_id != NO_LEADER and self._on(self.leader_id, self._flush):
            self._progress()

    def _progress(self) -> None:
        """The leader's durable end or a follower moved: advance the high watermark, acknowledge produces."""
        leader = self.brokers[self.leader_id]
        if leader.replicas is None:
            return
        leader.replicas.advance_high_watermark(leader.log.durable_end_offset)
        high_watermark = leader.replicas.high_watermark
        passed = [waiting for waiting in self._waiting if waiting[0] < high_watermark]
        self._waiting = [waiting for waiting in self._waiting if waiting[0] >= high_watermark]
        if len(leader.replicas.isr) >= MIN_INSYNC_REPLICAS:
            for _, base_offset, stored in passed:
                self.acknowledged[base_offset] = stored

    def _isr_check(self) -> None:
        if self.leader_id == NO_LEADER:
            return
        leader = self.brokers[self.leader_id]
        if leader.replicas is None:
            return
        isr = leader.replicas.isr_change(self.now_ms, REPLICA_LAG_TIME_MAX_MS, leader.epoch_start_offset)
        if isr is not None:
            self._commit_isr(set(isr))

    # ---- followers ---------------------------------------------------------------------------

    def _fetch(self, node_id: int) -> None:
        """One replica fetch of ``node_id`` from the leader, as ``core.broker`` answers and the fetcher applies it."""
        if self.leader_id == NO_LEADER or node_id == self.leader_id or node_id not in self.live:
            return
        follower, leader = self.brokers[node_id], self.brokers[self.leader_id]
        if leader.replicas is None or follower.log.durable_end_offset < follower.log.log_end_offset:
            return  # the sync policy: a follower fetches again only once what it appended is durable
        offset, last_epoch = follower.log.log_end_offset, follower.log.epochs.latest_epoch
        leader_log = leader.log
        end = leader_log.log_end_offset
        diverged = diverging_epoch(lambda epoch: leader_log.epochs.end_offset_for(epoch, end), last_epoch, offset)
        if diverged is None and offset > end:
            diverged = (leader_log.epochs.latest_epoch, end)  # a follower ahead of its leader: cut to its end
        if diverged is None:
            leader.replicas.follower_fetched(node_id, offset, end, self.now_ms)
            self._progress()
            records = leader_log.read(offset, FETCH_BYTES_MAX).records if offset < end else b""
            high_watermark = leader.replicas.high_watermark

            def apply(broker: SimulatedBroker) -> None:
                if records:
                    broker.log.append(records, self.now_ms, assign_offsets=False)
                broker.high_watermark = min(high_watermark, broker.log.log_end_offset)

            self._on(node_id, apply)
            return
        epoch, end_offset = diverged

        def truncate(broker: SimulatedBroker) -> None:
            own_end = broker.log.log_end_offset
            cut = truncation_offset(
                lambda epoch: broker.log.epochs.end_offset_for(epoch, own_end), own_end, epoch, end_offset
            )
            self.trace.append(f"{self.now_ms} broker {node_id} truncates to {cut}")
            broker.log.truncate_to(cut)

        self._on(node_id, truncate)


def run_schedule(seed: int, steps: int, root: str) -> ReplicationSimulation:
    """One seeded schedule, then healing and the final checks; an AssertionError names the seed."""
    file_system = PowerLossFileSystem()
    with fs.use(file_system):
        simulation = ReplicationSimulation(seed, root, file_system)
        try:
            for _ in range(steps):
                simulation.step()
            simulation.heal()
            simulation.check_replicas_agree()
        except AssertionError as error:
            trace = "\n".join(simulation.trace[-40:])
            raise AssertionError(
                f"replication power-loss simulation failed with seed {seed}; replay with "
                f"MQBROKER_REPLICATION_SEED={seed}\n{error}\n{trace}"
            ) from error
    return simulation
