"""The replica manager in-process: leading and following as the image says, ISR proposals, truncation, reassignment.

The first tests drive one ``ReplicaManager`` directly; the last ones run two or three whole
brokers on one fake cluster, copying batches between them as the replica fetcher would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from twisted.internet.task import Clock

from mqbroker import errors
from mqbroker.cluster.metadata_records import (
    AlterPartition,
    CreateTopic,
    ElectLeader,
    ReassignPartition,
)
from mqbroker.config import BrokerConfig, build_config
from mqbroker.core.topic_config import log_config_for
from mqbroker.durability.flusher import Flusher
from mqbroker.errors import ErrorCode
from mqbroker.model import ANONYMOUS, Acks, FetchPosition, FetchRequest, FetchResult
from mqbroker.records.header import stamp
from mqbroker.replication.replica_manager import ReplicaManager
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager
from tests.fakes import (
    BrokerRig,
    FakeClusterView,
    RecordingFollower,
    StepSync,
    build_broker,
    fired,
)
from tests.unit.storage.logtools import make_batch, read_all

KEY = ("t", 0)
LAG_MS = 1_000


@dataclass
class WakeRecorder:
    """The fetch waiters' side: which logs were woken, and for whom."""

    woken: list[tuple[PartitionLog, bool]] = field(default_factory=list)

    def wake(self, partition_log: PartitionLog, followers_only: bool = False) -> None:
        self.woken.append((partition_log, followers_only))


@dataclass
class ManagerRig:
    replicas: ReplicaManager
    cluster: FakeClusterView
    clock: Clock
    engine: StepSync
    logs: LogManager
    readers: WakeRecorder
    follower: RecordingFollower
    config: BrokerConfig


def _manager(tmp_path: Path, node_id: int = 1, replicas: tuple[int, ...] = (1, 2, 3), leader: int = 1) -> ManagerRig:
    """A replica manager of broker ``node_id`` holding a replica of t-0, told of every image change."""
    cluster = FakeClusterView(broker_ids=(1, 2, 3))
    config = build_config({"node_id": node_id, "data_dir": str(tmp_path), "replica_lag_time_max_ms": LAG_MS})
    clock, engine, readers = Clock(), StepSync(), WakeRecorder()
    logs = LogManager(str(tmp_path), log_config_for({}, {}))
    logs.open_all(0)
    followers: list[RecordingFollower] = []
    manager = ReplicaManager(config=config, clock=clock, logs=logs, cluster=cluster, readers=readers,
                             flusher_factory=lambda on_durable: Flusher(engine, on_durable),
                             follower_factory=lambda sink: followers.append(RecordingFollower(sink)) or followers[-1])
    logs.create("t", 0)
    cluster.add_image_listener(lambda image, record: manager.partitions_changed(image))
    cluster.apply(CreateTopic(name="t", assignment=(leader,), replicas=(replicas,)))
    return ManagerRig(manager, cluster, clock, engine, logs, readers, followers[0], config)


def _batch(base_offset: int, leader_epoch: int, values: list[bytes]) -> bytes:
    """A batch as a leader stored it: base offset and leader epoch stamped."""
    batch = bytearray(make_batch(values))
    stamp(batch, 0, base_offset, leader_epoch)
    return bytes(batch)


def _elect(cluster: FakeClusterView, leader_id: int) -> None:
    cluster.apply(ElectLeader(topic="t", partition=0, leader_id=leader_id,
                              leader_epoch=cluster.partition("t").leader_epoch))


def _fetched(rig: ManagerRig, replica_id: int, offset: int) -> None:
    epoch = rig.cluster.partition("t").leader_epoch
    rig.replicas.follower_fetched(replica_id, FetchPosition(topic="t", partition=0, offset=offset, max_bytes=1,
                                                            current_leader_epoch=epoch, last_fetched_epoch=epoch),
                                  int(rig.clock.seconds() * 1000))


# -- one replica manager -------------------------------------------------------------------


def test_the_leader_in_the_image_leads_and_follows_nothing(tmp_path: Path) -> None:
    rig = _manager(tmp_path)
    partition_log, leader = rig.replicas.leader("t", 0)
    assert rig.replicas.leading(KEY) is leader and leader.leader_epoch == 0
    assert rig.follower.following == {} and rig.replicas.follower_position(KEY) is None
    assert partition_log.epochs.latest_epoch == 0  # the epoch starts at the log end


def test_a_replica_the_image_does_not_make_leader_follows_the_leader(tmp_path: Path) -> None:
    rig = _manager(tmp_path, node_id=2)
    assert rig.follower.following == {KEY: (1, 0)}
    assert rig.replicas.follower_position(KEY) == (0, -1)
    with pytest.raises(errors.NotLeaderError, match="led by broker 1"):
        rig.replicas.leader("t", 0)


def test_losing_the_leadership_turns_the_leader_into_a_follower_and_wakes_its_readers(tmp_path: Path) -> None:
    rig = _manager(tmp_path)
    partition_log = rig.logs.get("t", 0)
    rig.readers.woken.clear()
    _elect(rig.cluster, 2)
    assert rig.replicas.leading(KEY) is None and rig.follower.following == {KEY: (2, 1)}
    assert (partition_log, False) in rig.readers.woken  # consumers waiting on it are answered (NOT_LEADER)


def test_the_leader_lookup_is_answered_once_per_image_and_follows_every_change(tmp_path: Path) -> None:
    """Every produce and fetch asks ``leader`` several times: asked again with the image unchanged, the answer comes
    without reading the image's topics; a record applied, or a leadership ending, is asked afresh."""
    rig = _manager(tmp_path)
    found = rig.replicas.leader("t", 0)

    class CountingTopics(dict):  # type: ignore[type-arg]
        reads = 0

        def get(self, *args: object) -> object:
            CountingTopics.reads += 1
            return super().get(*args)

    rig.cluster.image.topics = CountingTopics(rig.cluster.image.topics)
    assert rig.replicas.leader("t", 0) == found and rig.replicas.partition_log("t", 0) is found[0]
    assert CountingTopics.reads == 0
    rig.cluster.apply(AlterPartition(topic="t", partition=0, leader_id=1, leader_epoch=0, partition_epoch=0,
                                     isr=(1, 2)))
    CountingTopics.reads = 0
    assert rig.replicas.leader("t", 0)[1] is found[1] and CountingTopics.reads == 1
    _elect(rig.cluster, 2)
    with pytest.raises(errors.NotLeaderError, match="led by broker 2"):
        rig.replicas.leader("t", 0)
    _elect(rig.cluster, 1)
    assert rig.replicas.leader("t", 0)[1] is rig.replicas.leading(KEY) is not found[1]
    rig.replicas.stop()  # the image unchanged, the leadership ended
    with pytest.raises(errors.NotLeaderError):
        rig.replicas.leader("t", 0)


def test_a_follower_that_becomes_leader_starts_from_the_high_watermark_it_was_told(tmp_path: Path) -> None:
    rig = _manager(tmp_path, node_id=2)
    appended = rig.replicas.follower_append(KEY, FetchResult(topic="t", partition=0, records=_batch(0, 0, [b"a", b"b"]),
                                                             high_watermark=1, log_start_offset=0))
    assert appended is rig.logs.get("t", 0) and appended.log_end_offset == 2
    _elect(rig.cluster, 2)
    assert rig.replicas.leading(KEY).high_watermark == 1 and rig.follower.following == {}
    assert rig.logs.get("t", 0).epochs.latest_epoch == 1


def test_a_follower_truncates_where_the_leader_says_the_logs_diverged(tmp_path: Path) -> None:
    rig = _manager(tmp_path, node_id=2)
    for batch in (_batch(0, 0, [b"a", b"b"]), _batch(2, 1, [b"c", b"d"])):
        rig.replicas.follower_append(KEY, FetchResult(topic="t", partition=0, records=batch, high_watermark=0))
    assert rig.replicas.follower_position(KEY) == (4, 1)
    # The new leader never saw epoch 1: its epoch 0 ends at offset 2.
    rig.replicas.follower_append(KEY, FetchResult(topic="t", partition=0, diverging_epoch=0, diverging_end_offset=2))
    assert rig.replicas.follower_position(KEY) == (2, 0)
    assert read_all(rig.logs.get("t", 0)) == [_batch(0, 0, [b"a", b"b"])]


def test_a_follower_below_the_leaders_log_start_starts_again_there(tmp_path: Path) -> None:
    rig = _manager(tmp_path, node_id=2)
    assert rig.replicas.follower_reset(KEY, 10)
    assert rig.replicas.follower_position(KEY) == (10, -1)
    assert not rig.replicas.follower_reset(KEY, 5)  # already past it


def test_lagging_followers_are_proposed_out_of_the_isr(tmp_path: Path) -> None:
    rig = _manager(tmp_path)
    partition_log, _ = rig.replicas.leader("t", 0)
    partition_log.append(make_batch([b"a"]), 0, leader_epoch=0)
    rig.clock.advance(LAG_MS / 1000 / 2)
    _fetched(rig, 2, 1)  # broker 2 keeps up, broker 3 never fetches
    rig.clock.advance(LAG_MS / 1000)
    rig.replicas.check_isr()
    state = rig.cluster.partition("t")
    assert rig.cluster.proposed[-1] == AlterPartition(topic="t", partition=0, leader_id=1, leader_epoch=0,
                                                      partition_epoch=0, isr=(1, 2))
    assert state.isr == [1, 2] and rig.replicas.leading(KEY).replicas.isr == {1, 2}


def test_a_caught_up_follower_is_proposed_back_into_the_isr(tmp_path: Path) -> None:
    rig = _manager(tmp_path)
    state = rig.cluster.partition("t")
    rig.cluster.apply(AlterPartition(topic="t", partition=0, leader_id=1, leader_epoch=0,
                                     partition_epoch=state.partition_epoch, isr=(1, 2)))
    proposed = len(rig.cluster.proposed)
    rig.replicas.check_isr()
    assert len(rig.cluster.proposed) == proposed  # broker 3 has not fetched since it fell out
    _fetched(rig, 3, 0)
    rig.replicas.check_isr()
    assert rig.cluster.partition("t").isr == [1, 2, 3]


def test_a_refused_isr_proposal_is_proposed_again_from_the_committed_isr(tmp_path: Path) -> None:
    rig = _manager(tmp_path)
    rig.clock.advance(2 * LAG_MS / 1000)
    rig.cluster.hold = True
    rig.replicas.check_isr()
    rig.replicas.check_isr()
    assert len(rig.cluster.held) == 1  # one proposal in flight at a time
    rig.cluster.hold = False
    # Meanwhile the controller changed the partition: the held proposal's partition epoch is stale.
    rig.cluster.apply(ReassignPartition(topic="t", partition=0, target_replicas=(1, 2, 3)))
    rig.cluster.commit_held()
    rig.replicas.check_isr()
    assert rig.cluster.partition("t").isr == [1]


def test_a_follower_waits_for_its_appends_to_be_durable_before_it_fetches_again(tmp_path: Path) -> None:
    rig = _manager(tmp_path, node_id=2)
    partition_log = rig.replicas.follower_append(KEY, FetchResult(topic="t", partition=0,
                                                                  records=_batch(0, 0, [b"a"]), high_watermark=0))
    durable = rig.replicas.wait_durable(partition_log)
    assert not durable.called
    rig.engine.finish_round()
    fired(durable)
    assert partition_log.durable_end_offset == 1


# -- whole brokers replicating to each other -----------------------------------------------------


def _replicate(follower: BrokerRig, leader: BrokerRig) -> None:
    """One replica fetch from ``follower`` to ``leader``, in-process: what ``ReplicaFetcher`` does over the wire."""
    sink = follower.follower.sink
    positions = []
    for (topic, partition), (leader_id, epoch) in sorted(follower.follower.following.items()):
        position = sink.follower_position((topic, partition))
        if leader_id == leader.config.node_id and position is not None:
            positions.append(FetchPosition(topic=topic, partition=partition, offset=position[0], max_bytes=1 << 20,
                                           current_leader_epoch=epoch, last_fetched_epoch=position[1]))
    if not positions:
        return
    results = fired(leader.broker.replica_fetch(ANONYMOUS, follower.config.node_id,
                                                FetchRequest(positions=tuple(positions))))
    for result in results:
        key = (result.topic, result.partition)
        if result.error is not None and result.error.code == ErrorCode.OFFSET_OUT_OF_RANGE:
            sink.follower_reset(key, result.log_start_offset)
        elif result.error is None:
            appended = sink.follower_append(key, result)
            if appended is not None:
                durable = sink.wait_durable(appended)
                follower.engine.finish_all()
                fired(durable)


def _brokers(tmp_path: Path, count: int, replicas: tuple[int, ...]) -> tuple[FakeClusterView, list[BrokerRig]]:
    cluster = FakeClusterView(broker_ids=range(1, count + 1))
    clock = Clock()
    rigs = [build_broker(tmp_path / f"broker-{n}", cluster, node_id=n, clock=clock,
                         settings={"replica_lag_time_max_ms": LAG_MS}) for n in range(1, count + 1)]
    cluster.apply(CreateTopic(name="t", assignment=(replicas[0],), replicas=(replicas,)))
    return cluster, rigs


def _produce(rig: BrokerRig, values: list[bytes]) -> None:
    fired(rig.broker.produce(ANONYMOUS, "t", 0, make_batch(values), Acks.NONE, 1_000))
    rig.engine.finish_all()


def test_after_a_failover_the_old_leader_truncates_what_the_new_leader_never_had(tmp_path: Path) -> None:
    cluster, (one, two) = _brokers(tmp_path, 2, (1, 2))
    _produce(one, [b"a", b"b"])
    _replicate(two, one)
    _produce(one, [b"lost"])  # acknowledged by nobody but broker 1 (acks=0)
    _elect(cluster, 2)
    _produce(two, [b"c"])
    _replicate(one, two)  # told where the logs diverge: it truncates
    assert one.log("t").log_end_offset == 2
    _replicate(one, two)
    assert read_all(one.log("t")) == read_all(two.log("t"))
    assert [one.log("t").epochs.end_offset_for(epoch, 3) for epoch in (0, 1)] == [(0, 2), (1, 3)]


def test_a_reassignment_moves_the_partition_to_its_target_replicas(tmp_path: Path) -> None:
    cluster, (one, two, three) = _brokers(tmp_path, 3, (1, 2))
    _produce(one, [b"a", b"b"])
    _replicate(two, one)
    fired(one.broker.reassign_partition(ANONYMOUS, "t", 0, [2, 3]))
    assert ("t", 0) in three.logs.partitions() and three.follower.following == {KEY: (1, 0)}
    _replicate(three, one)
    _replicate(three, one)  # the leader learns a follower's position from its next fetch
    one.broker.maintenance.check_isr()  # broker 3 caught up: it joins the ISR, which completes the reassignment
    state = cluster.partition("t")
    assert (state.replicas, state.target_replicas, state.leader_id) == ([2, 3], [], 2)
    assert one.logs.partitions() == [] and one.follower.following == {}
    assert three.follower.following == {KEY: (2, 1)}
    fired(two.broker.produce(ANONYMOUS, "t", 0, make_batch([b"c"]), Acks.NONE, 1_000))
    _replicate(three, two)
    assert read_all(three.log("t")) == read_all(two.log("t"))
