"""The broker's control plane (Twisted): its Raft node and the metadata image, behind ``IClusterView``.

Every admin operation becomes a metadata record proposed to the controller (forwarded to the
Raft leader when this broker is not it); every broker applies the committed records to its
``MetadataImage`` and serves metadata from it. A broker with no ``controller_quorum`` is a
quorum of one, on the same code path. The control plane also registers this broker,
heartbeats for it, fences brokers whose session expired (while it leads), and tells its image
listeners (the broker core) of every change once this broker caught up.

It is handed its Raft node (with its storage and random source) and transport;
``cluster.wiring.build_control_plane`` builds them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from twisted.application.service import IService, MultiService
from twisted.internet.defer import Deferred, fail, inlineCallbacks, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from mqbroker import errors
from mqbroker.config import BrokerConfig, ConfigError
from mqbroker.cluster.controller import (
    BrokerSessions,
    create_partitions_record,
    create_topic_record,
    preferred_leader_elections,
)
from mqbroker.cluster.metadata import (
    CLUSTER_ENTITY,
    UNCLEAN_ELECTION_CONFIG,
    MetadataImage,
    MetadataStateMachine,
    TopicState,
)
from mqbroker.cluster.metadata_records import (
    AllocateProducerIds,
    AlterBrokerConfigs,
    AlterPartition,
    AlterTopicConfigs,
    BrokerHeartbeat,
    DeleteTopic,
    FenceBroker,
    PutGenericRecord,
    ReassignPartition,
    Record,
    RegisterBroker,
    decode_result,
    encode_record,
)
from mqbroker.interfaces import IClusterView, IGenericRecords
from mqbroker.raft.errors import ProposalDroppedError
from mqbroker.raft.messages import Campaign, Entry, EntryKind, Role, Snapshot
from mqbroker.raft.node import RaftNode

CONTROLLER_TICK_MS = 50
REGISTRATION_RETRY_MS = 200
#: After a controller election every broker gets at least half its session (and this many
#: heartbeat intervals) before it is fenced: its heartbeats waited for the new leader. Its session
#: still counts from the last heartbeat this node applied, so a broker that died with the old
#: leader is fenced about a session after its death, not a session after the election.
ELECTION_GRACE_HEARTBEATS = 2
#: The topic config the controller writes a cluster-wide default of at activation (see ``_write_activation_defaults``).
MIN_INSYNC_CONFIG = "min.insync.replicas"

#: Told of every change of the image once this broker caught up: (image, record; None: all may have changed).
ImageListener = Callable[[MetadataImage, "Record | None"], None]


class ClosableRaftStorage(Protocol):
    """What the control plane reads of its node's Raft log (``raft.storage.FileRaftStorage``), and closes at stop."""

    def snapshot(self) -> Snapshot: ...

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def entries(self, low: int, high: int) -> list[Entry]: ...

    def close(self) -> None: ...


def parse_quorum(config: BrokerConfig) -> dict[int, tuple[str, int]]:
    """The voters as {node id: (host, controller port)}; empty ``controller_quorum`` means this broker alone."""
    if not config.controller_quorum.strip():
        return {config.node_id: (config.public_host, config.controller_port)}
    voters: dict[int, tuple[str, int]] = {}
    for item in config.controller_quorum.split(","):
        node, at, address = item.strip().partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not node.isdigit() or not port.isdigit() or int(node) < 1:
            raise ConfigError(f"configuration key 'controller_quorum': {item!r} is not ID@HOST:PORT")
        voters[int(node)] = (host, int(port))
    if config.node_id not in voters:
        raise ConfigError(
            f"configuration key 'controller_quorum': node {config.node_id} is not among the voters {sorted(voters)}"
        )
    return voters


@implementer(IClusterView, IGenericRecords)
class ControlPlane(MultiService):
    """The metadata image of one broker and the Raft node replicating it; admin operations return Deferreds."""

    log = Logger()

    def __init__(
        self,
        *,
        config: BrokerConfig,
        clock: IReactorTime,
        voters: Mapping[int, tuple[str, int]],
        machine: MetadataStateMachine,
        node: RaftNode,
        storage: ClosableRaftStorage,
        transport: IService | None = None,
    ) -> None:
        """``node`` keeps its log in ``storage`` (closed when this service stops) and applies the committed
        records to ``machine``; ``transport`` (a child service, None for a quorum of one) carries the
        node's frames to the other voters."""
        super().__init__()
        assert node.state_machine is machine and node.storage is storage, "the parts of one Raft node"
        self.config = config
        self.node_id = config.node_id
        self._clock = clock
        self.voters = dict(voters)
        self.machine = machine
        self.node = node
        self._storage = storage
        self.transport = transport
        if transport is not None:
            transport.setServiceParent(self)
        self.sessions = BrokerSessions(config.broker_session_timeout_ms)
        self.caught_up = False
        self._image_listeners: list[ImageListener] = []
        #: The fenced brokers of the image the listeners last heard of (see ``_changed_nothing``).
        self._fenced_told: frozenset[int] = frozenset()
        self._apply_waiters: list[tuple[int, Deferred[None]]] = []
        self._caught_up_waiters: list[Deferred[None]] = []
        self._heartbeat_in_flight = False
        self._fencing: set[int] = set()
        self._activating = False
        self.machine.record_listeners.append(self._record_applied)
        self.machine.restore_listeners.append(self._image_restored)
        self.machine.index_listeners.append(self._index_applied)
        self.node.add_leader_listener(self._leader_changed)
        self._heartbeats = LoopingCall(self._heartbeat)
        self._heartbeats.clock = clock
        self._session_checks = LoopingCall(self._check_sessions)
        self._session_checks.clock = clock
        self._leader_balance = LoopingCall(self._elect_preferred_leaders)
        self._leader_balance.clock = clock

    # ---- life cycle ------------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self.node.start()
        if set(self.voters) == {self.node_id}:
            self.node.receive(Campaign())  # a quorum of one need not wait an election timeout
        # Checked every tick, not every heartbeat interval: a lapsed session is acted on at once.
        self._session_checks.start(CONTROLLER_TICK_MS / 1000.0, now=False)
        self._leader_balance.start(self.config.leader_imbalance_check_interval_ms / 1000.0, now=False)
        self._register()

    @inlineCallbacks
    def stopService(self) -> Any:
        for loop in (self._heartbeats, self._session_checks, self._leader_balance):
            if loop.running:
                loop.stop()
        yield self.node.stop()
        yield super().stopService()
        self._storage.close()

    def _register(self) -> None:
        record = RegisterBroker(node_id=self.node_id, host=self.config.public_host, port=self.config.public_native_port,
                                unclean_election_default=self._unclean_election_default,
                                listeners=self.config.listener_ports())
        registered = self._propose(record)
        registered.addCallbacks(self._registered, self._registration_failed)

    def _registration_failed(self, failure: Failure) -> None:
        failure.trap(errors.BrokerError)
        if self.running:
            self._clock.callLater(REGISTRATION_RETRY_MS / 1000.0, self._register)

    def _registered(self, _: Any) -> None:
        self.log.info("broker {node} registered with the controller (leader {leader})",
                      node=self.node_id, leader=self.node.leader_id)
        self.caught_up = True
        self._tell_listeners(self.image, None)
        self._heartbeats.start(self.config.broker_heartbeat_interval_ms / 1000.0, now=False)
        self._write_activation_defaults()
        waiters, self._caught_up_waiters = self._caught_up_waiters, []
        for waiter in waiters:
            waiter.callback(None)

    def when_caught_up(self) -> Deferred[None]:
        """Fire once this broker is registered and its image holds everything committed before that."""
        if self.caught_up:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._caught_up_waiters.append(waiter)
        return waiter

    # ---- reads -----------------------------------------------------------------------------

    def stored_topic_configs(self) -> dict[str, dict[str, str]]:
        """Topic configs as the stored Raft log has them, to open the local logs before the log is replayed.

        Uncommitted entries are included: this is only a hint, the replay reconfigures every log.
        """
        storage = self._storage
        scratch = MetadataStateMachine()
        scratch.restore(storage.snapshot().data)
        for entry in storage.entries(storage.first_index(), storage.last_index() + 1):
            if entry.kind is EntryKind.NORMAL and entry.data:
                scratch.apply(entry.index, entry.data)
        return {name: dict(topic.configs) for name, topic in scratch.image.topics.items()}

    @property
    def image(self) -> MetadataImage:
        """The metadata as of the last applied record."""
        return self.machine.image

    def topic(self, name: str) -> TopicState | None:
        """A topic of the image, or None."""
        return self.image.topics.get(name)

    def controller_id(self) -> int:
        """The Raft leader this node knows of (0 while there is none)."""
        return self.node.leader_id

    def add_image_listener(self, listener: ImageListener) -> None:
        """Tell ``listener`` of every change of the image once this broker caught up (see ``IClusterView``)."""
        self._image_listeners.append(listener)

    def add_record_listener(self, listener: ImageListener) -> None:
        """Tell ``listener`` of every record applied, caught up or not (see ``IGenericRecords``)."""
        self.machine.record_listeners.append(lambda record, image: listener(image, record))
        self.machine.restore_listeners.append(lambda image: listener(image, None))

    def describe(self) -> dict[str, Any]:
        """Voters, leader, term, commit index and brokers, for ``cluster describe``."""
        status = self.node.status()
        return {
            "node_id": self.node_id,
            "leader": status.leader_id,
            "term": status.term,
            "commit_index": status.commit_index,
            "applied_index": status.applied_index,
            "voters": sorted(status.configuration.voters),
            "brokers": [
                {"node_id": b.node_id, "host": b.host, "port": b.port, "state": "fenced" if b.fenced else "active"}
                for _, b in sorted(self.image.brokers.items())
            ],
        }

    # ---- writes ----------------------------------------------------------------------------

    # Admin writes wait until this broker is registered and caught up: a front end creating its
    # internal topics at start-up (or a client racing the start) must see the live brokers.

    def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str], replication_factor: int = 1
    ) -> Deferred[None]:
        """Create a topic with its partitions' replicas spread over the live brokers."""
        return self._propose_from_image(
            lambda image: create_topic_record(image, name, partitions, configs, replication_factor)
        )

    def alter_partition(self, record: AlterPartition) -> Deferred[None]:
        """Commit a partition leader's ISR change (refused if its epochs are stale)."""
        return self._propose_discarding(record)

    def reassign_partition(self, topic: str, partition: int, target_replicas: tuple[int, ...]) -> Deferred[None]:
        """Start moving a partition to ``target_replicas``."""
        return self._propose_from_image(
            lambda image: ReassignPartition(topic=topic, partition=partition, target_replicas=target_replicas)
        )

    def controlled_shutdown(self) -> Deferred[None]:
        """Before stopping: stop heartbeating and fence ourselves, so our leaderships move to ISR members first."""
        if self._heartbeats.running:
            self._heartbeats.stop()
        if not self.caught_up or self.image.brokers.get(self.node_id) is None:
            return succeed(None)
        fenced = self._propose_discarding(FenceBroker(node_id=self.node_id,
                                                      unclean_election_default=self._unclean_election_default))
        fenced.addTimeout(self.config.controlled_shutdown_timeout_ms / 1000.0, self._clock)
        fenced.addErrback(lambda failure: self.log.warn("controlled shutdown: leadership not moved ({error})",
                                                        error=failure.getErrorMessage()))
        return fenced

    def delete_topic(self, name: str) -> Deferred[None]:
        """Delete a topic everywhere."""
        return self._propose_from_image(lambda image: DeleteTopic(name=name))

    def create_partitions(self, name: str, total_count: int) -> Deferred[None]:
        """Grow a topic; the new partitions go to the least loaded live brokers."""
        return self._propose_from_image(lambda image: create_partitions_record(image, name, total_count))

    def alter_configs(self, name: str, configs: Mapping[str, str]) -> Deferred[None]:
        """Replace a topic's config overrides."""
        return self._propose_from_image(lambda image: AlterTopicConfigs(name=name, configs=dict(configs)))

    def alter_broker_configs(self, entity: str, set_configs: Mapping[str, str],
                             delete_configs: Sequence[str]) -> Deferred[None]:
        """Set and reset dynamic topic defaults of ``entity`` ("" the cluster, else a broker id)."""
        def build(image: MetadataImage) -> Record:
            configs = {key: value for key, value in image.broker_configs.get(entity, {}).items()
                       if key not in delete_configs}
            return AlterBrokerConfigs(entity=entity, configs={**configs, **set_configs})

        return self._propose_from_image(build)

    def put_generic_record(self, kind: str, key: str, value: Any) -> Deferred[None]:
        """Set (``value`` None: delete) a feature's typed record, e.g. a user or an ACL."""
        return self._propose_from_image(lambda image: PutGenericRecord(kind=kind, key=key, value=value))

    def allocate_producer_ids(self, count: int) -> Deferred[int]:
        """Reserve ``count`` producer ids cluster-wide; fire with the first."""
        return self.when_caught_up().addCallback(lambda _: self._propose(AllocateProducerIds(count=count)))

    def _propose_from_image(self, build: Callable[[MetadataImage], Record]) -> Deferred[None]:
        """Build a record from the image once caught up, and commit it."""

        def propose(_: object) -> Deferred[None]:
            try:
                record = build(self.image)
            except errors.BrokerError as error:
                return fail(error)
            return self._propose_discarding(record)

        return self.when_caught_up().addCallback(propose)

    def _propose_discarding(self, record: Record) -> Deferred[None]:
        proposed = self._propose(record)
        proposed.addCallback(lambda _: None)
        return proposed

    def _propose(self, record: Record) -> Deferred[Any]:
        """Commit ``record``; fire with its value once this broker has applied it too (read your writes)."""
        proposed = self.node.propose(encode_record(record))
        proposed.addErrback(_as_not_controller)
        proposed.addCallback(decode_result)
        proposed.addCallback(lambda result: self._applied_locally(result.index).addCallback(lambda _: result.value))
        return proposed

    def _applied_locally(self, index: int) -> Deferred[None]:
        if self.image.applied_index >= index:
            return succeed(None)
        waiter: Deferred[None] = Deferred()
        self._apply_waiters.append((index, waiter))
        return waiter

    def _index_applied(self, index: int) -> None:
        if not self._apply_waiters:
            return
        ready = [waiter for wanted, waiter in self._apply_waiters if wanted <= index]
        self._apply_waiters = [(wanted, waiter) for wanted, waiter in self._apply_waiters if wanted > index]
        for waiter in ready:
            waiter.callback(None)

    # ---- heartbeats and sessions -----------------------------------------------------------

    @property
    def _unclean_election_default(self) -> str:
        """This broker's ``log.unclean.leader.election.enable`` (dynamic over static), carried by the records that
        may elect leaders."""
        dynamic = self.image.dynamic_topic_default(self.node_id, UNCLEAN_ELECTION_CONFIG)
        return dynamic or self.config.topic_defaults.get(UNCLEAN_ELECTION_CONFIG, "false")

    def _write_activation_defaults(self) -> None:
        """While leading: give a cluster without dynamic defaults its ``min.insync.replicas`` (this broker's static
        value), once, as Kafka 4.1's controller does at activation; clients see it as the cluster-wide default."""
        if self._activating or not self.node.is_leader or not self.caught_up or CLUSTER_ENTITY in self.image.broker_configs:
            return
        self._activating = True
        value = self.config.topic_defaults.get(MIN_INSYNC_CONFIG, "1")
        written = self._propose(AlterBrokerConfigs(entity=CLUSTER_ENTITY, configs={MIN_INSYNC_CONFIG: value},
                                                   activation=True))
        written.addErrback(lambda failure: failure.trap(errors.BrokerError))
        written.addBoth(self._activation_done)

    def _activation_done(self, _: Any) -> None:
        self._activating = False

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def _heartbeat(self) -> None:
        self._write_activation_defaults()
        if self._heartbeat_in_flight:
            return
        self._heartbeat_in_flight = True
        sent = self._propose(BrokerHeartbeat(node_id=self.node_id,
                                             unclean_election_default=self._unclean_election_default))
        sent.addErrback(lambda failure: failure.trap(errors.BrokerError))
        sent.addBoth(self._heartbeat_done)

    def _heartbeat_done(self, _: Any) -> None:
        self._heartbeat_in_flight = False

    def _leader_changed(self, leader_id: int, role: Role) -> None:
        if role is Role.LEADER:
            grace_ms = max(ELECTION_GRACE_HEARTBEATS * self.config.broker_heartbeat_interval_ms,
                           self.config.broker_session_timeout_ms // 2)
            self.sessions.leadership_gained(self.image, self._now_ms(), grace_ms)
            self._fencing.clear()

    def _elect_preferred_leaders(self) -> None:
        """While leading the controller: hand leadership back to preferred replicas that are in sync again."""
        if not self.node.is_leader or not self.caught_up:
            return
        for record in preferred_leader_elections(self.image):
            elected = self._propose(record)
            elected.addErrback(lambda failure: failure.trap(errors.BrokerError))

    def _check_sessions(self) -> None:
        if not self.node.is_leader:
            return
        for record in self.sessions.expired(self.image, self._now_ms()):
            # The leader running this check is alive by definition: a reactor stalled past the
            # session (a loaded machine) must not make a broker fence itself and its partitions.
            if record.node_id in self._fencing or record.node_id == self.node_id:
                continue
            self.log.warn("broker {node} missed its session: fencing it", node=record.node_id)
            self._fencing.add(record.node_id)
            fenced = self._propose(dataclasses.replace(record, unclean_election_default=self._unclean_election_default))
            fenced.addErrback(lambda failure: failure.trap(errors.BrokerError))
            fenced.addBoth(lambda _, node_id=record.node_id: self._fencing.discard(node_id))

    # ---- image listeners ---------------------------------------------------------------------

    def _record_applied(self, record: Record, image: MetadataImage) -> None:
        if isinstance(record, (RegisterBroker, BrokerHeartbeat)):
            self.sessions.heard_from(record.node_id, self._now_ms())
        if self.caught_up and not self._changed_nothing(record):
            self._tell_listeners(image, record)

    def _changed_nothing(self, record: Record) -> bool:
        """A heartbeat of a broker that was live when the listeners last heard leaves the image as it was.

        Heartbeats are most of the records (each broker's, every ``broker_heartbeat_interval_ms``), and the
        listeners resync every partition on each record they hear; only a heartbeat that unfences a broker
        (which may elect leaders) changes anything. Every other record is told, so ``_fenced_told`` follows.
        """
        return isinstance(record, BrokerHeartbeat) and record.node_id not in self._fenced_told

    def _image_restored(self, image: MetadataImage) -> None:
        if self.caught_up:
            self._tell_listeners(image, None)

    def _tell_listeners(self, image: MetadataImage, record: Record | None) -> None:
        self._fenced_told = frozenset(node_id for node_id, broker in image.brokers.items() if broker.fenced)
        for listener in self._image_listeners:
            listener(image, record)


def _as_not_controller(failure: Failure) -> Failure:
    """A lost leadership or a proposal that timed out is NOT_CONTROLLER to the client: retry."""
    if failure.check(ProposalDroppedError, errors.RequestTimedOutError):
        return Failure(errors.NotControllerError(failure.value.message))
    return failure
