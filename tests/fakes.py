"""Test doubles shared by the in-process tests of the broker core, replication and the control plane.

``FakeClusterView`` is a controller that commits every proposal at once (or holds them until the
test commits them) to a real ``MetadataImage`` through the real, pure ``apply_record``; the
broker core under test cannot tell it from ``ControlPlane``. ``StepSync`` runs fsync rounds when
the test says so. ``ThreadlessReactor`` and ``InlinePool`` let Raft nodes run on a ``Clock``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.task import Clock
from twisted.test.iosim import FakeAddress, FakeTransport, IOPump, connect
from zope.interface import implementer

from mqbroker import errors
from mqbroker.cluster.controller import create_partitions_record, create_topic_record
from mqbroker.cluster.metadata import MetadataImage, PartitionState, TopicState, apply_record
from mqbroker.cluster.metadata_records import (
    AllocateProducerIds,
    AlterBrokerConfigs,
    AlterPartition,
    AlterTopicConfigs,
    DeleteTopic,
    PutGenericRecord,
    ReassignPartition,
    Record,
    RegisterBroker,
)
from mqbroker.config import BrokerConfig, build_config
from mqbroker.core.broker import Broker
from mqbroker.core.topic_config import log_config_for
from mqbroker.durability.flusher import Flusher
from mqbroker.durability.sync_engines import ISyncEngine, SyncableLog, Synced, flush_one
from mqbroker.interfaces import IAuthorizer, IClusterView, IGenericRecords
from mqbroker.protocols.frontends import FrontEndContext
from mqbroker.protocols.native.server import build_factory as build_native_factory
from mqbroker.security.acl import AllowEverything
from mqbroker.security.service import SecurityServices
from mqbroker.storage.log import PartitionLog
from mqbroker.storage.manager import LogManager

ImageListener = Callable[[MetadataImage, "Record | None"], None]


@implementer(IClusterView, IGenericRecords)
class FakeClusterView:
    """An ``IClusterView`` (and ``IGenericRecords``) over an in-memory image: proposals commit at once, or wait for
    ``commit_held``."""

    def __init__(self, broker_ids: Iterable[int] = (1,), controller_id: int = 1) -> None:
        self.image = MetadataImage()
        self.voters = {node_id: ("127.0.0.1", 9395 + node_id) for node_id in broker_ids}
        self._controller_id = controller_id
        self._listeners: list[ImageListener] = []
        self._record_listeners: list[ImageListener] = []
        #: Every record proposed through the interface, in order (committed or not).
        self.proposed: list[Record] = []
        #: While True, proposals wait in ``held`` until ``commit_held`` (a slow controller).
        self.hold = False
        self.held: list[tuple[Record, Deferred[Any]]] = []
        for node_id in broker_ids:
            self.apply(RegisterBroker(node_id=node_id, host="127.0.0.1", port=9393 + node_id))

    # -- what the test does ----------------------------------------------------------------

    def apply(self, record: Record) -> int | None:
        """Commit ``record`` now (as if another broker proposed it) and tell the listeners; raise if refused."""
        value = apply_record(self.image, record)
        self.image.applied_index += 1
        for listener in [*self._record_listeners, *self._listeners]:
            listener(self.image, record)
        return value

    def commit_held(self) -> None:
        """Commit the held proposals in order."""
        held, self.held = self.held, []
        for record, waiter in held:
            self._commit(record, waiter)

    def partition(self, topic: str, number: int = 0) -> PartitionState:
        """The image's state of one partition."""
        return self.image.topics[topic].partitions[number]

    def tell_listeners(self) -> None:
        """Tell the listeners the whole image may have changed (as after catching up)."""
        for listener in list(self._listeners):
            listener(self.image, None)

    # -- IClusterView ----------------------------------------------------------------------

    def topic(self, name: str) -> TopicState | None:
        return self.image.topics.get(name)

    def controller_id(self) -> int:
        return self._controller_id

    def add_image_listener(self, listener: ImageListener) -> None:
        self._listeners.append(listener)

    def describe(self) -> dict[str, Any]:
        return {"node_id": 1, "leader": self._controller_id, "voters": sorted(self.voters)}

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str], replication_factor: int = 1
    ) -> Deferred[None]:
        return self._propose_from_image(lambda: create_topic_record(self.image, name, partitions, configs,
                                                                    replication_factor))

    def delete_topic(self, name: str) -> Deferred[None]:
        return self._propose(DeleteTopic(name=name))

    def create_partitions(self, name: str, total_count: int) -> Deferred[None]:
        return self._propose_from_image(lambda: create_partitions_record(self.image, name, total_count))

    def alter_configs(self, name: str, configs: Mapping[str, str]) -> Deferred[None]:
        return self._propose(AlterTopicConfigs(name=name, configs=dict(configs)))

    def alter_broker_configs(self, entity: str, set_configs: Mapping[str, str],
                             delete_configs: Sequence[str]) -> Deferred[None]:
        configs = {key: value for key, value in self.image.broker_configs.get(entity, {}).items()
                   if key not in delete_configs}
        return self._propose(AlterBrokerConfigs(entity=entity, configs={**configs, **set_configs}))

    def alter_partition(self, record: AlterPartition) -> Deferred[None]:
        return self._propose(record)

    def reassign_partition(self, topic: str, partition: int, target_replicas: Sequence[int]) -> Deferred[None]:
        record = ReassignPartition(topic=topic, partition=partition, target_replicas=tuple(target_replicas))
        return self._propose(record)

    def allocate_producer_ids(self, count: int) -> Deferred[int]:
        return self._propose(AllocateProducerIds(count=count), keep_value=True)

    # -- IGenericRecords -------------------------------------------------------------------

    def add_record_listener(self, listener: ImageListener) -> None:
        self._record_listeners.append(listener)

    def put_generic_record(self, kind: str, key: str, value: Any) -> Deferred[None]:
        return self._propose(PutGenericRecord(kind=kind, key=key, value=value))

    def when_caught_up(self) -> Deferred[None]:
        return succeed(None)

    # -- proposals -------------------------------------------------------------------------

    def _propose_from_image(self, build: Callable[[], Record]) -> Deferred[Any]:
        try:
            record = build()
        except errors.BrokerError as error:
            return fail(error)
        return self._propose(record)

    def _propose(self, record: Record, keep_value: bool = False) -> Deferred[Any]:
        self.proposed.append(record)
        waiter: Deferred[Any] = Deferred()
        if not keep_value:
            waiter.addCallback(lambda _: None)
        if self.hold:
            self.held.append((record, waiter))
        else:
            self._commit(record, waiter)
        return waiter

    def _commit(self, record: Record, waiter: Deferred[Any]) -> None:
        try:
            value = self.apply(record)
        except errors.BrokerError as error:
            waiter.errback(error)
        else:
            waiter.callback(value)


@implementer(ISyncEngine)
class StepSync:
    """Fsync rounds that wait for the test: ``finish_round`` fsyncs the round's logs (for real) and fires it."""

    name = "thread"

    def __init__(self) -> None:
        self.rounds: list[tuple[Sequence[SyncableLog], Deferred[list[Synced]]]] = []

    def sync(self, logs: Sequence[SyncableLog]) -> Deferred[list[Synced]]:
        done: Deferred[list[Synced]] = Deferred()
        self.rounds.append((logs, done))
        return done

    def finish_round(self) -> None:
        """Complete the oldest round (the flusher starts the next one, if any, as it fires)."""
        logs, done = self.rounds.pop(0)
        done.callback([flush_one(partition_log) for partition_log in logs])  # a log that fails gets its failure

    def finish_all(self) -> None:
        """Complete rounds until none is left."""
        while self.rounds:
            self.finish_round()

    def stop(self) -> None:
        pass


class ThreadlessReactor(Clock):
    """A task.Clock that runs "from thread" calls at once (the fake pool runs work inline)."""

    def callFromThread(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        function(*args, **kwargs)


class InlinePool:
    """Runs "threaded" work synchronously and records how often it was asked."""

    def __init__(self) -> None:
        self.calls = 0

    def callInThreadWithCallback(
        self, on_result: Callable[..., None], function: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        self.calls += 1
        on_result(True, function(*args, **kwargs))


def fired(deferred: Deferred[Any]) -> Any:
    """The result of a Deferred that has fired (raising its failure's exception)."""
    results: list[Any] = []
    deferred.addBoth(results.append)
    assert results, "the Deferred has not fired"
    outcome = results[0]
    if hasattr(outcome, "raiseException"):
        outcome.raiseException()
    return outcome


class RecordingFollower:
    """A ``replication.replica_manager.Follower`` that remembers what it was told to follow."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self.following: dict[tuple[str, int], tuple[int, int]] = {}

    def follow(self, following: dict[tuple[str, int], tuple[int, int]]) -> None:
        self.following = dict(following)


@dataclass
class BrokerRig:
    """A ``Broker`` built in-process on a Clock, real partition logs in a temporary directory and a fake cluster."""

    broker: Broker
    cluster: FakeClusterView
    clock: Clock
    engine: StepSync
    logs: LogManager
    #: A ``RecordingFollower`` unless ``build_broker`` was given another follower factory.
    follower: Any
    config: BrokerConfig

    def log(self, topic: str, partition: int = 0) -> PartitionLog:
        """The local log of a partition."""
        return self.logs.get(topic, partition)


def build_broker(
    data_dir: Path, cluster: FakeClusterView, *, node_id: int = 1, clock: Clock | None = None,
    settings: Mapping[str, Any] | None = None, authorizer: IAuthorizer | None = None,
    follower_factory: Callable[[Any], Any] | None = None,
) -> BrokerRig:
    """Wire a ``Broker`` the way ``service.py`` does, with test doubles for the cluster, the fsync engine and the
    follower, and tell it the image (as the control plane does once the broker caught up)."""
    config = build_config({"node_id": node_id, "data_dir": str(data_dir), **(settings or {})})
    clock = clock or Clock()
    logs = LogManager(str(data_dir), log_config_for(config.topic_defaults, {}))
    logs.open_all(0)
    engine = StepSync()
    followers: list[Any] = []

    def follow(sink: Any) -> Any:
        followers.append(RecordingFollower(sink) if follower_factory is None else follower_factory(sink))
        return followers[-1]

    broker = Broker(config=config, clock=clock, logs=logs, cluster=cluster,
                    flusher_factory=lambda on_durable: Flusher(engine, on_durable),
                    follower_factory=follow, authorizer=authorizer or AllowEverything(),
                    security_admin=SecurityServices(config, cluster))
    cluster.tell_listeners()
    return BrokerRig(broker=broker, cluster=cluster, clock=clock, engine=engine, logs=logs, follower=followers[0],
                     config=config)


@implementer(IStreamClientEndpoint)
class MemoryEndpoint:
    """Connects each client straight to a new server protocol through iosim's in-memory transports.

    Nothing moves until ``flush`` pumps the bytes both ways (running the Clock's due calls too).
    """

    def __init__(self, server_factory: Any, clock: Clock) -> None:
        self._server_factory = server_factory
        self._clock = clock
        self.pumps: list[IOPump] = []

    def connect(self, client_factory: Any) -> Deferred[Any]:
        server = self._server_factory.buildProtocol(FakeAddress())
        server.callLater = self._clock.callLater  # the adapter's idle and frame timers run on the test's Clock
        client = client_factory.buildProtocol(FakeAddress())
        self.pumps.append(connect(server, FakeTransport(server, isServer=True), client,
                                  FakeTransport(client, isServer=False), greet=False, clock=self._clock))
        return succeed(client)

    def flush(self) -> None:
        """Deliver everything written on every connection, until both sides are quiet."""
        for pump in self.pumps:
            pump.flush()


def native_server(broker: Any, config: BrokerConfig, clock: Clock) -> Any:
    """The native front end's listener factory over ``broker`` (no security, no metrics)."""
    return build_native_factory(broker, FrontEndContext(reactor=clock, config=config, metrics=None))
