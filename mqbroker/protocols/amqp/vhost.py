"""The virtual host ``/``: exchanges, queues and bindings, persisted in compacted topics and replayed.

Every declaration change is written to ``__amqp_metadata`` (and awaited) before the client
hears declare-ok, so what a client saw declared survives a crash; queue states go to
``__amqp_queue_state`` a moment after they change (a crash may then redeliver a message whose
ack was not yet written: at-least-once). All broker access goes through ``IBroker``.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.internet.task import deferLater

from mqbroker import errors, limits
from mqbroker.interfaces import IBroker
from mqbroker.limits import produce_timeout_ms_default
from mqbroker.model import Acks, Principal, TopicSpec
from mqbroker.protocols.amqp import spec
from mqbroker.protocols.amqp.appender import BatchStored
from mqbroker.protocols.amqp.codec import decode_properties, encode_properties
from mqbroker.protocols.amqp.definitions import VHOST_HEADER, DefinitionsFollower
from mqbroker.protocols.amqp.held_bytes import ByteBudget
from mqbroker.protocols.amqp.queue_arguments import (
    DeathReason,
    QueuePolicy,
    QueueType,
    x_death_headers,
)
from mqbroker.protocols.amqp.queue_state import DeadLetter, QueuedMessage, QueueState
from mqbroker.protocols.amqp.queue_snapshots import QueueSnapshots
from mqbroker.protocols.amqp.queues import REMOTE_OWNER, ClassicQueue, ConsumerKey
from mqbroker.protocols.amqp.source_readers import SourceReaders
from mqbroker.protocols.amqp.routing import (
    Binding,
    DestinationKind,
    Exchange,
    ExchangeType,
    Router,
)
from mqbroker.protocols.amqp.sources import (
    Positions,
    SourceRecord,
    source_topic,
)
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode
from mqbroker.protocols.amqp.stored import (
    METADATA_TOPIC,
    QUEUE_STATE_TOPIC,
    QueueDeclaration,
    StoredMessage,
    binding_key,
    exchange_key,
    exchange_record,
    queue_key,
    queue_record,
    queue_topic,
)
from mqbroker.protocols.amqp.queue_home import check_served_here
from mqbroker.protocols.amqp.share_arguments import takes_share_default
from mqbroker.protocols.amqp.share_queue import ShareQueue
from mqbroker.protocols.amqp.stream_queue import StreamQueue
from mqbroker.protocols.amqp.transient import bindings_stored, exchange_stored
from mqbroker.protocols.amqp.vhost_replay import forget_previous_run, read_compacted, replay
from mqbroker.protocols.startup import StartedSignal
from mqbroker.records.builder import BatchBuilder
from mqbroker.records.readable import (
    SKIPPED_LOG_FORMAT,
    UnreadableBatch,
    UnreadableTally,
)
from mqbroker.security.names import name_problem

if TYPE_CHECKING:
    from prometheus_client import Counter

Queue = ClassicQueue | StreamQueue | ShareQueue
#: Who the AMQP front end acts as for its own bookkeeping topics.
INTERNAL_PRINCIPAL = Principal("Service", "amqp")
#: Pause between reads of the queue states while their partition has no reachable leader.
ADOPT_RETRY_S = 0.2
#: How often TTL and x-expires are checked.
HOUSEKEEPING_INTERVAL_S = 1.0
#: Longest queue or exchange name (a shortstr holds 255 bytes).
NAME_LENGTH_MAX = 255
_PUBLIC = Exchange(name="", type=ExchangeType.DIRECT)  # stands in for an exchange that is not internal


def _error(code: ReplyCode, text: str, method: spec.Method) -> AmqpError:
    return AmqpError(code, text, class_id=method.CLASS_ID, method_id=method.METHOD_ID)


def _check_name(kind: str, name: str, method: spec.Method) -> None:
    """406 for a queue or exchange name that is not printable (it appears in logs and stored keys)."""
    problem = name_problem(name, NAME_LENGTH_MAX)
    if problem is not None:
        raise _error(ReplyCode.PRECONDITION_FAILED, f"{kind} name {name[:64]!r} {problem}", method)


class VirtualHost:
    """Exchanges, queues and bindings of vhost ``/``, shared by every AMQP connection."""

    log = Logger()

    def __init__(self, broker: IBroker, reactor: IReactorTime, unreadable: UnreadableTally | None = None,
                 unroutable: Counter | None = None, default_queue_type: QueueType = QueueType.CLASSIC,
                 node_id: int | None = None) -> None:
        """``unreadable`` counts the batches its readers skip, ``unroutable`` the client messages that reach
        no queue (labels protocol, outcome; the broker's metrics); ``default_queue_type`` is the type of a
        queue declared without one (``amqp_default_queue_type``; share only where ``takes_share_default``);
        ``node_id`` is this broker's, the home of the classic queues declared through it (``queue_home.py``)."""
        self.broker = broker
        self.node_id = node_id
        self.default_queue_type = default_queue_type
        self.reactor = reactor
        self.unreadable = unreadable or UnreadableTally()
        self._unroutable = unroutable
        #: Message bytes every connection's channels hold in memory together (partial messages, open transactions).
        self.held_bytes = ByteBudget(limits.amqp_held_bytes_broker_max)
        self.principal = INTERNAL_PRINCIPAL
        self.router = Router()
        self.queues: dict[str, Queue] = {}
        #: Share queues whose x-expires is being checked with their group's host (one check at a time each).
        self._expiry_checks: set[str] = set()
        self.persisted_exchanges: dict[str, Exchange] = {}
        self.persisted_bindings: set[Binding] = set()
        #: Queue state snapshots waiting to be written.
        self.snapshots = QueueSnapshots(reactor, self.queues, self.write_records)
        self.sources = SourceReaders(self)
        #: Names this virtual host's metadata records (``definitions.py``); new at every start.
        self.instance = uuid.uuid4().hex.encode()
        #: Applies the declarations other brokers make (started once the replay is done; None alone).
        self.definitions: DefinitionsFollower | None = None
        #: Queues declared through other brokers and not consumed here yet (their state is read at first use).
        self.learned_queues: set[str] = set()
        #: Fires once the declarations are replayed; connections wait for it before Connection.OpenOk.
        self.started = StartedSignal(reactor, "AMQP front end")
        Deferred.fromCoroutine(self.started.run(self._load, self.log))

    def now_ms(self) -> int:
        """The reactor's clock in milliseconds."""
        return int(self.reactor.seconds() * 1000)

    # --- start-up: replay the compacted topics ------------------------------------------------

    async def _load(self) -> None:
        """One start attempt: replay the declarations, then follow other brokers' and start housekeeping."""
        replayed = await replay(self)
        if replayed.brokers_count > 1:
            self.definitions = DefinitionsFollower(self, replayed.metadata_end)
            Deferred.fromCoroutine(self.definitions.run()).addErrback(
                lambda failure: self.log.failure("the AMQP definitions follower failed", failure))
        self.reactor.callLater(HOUSEKEEPING_INTERVAL_S, self._housekeep)
        await forget_previous_run(self)  # before clients come: one redeclaring a queue of the last run gets a new one
        self.log.info("AMQP virtual host /: {exchanges} exchanges, {queues} queues, {bindings} bindings replayed",
                      exchanges=len(self.persisted_exchanges), queues=replayed.queues_count,
                      bindings=replayed.bindings_count)
        try:
            await self.sources.sync(replayed.positions)
        except errors.BrokerError as error:  # only forgetting positions of gone sources failed: harmless, redone next start
            self.log.warn("AMQP virtual host could not forget stale source positions: {error}", error=error)

    def skip_bad_record(self, topic: str, offset: int, error: Exception, consequence: str) -> None:
        """A replayed record that does not decode: count it, log where it is, go on without it."""
        fields = self.unreadable.skipped_at("AMQP replay", topic, 0, offset, offset, error)
        self.log.warn(SKIPPED_LOG_FORMAT + " ({consequence})", consequence=consequence, **fields)

    def skip_unreadable(self, reader: str, batch: UnreadableBatch) -> None:
        """A batch ``reader`` could not decode: count it, log where it is; the reader goes on after it."""
        self.log.warn(SKIPPED_LOG_FORMAT, **self.unreadable.skipped(reader, batch))

    # --- persistence --------------------------------------------------------------------------

    async def write_records(self, topic: str, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Write keyed records to a compacted topic of the virtual host (fires once durable)."""
        builder = BatchBuilder()
        now_ms = self.now_ms()
        for key, value in entries:
            builder.append(now_ms, key, value, ((VHOST_HEADER, self.instance),))
        if builder.records_count:
            await self.broker.produce(self.principal, topic, 0, builder.build(), Acks.ALL, produce_timeout_ms_default)

    async def sync_metadata(self, extra: Iterable[tuple[bytes, bytes | None]] = ()) -> None:
        """Write what changed in the router since the last write (the exchanges and bindings ``transient.py`` stores)."""
        entries = list(extra)
        current = {name: exchange for name, exchange in self.router.exchanges.items() if exchange_stored(exchange)}
        for name in self.persisted_exchanges.keys() - current.keys():
            entries.append((exchange_key(name), None))
        entries += [exchange_record(exchange) for name, exchange in current.items()
                    if self.persisted_exchanges.get(name) != exchange]
        stored_queues = {name for name, queue in self.queues.items()
                         if bindings_stored(queue.declaration, queue.owner is not None, self.definitions is not None)}
        bindings = {binding for binding in self.router.bindings
                    if binding.destination_kind is DestinationKind.EXCHANGE or binding.destination in stored_queues}
        entries += [(binding_key(binding), None) for binding in self.persisted_bindings - bindings]
        entries += [(binding_key(binding), b"") for binding in bindings - self.persisted_bindings]
        self.persisted_exchanges, self.persisted_bindings = current, bindings
        await self.write_records(METADATA_TOPIC, entries)
        await self.sources.sync({})

    def save_positions(self, topic: str, positions: Positions) -> Deferred[None]:
        """Store a source reader's positions (durably)."""
        return self.sources.save_positions(topic, positions)

    def route_source(self, topic: str, records: list[SourceRecord]) -> list[BatchStored]:
        """Route records of a native topic through every exchange reading it; the batches they went to."""
        return self.sources.route(topic, records)

    def state_changed(self, queue: ClassicQueue) -> None:
        """Schedule a write of the queue's state snapshot (not for a queue only published to here: the broker
        consuming it writes its state)."""
        if queue.owner is not None or not queue.declaration.durable or queue.name in self.learned_queues:
            return
        self.snapshots.changed(queue.name)

    # --- queues -------------------------------------------------------------------------------

    def add_queue(self, declaration: QueueDeclaration, owner: int | None, snapshot: bytes | None = None) -> Queue:
        if declaration.exclusive and owner is None:
            owner = REMOTE_OWNER  # replayed or learned: its connection is on its home broker
        policy = QueuePolicy.from_arguments(declaration.arguments)
        queue: Queue
        if policy.queue_type is QueueType.STREAM:
            queue = StreamQueue(self, declaration, owner)
        elif policy.queue_type is QueueType.SHARE:
            queue = ShareQueue(self, declaration, owner)
        else:
            state = (QueueState.restore(snapshot, policy=policy) if snapshot
                     else QueueState(policy=policy, now_ms=self.now_ms()))
            queue = ClassicQueue(self, declaration, owner, state)
        self.queues[declaration.name] = queue
        self.router.add_queue(declaration.name)
        return queue

    def queue(self, name: str, method: spec.Method, session_id: int) -> Queue:
        """The queue called ``name`` (404 if absent, 405 if another connection's exclusive queue)."""
        queue = self.queues.get(name)
        if queue is None:
            raise _error(ReplyCode.NOT_FOUND, f"no queue '{name}' in vhost '/'", method)
        if queue.owner is not None and queue.owner != session_id:
            raise _error(ReplyCode.RESOURCE_LOCKED, f"queue '{name}' is exclusive to another connection", method)
        return queue

    async def declare_queue(self, method: spec.QueueDeclare, session_id: int) -> spec.QueueDeclareOk:
        """queue.declare."""
        name = method.queue or f"amq.gen-{uuid.uuid4().hex}"
        if method.passive or name in self.queues:
            queue = self.queue(name, method, session_id)
        else:
            if name.startswith("amq.") and method.queue:
                raise _error(ReplyCode.ACCESS_REFUSED, f"queue name '{name}' is reserved (amq.*)", method)
            _check_name("queue", name, method)
            arguments = dict(method.arguments)
            if self.default_queue_type is QueueType.SHARE and takes_share_default(
                    durable=method.durable, exclusive=method.exclusive, auto_delete=method.auto_delete,
                    arguments=arguments):
                arguments["x-queue-type"] = "share"  # stored so: every broker serves it as a share queue
            policy = QueuePolicy.from_arguments(arguments)  # a bad argument: 406 before anything is created
            # In a cluster an exclusive queue is stored too (with its home), so publishes through others reach it.
            shared = method.exclusive and self.definitions is not None
            home = self.node_id if policy.queue_type is QueueType.CLASSIC and (shared or not method.exclusive) else None
            declaration = QueueDeclaration(name=name, durable=method.durable, auto_delete=method.auto_delete,
                                           arguments=arguments, home=home, exclusive=shared)
            topic_spec = TopicSpec(name=queue_topic(name), partitions=1, configs={"record.validation": "decode"})
            try:
                await self.broker.create_topic(self.principal, topic_spec, False)
            except errors.TopicAlreadyExistsError:
                pass  # left by a queue whose deletion did not finish; its records are this queue's
            queue = self.add_queue(declaration, owner=session_id if method.exclusive else None)
            if queue.owner is None or declaration.exclusive:
                await self.sync_metadata([queue_record(declaration)])
        if isinstance(queue, ClassicQueue):
            queue.state.touch(self.now_ms())
        elif isinstance(queue, ShareQueue):
            await queue.touch()
        return spec.QueueDeclareOk(queue=name, message_count=await queue.ready_count(),
                                   consumer_count=len(queue.consumers))

    async def delete_queue(self, name: str, *, if_unused: bool = False, if_empty: bool = False,
                           method: spec.Method | None = None) -> int:
        """Delete a queue, cancel its consumers and drop its log topic; return its message count."""
        queue = self.queues.get(name)
        if queue is None:
            return 0
        if method is not None and if_unused and queue.consumers:
            raise _error(ReplyCode.PRECONDITION_FAILED, f"queue '{name}' has consumers", method)
        count = await queue.ready_count()
        if method is not None and if_empty and count:
            raise _error(ReplyCode.PRECONDITION_FAILED, f"queue '{name}' is not empty", method)
        self.drop_queue(queue)
        await self.erase_queue(queue)
        return count

    async def erase_queue(self, queue: Queue) -> None:
        """Delete what is stored of a dropped queue: its share group, declaration, state and log topic."""
        if isinstance(queue, ShareQueue):
            await queue.delete_group()  # a queue declared again under this name starts afresh
        if queue.owner is None or queue.declaration.exclusive:
            await self.sync_metadata([(queue_key(queue.name), None)])
            await self.write_records(QUEUE_STATE_TOPIC, [(queue.name.encode("utf-8", "surrogateescape"), None)])
        try:
            await self.broker.delete_topic(self.principal, queue.topic)
        except errors.UnknownTopicOrPartitionError:
            pass  # never written to

    def drop_queue(self, queue: Queue) -> None:
        """Forget a deleted queue here: no more appends, its consumers cancelled (nothing written)."""
        queue.deleted = True
        queue.abandon_appends()
        if isinstance(queue, ShareQueue):
            queue.detach_all()
        del self.queues[queue.name]
        self.router.remove_queue(queue.name)
        for consumer in list(queue.consumers.values()):
            consumer.session.connection.cancel_consumer(consumer.channel, consumer.tag)
            consumer.session.forget_consumer(consumer.channel, consumer.tag)
            consumer.session.flush()
        self.snapshots.forget(queue.name)

    async def caught_up(self, queue: str | None = None, exchange: str | None = None) -> None:
        """In a cluster, before a queue or exchange this broker does not know is reported missing: apply
        every declaration other brokers made so far."""
        unknown = (queue is not None and queue not in self.queues) or (
            exchange is not None and exchange not in self.router.exchanges)
        if unknown and self.definitions is not None:
            try:
                await self.definitions.caught_up()
            except errors.BrokerError as error:  # the metadata topic has no leader now: answer with what is known
                self.log.warn("AMQP definitions could not be brought up to date: {error}", error=error)

    async def served_here(self, name: str, method: spec.Method) -> None:
        """405 for consuming, getting from or purging a classic queue through a broker other than its home."""
        queue = self.queues.get(name)
        if isinstance(queue, ClassicQueue) and not queue.declaration.exclusive:  # exclusive: 405 from queue()
            await check_served_here(self.broker, self.principal, name, queue.declaration.home, self.node_id, method)

    async def adopt(self, name: str) -> None:
        """Before the first consumer or get here of a queue another broker declared (and maybe consumed):
        take its newest stored state (what was acknowledged there is not delivered again)."""
        if name not in self.learned_queues:
            return
        self.learned_queues.discard(name)
        queue = self.queues.get(name)
        if not isinstance(queue, ClassicQueue) or queue.consumers or queue.unsettled_appends:
            return
        key = name.encode("utf-8", "surrogateescape")
        deadline_s = self.reactor.seconds() + limits.reroute_ms_max / 1000.0
        while True:  # right after a broker died, its partitions answer only once their new leader is known
            try:
                snapshots = [record for record in await read_compacted(
                    self.broker, self.principal, QUEUE_STATE_TOPIC,
                    lambda batch: self.skip_unreadable("AMQP replay", batch)) if record.key == key]
                break
            except errors.BrokerError as error:
                if not error.retriable or self.reactor.seconds() > deadline_s:
                    self.learned_queues.add(name)
                    raise
                await deferLater(self.reactor, ADOPT_RETRY_S)
        if snapshots and snapshots[-1].value is not None and self.queues.get(name) is queue and not queue.consumers:
            queue.deleted = True  # its reads stop; the adopted queue reads from the stored cursor
            try:
                self.add_queue(queue.declaration, owner=None, snapshot=snapshots[-1].value)
            except ValueError as error:
                self.skip_bad_record(QUEUE_STATE_TOPIC, snapshots[-1].offset, error, "the queue is read from its start")
                self.add_queue(queue.declaration, owner=None)

    def session_gone(self, session_id: int, holders: set[ConsumerKey]) -> None:
        """A connection closed: requeue its leases, drop its consumers, delete its exclusive queues."""
        for queue in list(self.queues.values()):
            for key in [key for key in queue.consumers if key[0] == session_id]:
                queue.remove_consumer(key)
            queue.release(holders)
            if queue.owner == session_id or (queue.declaration.auto_delete and queue.had_consumers
                                             and not queue.consumers):
                self._delete_in_background(queue.name)

    def consumer_removed(self, queue: Queue) -> None:
        """An auto-delete queue goes when its last consumer does."""
        if queue.declaration.auto_delete and queue.had_consumers and not queue.consumers:
            self._delete_in_background(queue.name)

    def _delete_in_background(self, name: str) -> None:
        deleted = Deferred.fromCoroutine(self.delete_queue(name))
        deleted.addErrback(lambda failure: self.log.failure("deleting AMQP queue {queue} failed", failure, queue=name))

    def _housekeep(self) -> None:
        now_ms = self.now_ms()
        for queue in list(self.queues.values()):
            if isinstance(queue, ClassicQueue):
                if queue.state.unused_expired(now_ms, len(queue.consumers)):
                    self._delete_in_background(queue.name)
                elif (queue.state.policy.message_ttl_ms is not None or queue.state.unread_count
                      or queue.state.ready_in_memory or queue.unsettled_appends):
                    queue.housekeep(now_ms)
            elif isinstance(queue, ShareQueue):
                self._expire_if_unused(queue)
                queue.housekeep(now_ms)
        self.reactor.callLater(HOUSEKEEPING_INTERVAL_S, self._housekeep)

    def _expire_if_unused(self, queue: ShareQueue) -> None:
        """Delete a share queue (cluster-wide) once its group's host counted it unused for its ``x-expires``."""
        if queue.policy.expires_ms is None or queue.name in self._expiry_checks:
            return
        self._expiry_checks.add(queue.name)

        async def check() -> None:
            try:
                if await queue.unused_past_expiry() and self.queues.get(queue.name) is queue:
                    await self.delete_queue(queue.name)
            finally:
                self._expiry_checks.discard(queue.name)

        Deferred.fromCoroutine(check()).addErrback(
            lambda failure: self.log.failure("expiring AMQP queue {queue} failed", failure, queue=queue.name))

    # --- exchanges and bindings -----------------------------------------------------------------

    async def declare_exchange(self, method: spec.ExchangeDeclare) -> spec.ExchangeDeclareOk:
        """exchange.declare."""
        if method.passive:
            self.router.lookup(method.exchange)
            return spec.ExchangeDeclareOk()
        try:
            exchange_type = ExchangeType(method.type)
        except ValueError:
            raise _error(ReplyCode.COMMAND_INVALID, f"exchange type '{method.type}' is not supported; "
                         "use direct, fanout, topic or headers", method) from None
        if method.exchange:  # "" is the default exchange, as before
            _check_name("exchange", method.exchange, method)
        home = self.node_id if not method.durable and self.definitions is not None else None  # stored: transient.py
        exchange = Exchange(name=method.exchange, type=exchange_type, durable=method.durable, home=home,
                            auto_delete=method.auto_delete, internal=method.internal, arguments=dict(method.arguments))
        topic = source_topic(exchange.arguments, method)
        if topic is not None and topic not in self.sources and method.exchange not in self.router.exchanges:
            await self.sources.start(topic, exchange, method)
        else:
            self.router.declare_exchange(exchange)
        await self.sync_metadata()
        return spec.ExchangeDeclareOk()

    async def delete_exchange(self, method: spec.ExchangeDelete) -> spec.ExchangeDeleteOk:
        """exchange.delete."""
        if method.exchange in self.router.exchanges or method.exchange == "" or method.exchange.startswith("amq."):
            self.router.delete_exchange(method.exchange, if_unused=method.if_unused)
        await self.sync_metadata()
        return spec.ExchangeDeleteOk()

    async def change_binding(self, binding: Binding, bind: bool) -> None:
        """queue.bind / unbind and exchange.bind / unbind."""
        if bind:
            self.router.bind(binding)
        else:
            self.router.unbind(binding)
        await self.sync_metadata()

    # --- messages -------------------------------------------------------------------------------

    def store(self, exchange: str, routing_key: str, headers: dict[str, Any] | None, properties_raw: bytes,
              body: bytes, expiration: str | None, *, from_client: bool = False) -> list[BatchStored]:
        """Route a message and append it to each queue reached (404 if the exchange is missing; 403 for a
        client publishing to an internal exchange, which only other exchanges and the broker feed)."""
        now_ms = self.now_ms()
        return [queue.append(now_ms, exchange, routing_key, properties_raw, body, expiration)
                for queue in self._reached(exchange, routing_key, headers, from_client)]

    def store_run(self, exchange: str, routing_key: str, headers: dict[str, Any] | None, properties_raw: bytes,
                  bodies: list[bytes], expiration: str | None, *,
                  from_client: bool = False) -> list[BatchStored] | None:
        """``store`` of messages alike but for their bodies, in order: routed once and appended to each queue
        reached in one go (one batch per queue for all of them); None, with nothing stored, when a queue reached
        judges each publish on its own (``x-overflow`` reject-publish): then store them one by one."""
        reached = self._reached(exchange, routing_key, headers, from_client)
        if not all(queue.takes_runs for queue in reached):
            return None
        now_ms = self.now_ms()
        return [queue.append_run(now_ms, exchange, routing_key, properties_raw, bodies, expiration) for queue in reached]

    def _reached(self, exchange: str, routing_key: str, headers: dict[str, Any] | None,
                 from_client: bool) -> list[Queue]:
        """The queues a message goes to, in name order (404 if the exchange is missing; 403 for a client
        publishing to an internal exchange)."""
        if from_client and exchange and self.router.exchanges.get(exchange, _PUBLIC).internal:
            raise AmqpError(ReplyCode.ACCESS_REFUSED, f"cannot publish to internal exchange '{exchange}'")
        names = self.router.route(exchange, routing_key, headers)
        if len(names) == 1:
            queue = self.queues.get(next(iter(names)))
            return [] if queue is None else [queue]
        return [self.queues[name] for name in sorted(names) if name in self.queues]

    def count_unroutable(self, returned: bool) -> None:
        """A client's message reached no queue: it was returned (mandatory) or dropped."""
        if self._unroutable is not None:
            self._unroutable.labels("amqp", "returned" if returned else "dropped").inc()

    def dead_letter(self, queue: ClassicQueue, dead: DeadLetter) -> None:
        """Republish a dead message to its queue's dead-letter exchange with ``x-death`` (or drop it)."""
        self.snapshots.dead_lettered(self.republish_dead(queue.name, queue.state.policy, dead.message, dead.reason))

    def republish_dead(self, queue: str, policy: QueuePolicy, message: QueuedMessage,
                       reason: DeathReason) -> list[BatchStored]:
        """Route a message dead in ``queue`` through its dead-letter exchange with ``x-death``; the batches it went
        to (none: the queue has no dead-letter exchange, or the exchange is gone and the message is dropped)."""
        if policy.dead_letter_exchange is None:
            return []
        stored: StoredMessage = message.payload
        properties = decode_properties(stored.properties_raw)
        headers = x_death_headers(properties.headers, queue=queue, reason=reason, exchange=stored.exchange,
                                  routing_keys=[stored.routing_key], now_ms=self.now_ms(),
                                  original_expiration=properties.expiration)
        properties_raw = encode_properties(dataclasses.replace(properties, headers=headers, expiration=None))
        routing_key = policy.dead_letter_routing_key or stored.routing_key
        try:
            return self.store(policy.dead_letter_exchange, routing_key, headers, properties_raw, stored.body, None)
        except AmqpError as error:
            self.log.warn("dead letter from {queue} dropped: {error}", queue=queue, error=error.reply_text)
            return []
