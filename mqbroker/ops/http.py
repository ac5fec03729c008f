"""The HTTP listener: ``/health`` (the process is up), ``/ready`` (serving), ``/metrics`` (Prometheus)."""

from __future__ import annotations

from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import Request, Site


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


class _Site(Site):
    """A site without access logs: Prometheus scrapes every few seconds and would flood them."""

    noisy = False

    def log(self, request: Request) -> None:
        """Write no access log line."""


def build_site(service: Any, metrics: Any) -> Site:
    """The HTTP site for ``service`` (anything with ``is_ready()``) and its ``BrokerMetrics``."""
    # imported here: prometheus_client.twisted imports the reactor (integration-notes.md)
    from prometheus_client.twisted import MetricsResource

    root = Resource()
    root.putChild(b"health", _Health())
    root.putChild(b"ready", _Ready(service))
    root.putChild(b"metrics", MetricsResource(registry=metrics.registry))
    return _Site(root)
