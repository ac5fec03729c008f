"""Composition root: builds the broker, its listeners and housekeeping timers as one service tree.

The only module that wires concrete classes together. Start-up order: open (and if needed
recover) every partition log, then listen. Shutdown order (SIGTERM): stop listening, answer
waiting fetches, finish the last fsync round, checkpoint, write the clean-shutdown marker.
"""

from __future__ import annotations

import gc
import pathlib
import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from twisted.application.internet import StreamServerEndpointService, TimerService
from twisted.application.service import MultiService
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.interfaces import IReactorTCP, IStreamServerEndpoint
from twisted.internet.posixbase import PosixReactorBase
from twisted.internet.threads import deferToThreadPool
from twisted.internet.endpoints import (
    HostnameEndpoint,
    TCP4ClientEndpoint,
    TCP4ServerEndpoint,
    TCP6ServerEndpoint,
    wrapClientTLS,
)
from twisted.logger import Logger
from twisted.plugin import getPlugins
from twisted.python.threadpool import ThreadPool

from mqbroker import __version__, limits
from mqbroker.core.broker import Broker
from mqbroker.core.topic_config import log_config_for
from mqbroker.ops.affinity import parse_cpu_list, pin_all_threads
from mqbroker.config import BrokerConfig, dial_address
from mqbroker.client.twisted.broker_login import log_in_as_broker
from mqbroker.connectors.wiring import Connectors, build_connectors
from mqbroker.cluster.controlplane import ControlPlane, parse_quorum
from mqbroker.cluster.wiring import build_control_plane
from mqbroker.replication.fetcher import ReplicaFetcher, ReplicaSink
from mqbroker.durability.flusher import Flusher
from mqbroker.durability.sync_engines import ISyncEngine, start_sync_engine
from mqbroker.protocols.frontends import FrontEndContext, FrontEndSecurity
from mqbroker.groups.coordinator import MemberIdGenerator
from mqbroker.interfaces import IBroker, IFrontEnd
from mqbroker.protocols.listeners import listener_factory
from mqbroker.durability.cleaner_service import LogCleanerService
from mqbroker.ops.metrics import BrokerMetrics
from mqbroker.forwarding.peers import PeerConnections
from mqbroker.forwarding.routing_broker import RoutingBroker
from mqbroker.forwarding.transaction_peers import NativeTransactionPeers
from mqbroker.security.cluster_auth import ClusterAuthentication, controller_tls_files
from mqbroker.security.peer_handshake import AuthenticatedClientEndpoint, AuthenticatedServerEndpoint
from mqbroker.security.quotas import ConnectionLimiter
from mqbroker.security.service import AuthenticationAudit, SecurityServices, tls_files
from mqbroker.storage.manager import LogManager

#: A new data directory is the broker's alone: partition data, the metadata log, the server secret.
DATA_DIRECTORY_MODE = 0o700


def _listen_endpoint(reactor: IReactorTCP, host: str, port: int) -> IStreamServerEndpoint:
    """A TCP endpoint on ``host`` (IPv4 or IPv6 literal, or a name resolved by the OS)."""
    interface = "" if host in ("", "0.0.0.0") else dial_address(host)
    if ":" in interface:
        return TCP6ServerEndpoint(reactor, port, backlog=limits.listen_backlog, interface=interface)
    return TCP4ServerEndpoint(reactor, port, backlog=limits.listen_backlog, interface=interface)


def discover_front_ends() -> list[IFrontEnd]:
    """Every ``IFrontEnd`` plugin installed under ``twisted.plugins``, by name."""
    import twisted.plugins

    return sorted(getPlugins(IFrontEnd, twisted.plugins), key=lambda front_end: front_end.name)


class BrokerService(MultiService):
    """Owns the broker: opens the logs on start, adds the listeners, shuts down gracefully."""

    log = Logger()

    def __init__(self, config: BrokerConfig, reactor: PosixReactorBase) -> None:
        """``reactor``: the running reactor, every facet of it (time, TCP, threads, its life cycle)."""
        super().__init__()
        self.config = config
        self.reactor = reactor
        self.data_dir = pathlib.Path(config.data_dir).resolve()
        self.broker: Broker | None = None
        self.control: ControlPlane | None = None
        self.security: SecurityServices | None = None
        self.metrics = BrokerMetrics()
        #: Housekeeping off the reactor thread: controller persistence, checkpoints, the log cleaner.
        self._threadpool = ThreadPool(minthreads=1, maxthreads=limits.background_threads_max, name="mqbroker-background")
        #: Opens, creates and checkpoints many partition logs at once, their fsyncs overlapping (``LogManager``).
        self._log_threads = ThreadPoolExecutor(config.log_recovery_threads, thread_name_prefix="mqbroker-logs")
        #: Runs the produce path's fsync rounds (see ``Flusher``, ``sync_engines``).
        self._sync_engine: ISyncEngine | None = None
        self._logs: LogManager | None = None
        #: Forwards the MQTT and AMQP front ends' partition calls to the other brokers' leaders.
        self.peers: PeerConnections | None = None
        #: The connector runtime and admin service (None when ``connectors.enabled`` is false).
        self.connectors: Connectors | None = None
        self.listening_ports: dict[str, Any] = {}
        #: The front ends that replay state before they serve (``startup.StartedSignal``); ``/ready`` waits for them.
        self._front_end_starts: list[Any] = []
        #: The controller voters {node id: (host, port)} and how brokers prove who they are to each other.
        self._voters = parse_quorum(config)
        self.cluster_auth = ClusterAuthentication.from_config(config, frozenset(self._voters))

    def startService(self) -> None:
        if self.config.cpu_affinity:  # first, so that every thread started below inherits the mask
            pin_all_threads(parse_cpu_list(self.config.cpu_affinity))
            self.log.info("broker threads run on CPU(s) {cpus} (cpu_affinity)", cpus=self.config.cpu_affinity)
        self.data_dir.mkdir(mode=DATA_DIRECTORY_MODE, parents=True, exist_ok=True)  # an existing one keeps its mode
        self.log.info("mqbroker {version} starting: node {node_id}, data directory {data_dir}",
                      version=__version__, node_id=self.config.node_id, data_dir=str(self.data_dir))
        now_ms = int(self.reactor.seconds() * 1000)
        topic_defaults = self.config.topic_defaults
        self._logs = LogManager(str(self.data_dir), log_config_for(topic_defaults, {}), self.config.segment_files_open_max,
                                self._log_threads.map)
        self.control = build_control_plane(
            config=self.config, reactor=self.reactor, data_dir=self.data_dir, threadpool=self._threadpool,
            listen_endpoint=self._controller_endpoint, peer_endpoint=self._controller_peer_endpoint,
            on_fatal=lambda failure: self.reactor.stop(),
        )
        self.security = SecurityServices(self.config, self.control, unreadable=self.metrics.unreadable)
        stored_configs = self.control.stored_topic_configs()
        self._logs.open_all(now_ms, {name: log_config_for(topic_defaults, configs) for name, configs in stored_configs.items()})
        self.log.info("opened {count} partition log(s)", count=len(self._logs.partitions()))
        self._threadpool.start()
        try:
            self._start_serving()
        except Exception as error:
            # e.g. a port in use: undo what started, so the process can exit with the error
            self.log.critical("mqbroker cannot start: {error}", error=error)
            self._threadpool.stop()
            if self._sync_engine is not None:
                self._sync_engine.stop()
            self._logs.close()
            self._log_threads.shutdown()
            raise

    def _start_serving(self) -> None:
        """Build the broker and start its timers and listeners (the logs are open)."""
        self.broker = Broker(
            config=self.config,
            clock=self.reactor,
            logs=self._logs,
            cluster=self.control,
            flusher_factory=lambda on_durable: Flusher(self._start_sync_engine(), on_durable, self.reactor),
            follower_factory=self._build_fetcher,
            authorizer=self.security.authorizer,
            security_admin=self.security,
            unreadable=self.metrics.unreadable,
        )
        broker = self.broker
        started = self.control.when_caught_up()
        started.addCallback(lambda _: broker.start_groups(MemberIdGenerator(random.SystemRandom())))
        started.addErrback(lambda failure: self.log.failure("consumer groups did not start", failure))
        started.addCallback(lambda _: self._freeze_start_up_heap())
        self._ensure_decoy_secret()
        self.metrics.attach(self.broker.stats)
        self._add_timers(self.broker)
        LogCleanerService(self._logs.logs, self.reactor, self._threadpool,
                          self.config.log_cleaner_interval_ms / 1000.0).setServiceParent(self)
        routing = self._build_routing_broker(self.broker)
        shares = self.control.when_caught_up()
        shares.addCallback(lambda _: broker.start_share_groups(
            routing, MemberIdGenerator(random.SystemRandom()), self._push_factory()))
        shares.addErrback(lambda failure: self.log.failure("share groups did not start", failure))
        if self.config.connectors_enabled:
            self._build_connectors(routing, started)
        self._add_listeners(self.broker, routing)
        self.control.setServiceParent(self)  # last: a listener that cannot bind stops start-up before any fsync thread
        super().startService()

    def _push_factory(self) -> Any:
        """Push subscriptions: a dispatcher per share group with a ``push.endpoint``, POSTing with an Agent."""
        from mqbroker.shares.push.dispatcher import dispatcher_factory

        return dispatcher_factory(self.reactor)

    def _build_connectors(self, routing: IBroker, started: Deferred[Any]) -> None:
        """The connector runtime (it starts once this broker caught up with the metadata) and its metrics."""
        assert self.broker is not None and self.security is not None and self.peers is not None
        self.connectors = build_connectors(config=self.config, reactor=self.reactor, routing=routing,
                                           local=self.broker, forward=self.peers.request,
                                           authorizer=self.security.authorizer, unreadable=self.metrics.unreadable)
        self.metrics.registry.register(self.connectors.collector)
        started.addCallback(lambda _: self.reactor.callLater(0, self._start_connectors))

    def _start_connectors(self) -> None:
        if self.running and self.connectors is not None:
            self.connectors.start()

    def _ensure_decoy_secret(self) -> None:
        """Until the cluster has its SCRAM decoy secret, keep trying to make one (a proposal needs a quorum)."""
        assert self.security is not None
        ensured = self.security.ensure_decoy_secret()
        ensured.addErrback(lambda failure: self.running and self.reactor.callLater(1.0, self._ensure_decoy_secret))

    def _start_sync_engine(self) -> ISyncEngine:
        self._sync_engine = start_sync_engine(self.reactor, self.config.fsync_engine, str(self.data_dir), self.log)
        self.log.info("fsync rounds run through {engine}", engine={"aio": "Linux AIO", "thread": "a thread", "worker": "a C thread"}[self._sync_engine.name])
        return self._sync_engine

    def _build_fetcher(self, sink: ReplicaSink) -> ReplicaFetcher:
        """The follower side of replication: fetches from the leaders of the partitions this broker follows."""
        files = tls_files(self.config)
        if self.config.security_inter_broker_tls and (files is None or files.ca is None or not self.config.native_tls_port):
            raise ValueError("security.inter_broker_tls needs --tls-cert, --tls-key, --tls-ca and a native TLS port")
        return ReplicaFetcher(
            node_id=self.config.node_id, reactor=self.reactor, sink=sink, address_of=self._address_of,
            fetch_wait_ms=self.config.replica_fetch_wait_max_ms, partition_bytes_max=self.config.replica_fetch_max_bytes,
            response_bytes_max=self.config.replica_fetch_response_max_bytes,
            endpoint_for=self._replica_tls_endpoint if self.config.security_inter_broker_tls else None,
            authenticate=self._native_login(),
        )

    def _native_login(self) -> Any:
        """What the replica fetcher and peer connections run after ApiVersions: SCRAM as ``Broker:<id>``
        without inter-broker TLS when the inter-broker user is configured (None: nothing)."""
        login = self.cluster_auth.login
        if login is None or self.config.security_inter_broker_tls:
            return None
        node_id = self.config.node_id
        return lambda protocol: Deferred.fromCoroutine(log_in_as_broker(protocol, login, node_id))

    def _address_of(self, node_id: int) -> tuple[str, int] | None:
        """Where broker ``node_id``'s native listener is, as registered in the metadata image."""
        assert self.control is not None
        registered = self.control.image.brokers.get(node_id)
        return None if registered is None else (registered.host, registered.port)

    def _leader_of(self, topic: str, partition: int) -> int | None:
        """The leader of a partition in the metadata image (-1: none; None: no such partition)."""
        assert self.control is not None
        record = self.control.topic(topic)
        if record is None or not 0 <= partition < len(record.partitions):
            return None
        return record.partitions[partition].leader_id

    def _build_routing_broker(self, broker: Broker) -> RoutingBroker:
        """The broker the MQTT and AMQP front ends see: partitions led elsewhere are served by their leaders.

        The same connections carry the core's transaction calls to other brokers (verifications, markers).

        Forwarded requests use one pooled native connection per broker, as the replica fetcher does
        (over the leaders' TLS listeners with this broker's certificate under ``inter_broker_tls``).
        """
        assert self.security is not None
        endpoint_for = self._replica_tls_endpoint if self.config.security_inter_broker_tls else self._peer_tcp_endpoint
        self.peers = PeerConnections(reactor=self.reactor, client_id=f"broker-{self.config.node_id}-frontends",
                                     address_of=self._address_of, endpoint_for=endpoint_for,
                                     authenticate=self._native_login())
        broker.use_transaction_peers(NativeTransactionPeers(self.peers))
        return RoutingBroker(local=broker, node_id=self.config.node_id, leader_of=self._leader_of, peers=self.peers,
                             authorizer=self.security.authorizer, clock=self.reactor)

    def _peer_tcp_endpoint(self, host: str, port: int) -> Any:
        """A plaintext connection to another broker's native listener."""
        return HostnameEndpoint(self.reactor, dial_address(host), port)

    def _replica_tls_endpoint(self, host: str, port: int) -> Any:
        """Inter-broker TLS: a leader's native TLS listener (its native port plus our TLS offset, as in metadata),
        the leader verified against ``tls_ca`` by its registered host name, our own certificate as the client
        certificate (the leader maps it to this broker's principal)."""
        files = tls_files(self.config)
        assert files is not None and files.ca is not None, "checked by _build_fetcher"
        from mqbroker.security.tls import client_options

        options = client_options(host, files.ca, files.certificate, files.key)
        tls_port = port + self.config.native_tls_port - self.config.native_port
        return wrapClientTLS(options, TCP4ClientEndpoint(self.reactor, dial_address(host), tls_port))

    def _add_timers(self, broker: Broker) -> None:
        timers = [
            (self.config.flush_check_interval_ms, broker.maintenance.flush_due_logs),
            (max(50, self.config.replica_lag_time_max_ms // 8), broker.maintenance.check_isr),
            (self.config.retention_check_interval_ms, broker.maintenance.apply_retention),
            (self.config.retention_check_interval_ms, broker.maintenance.expire_producers),
            (self.config.checkpoint_interval_ms, self._checkpoint),
        ]
        for interval_ms, call in timers:
            timer = TimerService(interval_ms / 1000.0, call)
            timer.clock = self.reactor
            timer.setServiceParent(self)

    def _freeze_start_up_heap(self) -> None:
        """Move everything start-up allocated (modules, classes, metadata) out of the cyclic collector's reach.

        Those objects live as long as the process; left in the oldest generation, every full
        collection walks them all and stalls the reactor for tens of milliseconds.
        """
        gc.collect()
        gc.freeze()
        self.log.info("start-up heap frozen: {count} objects exempt from garbage collection", count=gc.get_freeze_count())

    def _checkpoint(self) -> Any:
        """Write recovery points and producer snapshots in the thread pool (each involves fsyncs)."""
        assert self._logs is not None
        return deferToThreadPool(self.reactor, self._threadpool, self._logs.checkpoint)

    def _add_listeners(self, broker: Broker, routing: RoutingBroker) -> None:
        """Every front end's listeners: those whose clients route themselves get ``broker``, the others ``routing``."""
        assert self.security is not None
        context = FrontEndContext(reactor=self.reactor, config=self.config, metrics=self.metrics,
                                  security=front_end_security(self.security),
                                  connectors=self.connectors.admin if self.connectors is not None else None,
                                  cluster_records=self.control)
        tls = self.security.tls
        admin_views: dict[str, Any] = {}  # what the admin API shows of each front end
        for front_end in discover_front_ends():
            port = getattr(self.config, front_end.config_key)
            # e.g. native_tls_port; a TLS listener exists only when a certificate is configured
            tls_port = getattr(self.config, front_end.config_key.replace("_port", "_tls_port"), 0) if tls else 0
            if port == 0 and tls_port == 0:
                self.log.info("{protocol} listener disabled ({key} = 0)", protocol=front_end.name, key=front_end.config_key)
                continue
            served = broker if getattr(front_end, "clients_route", False) else routing
            factory = front_end.build_factory(served, context)
            if getattr(factory, "started", None) is not None:
                self._front_end_starts.append(factory.started)
            if getattr(factory, "admin_view", None) is not None:
                admin_views[front_end.name] = factory.admin_view
            if port:
                self._listen(front_end.name, port, factory)
            if tls_port:
                self._listen(f"{front_end.name}-tls", tls_port, factory, tls)
        if self.config.http_port:
            from mqbroker.ops.api.operations import AdminOperations
            from mqbroker.ops.http import build_site

            assert self.security is not None
            operations = AdminOperations(broker=routing, authorizer=self.security.authorizer, counters=broker.stats,
                                         config=self.config, front_ends=admin_views, share_groups=routing.share_groups,
                                         connectors=self.connectors.admin if self.connectors is not None else None)
            http_tls = tls if self.config.http_tls else None
            self._listen("http", self.config.http_port, build_site(self, self.metrics, operations), http_tls)

    def _controller_endpoint(self, port: int) -> Any:
        """The controller's listening endpoint on ``controller_host``: its own connection budget, mutual TLS
        with ``controller_tls``, then the broker handshake (a peer must prove a voter's identity)."""
        endpoint = _listen_endpoint(self.reactor, self.config.controller_host or self.config.host, port)
        tls = None
        if self.config.controller_tls:
            from mqbroker.security.tls import ReloadingServerContextFactory

            tls = ReloadingServerContextFactory(controller_tls_files(self.config))
        budget = self.config.controller_connections_max  # its own budget; voters share one host in tests
        limiter = ConnectionLimiter(total_max=budget, per_host_max=budget)
        return AuthenticatedServerEndpoint(endpoint, self.cluster_auth.policy(), self.reactor,
                                           wrap_factory=lambda factory: listener_factory(factory, limiter, "controller", tls))

    def _controller_peer_endpoint(self, host: str, port: int) -> Any:
        """How this broker dials a peer controller: TLS with our broker certificate under ``controller_tls``,
        then the broker handshake proving our node id."""
        peer_id = next(node_id for node_id, (voter_host, voter_port) in self._voters.items()
                       if voter_port == port and host in (voter_host, dial_address(voter_host)))
        endpoint = TCP4ClientEndpoint(self.reactor, host, port)
        if self.config.controller_tls:
            from mqbroker.security.tls import client_options

            files = controller_tls_files(self.config)
            endpoint = wrapClientTLS(client_options(host, files.ca, files.certificate, files.key), endpoint)
        auth = self.cluster_auth
        return AuthenticatedClientEndpoint(endpoint, reactor=self.reactor, node_id=self.config.node_id, peer_id=peer_id,
                                           method=auth.controller_method, login=auth.login,
                                           certificate_rules=auth.certificate_rules)

    def _listen(self, name: str, port: int, factory: Any, tls: Any = None) -> None:
        endpoint = _listen_endpoint(self.reactor, self.config.host, port)
        assert self.security is not None
        listener = StreamServerEndpointService(endpoint, listener_factory(factory, self.security.limiter_for(name), name, tls))
        listener._raiseSynchronously = True  # a port in use must stop start-up, not log and carry on
        listener.setServiceParent(self)
        self.listening_ports[name] = listener
        self.log.info("{protocol} listener on {host}:{port}", protocol=name, host=self.config.host, port=port)

    @inlineCallbacks
    def stopService(self) -> Any:
        self.log.info("mqbroker stopping: closing listeners, flushing and checkpointing")
        if self.connectors is not None:
            yield self.connectors.stop()  # first: their last checkpoints need this broker to lead their partitions
        if self.control is not None and self.control.running:
            yield self.control.controlled_shutdown()  # leaderships move to other in-sync replicas first
        yield super().stopService()  # listeners and timers stop first
        if self.peers is not None:
            yield self.peers.stop()
        if self.broker is not None:
            yield self.broker.stop()
        self._threadpool.stop()
        if self._sync_engine is not None:
            self._sync_engine.stop()
        if self._logs is not None:
            self._logs.close()
        self._log_threads.shutdown()
        self.log.info("mqbroker stopped cleanly (clean-shutdown marker written)")

    def is_ready(self) -> bool:
        """True once the logs are open, the listeners are up and the front ends have replayed their state."""
        return (self.running and self.broker is not None and self.control is not None and self.control.caught_up
                and all(signal.started for signal in self._front_end_starts))


def front_end_security(services: SecurityServices) -> FrontEndSecurity:
    """The connection-level part of the security services that the front ends get (admin goes through IBroker)."""
    acls = services.acls if services.authorizer is services.acls else None
    return FrontEndSecurity(authenticator=services.authenticator, authorizer=services.authorizer,
                            quotas=services.quotas, audit=AuthenticationAudit(), acls=acls)


def build_broker_service(config: BrokerConfig, reactor: PosixReactorBase) -> MultiService:
    """The whole broker as one service for twistd or ``mqbroker serve`` (the operator's umask applies)."""
    return BrokerService(config, reactor)


