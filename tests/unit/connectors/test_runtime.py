"""The connector runtime and admin service in-process, over a real broker core on a Clock.

A test connector type records what the runtime does to its tasks; everything else is the real
code: ``__connectors`` is a real compacted topic, claims, checkpoints and statuses go through
the broker's produce path (acks=all), and the view is read back through its fetch path.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from zope.interface import implementer
from zope.interface.verify import verifyObject

from mqbroker import errors
from mqbroker.cluster.metadata_records import FenceBroker
from mqbroker.connectors.admin import ConnectorAdmin
from mqbroker.connectors.broker_calls import CONNECTORS_PRINCIPAL, ConnectorBroker
from mqbroker.connector_model import TargetState, TaskState
from mqbroker.connectors.runtime import ConnectorRuntime, ConnectorType
from mqbroker.connectors.settings import SettingsReader
from mqbroker.connectors.state import CONNECTORS_TOPIC
from mqbroker.connectors.task import SupervisedTask, TaskContext
from mqbroker.interfaces import IAuthorizer, IConnectorAdmin
from mqbroker.model import ANONYMOUS, Acks, Operation, Principal, ResourceType
from mqbroker.records.builder import BatchBuilder
from tests.fakes import BrokerRig, FakeClusterView, build_broker, fired

PARTITIONS = 4


class RecordingTask(SupervisedTask):
    """Counts up and checkpoints its count every 100 ms; remembers every task built."""

    built: list[RecordingTask] = []
    type_name = "recording"

    def __init__(self, settings: Any, context: TaskContext) -> None:
        super().__init__(context)
        self.resumed_from = context.progress
        self.count = int(context.progress["count"]) if context.progress else 0
        self.finished = False
        RecordingTask.built.append(self)

    async def run(self) -> None:
        while True:
            await self.sleep(0.1)
            self.count += 1
            self.counters.records_total += 1
            await self.context.checkpoint({"count": self.count})

    async def finish(self) -> None:
        self.finished = True


def parse_recording(name: str, reader: SettingsReader) -> Any:
    return reader.text("note", "")


RECORDING = ConnectorType(name="recording", parse_settings=parse_recording, build_task=RecordingTask)


@implementer(IAuthorizer)
class OnlyDescribe:
    """Lets ``User:viewer`` describe the cluster and nothing else; everyone else may do everything."""

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return principal.name != "viewer" or operation is Operation.DESCRIBE


class Rig:
    """A broker core, a runtime and an admin service on one Clock."""

    def __init__(self, tmp_path: Path) -> None:
        RecordingTask.built = []
        self.broker_rig: BrokerRig = build_broker(tmp_path, FakeClusterView())
        self.clock = self.broker_rig.clock
        self.runtime, self.admin = self.start_runtime()

    def start_runtime(self) -> tuple[ConnectorRuntime, ConnectorAdmin]:
        broker = self.broker_rig.broker
        calls = ConnectorBroker(broker=broker, local=broker, node_id=1)
        runtime = ConnectorRuntime(broker=calls, clock=self.clock, node_id=1, partition_count=PARTITIONS,
                                   types={"recording": RECORDING}, leadership_check_interval_ms=100,
                                   status_interval_ms=200, rng=random.Random(3))
        runtime.start()
        admin = ConnectorAdmin(runtime=runtime, authorizer=OnlyDescribe(), new_incarnation=lambda: "ab" * 16)
        self.settle()
        return runtime, admin

    def settle(self, seconds: float = 1.0) -> None:
        """Let time pass in small steps, completing every fsync round (acks=all appends) as it comes."""
        for _ in range(int(seconds / 0.05)):
            self.broker_rig.engine.finish_all()
            self.clock.advance(0.05)
        self.broker_rig.engine.finish_all()

    def done(self, deferred: Deferred[Any]) -> Any:
        """Settle until ``deferred`` fired; its result."""
        for _ in range(100):
            if deferred.called:
                break
            self.settle(0.1)
        return fired(deferred)

    def create(self, name: str, **config: str) -> None:
        self.done(self.admin.create(ANONYMOUS, name, {"type": "recording", **config}))
        self.settle()

    def task(self, name: str, index: int = 0) -> Any:
        (described,) = self.done(self.admin.describe(ANONYMOUS, [name]))
        return described.tasks[index]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


def test_the_admin_service_provides_its_interface(rig: Rig) -> None:
    assert verifyObject(IConnectorAdmin, rig.admin)


def test_a_created_connector_runs_its_tasks_where_their_partitions_are_led(rig: Rig) -> None:
    rig.create("counter", **{"tasks.max": "3"})
    assert sorted(task.context.task for task in RecordingTask.built) == [0, 1, 2]
    assert all(task.count > 0 for task in RecordingTask.built)
    described = rig.task("counter", 2)
    assert described.state is TaskState.RUNNING and described.owner_id == 1
    assert described.metrics.records_total > 0
    assert rig.broker_rig.cluster.topic(CONNECTORS_TOPIC).configs["cleanup.policy"] == "compact"


@pytest.mark.parametrize("name, config, error", [
    ("bad name", {}, errors.InvalidRequestError),
    ("c", {"type": "nope"}, errors.InvalidConfigError),
    ("c", {"type": "recording", "unknown": "1"}, errors.InvalidConfigError),
])
def test_bad_connectors_are_refused_before_anything_is_stored(rig: Rig, name: str, config: dict[str, str],
                                                              error: type[Exception]) -> None:
    with pytest.raises(error):
        rig.done(rig.admin.create(ANONYMOUS, name, config))
    assert fired(rig.admin.describe(ANONYMOUS, None)) == []


def test_a_name_is_created_once(rig: Rig) -> None:
    rig.create("once")
    with pytest.raises(errors.DuplicateResourceError, match="delete it first"):
        rig.done(rig.admin.create(ANONYMOUS, "once", {"type": "recording"}))


def test_pause_stops_the_task_and_resume_runs_it_again_from_its_checkpoint(rig: Rig) -> None:
    rig.create("counter")
    (first,) = RecordingTask.built
    rig.done(rig.admin.pause(ANONYMOUS, "counter"))
    rig.settle()
    assert first.finished and rig.task("counter").state is TaskState.PAUSED
    (described,) = fired(rig.admin.describe(ANONYMOUS, ["counter"]))
    assert described.target_state is TargetState.PAUSED
    count_when_paused = first.count
    rig.done(rig.admin.resume(ANONYMOUS, "counter"))
    rig.settle()
    resumed = RecordingTask.built[-1]
    assert resumed is not first and resumed.resumed_from == {"count": count_when_paused}
    assert resumed.count > count_when_paused and rig.task("counter").state is TaskState.RUNNING


def test_delete_stops_the_tasks_and_forgets_their_progress(rig: Rig) -> None:
    rig.create("gone")
    rig.done(rig.admin.delete(ANONYMOUS, "gone"))
    rig.settle()
    assert RecordingTask.built[0].finished
    with pytest.raises(errors.ResourceNotFoundError):
        rig.done(rig.admin.describe(ANONYMOUS, ["gone"]))
    rig.create("gone")  # a new incarnation starts from nothing
    assert RecordingTask.built[-1].resumed_from is None
    with pytest.raises(errors.ResourceNotFoundError):
        rig.done(rig.admin.pause(ANONYMOUS, "never"))


def test_a_restarted_runtime_resumes_every_task_from_its_last_checkpoint(rig: Rig) -> None:
    rig.create("counter")
    (first,) = RecordingTask.built
    rig.done(rig.runtime.stop())
    stopped_at = first.count
    rig.runtime, rig.admin = rig.start_runtime()
    assert RecordingTask.built[-1].resumed_from == {"count": stopped_at}


def test_a_task_stops_when_this_broker_stops_leading_its_partition_and_shows_unassigned(rig: Rig) -> None:
    rig.create("counter")
    (task,) = RecordingTask.built
    rig.broker_rig.cluster.apply(FenceBroker(node_id=1))  # its leaderships end (no other replica to take them)
    rig.settle()
    assert task.finished
    described = rig.task("counter")
    assert described.state is TaskState.UNASSIGNED and described.owner_id == -1
    assert described.metrics.records_total > 0, "the last stored metrics stay visible"


def test_records_of_connectors_it_cannot_read_are_skipped_and_counted(rig: Rig) -> None:
    builder = BatchBuilder()
    for key, value in [(b"connector/x", b"{not json"), (b"mystery", b"{}"), (None, b"1")]:
        builder.append(0, key, value)
    rig.done(rig.broker_rig.broker.produce(CONNECTORS_PRINCIPAL, CONNECTORS_TOPIC, 0, builder.build(), Acks.LEADER, 1_000))
    rig.settle()
    assert rig.runtime.store.corrupt_records_total == 3
    rig.create("after")
    assert rig.task("after").state is TaskState.RUNNING


def test_changing_connectors_needs_alter_on_the_cluster(rig: Rig) -> None:
    viewer = Principal("User", "viewer")
    with pytest.raises(errors.ClusterAuthorizationError, match="needs ALTER"):
        rig.done(rig.admin.create(viewer, "c", {"type": "recording"}))
    rig.create("c")
    with pytest.raises(errors.ClusterAuthorizationError):
        rig.done(rig.admin.delete(viewer, "c"))
    assert [d.name for d in rig.done(rig.admin.describe(viewer, None))] == ["c"]


def test_a_connectors_tasks_act_as_the_principal_that_created_it(rig: Rig) -> None:
    alice = Principal("User", "alice", host="10.0.0.7")
    rig.done(rig.admin.create(alice, "hers", {"type": "recording"}))
    rig.settle()
    (task,) = RecordingTask.built
    assert task.context.broker.principal == Principal("User", "alice")
    assert rig.runtime.store.view.connectors["hers"].config["principal"] == "User:alice"
    (described,) = rig.done(rig.admin.describe(ANONYMOUS, ["hers"]))
    assert described.config["principal"] == "User:alice", "describe shows who the tasks act as"


@pytest.mark.parametrize("stated", ["User:admin", "Service:connectors", "nonsense"])
def test_no_one_creates_a_connector_acting_as_someone_else(rig: Rig, stated: str) -> None:
    with pytest.raises(errors.InvalidConfigError, match="act as the principal that creates it"):
        rig.done(rig.admin.create(Principal("User", "alice"), "c", {"type": "recording", "principal": stated}))
    assert rig.runtime.store.view.connectors == {}
