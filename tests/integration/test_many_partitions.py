"""A broker with more partitions than open segment files: it serves them all and survives kill -9.

The broker runs with ``segment_files_open_max`` far below its partition count, so appends and
fetches keep closing and reopening segment files; every acknowledged record must still be
read back, in order, after a kill -9 in the middle of a produce, and the broker must never hold
more segment files open than its budget once the work is done.
"""

from __future__ import annotations

import os
import pathlib
import re
import threading
import time

from mqbroker.client import Admin, Consumer, Producer
from tests.integration.brokerprocess import BrokerProcess

PARTITIONS = 96
SEGMENT_FILES_OPEN_MAX = 16
#: Records each partition gets before the kill, and (at most) during the produce the kill interrupts.
RECORDS_BEFORE, RECORDS_DURING = 20, 40
SEGMENT_NAME = re.compile(r"[0-9]{20}\.log")


def _open_segment_files(broker: BrokerProcess) -> int:
    """Partition segment files (``<data dir>/<topic>-<n>/<base offset>.log``) the broker process holds open now."""
    assert broker.process is not None
    descriptors = f"/proc/{broker.process.pid}/fd"
    count = 0
    for name in os.listdir(descriptors):
        try:
            target = pathlib.Path(os.readlink(os.path.join(descriptors, name)))
        except OSError:
            continue  # closed meanwhile
        count += target.parent.parent == broker.data_dir and SEGMENT_NAME.fullmatch(target.name) is not None
    return count


def _produce(bootstrap: str, first: int, count: int, acknowledged: dict[int, list[int]]) -> None:
    """Send ``count`` numbered records to every partition (acks=all), recording each as it is acknowledged."""

    def delivered(partition: int, number: int):  # type: ignore[no-untyped-def]
        def record(error: BaseException | None, metadata: object) -> None:
            if error is None:
                acknowledged[partition].append(number)
        return record

    with Producer(bootstrap, acks="all", linger_ms=2, delivery_timeout_ms=120_000) as producer:
        for number in range(first, first + count):
            for partition in range(PARTITIONS):
                producer.send("wide", f"{partition}:{number}".encode(), partition=partition,
                              on_delivery=delivered(partition, number))
        producer.flush()


def _read_all(bootstrap: str) -> dict[int, list[int]]:
    stored: dict[int, list[int]] = {partition: [] for partition in range(PARTITIONS)}
    with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([("wide", partition) for partition in range(PARTITIONS)])
        deadline, idle_polls = time.monotonic() + 120, 0
        while time.monotonic() < deadline and idle_polls < 6:
            messages = consumer.poll(timeout=0.5)
            idle_polls = 0 if messages else idle_polls + 1
            for message in messages:
                partition, number = message.value.decode().split(":")
                assert int(partition) == message.partition
                stored[message.partition].append(int(number))
    return stored


def test_more_partitions_than_open_files_serve_and_survive_kill_9(tmp_path: pathlib.Path) -> None:
    broker = BrokerProcess(data_dir=tmp_path / "data",
                           extra_args=["--set", f"segment_files_open_max={SEGMENT_FILES_OPEN_MAX}"])
    broker.data_dir.mkdir()
    broker.start()
    try:
        with Admin(broker.bootstrap) as admin:
            admin.create_topics(["wide"], partitions=PARTITIONS)
        acknowledged: dict[int, list[int]] = {partition: [] for partition in range(PARTITIONS)}
        _produce(broker.bootstrap, 0, RECORDS_BEFORE, acknowledged)
        assert all(sorted(numbers) == list(range(RECORDS_BEFORE)) for numbers in acknowledged.values())
        assert _read_all(broker.bootstrap) == {partition: sorted(numbers) for partition, numbers in acknowledged.items()}
        assert _open_segment_files(broker) <= SEGMENT_FILES_OPEN_MAX

        during = threading.Thread(target=_produce,
                                  args=(broker.bootstrap, RECORDS_BEFORE, RECORDS_DURING, acknowledged))
        during.start()
        deadline = time.monotonic() + 60
        while sum(map(len, acknowledged.values())) < PARTITIONS * (RECORDS_BEFORE + RECORDS_DURING // 4):
            assert during.is_alive(), "the second produce ended before the kill"
            assert time.monotonic() < deadline, "the second produce made no progress"
            time.sleep(0.005)
        broker.kill()
        broker.restart()
        during.join(timeout=180)
        assert not during.is_alive(), "the producer did not finish after the restart"

        stored = _read_all(broker.bootstrap)
        for partition in range(PARTITIONS):
            assert stored[partition] == sorted(set(stored[partition])), f"partition {partition}: out of order"
            missing = set(acknowledged[partition]) - set(stored[partition])
            assert not missing, f"partition {partition}: acknowledged records {sorted(missing)[:5]} lost"
        assert _open_segment_files(broker) <= SEGMENT_FILES_OPEN_MAX
    finally:
        broker.kill()
