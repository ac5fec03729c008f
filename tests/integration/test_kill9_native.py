"""kill -9 of the broker under acks=all load: every acknowledged message survives, once, in order."""

from __future__ import annotations

import pathlib
import random
import subprocess
import sys
import time

import pytest

from mqbroker.client import Consumer
from tests.integration.brokerprocess import BrokerProcess

#: Messages of the default run (about 5 s on an idle machine) and of the -m slow one (about 10 s); both kill
#: the broker KILLS times and check everything.
MESSAGES_SHORT, MESSAGES_FULL = 30_000, 60_000
RATE_PER_S = 6_000
KILLS = 3
#: Acknowledgements between two kills: random in this range (three kills stay below MESSAGES_SHORT).
ACKS_BETWEEN_KILLS_MIN, ACKS_BETWEEN_KILLS_MAX = 300, 6_000
ENGINE_LOG_NAMES = {"aio": "Linux AIO", "thread": "a thread", "worker": "a C thread"}


@pytest.mark.parametrize("engine", ["aio", "thread", "worker"])
@pytest.mark.parametrize("messages", [MESSAGES_SHORT, pytest.param(MESSAGES_FULL, marks=pytest.mark.slow)])
def test_acknowledged_messages_survive_kill_9_exactly_once_and_in_order(tmp_path: pathlib.Path, engine: str,
                                                                       messages: int) -> None:
    broker = BrokerProcess(data_dir=tmp_path / "data", extra_args=["--set", f"fsync_engine={engine}"])
    broker.start()
    assert f"fsync rounds run through {ENGINE_LOG_NAMES[engine]}" in broker.log_text()
    ack_file = tmp_path / "acked.txt"
    repository = pathlib.Path(__file__).resolve().parents[2]
    producer = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.acked_producer_child", broker.bootstrap, "crash", str(messages),
         str(RATE_PER_S), str(ack_file)],
        cwd=repository,
    )
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    try:
        for _ in range(KILLS):
            # A kill lands after some more acknowledgements (not after some time: a restart on a loaded
            # machine can take seconds, and the producer must still be running at every kill).
            target = _acknowledged_count(ack_file) + rng.randint(ACKS_BETWEEN_KILLS_MIN, ACKS_BETWEEN_KILLS_MAX)
            deadline = time.monotonic() + 120
            while _acknowledged_count(ack_file) < target:
                assert producer.poll() is None, "the producer finished before the broker was killed"
                assert time.monotonic() < deadline, f"no acknowledgement progress (seed {seed})"
                time.sleep(0.02)
            broker.kill()
            time.sleep(rng.uniform(0.1, 1.0))
            broker.restart()
        assert producer.wait(timeout=240) == 0, f"producer failed (seed {seed})"
        acknowledged = [int(line) for line in ack_file.read_text().split()]
        with Consumer(broker.bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([("crash", 0)])
            stored: list[int] = []
            deadline = time.monotonic() + 60
            while len(stored) < messages and time.monotonic() < deadline:
                stored += [int(message.value) for message in consumer.poll(timeout=0.5)]
    finally:
        producer.kill()
        broker.kill()
    assert acknowledged == list(range(messages)), f"the producer did not finish its run (seed {seed})"
    assert len(stored) == len(set(stored)), f"duplicates in the log (seed {seed})"
    assert stored == sorted(stored), f"the log is out of order (seed {seed})"
    missing = set(acknowledged) - set(stored)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]} (seed {seed})"


def _acknowledged_count(ack_file: pathlib.Path) -> int:
    """How many values the producer child has recorded as acknowledged so far."""
    return ack_file.read_bytes().count(b"\n") if ack_file.exists() else 0
