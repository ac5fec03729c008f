"""Sending push requests: ``twisted.web.client.Agent`` over a pool of persistent connections per subscription.

Each subscription has its own pool (at most ``push.max.outstanding`` connections), so an endpoint
that hangs or refuses holds only its own subscription's connections. HTTPS endpoints are verified
(certificate chain and host name) against ``push.ca.file``, or the system's trust store without it.
A request that has no answer within the ack deadline is cancelled, closing its connection. At
most ``limits.push_response_bytes_max`` of a response body are read; the rest is dropped.
"""

from __future__ import annotations

import re
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.interfaces import IConsumer, IStreamClientEndpoint
from twisted.internet.protocol import Protocol
from twisted.internet.ssl import Certificate, trustRootFromCertificates
from twisted.python.failure import Failure
from twisted.web.client import URI, Agent, BrowserLikePolicyForHTTPS, HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgentEndpointFactory, IBodyProducer, IResponse
from zope.interface import implementer

from mqbroker import limits
from mqbroker.shares.push.signing import PushRequest

_PEM_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)
#: Seconds an idle pooled connection is kept.
IDLE_CONNECTION_S = 60
#: Seconds allowed to open a connection (within the ack deadline).
CONNECT_TIMEOUT_S = 10


@implementer(IBodyProducer)
class _Body:
    """A request body already in memory."""

    def __init__(self, body: bytes) -> None:
        self._body = body
        self.length = len(body)

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        consumer.write(self._body)
        return succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


class _BoundedDiscard(Protocol):
    """Reads a response body and drops it, stopping after ``limits.push_response_bytes_max`` bytes."""

    def __init__(self, finished: Deferred[None]) -> None:
        self._finished = finished
        self._received = 0

    def dataReceived(self, data: bytes) -> None:
        self._received += len(data)
        if self._received > limits.push_response_bytes_max:
            self.transport.stopProducing()

    def connectionLost(self, reason: Failure = None) -> None:  # type: ignore[assignment]
        """The body ended (or was cut short: the status that was sent stands)."""
        self._finished.callback(None)


def load_trust_root(ca_file: str) -> Any:
    """The certificates of a PEM file as a trust root; ``ValueError`` if it holds none."""
    with open(ca_file, "rb") as handle:
        pem = handle.read()
    certificates = [Certificate.loadPEM(block) for block in _PEM_CERTIFICATE.findall(pem)]
    if not certificates:
        raise ValueError(f"{ca_file} holds no PEM certificate")
    return trustRootFromCertificates(certificates)


@implementer(IAgentEndpointFactory)
class _OneEndpoint:
    """Agent's endpoint for a URL, built once per host and port rather than per request.

    A subscription POSTs to one URL; ``Agent``'s own factory builds a fresh endpoint for every
    request, IDNA-encoding the host name each time (a tenth of the broker's work per push). Each
    endpoint is what that factory would build: ``HostnameEndpoint``, wrapped in TLS verified by
    the policy for ``https``.
    """

    def __init__(self, reactor: Any, policy: BrowserLikePolicyForHTTPS) -> None:
        self._reactor = reactor
        self._policy = policy
        self._endpoints: dict[tuple[bytes, bytes, int], IStreamClientEndpoint] = {}

    def endpointForURI(self, uri: URI) -> IStreamClientEndpoint:  # noqa: N802 (IAgentEndpointFactory's name)
        """The endpoint of ``uri``'s scheme, host and port."""
        key = (uri.scheme, uri.host, uri.port)
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            endpoint = HostnameEndpoint(self._reactor, uri.host, uri.port, timeout=CONNECT_TIMEOUT_S)
            if uri.scheme == b"https":
                endpoint = wrapClientTLS(self._policy.creatorForNetloc(uri.host, uri.port), endpoint)
            self._endpoints[key] = endpoint
        return endpoint


class PushSender:
    """POSTs one subscription's requests to its endpoint."""

    def __init__(self, reactor: Any, *, endpoint: str, connections_max: int, ca_file: str = "") -> None:
        self._reactor = reactor
        self._url = endpoint.encode("utf-8")
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        self._pool.maxPersistentPerHost = connections_max
        self._pool.cachedConnectionTimeout = IDLE_CONNECTION_S
        self._pool.retryAutomatically = False  # a POST that may have arrived is the dispatcher's to retry
        policy = BrowserLikePolicyForHTTPS(trustRoot=load_trust_root(ca_file)) if ca_file else BrowserLikePolicyForHTTPS()
        self._agent = Agent.usingEndpointFactory(reactor, _OneEndpoint(reactor, policy), pool=self._pool)

    def post(self, request: PushRequest, timeout_s: float) -> Deferred[int]:
        """Send ``request``; fires with the response's status code (fails on timeout or connection errors)."""
        headers = Headers({name.encode("ascii"): [value.encode("utf-8")] for name, value in request.headers.items()})
        sent = self._agent.request(b"POST", self._url, headers, _Body(request.body))
        sent.addCallback(self._status)
        sent.addTimeout(timeout_s, self._reactor)
        return sent

    @staticmethod
    def _status(response: IResponse) -> Deferred[int]:
        finished: Deferred[None] = Deferred()
        response.deliverBody(_BoundedDiscard(finished))
        return finished.addCallback(lambda _: int(response.code))

    def close(self) -> Deferred[None]:
        """Close the pooled connections."""
        return self._pool.closeCachedConnections()
