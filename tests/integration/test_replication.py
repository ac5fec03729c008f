"""Replication on a real three-broker cluster: RF 3, acks=all, ISR shrink and rejoin, leader failover."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from mqbroker.client import Admin, Consumer, Producer
from mqbroker.client.connection import BlockingConnection
from mqbroker.errors import FencedLeaderEpochError, InvalidReplicationFactorError, NotLeaderError
from mqbroker.groups.model import TopicPartition
from mqbroker.groups.service import OFFSETS_TOPIC, offsets_partition
from mqbroker.protocols.native import messages as m
from mqbroker.records.builder import encode_batch
from mqbroker.records.record import Record
from tests.integration.brokerprocess import BrokerProcess
from tests.integration.clusterprocess import controller_leader, retrying, start_cluster, wait_for
from tests.integration.replicas import assert_replica_matches

LAG_MS = 1500


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[BrokerProcess]]:
    brokers = start_cluster(tmp_path_factory.mktemp("replication"),
                            extra_args=["--set", f"replica_lag_time_max_ms={LAG_MS}",
                                        "--set", "group_initial_rebalance_delay_ms=0"])
    yield brokers
    for broker in brokers:
        if broker.process is not None and broker.process.poll() is None:
            os.kill(broker.process.pid, signal.SIGCONT)
            broker.stop()


def _partition(bootstrap: str, topic: str, number: int = 0):  # type: ignore[no-untyped-def]
    with Admin(bootstrap) as admin:
        [described] = [t for t in admin.metadata([topic]).topics if t.name == topic]
        return next(p for p in described.partitions if p.partition_index == number)


def _read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([(topic, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            values += [message.value for message in consumer.poll(timeout=0.5)]
        return values


def _live(cluster: list[BrokerProcess]) -> BrokerProcess:
    return next(b for b in cluster if b.process is not None and b.process.poll() is None)


def test_replicated_topic_has_three_in_sync_replicas_and_acks_all_works(cluster: list[BrokerProcess]) -> None:
    with Admin(cluster[0].bootstrap) as admin:
        retrying(lambda: admin.create_topics(["replicated"], partitions=3, replication_factor=3,
                                             configs={"min.insync.replicas": "2"}))
    wait_for(lambda: sorted(_partition(cluster[0].bootstrap, "replicated").isr_nodes) == [1, 2, 3])
    with Producer(cluster[0].bootstrap, acks="all") as producer:
        futures = [producer.send("replicated", value=b"v%d" % n, partition=0) for n in range(200)]
        producer.flush()
        assert [f.result(20).offset for f in futures] == list(range(200))
    assert _read_all(cluster[1].bootstrap, "replicated", 200) == [b"v%d" % n for n in range(200)]


def test_follower_down_leaves_the_isr_then_catches_up_and_rejoins(cluster: list[BrokerProcess]) -> None:
    state = _partition(cluster[0].bootstrap, "replicated")
    follower_id = next(r for r in state.replica_nodes if r != state.leader_id)
    follower = cluster[follower_id - 1]
    follower.kill()
    wait_for(lambda: follower_id not in _partition(_live(cluster).bootstrap, "replicated").isr_nodes)
    with Producer(_live(cluster).bootstrap, acks="all") as producer:
        futures = [producer.send("replicated", value=b"w%d" % n, partition=0) for n in range(100)]
        producer.flush()
        assert all(f.result(30).offset >= 200 for f in futures)
    follower.start(timeout_s=60)
    wait_for(lambda: follower_id in _partition(cluster[0].bootstrap, "replicated").isr_nodes, timeout_s=60)
    assert assert_replica_matches(follower.data_dir, cluster[0].bootstrap, "replicated", 0) == 300


def test_leader_killed_fails_over_to_an_in_sync_replica_without_losing_acknowledged_records(
    cluster: list[BrokerProcess],
) -> None:
    before = _partition(cluster[0].bootstrap, "replicated")
    leader = cluster[before.leader_id - 1]
    leader.kill()
    survivor = next(b for b in cluster if b is not leader)
    wait_for(lambda: _partition(survivor.bootstrap, "replicated").leader_id not in (-1, before.leader_id))
    after = _partition(survivor.bootstrap, "replicated")
    assert after.leader_epoch > before.leader_epoch
    with Producer(survivor.bootstrap, acks="all") as producer:
        assert producer.send("replicated", value=b"after", partition=0).result(30).offset == 300
    values = _read_all(survivor.bootstrap, "replicated", 301)
    assert values == [b"v%d" % n for n in range(200)] + [b"w%d" % n for n in range(100)] + [b"after"]
    leader.start(timeout_s=60)
    wait_for(lambda: before.leader_id in _partition(survivor.bootstrap, "replicated").isr_nodes, timeout_s=60)
    assert assert_replica_matches(leader.data_dir, survivor.bootstrap, "replicated", 0) == 301  # the old leader caught up


def test_reassignment_under_load_loses_nothing_and_ends_in_sync(cluster: list[BrokerProcess]) -> None:
    with Admin(cluster[0].bootstrap) as admin:
        retrying(lambda: admin.create_topics(["moving"], partitions=1, replication_factor=2))
    before = _partition(cluster[0].bootstrap, "moving")
    wait_for(lambda: len(_partition(cluster[0].bootstrap, "moving").isr_nodes) == 2)
    newcomer = next(n for n in (1, 2, 3) if n not in before.replica_nodes)
    target = [newcomer, before.replica_nodes[0]]  # leadership moves to the new broker, the other replica leaves
    acknowledged: list[bytes] = []
    read: list[bytes] = []
    stop = threading.Event()
    bootstraps = [broker.bootstrap for broker in cluster]

    def produce() -> None:
        with Producer(bootstraps, acks="all", linger_ms=2) as producer:
            n = 0
            while not stop.is_set():
                futures = [(b"m%d" % (n + k), producer.send("moving", value=b"m%d" % (n + k), partition=0))
                           for k in range(20)]
                n += 20
                producer.flush()
                acknowledged.extend(value for value, future in futures if future.result(30).offset >= 0)

    def consume() -> None:
        with Consumer(bootstraps, auto_offset_reset="earliest") as consumer:
            consumer.assign([("moving", 0)])
            while not produced.is_set() or len(read) < len(acknowledged):
                read.extend(message.value for message in consumer.poll(timeout=0.2))
                if time.monotonic() > give_up[0]:
                    return

    give_up = [float("inf")]
    produced = threading.Event()
    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        with Admin(cluster[0].bootstrap) as admin:
            admin.reassign_partition("moving", 0, target)
            assert ("moving", 0) in admin.list_reassignments(["moving"]) or \
                list(_partition(cluster[0].bootstrap, "moving").replica_nodes) == target
            wait_for(lambda: not admin.list_reassignments(["moving"]), timeout_s=60)
        time.sleep(1.0)
    finally:
        stop.set()
        threads[0].join(60)
        produced.set()
        give_up[0] = time.monotonic() + 20
        threads[1].join(60)
    after = _partition(cluster[0].bootstrap, "moving")
    assert list(after.replica_nodes) == target and sorted(after.isr_nodes) == sorted(target)
    assert after.leader_id == newcomer
    assert len(acknowledged) > 100
    assert read == acknowledged  # every acknowledged record, once, in order, read while the replicas moved
    assert _read_all(cluster[2].bootstrap, "moving", len(acknowledged)) == acknowledged


def test_an_admin_whose_cached_leader_moved_follows_the_new_leader(cluster: list[BrokerProcess]) -> None:
    """A NOT_LEADER reply makes the admin look the leader up again (it used to retry the old one until timeout)."""
    with Admin([broker.bootstrap for broker in cluster], request_timeout_ms=60_000) as admin:
        end = admin.list_offset("replicated", 1, -1)  # caches the current leader
        before = _partition(cluster[0].bootstrap, "replicated", 1)
        target = [n for n in (1, 2, 3) if n != before.leader_id] + [before.leader_id]
        admin.reassign_partition("replicated", 1, target)
        wait_for(lambda: _partition(cluster[0].bootstrap, "replicated", 1).leader_id == target[0], timeout_s=60)
        started = time.monotonic()
        assert admin.list_offset("replicated", 1, -1) == end
        assert time.monotonic() - started < 15  # far below the 60 s request timeout that retrying the old leader waits


def test_offset_commit_waits_for_the_in_sync_replicas(cluster: list[BrokerProcess]) -> None:
    # The coordinator is the controller leader; give the group's offsets partition three replicas led by it.
    group = "commit-waits"
    number = offsets_partition(group, 8)
    controller = controller_leader(cluster)
    with Admin(cluster[0].bootstrap) as admin:
        admin.reassign_partition(OFFSETS_TOPIC, number, [controller, *(n for n in (1, 2, 3) if n != controller)])
        wait_for(lambda: not admin.list_reassignments([OFFSETS_TOPIC]), timeout_s=60)
    # The preferred-leader check hands leadership to the target's first replica.
    wait_for(lambda: _partition(cluster[0].bootstrap, OFFSETS_TOPIC, number).leader_id == controller)
    state = _partition(cluster[0].bootstrap, OFFSETS_TOPIC, number)
    assert len(state.isr_nodes) == 3, state
    with Consumer(cluster[0].bootstrap, group_id=group, topics=["replicated"], auto_offset_reset="earliest",
                  enable_auto_commit=False) as consumer:
        wait_for(lambda: bool(consumer.poll(timeout=0.5)) or bool(consumer.assignment()))
        follower = cluster[next(r for r in state.replica_nodes if r != state.leader_id) - 1]
        os.kill(follower.process.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            consumer.commit({TopicPartition("replicated", 0): 7})
            waited_s = time.monotonic() - started
        finally:
            os.kill(follower.process.pid, signal.SIGCONT)
        # Committed only once the paused follower left the ISR (replica_lag_time_max_ms), not on the leader's disk.
        assert waited_s >= LAG_MS / 1000 / 2
        assert consumer.committed(TopicPartition("replicated", 0)) == 7


def test_follower_below_the_leaders_log_start_starts_again_from_there(cluster: list[BrokerProcess]) -> None:
    with Admin(cluster[0].bootstrap) as admin:
        retrying(lambda: admin.create_topics(["trimmed"], partitions=1, replication_factor=3))
    wait_for(lambda: len(_partition(cluster[0].bootstrap, "trimmed").isr_nodes) == 3)
    state = _partition(cluster[0].bootstrap, "trimmed")
    follower_id = next(r for r in state.replica_nodes if r != state.leader_id)
    follower = cluster[follower_id - 1]
    follower.kill()
    live = _live(cluster).bootstrap
    wait_for(lambda: follower_id not in _partition(live, "trimmed").isr_nodes)
    with Producer(live, acks="all") as producer:
        for n in range(300):
            producer.send("trimmed", value=b"t%d" % n, partition=0)
        producer.flush()
    with Admin(live) as admin:
        assert admin.delete_records("trimmed", 0, 250) == 250
    follower.start(timeout_s=60)
    wait_for(lambda: follower_id in _partition(cluster[0].bootstrap, "trimmed").isr_nodes, timeout_s=60)
    assert assert_replica_matches(follower.data_dir, cluster[0].bootstrap, "trimmed", 0) == 50  # offsets 250..299


def test_a_paused_leader_that_lost_leadership_refuses_writes_when_it_resumes(cluster: list[BrokerProcess]) -> None:
    with Admin(cluster[0].bootstrap) as admin:
        retrying(lambda: admin.create_topics(["zombie"], partitions=1, replication_factor=3))
    wait_for(lambda: len(_partition(cluster[0].bootstrap, "zombie").isr_nodes) == 3)
    before = _partition(cluster[0].bootstrap, "zombie")
    paused = cluster[before.leader_id - 1]
    others = [b for b in cluster if b is not paused]
    os.kill(paused.process.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: _partition(others[0].bootstrap, "zombie").leader_id not in (-1, before.leader_id))
    finally:
        os.kill(paused.process.pid, signal.SIGCONT)
    host, port = paused.bootstrap.rsplit(":", 1)
    connection = BlockingConnection(host, int(port), "zombie-check", 10.0)
    try:
        produce = m.ProduceRequest(acks=-1, timeout_ms=5000, topics=(m.ProduceTopic(name="zombie", partitions=(
            m.ProducePartition(partition_index=0, records=encode_batch([Record(offset=0, timestamp_ms=0, key=None, value=b"late")])),)),))
        answers = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            response = connection.request(produce, 10.0)
            code = response.topics[0].partitions[0].error_code
            answers.append(code)
            if code == NotLeaderError.code:
                break
            time.sleep(0.2)
        assert answers[-1] == NotLeaderError.code, answers
        assert 0 not in answers  # never acknowledged by the deposed leader
        stale = m.FetchRequest(replica_id=99, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=(m.FetchTopic(
            name="zombie", partitions=(m.FetchPartition(partition_index=0, current_leader_epoch=before.leader_epoch,
                                                        fetch_offset=0, partition_max_bytes=1 << 20),)),))
        code = connection.request(stale, 10.0).topics[0].partitions[0].error_code
        assert code in (NotLeaderError.code, FencedLeaderEpochError.code)
    finally:
        connection.close()


def _replicated_topic(cluster: list[BrokerProcess], topic: str) -> None:
    """Create ``topic`` (one partition, RF 3, min.insync.replicas 2) and wait until its three replicas are in sync."""
    def created() -> bool:
        try:
            with Admin(cluster[0].bootstrap) as admin:
                retrying(lambda: admin.create_topics([topic], partitions=1, replication_factor=3,
                                                     configs={"min.insync.replicas": "2"}))
        except InvalidReplicationFactorError:  # a broker an earlier test paused or killed is not live again yet
            return False
        return True

    wait_for(created, timeout_s=60)
    wait_for(lambda: len(_partition(cluster[0].bootstrap, topic).isr_nodes) == 3)


def test_a_consumer_whose_parked_fetch_was_at_the_killed_leader_reads_on_from_the_new_one(
    cluster: list[BrokerProcess],
) -> None:
    """The consumer's next fetch waits at the partition leader (pipelining, a 5 s long poll) when the leader is
    killed -9: the consumer finds the new leader and returns every acknowledged record once, in order."""
    _replicated_topic(cluster, "parked")
    bootstraps = [broker.bootstrap for broker in cluster]
    with Producer(bootstraps, acks="all") as producer:
        assert [f.result(30).offset for f in [producer.send("parked", value=b"a%d" % n, partition=0)
                                              for n in range(50)]] == list(range(50))
    leader_id = _partition(cluster[0].bootstrap, "parked").leader_id
    leader = cluster[leader_id - 1]
    read: list[bytes] = []
    with Consumer(bootstraps, auto_offset_reset="earliest", fetch_max_wait_ms=5_000) as consumer:
        consumer.assign([("parked", 0)])
        deadline = time.monotonic() + 30
        while len(read) < 50 and time.monotonic() < deadline:
            read += [message.value for message in consumer.poll(timeout=0.5)]
        assert read == [b"a%d" % n for n in range(50)]  # and the next fetch now waits at the leader
        leader.kill()
        try:
            survivor = next(b for b in cluster if b is not leader)
            wait_for(lambda: _partition(survivor.bootstrap, "parked").leader_id not in (-1, leader_id))
            with Producer(survivor.bootstrap, acks="all") as producer:
                assert [f.result(30).offset for f in [producer.send("parked", value=b"b%d" % n, partition=0)
                                                      for n in range(50)]] == list(range(50, 100))
            deadline = time.monotonic() + 60
            while len(read) < 100 and time.monotonic() < deadline:
                read += [message.value for message in consumer.poll(timeout=0.5)]
        finally:
            leader.start(timeout_s=60)
    assert read == [b"a%d" % n for n in range(50)] + [b"b%d" % n for n in range(50)]


def test_a_poll_interrupted_as_the_leader_is_killed_returns_its_records_once_from_the_new_one(
    cluster: list[BrokerProcess], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first poll takes records 0-59; as it sends the next fetch to the leader, the leader is killed -9 and the
    poll is interrupted (KeyboardInterrupt): the records it took are read again from the new leader, followed by
    those produced there after, every acknowledged record once and in order."""
    _replicated_topic(cluster, "interrupted")
    bootstraps = [broker.bootstrap for broker in cluster]
    with Producer(bootstraps, acks="all") as producer:
        assert [f.result(30).offset for f in [producer.send("interrupted", value=b"a%d" % n, partition=0)
                                              for n in range(60)]] == list(range(60))
    leader_id = _partition(cluster[0].bootstrap, "interrupted").leader_id
    leader = cluster[leader_id - 1]
    send = BlockingConnection.send
    fetches: list[m.FetchRequest] = []

    def killed_and_interrupted(connection: BlockingConnection, request: object) -> int:
        if isinstance(request, m.FetchRequest):
            fetches.append(request)
            if len(fetches) == 2:  # the pipelined fetch, sent once the first one's records were taken
                monkeypatch.setattr(BlockingConnection, "send", send)
                leader.kill()
                raise KeyboardInterrupt
        return send(connection, request)

    read: list[bytes] = []
    with Consumer(bootstraps, auto_offset_reset="earliest", fetch_max_wait_ms=5_000) as consumer:
        consumer.assign([("interrupted", 0)])
        monkeypatch.setattr(BlockingConnection, "send", killed_and_interrupted)
        try:
            with pytest.raises(KeyboardInterrupt):
                read += [message.value for message in consumer.poll(timeout=10.0)]
            assert read == [] and fetches[1].topics[0].partitions[0].fetch_offset == 60  # the first took 0-59
            survivor = next(b for b in cluster if b is not leader)
            wait_for(lambda: _partition(survivor.bootstrap, "interrupted").leader_id not in (-1, leader_id))
            with Producer(survivor.bootstrap, acks="all") as producer:
                assert [f.result(30).offset for f in [producer.send("interrupted", value=b"b%d" % n, partition=0)
                                                      for n in range(50)]] == list(range(60, 110))
            deadline = time.monotonic() + 60
            while len(read) < 110 and time.monotonic() < deadline:
                read += [message.value for message in consumer.poll(timeout=0.5)]
            read += [message.value for message in consumer.poll(timeout=1.0)]  # nothing more: no record twice
        finally:
            monkeypatch.setattr(BlockingConnection, "send", send)
            leader.start(timeout_s=60)
    assert read == [b"a%d" % n for n in range(60)] + [b"b%d" % n for n in range(50)]
