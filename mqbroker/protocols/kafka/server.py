"""The Kafka front end's Twisted adapter: decoded requests → handlers → responses, in request order.

Thin by design: the connection (``connection.ServerConnection``) turns bytes into requests and
orders the responses, the handlers translate to and from ``IBroker`` calls, and this module only
wires them to a socket, authentication, quotas and metrics.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.interfaces import IBroker
from mqbroker.model import ANONYMOUS, Principal
from mqbroker.protocols.adapter import ConnectionHandle, SessionFactory
from mqbroker.protocols.frontends import FrontEndContext, FrontEndSecurity
from mqbroker.protocols.kafka.broker_calls import BrokerCalls
from mqbroker.protocols.kafka.config_catalog import BrokerConfigEntry, broker_configs
from mqbroker.protocols.kafka.connection import ConnectionFailed, RequestReceived, ServerConnection
from mqbroker.protocols.kafka.error_codes import error_response
from mqbroker.protocols.kafka.handlers import HANDLERS
from mqbroker.protocols.kafka.handlers.context import RequestContext
from mqbroker.protocols.kafka.messages.apis import APIS, ApiKey
from mqbroker.protocols.kafka.security import SECURITY_APIS, KafkaSecurity

if TYPE_CHECKING:
    from mqbroker.protocols.frontends import RequestLatencyMetric

#: Listener port keys in broker registrations: clients are sent to the listener they came in on.
PLAIN_LISTENER = "kafka_port"
TLS_LISTENER = "kafka_tls_port"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ListenerFacts:
    """What every connection of the Kafka listener shares."""

    node_id: int
    request_bytes_max: int
    broker_configs: dict[str, BrokerConfigEntry] = dataclasses.field(default_factory=dict)


class KafkaSession:
    """One Kafka client connection: decodes requests, runs their handlers, writes responses in order."""

    log = Logger()

    def __init__(self, broker: IBroker, facts: ListenerFacts, latency: RequestLatencyMetric | None = None,
                 security: FrontEndSecurity | None = None, clock: IReactorTime | None = None) -> None:
        """``security`` None: every client is anonymous; ``clock`` None: replies are never throttled."""
        self._broker = broker
        self._facts = facts
        self._codec = ServerConnection(facts.request_bytes_max)
        self._latency = latency
        self._front_end_security = security
        self._security: KafkaSecurity | None = None
        self._clock = clock
        self._connection: ConnectionHandle | None = None
        self._principal = ANONYMOUS
        self._listener = PLAIN_LISTENER
        self._calls: BrokerCalls | None = None
        self._in_progress = 0
        self._throttled = False
        self._closed = False

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete request (the adapter closes a connection that trickles one)."""
        return self._codec.buffered_bytes

    def connection_made(self, connection: ConnectionHandle) -> None:
        self._connection = connection
        host = connection.peer.rpartition(":")[0]
        self._principal = dataclasses.replace(self._principal, host=host)
        self._listener = TLS_LISTENER if connection.secure else PLAIN_LISTENER
        if self._front_end_security is not None:
            self._security = KafkaSecurity(self._front_end_security, self._broker, connection.secure, host,
                                           connection.peer_certificate)

    def connection_lost(self, reason: Failure) -> None:
        self._closed = True

    def data_received(self, data: bytes) -> None:
        for event in self._codec.receive_data(data):
            if isinstance(event, RequestReceived):
                self._start(event)
            else:
                self._fail(event)
        self._flush()

    def _fail(self, event: ConnectionFailed) -> None:
        assert self._connection is not None
        self.log.warn("closing Kafka connection from {peer}: {error}", peer=self._connection.peer,
                      error=event.error.message)
        self._flush()
        self._connection.close()

    def _calls_for(self, principal: Principal, client_id: str) -> BrokerCalls:
        calls = self._calls
        if calls is None or calls.principal is not principal or calls.client_id != client_id:
            calls = self._calls = BrokerCalls(self._broker, principal, client_id)
        return calls

    def _start(self, event: RequestReceived) -> None:
        header, request = event.header, event.request
        api_key = header.api_key
        principal: Principal | None = self._principal
        security = self._security
        if security is not None:
            try:
                principal = security.principal_for(api_key)
            except errors.IllegalSaslStateError as error:
                self._refuse(event, error)
                return
        if security is not None and api_key in SECURITY_APIS:
            answered = maybeDeferred(security.handle, principal, api_key, request)
        else:
            assert principal is not None
            context = RequestContext(
                calls=self._calls_for(principal, header.client_id or ""), version=header.api_version,
                node_id=self._facts.node_id, listener=self._listener,
                broker_configs=self._facts.broker_configs,
            )
            answered = maybeDeferred(HANDLERS[api_key], context, request)
        self._in_progress += 1
        answered.addCallbacks(self._answer, self._answer_failure, callbackArgs=(event, principal, time.perf_counter()),
                              errbackArgs=(event,))
        answered.addErrback(self._broken, event)
        self._apply_backpressure()

    def _refuse(self, event: RequestReceived, error: errors.BrokerError) -> None:
        """Answer (if the API has a top-level error code) and close: the client broke the SASL sequence."""
        response = error_response(APIS[event.header.api_key].response_type, error)
        if response is not None and event.sequence is not None:
            self._codec.respond(event.sequence, response)
        self._flush()
        assert self._connection is not None
        self._connection.close()

    def _answer(self, response: Any, event: RequestReceived, principal: Principal | None, started: float) -> None:
        self._in_progress -= 1
        header = event.header
        if self._latency is not None:
            _latency_series(self._latency, header.api_key).observe(time.perf_counter() - started)
        delay_ms = 0
        if self._security is not None and self._clock is not None and principal is not None:
            now_ms = int(self._clock.seconds() * 1000)
            delay_ms = self._security.throttle_ms(principal, header.client_id or "", event.request, response, now_ms)
        if event.sequence is not None:
            if delay_ms > 0 and hasattr(response, "throttle_time_ms"):
                response = dataclasses.replace(response, throttle_time_ms=delay_ms)
            self._codec.respond(event.sequence, response)
            self._flush()
            if header.api_key == ApiKey.SASL_AUTHENTICATE and response.error_code and self._connection is not None:
                self._connection.close()  # as Kafka does after a failed authentication
        if delay_ms > 0:
            self._throttle(delay_ms)
        self._apply_backpressure()

    def _answer_failure(self, failure: Failure, event: RequestReceived) -> None:
        """A handler failed as a whole: answer with the API's error response, or close the connection."""
        self._in_progress -= 1
        if not failure.check(errors.BrokerError):
            self._log_unexpected(failure, event)
        if event.sequence is None:
            self._apply_backpressure()
            return
        response = error_response(APIS[event.header.api_key].response_type, failure.value)
        if response is None:  # errors of this API live per partition: only the handler could have said which
            if failure.check(errors.BrokerError):
                self.log.warn("closing Kafka connection: {api} failed as a whole: {error}",
                              api=event.header.api_key.name, error=failure.value)
            if self._connection is not None:
                self._connection.close()
            return
        self._codec.respond(event.sequence, response)
        self._flush()
        self._apply_backpressure()

    def _broken(self, failure: Failure, event: RequestReceived) -> None:
        """Answering itself failed (a response the wire cannot carry): the order is lost, so close."""
        self._log_unexpected(failure, event)
        if self._connection is not None:
            self._connection.close()

    def _log_unexpected(self, failure: Failure, event: RequestReceived) -> None:
        self.log.failure("unexpected error answering Kafka {api} request {correlation_id}", failure,
                         api=ApiKey(event.header.api_key).name, correlation_id=event.header.correlation_id)

    def _throttle(self, delay_ms: int) -> None:
        """KIP-219: the response goes out at once (with its throttle time); the connection is muted meanwhile."""
        self._throttled = True

        def release() -> None:
            self._throttled = False
            self._apply_backpressure()

        self._clock.callLater(delay_ms / 1000.0, release)

    def _flush(self) -> None:
        data = self._codec.data_to_send()
        if data and not self._closed and self._connection is not None:
            self._connection.write(data)

    def _apply_backpressure(self) -> None:
        """Stop reading requests while too many are in progress (or the client is throttled)."""
        if self._connection is None:
            return
        busy = self._in_progress + self._codec.unanswered_requests >= limits.kafka_inflight_requests_max
        if self._throttled or busy:
            self._connection.pause_reading()
        else:
            self._connection.resume_reading()


@functools.lru_cache(maxsize=128)
def _latency_series(latency: Any, api_key: int) -> Any:
    """The request-latency histogram series of one API (looking a series up by labels is slow on every reply)."""
    return latency.labels("kafka", ApiKey(api_key).name.lower())


def _listener_settings(config: Any) -> dict[str, str]:
    """Kafka's ``listeners`` and ``advertised.listeners`` for this broker's Kafka listeners."""
    ports = [("PLAINTEXT", config.kafka_port)]
    if config.tls_cert:
        ports.append(("SSL", config.kafka_tls_port))
    listening = [(name, port) for name, port in ports if port]
    return {"listeners": ",".join(f"{name}://{config.host}:{port}" for name, port in listening),
            "advertised.listeners": ",".join(f"{name}://{config.public_host}:{port}" for name, port in listening)}


def build_factory(broker: IBroker, context: FrontEndContext) -> SessionFactory:
    """The Kafka listener's factory (named by the front-end plugin)."""
    config = context.config
    facts = ListenerFacts(
        node_id=config.node_id, request_bytes_max=limits.kafka_request_bytes_max,
        broker_configs=broker_configs(config, type(config)(), _listener_settings(config)),
    )
    latency = context.metrics.request_latency if context.metrics is not None else None
    gauge = context.metrics.connections.labels("kafka") if context.metrics is not None else None
    return SessionFactory(
        lambda address: KafkaSession(broker, facts, latency, context.security, context.reactor),
        idle_timeout_s=config.connection_idle_ms / 1000.0,
        metrics_gauge=gauge,
        frame_timeout_s=context.frame_timeout_s,
        no_delay=True,
    )
