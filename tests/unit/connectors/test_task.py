"""The supervised task loop on a Clock: outages back off and are counted, failures too, stop finishes."""

from __future__ import annotations

import random
from typing import Any

from twisted.internet.defer import succeed
from twisted.internet.task import Clock

from mqbroker.connector_model import TaskState
from mqbroker.connectors.task import OutageError, SupervisedTask, TaskContext, partitions_lag
from mqbroker.records.errors import CorruptRecordError
from mqbroker.records.readable import UnreadableBatch
from tests.fakes import fired


class ScriptedTask(SupervisedTask):
    """Each run takes the next step: an exception to raise, or a number of records to copy and then wait."""

    def __init__(self, clock: Clock, steps: list[Any]) -> None:
        super().__init__(TaskContext(name="t", task=0, tasks_count=1, node_id=1, broker=None, clock=clock,  # type: ignore[arg-type]
                                     progress=None, checkpoint=lambda progress: succeed(None),
                                     still_owner=lambda: succeed(True), rng=random.Random(1)))
        self.steps = steps
        self.runs = 0
        self.finished = 0

    async def run(self) -> None:
        self.runs += 1
        step = self.steps.pop(0) if self.steps else 0
        if isinstance(step, BaseException):
            raise step
        self.counters.records_total += step
        self.healthy()
        while True:
            await self.sleep(10)

    async def finish(self) -> None:
        self.finished += 1


def test_an_outage_backs_off_is_counted_and_ends_when_the_task_works_again() -> None:
    clock = Clock()
    task = ScriptedTask(clock, [OutageError("Redis is unreachable"), OutageError("still"), 5])
    task.start()
    assert task.state is TaskState.BACKOFF and task.counters.outage_started_s == 0
    status = task.status()
    assert status.metrics.in_outage and status.metrics.outages_total == 1
    assert status.metrics.last_error == "OutageError: Redis is unreachable"
    clock.advance(0.3)  # first retry after ~0.2 s: the outage goes on
    assert task.runs == 2 and task.status().metrics.outages_total == 1
    clock.advance(1.0)
    assert task.runs == 3 and task.state is TaskState.RUNNING
    metrics = task.status().metrics
    assert not metrics.in_outage and metrics.outages_total == 1 and metrics.outage_seconds > 0.5
    assert metrics.errors_total == 2


def test_an_unexpected_error_is_a_failure_retried_slowly_not_an_outage() -> None:
    clock = Clock()
    task = ScriptedTask(clock, [ValueError("a bug"), ValueError("a bug"), 1])
    task.start()
    assert task.state is TaskState.FAILED and not task.status().metrics.in_outage
    clock.advance(0.5)
    assert task.runs == 1, "failures wait at least a second"
    clock.advance(1.0)
    assert task.runs == 2
    clock.advance(3.0)
    assert task.runs == 3 and task.state is TaskState.RUNNING


def test_stop_cancels_the_run_and_finishes_once() -> None:
    clock = Clock()
    task = ScriptedTask(clock, [3])
    task.start()
    fired(task.stop())
    assert task.finished == 1 and not clock.getDelayedCalls()


def test_a_task_never_started_stops_at_once() -> None:
    task = ScriptedTask(Clock(), [])
    fired(task.stop())
    assert task.finished == 0


def test_skipped_batches_count_in_the_brokers_tally_and_as_the_tasks_errors() -> None:
    task = ScriptedTask(Clock(), [])
    task.skipped([UnreadableBatch(topic="telemetry", partition=2, first_offset=7, last_offset=9,
                                  error=CorruptRecordError("a varint runs past the end"))])
    assert task.context.unreadable.counts() == {("connector t/0", "telemetry"): 1}
    metrics = task.status().metrics
    assert metrics.errors_total == 1 and "telemetry-2 at offsets 7..9" in (metrics.last_error or "")


def test_lag_counts_records_behind_and_the_age_of_the_newest_copied_while_behind() -> None:
    high_watermarks = {("t", 0): 10, ("t", 1): 5}
    assert partitions_lag(high_watermarks, {("t", 0): 4, ("t", 1): 5}, {("t", 0): 1_000, ("t", 1): 500}, 3_500) == (
        6, 2.5)
    assert partitions_lag(high_watermarks, {("t", 0): 10, ("t", 1): 5}, {}, 3_500) == (0, 0.0)
