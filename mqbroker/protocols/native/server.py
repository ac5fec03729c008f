"""The native protocol's Twisted front end: decoded requests → ``IBroker`` calls → responses.

Thin by design: the codec (``connection.ServerConnection``) turns bytes into requests, the
broker does the work, and the handlers (``data_handlers``, ``admin_handlers``,
``group_handlers``, and ``security`` for SASL, users and ACLs) only translate between their
types. Many requests are in flight per connection; responses go out as each completes, matched
by correlation id.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mqbroker import errors, limits
from mqbroker.config import BrokerConfig
from mqbroker.interfaces import IBroker, IConnectorAdmin
from mqbroker.model import ANONYMOUS, Principal
from mqbroker.protocols.adapter import ConnectionHandle, SessionFactory
from mqbroker.protocols.frontends import FrontEndContext, FrontEndSecurity
from mqbroker.protocols.native import admin_handlers as admin
from mqbroker.protocols.native import data_handlers as data
from mqbroker.protocols.native import group_handlers as group
from mqbroker.protocols.native import share_handlers as share
from mqbroker.protocols.native import txn_handlers
from mqbroker.protocols.native import messages as m
from mqbroker.protocols.native.codec import RequestHeader, supported_api_versions
from mqbroker.protocols.native.connector_handlers import CONNECTOR_APIS, handle_connector_request
from mqbroker.protocols.native.connection import (
    ConnectionFailed,
    RequestReceived,
    RequestRejected,
    ServerConnection,
)
from mqbroker.protocols.native.security import SECURITY_APIS, ConnectionSecurity

if TYPE_CHECKING:
    from mqbroker.protocols.frontends import LatencyObserver, RequestLatencyMetric

Handler = Callable[[Any, Principal, Any], Awaitable[Any]]


async def handle_api_versions(broker: IBroker, principal: Principal, request: m.ApiVersionsRequest) -> Any:
    """List the APIs this server answers (only those with a handler)."""
    advertised = supported_api_versions()
    served = HANDLERS.keys() | SECURITY_APIS | CONNECTOR_APIS
    return m.ApiVersionsResponse(api_keys=tuple(r for r in advertised.api_keys if r.api_key in served))


HANDLERS: dict[m.ApiKey, Handler] = {
    m.ApiKey.API_VERSIONS: handle_api_versions,
    m.ApiKey.METADATA: data.handle_metadata,
    m.ApiKey.PRODUCE: data.handle_produce,
    m.ApiKey.FETCH: data.handle_fetch,
    m.ApiKey.LIST_OFFSETS: data.handle_list_offsets,
    m.ApiKey.CREATE_TOPICS: admin.handle_create_topics,
    m.ApiKey.DELETE_TOPICS: admin.handle_delete_topics,
    m.ApiKey.CREATE_PARTITIONS: admin.handle_create_partitions,
    m.ApiKey.DELETE_RECORDS: admin.handle_delete_records,
    m.ApiKey.DESCRIBE_CONFIGS: admin.handle_describe_configs,
    m.ApiKey.INCREMENTAL_ALTER_CONFIGS: admin.handle_alter_configs,
    m.ApiKey.INIT_PRODUCER_ID: admin.handle_init_producer_id,
    m.ApiKey.FIND_COORDINATOR: group.handle_find_coordinator,
    m.ApiKey.JOIN_GROUP: group.handle_join_group,
    m.ApiKey.SYNC_GROUP: group.handle_sync_group,
    m.ApiKey.HEARTBEAT: group.handle_heartbeat,
    m.ApiKey.LEAVE_GROUP: group.handle_leave_group,
    m.ApiKey.OFFSET_COMMIT: group.handle_offset_commit,
    m.ApiKey.OFFSET_FETCH: group.handle_offset_fetch,
    m.ApiKey.LIST_GROUPS: group.handle_list_groups,
    m.ApiKey.DESCRIBE_GROUPS: group.handle_describe_groups,
    m.ApiKey.DELETE_GROUPS: group.handle_delete_groups,
    m.ApiKey.DESCRIBE_QUORUM: admin.handle_describe_quorum,
    m.ApiKey.ALTER_PARTITION_REASSIGNMENTS: admin.handle_alter_partition_reassignments,
    m.ApiKey.LIST_PARTITION_REASSIGNMENTS: admin.handle_list_partition_reassignments,
    m.ApiKey.SHARE_GROUP_HEARTBEAT: share.handle_share_group_heartbeat,
    m.ApiKey.SHARE_GROUP_DESCRIBE: share.handle_share_group_describe,
    m.ApiKey.SHARE_FETCH: share.handle_share_fetch,
    m.ApiKey.SHARE_ACKNOWLEDGE: share.handle_share_acknowledge,
    m.ApiKey.CREATE_SHARE_GROUP: share.handle_create_share_group,
    m.ApiKey.ALTER_SHARE_GROUP: share.handle_alter_share_group,
    m.ApiKey.DELETE_SHARE_GROUP: share.handle_delete_share_group,
    m.ApiKey.LIST_SHARE_GROUPS: share.handle_list_share_groups,
    **txn_handlers.HANDLERS,
}


class NativeSession:
    """One client connection: decodes requests, runs their handlers, writes responses."""

    log = Logger()

    def __init__(
        self, broker: IBroker, config: BrokerConfig, *, clock: IReactorTime | None = None,
        latency: RequestLatencyMetric | None = None, security: FrontEndSecurity | None = None,
        connectors: IConnectorAdmin | None = None,
    ) -> None:
        """``security`` None: every client is anonymous; ``clock`` None: replies are never throttled."""
        self._broker = broker
        self._config = config
        #: The connector admin service, or None: connectors are off on this broker.
        self._connectors = connectors
        self._frame_bytes_max = config.native_frame_bytes_max
        self._codec = ServerConnection(self._frame_bytes_max)
        self._latency = latency
        self._connection: ConnectionHandle | None = None
        self._principal = ANONYMOUS
        self._closed = False
        self._front_end_security = security
        self._security: ConnectionSecurity | None = None
        self._clock = clock
        self._throttled = False
        #: Whether a request has run as an authenticated principal (the frame bound is then the full one).
        self._authenticated = False

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete request (the adapter closes a connection that trickles one)."""
        return self._codec.buffered_bytes

    def connection_made(self, connection: ConnectionHandle) -> None:
        self._connection = connection
        # The peer's host goes into the principal: host-based ACLs and `groups describe` show it.
        host = connection.peer.rpartition(":")[0]
        self._principal = dataclasses.replace(self._principal, host=host)
        if self._front_end_security is not None:
            self._security = ConnectionSecurity(self._front_end_security, self._config, connection.secure, host,
                                                connection.peer_certificate)
            if not self._config.security_allow_anonymous:  # small frames until SASL or a certificate names it
                self._codec.allow_frames_up_to(min(self._frame_bytes_max, limits.pre_authentication_frame_bytes_max))
    def connection_lost(self, reason: Failure) -> None:
        self._closed = True

    def data_received(self, data: bytes) -> None:
        for event in self._codec.receive_data(data):
            if isinstance(event, RequestReceived):
                self._start(event.header, event.request)
            elif isinstance(event, RequestRejected):
                self._write(self._codec.reply_error(event.header, event.error))
            else:
                self._fail(event)
        self._apply_backpressure()

    def _fail(self, event: ConnectionFailed) -> None:
        assert self._connection is not None
        self.log.warn("closing native connection from {peer}: {error}", peer=self._connection.peer, error=event.error.message)
        if event.error.header is not None:
            self._write(self._codec.reply_error(event.error.header, event.error))
        self._connection.close()

    def _start(self, header: RequestHeader, request: Any) -> None:
        api_key = header.api_key  # the codec decoded it to an ApiKey
        principal = self._principal
        if self._security is not None:
            try:
                authenticated = self._security.require_principal(api_key)
                if authenticated is not None and not self._authenticated:
                    self._authenticated = True
                    self._codec.allow_frames_up_to(self._frame_bytes_max)
                principal = authenticated or principal
            except errors.BrokerError as error:
                self._write(self._codec.reply_error(header, error))
                return
        handler = HANDLERS.get(api_key)
        if self._security is not None and api_key in SECURITY_APIS:
            handler = self._security.handle
        elif api_key in CONNECTOR_APIS:
            handler = functools.partial(_connector_request, self._connectors)
        if handler is None:
            error = errors.UnknownApiKeyError(f"API {api_key.name} is not served by this broker version")
            self._write(self._codec.reply_error(header, error))
            return
        started = time.perf_counter()
        group.REQUEST_CLIENT_ID.set(header.client_id)
        data.REQUEST_API_VERSION.set(header.api_version)
        answered = maybeDeferred(handler, self._broker, principal, request)  # produce/fetch: Deferreds; others: coroutines
        if header.api_key == m.ApiKey.PRODUCE and request.acks == 0:
            answered.addCallback(self._throttle_then, principal, header, request, None, lambda: None)
            answered.addErrback(self._log_unexpected, header)
            return  # acks=0: the client expects no response
        answered.addCallbacks(self._reply, self._reply_failure, callbackArgs=(header, started, principal, request),
                              errbackArgs=(header,))

    def _reply(self, response: Any, header: RequestHeader, started: float, principal: Principal, request: Any) -> None:
        if self._latency is not None:
            _latency_series(self._latency, header.api_key).observe(time.perf_counter() - started)
        if self._security is not None:
            response = self._security.advertise(response)
        frame = self._codec.reply(header, response)
        self._throttle_then(response, principal, header, request, response, lambda: self._write(frame))

    def _throttle_then(self, _: Any, principal: Principal, header: RequestHeader, request: Any, response: Any,
                       send: Any) -> None:
        """Quotas: over its byte rate, a client's reply waits and its connection is not read meanwhile."""
        delay_ms = 0
        if self._security is not None and self._clock is not None:
            now_ms = int(self._clock.seconds() * 1000)
            delay_ms = self._security.throttle_ms(principal, header.client_id, request, response, now_ms)
        if delay_ms <= 0:
            send()
            self._apply_backpressure()
            return
        self._throttled = True
        self._apply_backpressure()

        def release() -> None:
            self._throttled = False
            send()
            self._apply_backpressure()

        assert self._clock is not None, "a reply is held only with a clock"
        self._clock.callLater(delay_ms / 1000.0, release)

    def _reply_failure(self, failure: Failure, header: RequestHeader) -> None:
        if failure.check(errors.BrokerError):
            self._write(self._codec.reply_error(header, failure.value))
        else:
            self._log_unexpected(failure, header)
            self._write(self._codec.reply_error(header, errors.UnknownServerError("internal error; see the broker log")))
        self._apply_backpressure()

    def _log_unexpected(self, failure: Failure, header: RequestHeader) -> None:
        self.log.failure("unexpected error answering {api} request {correlation_id}", failure,
                         api=m.ApiKey(header.api_key).name, correlation_id=header.correlation_id)

    def _write(self, frame: bytes) -> None:
        if not self._closed and self._connection is not None:
            self._connection.write(frame)

    def _apply_backpressure(self) -> None:
        """Stop reading requests while too many are in flight for this connection."""
        if self._connection is None:
            return
        if self._throttled or self._codec.inflight_requests >= limits.native_inflight_requests_max:
            self._connection.pause_reading()
        else:
            self._connection.resume_reading()


@functools.lru_cache(maxsize=256)
def _latency_series(latency: RequestLatencyMetric, api_key: int) -> LatencyObserver:
    """The request-latency histogram series of one API (looking a series up by labels is slow on every reply)."""
    return latency.labels("native", m.ApiKey(api_key).name.lower())


def _connector_request(admin: IConnectorAdmin | None, broker: IBroker, principal: Principal, request: Any) -> Any:
    """A connector API call, in the handlers' shape (the broker is not used: the admin service answers)."""
    return Deferred.fromCoroutine(handle_connector_request(admin, principal, request))


def build_factory(broker: IBroker, context: FrontEndContext) -> SessionFactory:
    """The native listener's factory (named by the front-end plugin)."""
    config = context.config
    latency = context.metrics.request_latency if context.metrics is not None else None
    gauge = context.metrics.connections.labels("native") if context.metrics is not None else None
    return SessionFactory(
        lambda address: NativeSession(broker, config, clock=context.reactor, latency=latency,
                                      security=context.security, connectors=context.connectors),
        idle_timeout_s=config.connection_idle_ms / 1000.0,
        metrics_gauge=gauge,
        frame_timeout_s=context.frame_timeout_s,
        no_delay=True,  # Nagle held a pipelined answer until the client's delayed ACK (40 ms) once it went quiet
    )


