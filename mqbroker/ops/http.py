"""The HTTP listener: ``/health`` (the process is up), ``/ready`` (serving), ``/metrics`` (Prometheus).

Bounded like the other listeners: a request must arrive whole within ``http_request_timeout_ms``
(a client trickling a request is disconnected), and an idle keep-alive connection is closed.
With the ACL authorizer on, every path but ``security.http_open_paths`` needs authentication:
HTTP basic auth checked against the SCRAM credential store (over TLS unless
``plain_without_tls``), or a verified client certificate (``http_tls`` with client auth); the
principal needs ``describe`` on the cluster. Refusals are 401 (with a ``WWW-Authenticate``
challenge) or 403, and go to the audit log.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from twisted.web.http import HTTPChannel
from twisted.web.pages import errorPage
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request, Site
from zope.interface import implementer

from mqbroker import errors, limits
from mqbroker.model import Operation, Principal
from mqbroker.security.service import audit_authentication_failure
from mqbroker.security.tls import peer_identity


class _Health(Resource):
    isLeaf = True

    def render_GET(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"text/plain")
        return b"ok\n"


class _Ready(Resource):
    isLeaf = True

    def __init__(self, service: Any) -> None:
        super().__init__()
        self._service = service

    def render_GET(self, request: Request) -> bytes:
        request.setHeader(b"content-type", b"text/plain")
        if self._service.is_ready():
            return b"ready\n"
        request.setResponseCode(503)
        return b"starting or stopping\n"


class _DeadlineChannel(HTTPChannel):
    """An HTTP connection whose every request must arrive whole within the site's ``request_timeout_s``."""

    _deadline: Any = None

    def connectionMade(self) -> None:
        super().connectionMade()
        self._arm()

    def dataReceived(self, data: bytes) -> None:
        if self._deadline is None:
            self._arm()  # the next request on a keep-alive connection begins
        super().dataReceived(data)

    def allContentReceived(self) -> None:
        self._disarm()
        super().allContentReceived()

    def connectionLost(self, reason: Any) -> None:
        self._disarm()
        super().connectionLost(reason)

    def _arm(self) -> None:
        self._deadline = self.callLater(self.site_request_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        self.transport.abortConnection()


class _Site(Site):
    """A site without access logs (Prometheus scrapes every few seconds) and with a request deadline."""

    noisy = False
    protocol = _DeadlineChannel

    def __init__(self, resource: Any, request_timeout_s: float) -> None:
        super().__init__(resource, timeout=limits.http_idle_s_max)
        self.request_timeout_s = request_timeout_s

    def buildProtocol(self, addr: Any) -> Any:
        channel = super().buildProtocol(addr)
        channel.site_request_timeout_s = self.request_timeout_s
        return channel

    def log(self, request: Request) -> None:
        """Write no access log line."""


@implementer(IResource)
class _Authenticated:
    """Serves ``root`` to authenticated principals allowed to describe the cluster; open paths to everyone."""

    isLeaf = False

    def __init__(self, root: Resource, security: Any, open_paths: frozenset[str]) -> None:
        self._root = root
        self._security = security
        self._open_paths = open_paths

    def getChildWithDefault(self, name: bytes, request: Request) -> Any:
        if "/" + name.decode("utf-8", "replace") in self._open_paths:
            return self._root.getChildWithDefault(name, request)
        try:
            principal = self._principal(request)
            self._security.check_cluster(principal, Operation.DESCRIBE)
        except errors.SaslAuthenticationError as error:
            host = getattr(request.getClientAddress(), "host", "")
            audit_authentication_failure("http", host, "", error.message)
            request.setHeader(b"www-authenticate", b'Basic realm="mqbroker", charset="UTF-8"')
            return errorPage(401, "Unauthorized", "authenticate with HTTP basic auth (a broker user) or a client "
                                                  "certificate")
        except errors.ClusterAuthorizationError as error:
            return errorPage(403, "Forbidden", error.message)
        return self._root.getChildWithDefault(name, request)

    def putChild(self, path: bytes, child: Any) -> None:
        self._root.putChild(path, child)

    def render(self, request: Request) -> bytes:
        return self.getChildWithDefault(b"", request).render(request)

    def _principal(self, request: Request) -> Principal:
        authenticator = self._security.authenticator
        host = getattr(request.getClientAddress(), "host", "")
        header = request.getHeader(b"authorization")
        if header is not None:
            scheme, _, encoded = header.partition(b" ")
            if scheme.lower() != b"basic":
                raise errors.SaslAuthenticationError(f"HTTP authentication scheme {scheme[:16]!r} is not supported")
            try:
                username, colon, password = base64.b64decode(encoded, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                raise errors.SaslAuthenticationError("malformed basic authorization header") from None
            if not colon:
                raise errors.SaslAuthenticationError("malformed basic authorization header")
            return authenticator.authenticate_password(username, password, request.isSecure(), host)
        identity = peer_identity(request.channel.transport) if request.isSecure() else None
        if identity is not None:
            return authenticator.authenticate_certificate(identity.subject, identity.alternative_names, host)
        raise errors.SaslAuthenticationError("this path needs authentication")


def build_site(service: Any, metrics: Any) -> Site:
    """The HTTP site for ``service`` (``is_ready()``, ``config``, ``security``) and its ``BrokerMetrics``."""
    # imported here: prometheus_client.twisted imports the reactor (integration-notes.md)
    from prometheus_client.twisted import MetricsResource

    root = Resource()
    root.putChild(b"health", _Health())
    root.putChild(b"ready", _Ready(service))
    root.putChild(b"metrics", MetricsResource(registry=metrics.registry))
    config = getattr(service, "config", None)
    security = getattr(service, "security", None)
    served: Any = root
    if config is not None and security is not None and config.security_authorizer == "acl":
        open_paths = frozenset(path.strip() for path in config.security_http_open_paths.split(",") if path.strip())
        served = _Authenticated(root, security, open_paths)
    timeout_s = (config.http_request_timeout_ms if config is not None else 10_000) / 1000.0
    return _Site(served, timeout_s)
