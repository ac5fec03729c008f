"""Create, pause, resume, delete and describe connectors: the one service behind the CLI's native
requests and the HTTP admin API (Twisted).

Changes are records appended to ``__connectors`` (a connector's record to its partition, at that
partition's leader); each call returns once this broker's view has read its own record back, so
a ``describe`` through the same broker sees it. The tasks' owners pick the change up from their
own views. ``describe`` answers from the view: statuses are what each owner last stored (every
``connectors_status_interval_ms``), or the live status for tasks running on this broker.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence

from twisted.internet.defer import Deferred
from zope.interface import implementer

from mqbroker import errors
from mqbroker.connector_model import ConnectorDescription, TargetState, TaskDescription, TaskMetrics, TaskState, redacted
from mqbroker.connectors.runtime import ConnectorRuntime
from mqbroker.connectors.settings import PRINCIPAL_KEY, tasks_count
from mqbroker.connectors.state import (
    CONNECTORS_TOPIC,
    ConnectorRecord,
    StateKey,
    StateValue,
    check_connector_name,
    connector_key,
    connector_partition,
    progress_key,
    status_key,
    task_partition,
)
from mqbroker.connectors.view import TaskId
from mqbroker.interfaces import IAuthorizer, IConnectorAdmin
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.model import CLUSTER_RESOURCE


def random_incarnation() -> str:
    """A new connector's incarnation: 128 random bits as hexadecimal."""
    return os.urandom(16).hex()


@implementer(IConnectorAdmin)
class ConnectorAdmin:
    """``IConnectorAdmin`` over the runtime's view of ``__connectors``."""

    def __init__(self, *, runtime: ConnectorRuntime, authorizer: IAuthorizer,
                 new_incarnation: Callable[[], str] = random_incarnation) -> None:
        self._runtime = runtime
        self._store = runtime.store
        self._authorizer = authorizer
        self._new_incarnation = new_incarnation

    def create(self, principal: Principal, name: str, config: Mapping[str, str]) -> Deferred[None]:
        """Check and store a new connector; see ``IConnectorAdmin.create``."""
        return Deferred.fromCoroutine(self._create(principal, name, dict(config)))

    def pause(self, principal: Principal, name: str) -> Deferred[None]:
        """Pause a connector; see ``IConnectorAdmin.pause``."""
        return Deferred.fromCoroutine(self._set_target_state(principal, name, TargetState.PAUSED))

    def resume(self, principal: Principal, name: str) -> Deferred[None]:
        """Resume a connector; see ``IConnectorAdmin.resume``."""
        return Deferred.fromCoroutine(self._set_target_state(principal, name, TargetState.RUNNING))

    def delete(self, principal: Principal, name: str) -> Deferred[None]:
        """Delete a connector; see ``IConnectorAdmin.delete``."""
        return Deferred.fromCoroutine(self._delete(principal, name))

    def describe(self, principal: Principal, names: Sequence[str] | None) -> Deferred[list[ConnectorDescription]]:
        """Describe connectors; see ``IConnectorAdmin.describe``."""
        return Deferred.fromCoroutine(self._describe(principal, names))

    # -- changes -------------------------------------------------------------------------------

    async def _create(self, principal: Principal, name: str, config: dict[str, str]) -> None:
        self._require(principal, Operation.ALTER)
        try:
            check_connector_name(name)
        except ValueError as error:
            raise errors.InvalidRequestError(str(error)) from None
        stated = config.get(PRINCIPAL_KEY)
        if stated is not None and stated != str(principal):
            raise errors.InvalidConfigError(
                f"{PRINCIPAL_KEY}={stated[:80]!r}: a connector's tasks act as the principal that creates it "
                f"({principal}); leave the key out, or create the connector as that principal")
        config = {**config, PRINCIPAL_KEY: str(principal)}
        self._runtime.parse(name, config)
        await self._store.ready
        if name in self._store.view.connectors:
            raise errors.DuplicateResourceError(
                f"connector {name!r} exists; delete it first (`mqbroker connectors delete {name}`)")
        record = ConnectorRecord(name=name, incarnation=self._new_incarnation(), target_state=TargetState.RUNNING,
                                 config=config)
        await self._write(connector_partition(name, self._store.partition_count), [(connector_key(name), record)])

    async def _set_target_state(self, principal: Principal, name: str, target_state: TargetState) -> None:
        self._require(principal, Operation.ALTER)
        current = await self._existing(name)
        if current.target_state is target_state:
            return
        record = ConnectorRecord(name=name, incarnation=current.incarnation, target_state=target_state,
                                 config=current.config)
        await self._write(connector_partition(name, self._store.partition_count), [(connector_key(name), record)])

    async def _delete(self, principal: Principal, name: str) -> None:
        """The connector's record first (its owners stop the tasks), then its tasks' status and progress."""
        self._require(principal, Operation.ALTER)
        current = await self._existing(name)
        count = self._store.partition_count
        await self._write(connector_partition(name, count), [(connector_key(name), None)])
        by_partition: dict[int, list[tuple[StateKey, StateValue | None]]] = {}
        for task in range(tasks_count(current.config)):
            keys = by_partition.setdefault(task_partition(name, task, count), [])
            keys += [(status_key(name, task), None), (progress_key(name, task), None)]
        for partition, entries in by_partition.items():
            await self._write(partition, entries)

    async def _existing(self, name: str) -> ConnectorRecord:
        await self._store.ready
        current = self._store.view.connectors.get(name)
        if current is None:
            raise errors.ResourceNotFoundError(
                f"no connector {name!r}; `mqbroker connectors list` shows the connectors")
        return current

    async def _write(self, partition: int, entries: list[tuple[StateKey, StateValue | None]]) -> None:
        """Append at the partition's leader, then wait until this broker's view has it."""
        offset = await self._store.write(partition, entries, local=False)
        await self._store.read_past(partition, offset)

    # -- describe ------------------------------------------------------------------------------

    async def _describe(self, principal: Principal, names: Sequence[str] | None) -> list[ConnectorDescription]:
        self._require(principal, Operation.DESCRIBE)
        await self._store.ready
        view = self._store.view
        wanted: Iterable[str] = sorted(view.connectors) if names is None else names
        leaders = {p.partition: p.leader_id for p in await self._runtime.broker.partitions(CONNECTORS_TOPIC)}
        described = []
        for name in wanted:
            connector = view.connectors.get(name)
            if connector is None:
                raise errors.ResourceNotFoundError(f"no connector {name!r}")
            tasks = tuple(self._task(TaskId(name=name, incarnation=connector.incarnation, task=task), leaders)
                          for task in range(tasks_count(connector.config)))
            described.append(ConnectorDescription(
                name=name, type=connector.config.get("type", "?"), target_state=connector.target_state,
                config=redacted(connector.config), tasks=tasks))
        return described

    def _task(self, task_id: TaskId, leaders: Mapping[int, int]) -> TaskDescription:
        """The live status if the task runs here; else the owner's last stored one, if that owner still leads."""
        status = self._runtime.local_status(task_id)
        if status is None:
            stored = self._store.view.status_of(task_id)
            partition = task_partition(task_id.name, task_id.task, self._store.partition_count)
            if stored is not None and leaders.get(partition) == stored.status.owner_id:
                status = stored.status
            else:
                metrics = stored.status.metrics if stored is not None else TaskMetrics()
                return TaskDescription(task=task_id.task, state=TaskState.UNASSIGNED,
                                       owner_id=leaders.get(partition, -1), updated_ms=-1, metrics=metrics)
        return TaskDescription(task=task_id.task, state=status.state, owner_id=status.owner_id,
                               updated_ms=status.updated_ms, metrics=status.metrics)

    def _require(self, principal: Principal, operation: Operation) -> None:
        if not self._authorizer.authorize(principal, operation, ResourceType.CLUSTER, CLUSTER_RESOURCE):
            raise errors.ClusterAuthorizationError(
                f"{principal} may not {operation.value} connectors (needs {operation.value.upper()} on the cluster)")

