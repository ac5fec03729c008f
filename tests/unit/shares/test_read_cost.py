"""What reading the log costs a share partition per batch: a read without delay headers is searched for them once,
not batch by batch (a consumer joining a queue of small batches waited for thousands of short searches before its
first fetch could lease anything: issue 24); delayed records are still found in a read of many batches, compressed
ones included."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mqbroker.groups.coordinator import MemberIdGenerator
from mqbroker.model import ANONYMOUS, TopicSpec
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.compression import Compression
from mqbroker.shares import messages as m
from tests.fakes import BrokerRig, FakeClusterView, build_broker, fired

BATCHES = 200


def _started(tmp_path: Path) -> BrokerRig:
    rig = build_broker(tmp_path, FakeClusterView(broker_ids=(1,)), settings={"share_state_topic_partitions": 2})
    fired(rig.broker.start_share_groups(rig.broker, MemberIdGenerator(random.Random(7)), None))
    fired(rig.broker.create_topic(ANONYMOUS, TopicSpec(name="events", partitions=1), False))
    return rig


def _settle(rig: BrokerRig) -> None:
    for _ in range(20):
        rig.engine.finish_all()
        rig.clock.advance(0)


def _produce(rig: BrokerRig, bodies: int, headers: list[tuple[str, bytes | None]] | None = None,
             compression: Compression = Compression.NONE, body_bytes: int = 100) -> None:
    builder = BatchBuilder(compression=compression)
    for _ in range(bodies):
        builder.append(0, b"k", b"x" * body_bytes, headers or [])
    produced = rig.broker.produce(ANONYMOUS, "events", 0, builder.build(), 1, 1000)
    _settle(rig)
    fired(produced)


def _joined_group(rig: BrokerRig) -> Callable[[], str]:
    """Create the group (earliest) now; the returned call joins it (which reads the log) and gives the member id."""
    created = rig.broker.create_share_group(ANONYMOUS, "g", ["events"], {"auto.offset.reset": "earliest"})
    _settle(rig)
    fired(created)

    def join() -> str:
        joined = rig.broker.share_group_heartbeat(ANONYMOUS, m.ShareHeartbeatRequest(
            group_id="g", client_id="c", topics=("events",)))
        _settle(rig)
        return str(fired(joined).member_id)

    return join


def _finds_of(run: Callable[[], Any]) -> int:
    """``bytes.find`` calls ``run`` made."""
    return _calls_of(run, lambda event, frame, argument: event == "c_call" and getattr(argument, "__name__", "") == "find")


def _calls_of(run: Callable[[], Any], counted: Callable[[str, Any, Any], bool]) -> int:
    """Calls ``run`` made that ``counted(event, frame, argument)`` picks."""
    finds = 0

    def profile(frame: Any, event: str, argument: Any) -> None:
        nonlocal finds
        if counted(event, frame, argument):
            finds += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return finds


def test_a_read_without_delays_is_searched_for_them_once_not_batch_by_batch(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    for _ in range(BATCHES):
        _produce(rig, 20)
    _settle(rig)
    join = _joined_group(rig)
    _settle(rig)
    assert _finds_of(join) < BATCHES  # two per batch before


def test_delayed_records_are_found_among_plain_batches_of_one_read_and_in_compressed_ones(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    later = str(int(rig.clock.seconds() * 1000) + 60_000).encode()
    _produce(rig, 5)
    _produce(rig, 1, headers=[("x-deliver-at", later)])  # offset 5
    _produce(rig, 5)
    _produce(rig, 1, headers=[("x-delay", b"60000")], compression=Compression.GZIP)  # offset 11
    _produce(rig, 5, compression=Compression.GZIP)
    _settle(rig)
    join = _joined_group(rig)
    _settle(rig)
    member = join()
    answer = rig.broker.share_fetch(ANONYMOUS, m.ShareFetchRequest(group_id="g", member_id=member, records_max=100,
                                                                    wait_ms_max=0))
    _settle(rig)
    leased = [offset for partition in fired(answer).partitions for acquired in partition.acquired
              for offset in range(acquired.first, acquired.last + 1)]
    assert leased == [offset for offset in range(17) if offset not in (5, 11)]


def test_a_member_joining_a_backlog_is_not_held_up_by_one_large_read(tmp_path: Path) -> None:
    """The join reads the log at once (the group now has someone to deliver to), and each read is taken into the
    region in one reactor turn: reads are small, so the first fetch leases after a short take, and its lease write
    is answered without waiting for a long one; the rest of the backlog follows read by read."""
    rig = _started(tmp_path)
    for _ in range(BATCHES):
        _produce(rig, 20, body_bytes=1_000)  # ~20 KiB a batch, ~4 MiB in all
    _joined_group(rig)
    _settle(rig)
    joined: list[Any] = []
    batches_per_take = [0]

    def join() -> None:
        joined.append(rig.broker.share_group_heartbeat(ANONYMOUS, m.ShareHeartbeatRequest(
            group_id="g", client_id="c", topics=("events",))))
        _settle(rig)

    def counted(event: str, frame: Any, _: Any) -> bool:
        if event == "call" and frame.f_code.co_filename.endswith("shares/runtime.py"):
            if frame.f_code.co_name == "_take":
                batches_per_take.append(0)
        elif event == "call" and frame.f_code.co_name == "extend" and frame.f_code.co_filename.endswith(
                "shares/partition.py"):
            batches_per_take[-1] += 1
            return True
        return False

    assert _calls_of(join, counted) == BATCHES
    assert max(batches_per_take) <= 20  # all 200 in one take before
    fetched = rig.broker.share_fetch(ANONYMOUS, m.ShareFetchRequest(
        group_id="g", member_id=str(fired(joined[0]).member_id), records_max=10_000, wait_ms_max=0))
    _settle(rig)
    assert sum(acquired.last - acquired.first + 1 for partition in fired(fetched).partitions
               for acquired in partition.acquired) == 20 * BATCHES


def test_a_batch_larger_than_one_read_is_still_read(tmp_path: Path) -> None:
    rig = _started(tmp_path)
    _produce(rig, 1, body_bytes=600_000)
    _produce(rig, 1)
    join = _joined_group(rig)
    _settle(rig)
    member = join()
    fetched = rig.broker.share_fetch(ANONYMOUS, m.ShareFetchRequest(group_id="g", member_id=member, records_max=10,
                                                                     wait_ms_max=0))
    _settle(rig)
    assert [(acquired.first, acquired.last) for partition in fired(fetched).partitions
            for acquired in partition.acquired] == [(0, 1)]
