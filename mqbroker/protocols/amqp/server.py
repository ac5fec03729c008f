"""The AMQP 0-9-1 front end: the sans-I/O ``Connection``'s actions carried out against ``IBroker``.

Thin by design: ``connection.Connection`` speaks the protocol, ``vhost.VirtualHost`` holds
exchanges, queues and bindings, ``queues`` reads and writes queue logs; this module moves
bytes, runs each action, reports results back to the connection and keeps its timer.
A connection's broker-side methods run one after another (a nowait declare followed by a
publish must take effect in that order); publishes do not wait for earlier confirms.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections import deque
from collections.abc import Callable, Coroutine, Hashable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorCore, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import __version__ as mqbroker_version
from mqbroker import errors, limits
from mqbroker.interfaces import IBroker
from mqbroker.model import Operation, Principal
from mqbroker.protocols.adapter import ConnectionHandle, SessionFactory
from mqbroker.protocols.frontends import FrontEndContext, FrontEndSecurity
from mqbroker.protocols.amqp import security as amqp_security
from mqbroker.protocols.amqp import spec
from mqbroker.protocols.amqp.admin_view import AmqpAdminView
from mqbroker.protocols.amqp.actions import (
    Action,
    Authenticate,
    Cancel,
    ChannelClosed,
    CloseTransport,
    Consume,
    ConsumersReady,
    Execute,
    Outcome,
    Publish,
    PublishRun,
    Settle,
    Unacked,
)
from mqbroker.protocols.amqp.appender import BatchStored, all_settled
from mqbroker.protocols.amqp.confirm_runs import ConfirmRuns
from mqbroker.protocols.amqp.connection import Connection
from mqbroker.protocols.amqp.queue_arguments import QueueType, parse_stream_offset
from mqbroker.protocols.amqp.queues import Consumer, ConsumerKey, delivery_of
from mqbroker.protocols.amqp.routing import Binding, DestinationKind
from mqbroker.protocols.amqp.sources import source_topic
from mqbroker.protocols.amqp.spec import AmqpError, ReplyCode
from mqbroker.protocols.amqp.stream_queue import StreamQueue
from mqbroker.protocols.amqp.vhost import VirtualHost
from mqbroker.protocols.throttle import throttles

_session_ids = itertools.count(1)
_QUEUE = operator.attrgetter("queue")
_MESSAGE_REF = operator.attrgetter("message_ref")


class AmqpSession:
    """One AMQP connection."""

    log = Logger()

    def __init__(self, vhost: VirtualHost, reactor: IReactorTime, security: FrontEndSecurity | None = None) -> None:
        """``security`` None: everyone is let in, named after the user name it gives."""
        self.session_id = next(_session_ids)
        self._vhost = vhost
        self._reactor = reactor
        self._security = security
        self.connection = Connection(now_ms=vhost.now_ms(), version=mqbroker_version, broker_budget=vhost.held_bytes)
        self._handle: ConnectionHandle | None = None
        self._principal: Principal | None = None
        self._timer: IDelayedCall | None = None
        self._closed = False
        self._consumers: dict[tuple[int, str], str] = {}  # (channel, tag) → queue name
        self._lease_holders: set[ConsumerKey] = set()
        self._serial: Deferred[None] | None = None  # the broker-side method running now, if any
        self._waiting: deque[tuple[Callable[[Any], Deferred[None] | None], Action]] = deque()
        self._confirms = ConfirmRuns(self.connection, self._confirmed)
        #: Runs of confirms settled in this reactor turn, [channel, first, last, stored], sent at its end.
        self._settled_runs: list[list[Any]] = []
        self._confirm_call: IDelayedCall | None = None
        self._unstored: dict[BatchStored, int] = {}  # body bytes published into each unsettled batch
        self._transaction_batches: dict[int, list[BatchStored]] = {}  # channel → its committed publishes' batches
        self._unstored_bytes = 0
        self._blocked = False
        self._timer_deadline_ms = 0
        # Byte-rate quotas: publishing over quota pauses reading; deliveries over quota wait in their queues.
        self._produce_throttle, self._fetch_throttle = throttles(
            security, reactor, self._apply_backpressure, self._deliveries_released)
        self._delivered_bytes_counted = 0

    # --- Session --------------------------------------------------------------------------

    def connection_made(self, connection: ConnectionHandle) -> None:
        self._handle = connection
        self._reschedule()

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame (the adapter closes a connection that trickles one)."""
        return self.connection.buffered_bytes

    def data_received(self, data: bytes) -> None:
        actions = self.connection.receive_data(data, self._vhost.now_ms())
        self._run(actions)
        if self._produce_throttle is not None:
            published = sum(len(action.body) if type(action) is Publish else sum(map(len, action.bodies))
                            for action in actions if isinstance(action, (Publish, PublishRun)))  # type: ignore[union-attr]
            if published:
                self._produce_throttle.record(published)
                self._apply_backpressure()
        self.flush()

    def connection_lost(self, reason: Failure) -> None:
        self._closed = True
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        for throttle in (self._produce_throttle, self._fetch_throttle):
            if throttle is not None:
                throttle.cancel()
        self._vhost.session_gone(self.session_id, self._lease_holders)
        self._consumers.clear()

    def flush(self) -> None:
        """Write what the connection queued and re-arm the timer."""
        self._confirms.seal()
        if self._fetch_throttle is not None and self.connection.delivered_bytes != self._delivered_bytes_counted:
            self._fetch_throttle.record(self.connection.delivered_bytes - self._delivered_bytes_counted)
            self._delivered_bytes_counted = self.connection.delivered_bytes
        data = self.connection.data_to_send()
        if data and self._handle is not None and not self._closed:
            self._handle.write(data)
        self._reschedule()

    def delivery_window(self, channel: int, consumer_tag: str) -> int:
        """How many more deliveries a consumer may take now: none while over the fetch quota."""
        if self._fetch_throttle is not None and self._fetch_throttle.active:
            return 0
        return self.connection.delivery_window(channel, consumer_tag)

    def forget_consumer(self, channel: int, tag: str) -> None:
        """The queue of a consumer was deleted."""
        self._consumers.pop((channel, tag), None)

    # --- timers ----------------------------------------------------------------------------

    def _reschedule(self) -> None:
        if self._closed:
            return
        deadline_ms = self.connection.next_deadline_ms()
        armed = self._timer is not None and self._timer.active()
        if armed and deadline_ms is not None and self._timer_deadline_ms <= deadline_ms:
            return  # firing early is harmless: tick checks the real deadlines and re-arms
        if armed:
            self._timer.cancel()
        self._timer = None
        if deadline_ms is not None:
            delay_s = max(0.0, (deadline_ms - self._vhost.now_ms()) / 1000.0)
            self._timer = self._reactor.callLater(delay_s, self._tick)
            self._timer_deadline_ms = deadline_ms

    def _tick(self) -> None:
        self._timer = None
        self._run(self.connection.tick(self._vhost.now_ms()))
        self.flush()

    # --- actions ---------------------------------------------------------------------------

    def _run(self, actions: list[Action]) -> None:
        publish: Callable[[Publish | PublishRun], Deferred[None] | None] | None = None
        for action in actions:
            if isinstance(action, (Publish, PublishRun)):
                if publish is None:  # publishes arrive with the bytes being handled now: their ticket is taken now
                    definitions = self._vhost.definitions
                    ticket = definitions.fence.ticket() if definitions else 0
                    # a covered ticket (always on a single broker) waits for no other broker's declarations
                    covered = definitions is None or definitions.fence.covers(ticket)
                    publish = self._publish_now if covered else functools.partial(self._publish, ticket)
                self._in_order(publish, action)
            elif isinstance(action, Settle):
                self._settle(action)
            elif isinstance(action, ConsumersReady):
                self._consumers_ready(action)
            elif isinstance(action, Execute):
                self._in_order(self._start_execute, action)
            elif isinstance(action, Consume):
                self._in_order(self._start_consume, action)
            elif isinstance(action, Cancel):
                self._remove_consumer(action.channel, action.consumer_tag)
            elif isinstance(action, ChannelClosed):
                self._channel_closed(action)
            elif isinstance(action, Authenticate):
                self._authenticate(action)
            elif isinstance(action, CloseTransport):
                self.log.info("closing the AMQP connection from {peer}: {reason}",
                              peer=self._handle.peer if self._handle is not None else "?", reason=action.reason)
                self.flush()
                if self._handle is not None:
                    self._handle.close()

    def _in_order(self, step: Callable[[Any], Deferred[None] | None], action: Action) -> None:
        """Run ``step(action)`` now if nothing runs, else after the steps before it."""
        if self._serial is not None or self._waiting:
            self._waiting.append((step, action))
            return
        self._step(step, action)

    def _step(self, step: Callable[[Any], Deferred[None] | None], action: Action) -> None:
        running = step(action)
        if running is None:
            return
        self._serial = running
        running.addBoth(self._step_done)

    def _step_done(self, _: Any) -> None:
        self._serial = None
        while self._waiting and self._serial is None:
            self._step(*self._waiting.popleft())
        self.flush()

    def _start_execute(self, action: Execute) -> Deferred[None]:
        return self._start(self._execute(action), action.channel, action.method)

    def _start_consume(self, action: Consume) -> Deferred[None]:
        return self._start(self._consume(action), action.channel, None)

    def _start(self, work: Coroutine[Any, Any, None], channel: int, method: spec.Method | None) -> Deferred[None]:
        running = Deferred.fromCoroutine(work)
        running.addErrback(self._failed, channel, method)
        return running

    def _failed(self, failure: Failure, channel: int, method: spec.Method | None) -> None:
        if failure.check(AmqpError):
            error = failure.value
        elif failure.check(errors.BrokerError):
            error = AmqpError(ReplyCode.INTERNAL_ERROR, f"the broker refused: {failure.value.message}",
                              class_id=getattr(method, "CLASS_ID", 0), method_id=getattr(method, "METHOD_ID", 0))
        else:
            self.log.failure("AMQP method failed unexpectedly", failure)
            error = AmqpError(ReplyCode.INTERNAL_ERROR, "internal error; see the broker log")
        self._run(self.connection.fail(channel, error, self._vhost.now_ms()))
        self.flush()

    def _authenticate(self, action: Authenticate) -> None:
        def accepted(_: Any) -> None:
            if self._security is None:  # no security: every user is accepted, named after itself
                self._principal = Principal("User", action.username)
            else:
                try:
                    self._principal = amqp_security.authenticate(self._security, self._handle, action)
                except errors.SaslAuthenticationError as error:
                    self._run(self.connection.authentication_failed(error.message, self._vhost.now_ms()))
                    self.flush()
                    return
            for throttle in (self._produce_throttle, self._fetch_throttle):
                if throttle is not None:
                    throttle.principal = str(self._principal)
                    throttle.client_id = str(self.connection.client_properties.get("connection_name", ""))
            self._run(self.connection.authentication_succeeded())
            self.flush()

        def unavailable(failure: Failure) -> None:
            message = failure.value.message if failure.check(errors.BrokerError) else "the AMQP front end is not ready"
            self.log.warn("refusing an AMQP connection: {message}", message=message)
            self._run(self.connection.authentication_failed(message, self._vhost.now_ms(), ReplyCode.CONNECTION_FORCED))
            self.flush()

        self._vhost.started.wait().addCallbacks(accepted, unavailable)

    # --- broker-side methods ---------------------------------------------------------------

    async def _execute(self, action: Execute) -> None:
        method, vhost = action.method, self._vhost
        reply: spec.Method
        await vhost.caught_up(queue=getattr(method, "queue", None) or None,
                              exchange=getattr(method, "exchange", None) or getattr(method, "source", None) or None)
        if isinstance(method, spec.ExchangeDeclare):
            topic = None if method.passive else source_topic(method.arguments, method)
            if topic is not None:
                amqp_security.check_topic(self._security, self._principal, topic, Operation.READ, 40, 10)
            reply = await vhost.declare_exchange(method)
        elif isinstance(method, spec.ExchangeDelete):
            reply = await vhost.delete_exchange(method)
        elif isinstance(method, (spec.ExchangeBind, spec.ExchangeUnbind)):
            binding = Binding(source=method.source, destination=method.destination,
                              destination_kind=DestinationKind.EXCHANGE, routing_key=method.routing_key,
                              arguments=tuple(sorted(method.arguments.items())))
            await vhost.change_binding(binding, isinstance(method, spec.ExchangeBind))
            reply = spec.ExchangeBindOk() if isinstance(method, spec.ExchangeBind) else spec.ExchangeUnbindOk()
        elif isinstance(method, spec.QueueDeclare):
            if not method.passive:
                amqp_security.check_queue(self._security, self._principal, method.queue, Operation.CREATE, 50, 10)
            reply = await vhost.declare_queue(method, self.session_id)
        elif isinstance(method, (spec.QueueBind, spec.QueueUnbind)):
            vhost.queue(method.queue, method, self.session_id)
            binding = Binding(source=method.exchange, destination=method.queue, routing_key=method.routing_key,
                              arguments=tuple(sorted(method.arguments.items())))
            await vhost.change_binding(binding, isinstance(method, spec.QueueBind))
            reply = spec.QueueBindOk() if isinstance(method, spec.QueueBind) else spec.QueueUnbindOk()
        elif isinstance(method, spec.QueuePurge):
            amqp_security.check_queue(self._security, self._principal, method.queue, Operation.DELETE, 50, 30)
            await vhost.served_here(method.queue, method)
            reply = spec.QueuePurgeOk(message_count=await vhost.queue(method.queue, method, self.session_id).purge())
        elif isinstance(method, spec.QueueDelete):
            amqp_security.check_queue(self._security, self._principal, method.queue, Operation.DELETE, 50, 40)
            if method.queue in vhost.queues:
                vhost.queue(method.queue, method, self.session_id)  # 405 for another connection's exclusive queue
            count = await vhost.delete_queue(method.queue, if_unused=method.if_unused, if_empty=method.if_empty,
                                             method=method)
            reply = spec.QueueDeleteOk(message_count=count)
        elif isinstance(method, spec.TxCommit):
            # The transaction's publishes ran just before this (in order): commit-ok once they are durable.
            if not await all_settled(self._transaction_batches.pop(action.channel, [])):
                raise AmqpError(ReplyCode.INTERNAL_ERROR, "the broker could not store a committed message",
                                class_id=90, method_id=20)
            reply = spec.TxCommitOk()
        else:
            assert isinstance(method, spec.BasicGet), method
            await self._get(action.channel, method)
            return
        if action.reply_expected:
            self.connection.complete(action.channel, reply)
            self.flush()

    async def _get(self, channel: int, method: spec.BasicGet) -> None:
        amqp_security.check_queue(self._security, self._principal, method.queue, Operation.READ, 60, 70)
        await self._vhost.served_here(method.queue, method)
        await self._vhost.adopt(method.queue)
        queue = self._vhost.queue(method.queue, method, self.session_id)
        if isinstance(queue, StreamQueue):
            raise AmqpError(ReplyCode.PRECONDITION_FAILED, "basic.get is not supported on stream queues; consume "
                            "with x-stream-offset", class_id=60, method_id=70)
        key: ConsumerKey = (self.session_id, channel, None)
        taken = await queue.get(key)
        if taken is None:
            self.connection.complete(channel, spec.BasicGetEmpty())
        else:
            message, redelivered = taken
            if method.no_ack:
                queue.settle([message.offset], Outcome.ACK)
            else:
                self._lease_holders.add(key)
            remaining = await queue.ready_count()
            self.connection.get_ok(channel, delivery_of(queue.name, message, redelivered), remaining,
                                   no_ack=method.no_ack)
        self.flush()

    async def _consume(self, action: Consume) -> None:
        method = spec.BasicConsume(queue=action.queue)
        amqp_security.check_queue(self._security, self._principal, action.queue, Operation.READ, 60, 20)
        await self._vhost.caught_up(queue=action.queue)
        await self._vhost.served_here(action.queue, method)
        await self._vhost.adopt(action.queue)
        queue = self._vhost.queue(action.queue, method, self.session_id)
        if action.exclusive and queue.consumers:
            raise AmqpError(ReplyCode.ACCESS_REFUSED, f"queue '{action.queue}' already has consumers; "
                            "an exclusive consumer needs it alone", class_id=60, method_id=20)
        if any(existing.exclusive for existing in queue.consumers.values()):
            raise AmqpError(ReplyCode.ACCESS_REFUSED, f"queue '{action.queue}' has an exclusive consumer",
                            class_id=60, method_id=20)
        consumer = Consumer(session=self, channel=action.channel, tag=action.consumer_tag, no_ack=action.no_ack,
                            exclusive=action.exclusive)
        self._consumers[(action.channel, action.consumer_tag)] = queue.name
        self._lease_holders.add(consumer.key)
        if action.reply_expected:
            self.connection.complete(action.channel, spec.BasicConsumeOk(consumer_tag=action.consumer_tag))
            self.flush()
        if isinstance(queue, StreamQueue):
            await queue.add_consumer(consumer, parse_stream_offset(action.arguments.get("x-stream-offset")))
        else:
            queue.add_consumer(consumer)

    def _remove_consumer(self, channel: int, tag: str) -> None:
        name = self._consumers.pop((channel, tag), None)
        queue = self._vhost.queues.get(name) if name is not None else None
        if queue is not None:
            queue.remove_consumer((self.session_id, channel, tag))
            self._vhost.consumer_removed(queue)

    def _channel_closed(self, action: ChannelClosed) -> None:
        self._transaction_batches.pop(action.channel, None)
        self._settle_all(action.unacked, Outcome.REQUEUE)
        for tag in action.consumer_tags:
            self._remove_consumer(action.channel, tag)

    def _settle(self, action: Settle) -> None:
        self._settle_all(action.deliveries, action.outcome)

    def _settle_all(self, deliveries: tuple[Unacked, ...], outcome: Outcome) -> None:
        """Settle per queue in one go: one state change and one dispatch per queue, not per message."""
        by_queue: dict[str, list[Hashable]] = {}
        names = set(map(_QUEUE, deliveries))
        if len(names) == 1:  # a consumer's (multiple) ack: all from one queue
            by_queue[names.pop()] = list(map(_MESSAGE_REF, deliveries))
        else:
            for delivery in deliveries:
                by_queue.setdefault(delivery.queue, []).append(delivery.message_ref)
        for name, references in by_queue.items():
            queue = self._vhost.queues.get(name)
            if queue is not None:
                queue.settle(references, outcome)

    def _consumers_ready(self, action: ConsumersReady) -> None:
        names = {self._consumers.get((action.channel, tag)) for tag in action.consumer_tags}
        for name in names:
            queue = self._vhost.queues.get(name) if name is not None else None
            if queue is not None:
                queue.dispatch()

    # --- publishing ------------------------------------------------------------------------

    def _publish(self, ticket: int, action: Publish | PublishRun) -> Deferred[None] | None:
        """Store a publish; in a cluster, once the declarations any broker made before it arrived (``ticket``) are
        applied here (``definitions_fence.py``: a binding is in force on every broker when bind-ok is sent)."""
        definitions = self._vhost.definitions
        if definitions is not None and not definitions.fence.covers(ticket):
            return definitions.fence.wait(ticket).addCallback(lambda _: self._publish_now(action))
        self._publish_now(action)
        return None

    def _publish_now(self, action: Publish | PublishRun) -> None:
        if type(action) is PublishRun:
            self._publish_run_now(action)
            return
        assert isinstance(action, Publish)
        try:
            amqp_security.check_publish(self._security, self._principal, self._vhost, action.exchange,
                                        action.routing_key, action.properties.headers)
            batches = self._vhost.store(action.exchange, action.routing_key, action.properties.headers,
                                        action.properties_raw, action.body, action.properties.expiration,
                                        from_client=True)
        except AmqpError as error:
            error.class_id, error.method_id = 60, 40
            self._run(self.connection.fail(action.channel, error, self._vhost.now_ms()))
            self.flush()
            return
        if not batches:
            self._vhost.count_unroutable(returned=action.mandatory)
            if action.mandatory:
                self.connection.return_message(action.channel, action, ReplyCode.NO_ROUTE, "NO_ROUTE")
        if action.confirm_sequence is not None:
            self._confirms.add(action.channel, action.confirm_sequence, batches)
        if action.transactional:
            self._transaction_batches.setdefault(action.channel, []).extend(batches)
        if batches:
            self._hold(batches, len(action.body))

    def _publish_run_now(self, run: PublishRun) -> None:
        """``_publish_now`` of each message of the run: checked and routed once, appended to each queue in one go,
        confirmed as one run; one by one when a queue reached judges each publish (``vhost.store_run``)."""
        try:
            amqp_security.check_publish(self._security, self._principal, self._vhost, run.exchange, run.routing_key,
                                        run.properties.headers)
            batches = self._vhost.store_run(run.exchange, run.routing_key, run.properties.headers, run.properties_raw,
                                            run.bodies, run.properties.expiration, from_client=True)
        except AmqpError as error:
            error.class_id, error.method_id = 60, 40
            self._run(self.connection.fail(run.channel, error, self._vhost.now_ms()))
            self.flush()
            return
        if batches is None:
            for publish in run.publishes():
                self._publish_now(publish)
            return
        if not batches:
            for publish in run.publishes():
                self._vhost.count_unroutable(returned=run.mandatory)
                if run.mandatory:
                    self.connection.return_message(run.channel, publish, ReplyCode.NO_ROUTE, "NO_ROUTE")
        if run.confirm_sequence is not None:
            self._confirms.add(run.channel, run.confirm_sequence, batches, run.confirm_sequence + len(run.bodies) - 1)
        if batches:
            self._hold(batches, sum(map(len, run.bodies)))

    # --- backpressure: publishes the broker has not stored yet ------------------------------

    def _hold(self, batches: list[BatchStored], body_bytes: int) -> None:
        """Count a publish's bytes until its batches settle; past the bound, stop reading and block."""
        for batch in batches:
            held = self._unstored.get(batch)
            if held is None:
                self._unstored[batch] = body_bytes
                batch.when_settled(functools.partial(self._released, batch))
            else:
                self._unstored[batch] = held + body_bytes
        self._unstored_bytes += body_bytes * len(batches)
        if not self._blocked and self._unstored_bytes > limits.amqp_unstored_publish_bytes_max:
            self._blocked = True
            self.connection.block("the broker is storing this connection's earlier publishes")
            self._apply_backpressure()

    def _released(self, batch: BatchStored, _: bool) -> None:
        self._unstored_bytes -= self._unstored.pop(batch)
        if self._blocked and self._unstored_bytes <= limits.amqp_unstored_publish_bytes_max // 2:
            self._blocked = False
            if not self._closed:
                self.connection.unblock()
                self._apply_backpressure()
                self.flush()

    def _apply_backpressure(self) -> None:
        """Read from the socket unless the broker is behind on storing publishes or the client is over its
        produce quota."""
        if self._handle is None or self._closed:
            return
        if self._blocked or (self._produce_throttle is not None and self._produce_throttle.active):
            self._handle.pause_reading()
        else:
            self._handle.resume_reading()

    def _deliveries_released(self) -> None:
        """The fetch throttle ended: the queues this connection consumes from deliver again."""
        for name in set(self._consumers.values()):
            queue = self._vhost.queues.get(name)
            if queue is not None:
                queue.dispatch()

    def _confirmed(self, channel: int, first: int, last: int, stored: bool) -> None:
        """A run of confirmed publishes settled: answered at the end of this reactor turn, with the runs the same
        fsync round settled (one per batch, and a batch per turn of publishes): consecutive runs of one outcome
        as one basic.ack (multiple), all in one write. Answered at once, each run cost a write (5% of the
        broker's samples publishing with pika) and pika the handling of one more frame."""
        runs = self._settled_runs
        if runs and runs[-1][0] == channel and runs[-1][2] + 1 == first and runs[-1][3] is stored:
            runs[-1][2] = last
        else:
            runs.append([channel, first, last, stored])
        if self._confirm_call is None:
            self._confirm_call = self._reactor.callLater(0, self._send_confirms)

    def _send_confirms(self) -> None:
        self._confirm_call = None
        runs, self._settled_runs = self._settled_runs, []
        if self._closed:
            return
        for channel, first, last, stored in runs:
            self.connection.publish_settled_range(channel, first, last, stored=stored)
        self.flush()


def build_factory(broker: IBroker, context: FrontEndContext) -> SessionFactory:
    """The AMQP listener's factory (named by the front-end plugin)."""
    reactor = context.reactor
    metrics = context.metrics
    vhost = VirtualHost(broker, reactor, unreadable=metrics.unreadable if metrics is not None else None,
                        unroutable=metrics.unroutable if metrics is not None else None,
                        default_queue_type=QueueType(context.config.amqp_default_queue_type),
                        node_id=context.config.node_id)
    # Runs before the broker service stops (registered earlier), while appends are still accepted.
    IReactorCore(reactor).addSystemEventTrigger("before", "shutdown", vhost.snapshots.write_changed_states)
    gauge = context.metrics.connections.labels("amqp") if context.metrics is not None else None
    # Heartbeats detect dead peers; the generic idle timeout stays off (a consumer may be idle).
    # No Nagle: writes already coalesce per reactor turn; a held-back delivery or confirm is only latency.
    return SessionFactory(lambda address: AmqpSession(vhost, reactor, context.security), idle_timeout_s=None,
                          metrics_gauge=gauge, no_delay=True, frame_timeout_s=context.frame_timeout_s,
                          started=vhost.started, admin_view=AmqpAdminView(vhost))
