"""The Twisted client's connections by broker and its metadata view, reactor-driven.

Connections are opened through endpoints (TLS when asked) on first use, negotiate API versions
and SASL, and are reopened after a loss; requests return Deferreds.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Sequence
from typing import Any

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import HostnameEndpoint, connectProtocol, wrapClientTLS
from twisted.internet.interfaces import IReactorTCP
from twisted.python.failure import Failure

from mqbroker.client.cluster import ClusterView
from mqbroker.client.connection import BrokerUnavailableError, parse_bootstrap
from mqbroker.client.security import ClientSecurity, sasl_steps
from mqbroker.client.twisted.protocol import NativeClientProtocol
from mqbroker.errors import BrokerError
from mqbroker.protocols.native.messages import (
    ApiVersionsRequest,
    CoordinatorType,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)


class TwistedCluster:
    """Connections by node id and the metadata view, reactor-driven."""

    def __init__(self, reactor: IReactorTCP, bootstrap: str | Sequence[str], client_id: str,
                 security: ClientSecurity | None = None) -> None:
        self.reactor = reactor
        self.security = security
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.view = ClusterView()
        self._connected: dict[Any, NativeClientProtocol] = {}
        self._waiters: dict[Any, list[Deferred[NativeClientProtocol]]] = {}
        self._closed = False

    def _connect(self, key: Any, host: str, port: int) -> Deferred[NativeClientProtocol]:
        if self._closed:
            return fail(BrokerUnavailableError("the client is closed"))
        connected = self._connected.get(key)
        if connected is not None:
            return succeed(connected)
        waiter: Deferred[NativeClientProtocol] = Deferred()
        waiters = self._waiters.get(key)
        if waiters is not None:
            waiters.append(waiter)
            return waiter
        self._waiters[key] = [waiter]
        protocol = NativeClientProtocol(self.client_id)
        Deferred.fromCoroutine(self._open(key, host, port, protocol))
        return waiter

    async def _open(self, key: Any, host: str, port: int, protocol: NativeClientProtocol) -> None:
        """Connect and negotiate versions, then hand the connection to everyone waiting for it."""
        outcome: Any
        try:
            await connectProtocol(self._endpoint(host, port), protocol)
            protocol.codec.use_broker_versions(await protocol.request(ApiVersionsRequest()))
            if self.security is not None and self.security.sasl_mechanism:
                await self._authenticate(protocol, self.security)
        except BrokerError as error:  # e.g. SASL_AUTHENTICATION_FAILED: the broker's own answer, as it is
            protocol.transport.loseConnection()
            outcome = Failure(error)
        except Exception as error:  # every connect failure is reported to the waiters as one typed error
            outcome = Failure(BrokerUnavailableError(f"cannot connect to {host}:{port}: {error}"))
        else:
            outcome = protocol
            self._connected[key] = protocol
            protocol.lost.addCallback(lambda _: self._connected.pop(key, None))
        for waiter in self._waiters.pop(key):
            waiter.callback(outcome)

    def _endpoint(self, host: str, port: int) -> Any:
        """TCP, or TLS when the security settings ask for it (the server's certificate must name ``host``)."""
        endpoint = HostnameEndpoint(self.reactor, host, port)
        security = self.security
        if security is None or security.ssl_context is None:
            return endpoint
        from mqbroker.security.tls import client_options  # TLS support is loaded only by clients that use it

        options = client_options(host, *(pathlib.Path(path) if path else None
                                         for path in (security.tls_ca, security.tls_cert, security.tls_key)))
        return wrapClientTLS(options, endpoint)

    @staticmethod
    async def _authenticate(protocol: NativeClientProtocol, security: ClientSecurity) -> None:
        """SaslHandshake, then SaslAuthenticate steps until the exchange completes (typed errors on refusal)."""
        await protocol.request(SaslHandshakeRequest(mechanism=security.sasl_mechanism or ""))
        steps = sasl_steps(security)
        message = next(steps)
        while True:
            response = await protocol.request(SaslAuthenticateRequest(auth_bytes=message))
            try:
                message = steps.send(response.auth_bytes)
            except StopIteration:
                return

    def connection(self, node_id: int | None) -> Deferred[NativeClientProtocol]:
        """The connection to ``node_id`` (None: to any broker, see ``_any_connection``)."""
        if node_id is None:
            return Deferred.fromCoroutine(self._any_connection())
        address = self.view.address(node_id)
        if address is None:
            return fail(BrokerUnavailableError(f"broker {node_id} is not in the cluster metadata"))
        return self._connect(node_id, *address)

    async def _any_connection(self) -> NativeClientProtocol:
        """A connection to some broker: the bootstrap brokers in turn, then those the metadata named."""
        failures = []
        known = [address for node in self.view.node_ids if (address := self.view.address(node))]
        for host, port in self.bootstrap + known:
            try:
                return await self._connect(None, host, port)
            except BrokerUnavailableError as error:
                failures.append(str(error))
        raise BrokerUnavailableError("no broker reachable: " + "; ".join(failures))

    async def request(self, node_id: int | None, request: object) -> Any:
        """Send ``request`` to ``node_id`` and wait for the response."""
        connection = await self.connection(node_id)
        return await connection.request(request)

    async def refresh(self, topics: Iterable[str] | None, auto_create: bool = True) -> MetadataResponse:
        """Ask for metadata about ``topics`` (None: all) and update the view."""
        names = None if topics is None else tuple(sorted(set(topics)))
        response = await self.request(None, MetadataRequest(topics=names, allow_auto_topic_creation=auto_create))
        self.view.update(response, int(self.reactor.seconds() * 1000))  # type: ignore[attr-defined]
        return response

    async def coordinator_request(
        self, role: str, request: object, key: str | None = None, key_type: CoordinatorType = CoordinatorType.GROUP
    ) -> Any:
        """Send ``request`` to the coordinator of ``key`` (default: the request's group) over the connection
        named ``role``."""
        connection_key = ("coordinator", role)
        connection = self._connected.get(connection_key)
        if connection is None:  # look the coordinator up again for every new connection
            lookup = FindCoordinatorRequest(key=request.group_id if key is None else key,  # type: ignore[attr-defined]
                                            key_type=key_type)
            found = await self.request(None, lookup)
            assert isinstance(found, FindCoordinatorResponse)
            connection = await self._connect(connection_key, found.host, found.port)
        return await connection.request(request)

    def drop_coordinator(self, role: str) -> None:
        """Close the coordinator connection named ``role``; its waiting requests fail."""
        protocol = self._connected.pop(("coordinator", role), None)
        if protocol is not None:
            protocol.transport.loseConnection()

    async def all_topics(self) -> MetadataResponse:
        """Metadata of every topic."""
        return await self.refresh(None, auto_create=False)

    def close(self) -> None:
        """Close every open connection; none is opened any more."""
        self._closed = True
        for protocol in list(self._connected.values()):
            protocol.transport.loseConnection()
        self._connected.clear()
