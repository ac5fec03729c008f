"""The replica fetcher in-process: a follower broker fetching from a leader broker over in-memory native connections."""

from __future__ import annotations

from pathlib import Path

from twisted.internet.task import Clock

from mqbroker import limits
from mqbroker.cluster.metadata_records import CreateTopic, DeleteTopic
from mqbroker.model import ANONYMOUS, Acks
from mqbroker.records.errors import CorruptRecordError
from mqbroker.replication.fetcher import ReplicaFetcher, ReplicaSink
from tests.fakes import (
    BrokerRig,
    FakeClusterView,
    MemoryEndpoint,
    build_broker,
    fired,
    native_server,
)
from tests.unit.storage.logtools import make_batch, read_all

FETCH_WAIT_MS = 500


class Pair:
    """Broker 1 leads t-0; broker 2 follows it with a real ``ReplicaFetcher`` whose connections stay in memory."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = Clock()
        self.cluster = FakeClusterView(broker_ids=(1, 2))
        self.leader = build_broker(tmp_path / "leader", self.cluster, node_id=1, clock=self.clock)
        self.endpoint = MemoryEndpoint(native_server(self.leader.broker, self.leader.config, self.clock), self.clock)
        self.dialed: list[tuple[str, int]] = []
        self.follower: BrokerRig = build_broker(tmp_path / "follower", self.cluster, node_id=2, clock=self.clock,
                                                follower_factory=self._fetcher)
        self.cluster.apply(CreateTopic(name="t", assignment=(1,), replicas=((1, 2),)))

    def _fetcher(self, sink: ReplicaSink) -> ReplicaFetcher:
        self.sink = sink
        return ReplicaFetcher(node_id=2, reactor=self.clock, sink=sink, address_of=self._address_of,
                              fetch_wait_ms=FETCH_WAIT_MS, partition_bytes_max=1 << 20, response_bytes_max=1 << 20,
                              endpoint_for=self._endpoint_for)

    def _address_of(self, node_id: int) -> tuple[str, int] | None:
        broker = self.cluster.image.brokers.get(node_id)
        return None if broker is None else (broker.host, broker.port)

    def _endpoint_for(self, host: str, port: int) -> MemoryEndpoint:
        self.dialed.append((host, port))
        return self.endpoint

    def run(self, rounds: int = 20) -> None:
        """Move bytes, finish fsync rounds and let the fetch loop's timers run, a few times over."""
        for _ in range(rounds):
            self.endpoint.flush()
            self.leader.engine.finish_all()
            self.follower.engine.finish_all()
            self.clock.advance(0.05)


def test_the_follower_copies_the_leaders_batches_and_completes_an_acks_all_produce(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    pair.run()
    assert pair.dialed == [("127.0.0.1", 9394)]  # the leader's native listener, as registered
    produced = pair.leader.broker.produce(ANONYMOUS, "t", 0, make_batch([b"a", b"b"]), Acks.ALL, 10_000)
    pair.run()
    assert fired(produced).last_offset == 1  # the follower fetched past the batch: the high watermark moved
    assert read_all(pair.follower.log("t")) == read_all(pair.leader.log("t"))
    assert pair.follower.log("t").durable_end_offset == 2  # it fsynced before fetching again


def test_a_leader_that_stops_answering_is_dropped_and_dialed_again(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    pair.run(rounds=3)
    assert len(pair.endpoint.pumps) == 1
    pair.clock.advance(FETCH_WAIT_MS / 1000 + limits.peer_request_slack_s + 0.1)  # the long-poll's answer never delivered
    assert pair.endpoint.pumps[0].client.transport.disconnecting
    pair.run()
    assert len(pair.endpoint.pumps) == 2
    produced = pair.leader.broker.produce(ANONYMOUS, "t", 0, make_batch([b"a"]), Acks.ALL, 10_000)
    pair.run()
    assert fired(produced).last_offset == 0


def test_following_nothing_closes_the_connection_to_the_leader(tmp_path: Path) -> None:
    pair = Pair(tmp_path)
    pair.run(rounds=3)
    pair.follower.broker.stop()
    pair.run(rounds=3)
    assert pair.endpoint.pumps[0].client.transport.disconnecting


def test_a_partition_dropped_while_its_fsync_waits_does_not_stop_the_others_from_that_leader(tmp_path: Path) -> None:
    # Reassignment or deletion closes a followed log while the fetch loop waits for its fsync: that fsync fails
    # (the log is closed), and the loop must go on for the leader's other partitions, not end for good.
    pair = Pair(tmp_path)
    pair.cluster.apply(CreateTopic(name="u", assignment=(1,), replicas=((1, 2),)))
    pair.run()
    pair.leader.broker.produce(ANONYMOUS, "t", 0, make_batch([b"gone"]), Acks.LEADER, 10_000)
    for _ in range(20):  # until the follower appended t's batch and waits for its fsync
        pair.endpoint.flush()
        pair.leader.engine.finish_all()
        pair.clock.advance(0.05)
        if pair.follower.log("t").log_end_offset:
            break
    assert pair.follower.log("t").log_end_offset == 1 and pair.follower.engine.rounds
    pair.cluster.apply(DeleteTopic(name="t"))
    pair.run()
    produced = pair.leader.broker.produce(ANONYMOUS, "u", 0, make_batch([b"kept"]), Acks.ALL, 10_000)
    pair.run()
    assert fired(produced).last_offset == 0  # the follower still fetches u from broker 1
    assert read_all(pair.follower.log("u")) == read_all(pair.leader.log("u"))


def test_a_batch_one_partition_refuses_does_not_hold_back_the_others_in_the_same_answer(tmp_path: Path) -> None:
    # Damaged data for one partition (a forged or broken leader) is that partition's problem: the others in the
    # same fetch answer are appended and acknowledged.
    pair = Pair(tmp_path)
    pair.cluster.apply(CreateTopic(name="u", assignment=(1,), replicas=((1, 2),)))
    pair.run()
    append = pair.sink.follower_append

    def refuse_t(key: tuple[str, int], result: object) -> object:
        if key == ("t", 0):
            raise CorruptRecordError("damaged batch")
        return append(key, result)

    pair.sink.follower_append = refuse_t  # type: ignore[method-assign]
    pair.leader.broker.produce(ANONYMOUS, "t", 0, make_batch([b"refused"]), Acks.LEADER, 10_000)
    produced = pair.leader.broker.produce(ANONYMOUS, "u", 0, make_batch([b"kept"]), Acks.ALL, 10_000)
    pair.run()
    assert fired(produced).last_offset == 0
    assert pair.follower.log("t").log_end_offset == 0
