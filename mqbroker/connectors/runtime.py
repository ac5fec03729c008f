"""The connector runtime on one broker: which tasks run here, starting, pausing and stopping them (Twisted).

Ownership follows leadership. Every ``connectors_leadership_check_interval_ms`` the runtime asks
the broker which ``__connectors`` partitions it leads. For a newly led partition it appends a
claim record on the local broker (which fails unless this broker leads it) and waits until its
view has read the partition up to that record: the view then holds the last checkpoint the
previous owner wrote, and the tasks placed there start from it. A partition it no longer leads
(at the claimed leader epoch) is released at once: its tasks stop. Their progress and status
writes also go to the local broker only, so a deposed owner cannot overwrite its successor's
checkpoints. When a broker dies, the controller elects new leaders for its partitions and the
tasks move with them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from mqbroker import errors
from mqbroker.client.connection import BrokerUnavailableError
from mqbroker.connectors.broker_calls import ConnectorBroker
from mqbroker.connector_model import TargetState, TaskMetrics, TaskState, TaskStatus
from mqbroker.connectors.settings import ParsedConfig, SettingsParser, parse_config, tasks_count
from mqbroker.connectors.state import (
    CONNECTORS_TOPIC,
    ClaimRecord,
    ProgressRecord,
    StateKey,
    StateValue,
    StatusRecord,
    claim_key,
    progress_key,
    status_key,
)
from mqbroker.connectors.store import StateStore
from mqbroker.connectors.task import SupervisedTask, TaskContext
from mqbroker.connectors.view import PlannedTask, TaskId
from mqbroker.records.readable import UnreadableTally


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectorType:
    """A kind of connector: how its settings are read and how one of its tasks is built."""

    name: str
    parse_settings: SettingsParser
    build_task: Callable[[Any, TaskContext], SupervisedTask]


class _BrokenTask:
    """A task whose stored configuration does not parse: it never runs and reports why."""

    def __init__(self, node_id: int, clock: IReactorTime, problem: str) -> None:
        self._node_id = node_id
        self._clock = clock
        self._problem = problem

    def status(self) -> TaskStatus:
        """FAILED, with the configuration's problem as the last error."""
        return TaskStatus(state=TaskState.FAILED, owner_id=self._node_id, updated_ms=int(self._clock.seconds() * 1000),
                          metrics=TaskMetrics(errors_total=1, last_error=self._problem))


class _Running:
    """A task placed here: the task object (running, or stopped while paused) and what it was asked to do."""

    def __init__(self, plan: PlannedTask, task: SupervisedTask | _BrokenTask, type_name: str) -> None:
        self.plan = plan
        self.task = task
        self.type_name = type_name
        self.target_state = plan.target_state


class ConnectorRuntime:
    """Runs the tasks placed in the ``__connectors`` partitions this broker leads."""

    log = Logger()

    def __init__(self, *, broker: ConnectorBroker, clock: IReactorTime, node_id: int, partition_count: int,
                 types: Mapping[str, ConnectorType], leadership_check_interval_ms: int, status_interval_ms: int,
                 rng: random.Random | None = None, unreadable: UnreadableTally | None = None) -> None:
        self.broker = broker
        #: The broker's count of undecodable batches the tasks skipped.
        self.unreadable = unreadable or UnreadableTally()
        self.clock = clock
        self.node_id = node_id
        self.types = dict(types)
        self.parsers: dict[str, SettingsParser] = {name: kind.parse_settings for name, kind in types.items()}
        self.store = StateStore(broker=broker, clock=clock, partition_count=partition_count,
                                on_change=self._reconcile_soon)
        self._rng = rng or random.Random()
        self._claimed: dict[int, int] = {}
        self._claiming: dict[int, int] = {}
        self._led: dict[int, int] = {}
        self._tasks: dict[TaskId, _Running] = {}
        self._reconciling: Deferred[None] | None = None
        self._again = False
        self._stopped = False
        self._loops = [(LoopingCall(self._check_leadership), leadership_check_interval_ms),
                       (LoopingCall(self._write_statuses), status_interval_ms)]
        for loop, _ in self._loops:
            loop.clock = clock

    # -- life --------------------------------------------------------------------------------

    def start(self) -> None:
        """Read ``__connectors`` (creating it if needed), then check leadership and report statuses periodically."""
        self.store.start()
        self.store.ready.addCallback(lambda _: self._start_loops())

    def _start_loops(self) -> None:
        if self._stopped:
            return
        for loop, interval_ms in self._loops:
            loop.start(interval_ms / 1000.0, now=True).addErrback(
                lambda failure: self.log.failure("connector runtime loop died", failure))

    def stop(self) -> Deferred[Any]:
        """Stop every task here (each writes its last checkpoint) and stop reading ``__connectors``."""
        self._stopped = True
        for loop, _ in self._loops:
            if loop.running:
                loop.stop()
        stopping = [Deferred.fromCoroutine(self._stop_task(task_id)) for task_id in list(self._tasks)]
        done = gatherResults(stopping, consumeErrors=True)
        done.addBoth(lambda _: self.store.stop())
        return done

    @property
    def partition_count(self) -> int:
        """Partitions of ``__connectors``."""
        return self.store.partition_count

    def local_tasks(self) -> list[tuple[TaskId, str, TaskStatus]]:
        """Every task placed on this broker: its id, type and status now (metrics, describe)."""
        return [(task_id, running.type_name, self._status_of(running)) for task_id, running in self._tasks.items()]

    def local_status(self, task_id: TaskId) -> TaskStatus | None:
        """The live status of a task running here (None: it runs elsewhere, or nowhere)."""
        running = self._tasks.get(task_id)
        return None if running is None else self._status_of(running)

    def parse(self, name: str, config: Mapping[str, str]) -> ParsedConfig:
        """Check a configuration as ``create`` does (``InvalidConfigError``)."""
        return parse_config(name, config, self.parsers)

    # -- leadership --------------------------------------------------------------------------

    async def _check_leadership(self) -> None:
        try:
            partitions = await self.broker.partitions(CONNECTORS_TOPIC)
        except (errors.BrokerError, BrokerUnavailableError) as error:
            self.log.debug("cannot read {topic}'s leaders: {error}", topic=CONNECTORS_TOPIC, error=error)
            return
        self._led = {p.partition: p.leader_epoch for p in partitions if p.leader_id == self.node_id}
        released = [p for p, epoch in self._claimed.items() if self._led.get(p) != epoch]
        for partition in released:
            del self._claimed[partition]
            self.log.info("{topic}-{partition} led elsewhere now: its connector tasks stop here",
                          topic=CONNECTORS_TOPIC, partition=partition)
        if released:
            self._reconcile_soon()
        for partition, epoch in self._led.items():
            if self._claimed.get(partition) != epoch and self._claiming.get(partition) != epoch:
                Deferred.fromCoroutine(self._claim(partition, epoch))

    async def _still_leads(self, partition: int) -> bool:
        """Whether this broker leads ``partition`` now, at the leader epoch it claimed it at."""
        claimed = self._claimed.get(partition)
        if claimed is None:
            return False
        found = [p for p in await self.broker.partitions(CONNECTORS_TOPIC) if p.partition == partition]
        return bool(found) and found[0].leader_id == self.node_id and found[0].leader_epoch == claimed

    async def _claim(self, partition: int, epoch: int) -> None:
        """Record the takeover on the local broker, read up to it, then run the partition's tasks."""
        self._claiming[partition] = epoch
        try:
            offset = await self.store.write(partition, [(claim_key(partition), ClaimRecord(node_id=self.node_id,
                                                                                          leader_epoch=epoch))],
                                            local=True)
            await self.store.read_past(partition, offset)
        except (errors.BrokerError, BrokerUnavailableError) as error:
            self.log.debug("claiming {topic}-{partition} failed ({error}); the next check retries",
                           topic=CONNECTORS_TOPIC, partition=partition, error=error)
            return
        finally:
            self._claiming.pop(partition, None)
        if self._led.get(partition) == epoch and not self._stopped:
            self._claimed[partition] = epoch
            self.log.info("claimed {topic}-{partition} at leader epoch {epoch}: its connector tasks run here",
                          topic=CONNECTORS_TOPIC, partition=partition, epoch=epoch)
            self._reconcile_soon()

    # -- tasks -------------------------------------------------------------------------------

    def _reconcile_soon(self) -> None:
        """Bring the running tasks in line with the view and the claims (serialized: stopping takes time)."""
        if self._stopped:
            return
        if self._reconciling is not None:
            self._again = True
            return
        self._reconciling = Deferred.fromCoroutine(self._reconcile())
        self._reconciling.addErrback(lambda failure: self.log.failure("reconciling connector tasks failed", failure))
        self._reconciling.addBoth(self._reconciled)

    def _reconciled(self, _: Any) -> None:
        self._reconciling = None
        if self._again:
            self._again = False
            self._reconcile_soon()

    async def _reconcile(self) -> None:
        view = self.store.view
        planned = view.planned_tasks(self._claimed, self.partition_count, tasks_count)
        for task_id, running in list(self._tasks.items()):
            plan = planned.get(task_id)
            if plan is None:
                await self._stop_task(task_id)
                if task_id.name not in view.connectors or view.connectors[task_id.name].incarnation != task_id.incarnation:
                    await self._forget(running.plan)
            elif plan.target_state is not running.target_state:
                await self._switch(task_id, running, plan)
        for task_id, plan in planned.items():
            if task_id not in self._tasks and not self._stopped:
                self._start_task(plan, counters=None)

    def _start_task(self, plan: PlannedTask, counters: Any) -> None:
        """Build the task (a broken one if its configuration does not parse) and run it unless paused."""
        task_id = plan.task_id
        try:
            parsed = self.parse(task_id.name, plan.config)
        except errors.BrokerError as error:
            self._tasks[task_id] = _Running(plan, _BrokenTask(self.node_id, self.clock, error.message),
                                            plan.config.get("type", "?"))
            return
        context = TaskContext(
            name=task_id.name, task=task_id.task, tasks_count=plan.tasks_count, node_id=self.node_id,
            broker=self.broker.acting_as(parsed.principal), clock=self.clock,
            progress=self.store.view.progress_of(task_id),
            checkpoint=lambda progress: Deferred.fromCoroutine(self._write_progress(plan, progress)),
            still_owner=lambda: Deferred.fromCoroutine(self._still_leads(plan.partition)), rng=self._rng,
            unreadable=self.unreadable,
        )
        task = self.types[parsed.type].build_task(parsed.settings, context)
        if counters is not None:
            task.counters = counters
        running = _Running(plan, task, parsed.type)
        self._tasks[task_id] = running
        if plan.target_state is TargetState.PAUSED:
            task.state = TaskState.PAUSED
            return
        self.log.info("connector {task}: starting ({type}) from {progress}", task=task.label, type=parsed.type,
                      progress="its last checkpoint" if context.progress is not None else "the beginning")
        task.start()

    async def _switch(self, task_id: TaskId, running: _Running, plan: PlannedTask) -> None:
        """Pause (stop, keep the counters) or resume (a new task from the latest checkpoint)."""
        task = running.task
        await self._stop_task(task_id)
        counters = getattr(task, "counters", None)
        self._start_task(plan, counters)
        self.log.info("connector {name}/{task}: {state}", name=task_id.name, task=task_id.task,
                      state=plan.target_state.value)

    async def _stop_task(self, task_id: TaskId) -> None:
        running = self._tasks.pop(task_id, None)
        if running is not None and isinstance(running.task, SupervisedTask):
            await running.task.stop()

    async def _forget(self, plan: PlannedTask) -> None:
        """A deleted connector's task stopped: delete its status and progress records (if this broker still leads)."""
        task_id = plan.task_id
        entries: list[tuple[StateKey, StateValue | None]] = [(status_key(task_id.name, task_id.task), None),
                                                             (progress_key(task_id.name, task_id.task), None)]
        try:
            await self.store.write(plan.partition, entries, local=True)
        except (errors.BrokerError, BrokerUnavailableError):
            return  # the partition's next owner sees records of no connector: they are ignored

    async def _write_progress(self, plan: PlannedTask, progress: Mapping[str, Any]) -> None:
        task_id = plan.task_id
        record = ProgressRecord(incarnation=task_id.incarnation, progress=dict(progress))
        await self.store.write(plan.partition, [(progress_key(task_id.name, task_id.task), record)], local=True)

    async def _write_statuses(self) -> None:
        """Store the status of every task here, one batch per partition (failures: the next round retries)."""
        by_partition: dict[int, list[tuple[StateKey, StateValue | None]]] = {}
        for task_id, running in self._tasks.items():
            record = StatusRecord(incarnation=task_id.incarnation, status=self._status_of(running))
            by_partition.setdefault(running.plan.partition, []).append((status_key(task_id.name, task_id.task), record))
        for partition, entries in by_partition.items():
            try:
                await self.store.write(partition, entries, local=True)
            except (errors.BrokerError, BrokerUnavailableError) as error:
                self.log.debug("storing task statuses in {topic}-{partition} failed: {error}", topic=CONNECTORS_TOPIC,
                               partition=partition, error=error)

    @staticmethod
    def _status_of(running: _Running) -> TaskStatus:
        return running.task.status()
