"""Replicas agreeing after failovers by leader epoch (KIP-101/279), including the cases HW truncation lost.

Each simulated replica keeps a list of (epoch, value) records, a durable prefix and a real
``LeaderEpochCache``; a follower "fetches" by asking ``diverging_epoch`` and truncating with
``truncation_offset`` until the logs agree, then copying. A seeded random run crashes replicas
(losing their unflushed tail) and elects leaders arbitrarily; every replica must end up with the
final leader's log, record for record.
"""

from __future__ import annotations

import pathlib
import random
import tempfile

import pytest

from mqbroker.replication.decisions import diverging_epoch, truncation_offset
from mqbroker.storage.epochs import LeaderEpochCache


class Replica:
    """A log of (epoch, value) records with an epoch cache; only the durable prefix survives a crash."""

    def __init__(self, directory: pathlib.Path) -> None:
        directory.mkdir()
        self.records: list[tuple[int, str]] = []
        self.durable = 0
        self.cache = LeaderEpochCache.load(str(directory))

    @property
    def end(self) -> int:
        return len(self.records)

    def lookup(self, epoch: int) -> tuple[int, int]:
        return self.cache.end_offset_for(epoch, self.end)

    def become_leader(self, epoch: int) -> None:
        self.cache.assign(epoch, self.end)

    def append(self, entries: list[tuple[int, str]]) -> None:
        for epoch, value in entries:
            self.cache.assign(epoch, self.end)
            self.records.append((epoch, value))

    def truncate(self, offset: int) -> None:
        del self.records[offset:]
        self.durable = min(self.durable, offset)
        self.cache.truncate_from_end(offset)

    def crash(self) -> None:
        self.truncate(self.durable)


def fetch_once(follower: Replica, leader: Replica, max_records: int) -> None:
    """One replica fetch: truncate if the leader reports divergence, else copy up to ``max_records``."""
    diverged = diverging_epoch(leader.lookup, follower.cache.latest_epoch, follower.end)
    if diverged is not None:
        follower.truncate(truncation_offset(follower.lookup, follower.end, *diverged))
        return
    assert follower.records == leader.records[: follower.end], "no divergence reported yet the logs differ"
    follower.append(leader.records[follower.end : follower.end + max_records])


def catch_up(follower: Replica, leader: Replica) -> None:
    for _ in range(100):
        fetch_once(follower, leader, max_records=1000)
        if follower.end == leader.end and diverging_epoch(leader.lookup, follower.cache.latest_epoch, follower.end) is None:
            return
    raise AssertionError("the follower never caught up")


@pytest.fixture
def replicas(tmp_path: pathlib.Path) -> list[Replica]:
    return [Replica(tmp_path / name) for name in "abc"]


def test_acknowledged_record_survives_a_restart_then_failover_kip101_loss_case(replicas: list[Replica]) -> None:
    a, b, _ = replicas
    a.become_leader(0)
    a.append([(0, "m1"), (0, "m2")])
    a.durable = 2
    catch_up(b, a)
    b.durable = 2  # b has both; under HW truncation it would have cut m2 on restart (its HW lagged)
    b.crash()
    b.become_leader(1)  # a dies; b leads epoch 1
    b.append([(1, "m3")])
    catch_up(a, b)
    assert [value for _, value in a.records] == ["m1", "m2", "m3"] == [value for _, value in b.records]


def test_replicas_never_disagree_at_an_offset_after_a_double_crash_kip101_divergence_case(replicas: list[Replica]) -> None:
    a, b, _ = replicas
    a.become_leader(0)
    a.append([(0, "m1")])
    catch_up(b, a)
    a.append([(0, "m2")])  # only a has m2 (it is durable on a); both crash, b comes back first
    a.durable, b.durable = 2, 1
    b.crash()
    b.become_leader(1)
    b.append([(1, "m3")])
    catch_up(a, b)
    assert a.records == b.records == [(0, "m1"), (1, "m3")]


def test_fast_successive_failovers_converge_by_iterating_kip279(replicas: list[Replica]) -> None:
    a, b, c = replicas
    a.become_leader(0)
    a.append([(0, "x0"), (0, "x1")])
    catch_up(b, a)
    catch_up(c, a)
    a.become_leader(1)
    a.append([(1, "a2")])  # only a
    b.become_leader(2)
    b.append([(2, "b2"), (2, "b3")])  # only b
    a.become_leader(3)
    a.append([(3, "a3")])
    catch_up(b, a)  # b last fetched epoch 2, which a never saw: a answers epoch 1; b cuts and asks again
    catch_up(c, a)
    assert a.records == b.records == c.records == [(0, "x0"), (0, "x1"), (1, "a2"), (3, "a3")]


def test_random_failovers_and_crashes_always_converge_on_the_final_leader() -> None:
    with tempfile.TemporaryDirectory(dir="/dev/shm" if pathlib.Path("/dev/shm").is_dir() else None) as root:
        for seed in range(120):
            rng = random.Random(seed)
            replicas = [Replica(pathlib.Path(root) / f"{seed}-{n}") for n in range(3)]
            epoch, leader, counter = 0, replicas[0], 0
            leader.become_leader(epoch)
            for _ in range(rng.randint(3, 12)):
                for _ in range(rng.randint(0, 4)):
                    counter += 1
                    leader.append([(epoch, f"v{counter}")])
                for follower in replicas:
                    if follower is not leader and rng.random() < 0.6:
                        fetch_once(follower, leader, max_records=rng.randint(1, 3))
                for replica in replicas:
                    replica.durable = rng.randint(replica.durable, replica.end)
                    if rng.random() < 0.25:
                        replica.crash()
                epoch += 1
                leader = rng.choice(replicas)  # unclean elections included: convergence must still hold
                leader.become_leader(epoch)
            for follower in replicas:
                if follower is not leader:
                    catch_up(follower, leader)
                assert follower.records == leader.records, f"seed {seed}"
