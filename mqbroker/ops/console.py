"""The web console: static files shipped in the package (``ops/static``), served at ``/`` with strict headers.

Plain HTML, CSS and JavaScript without a build step or a framework: the page calls the admin
API (``/api/v1``) with the browser's credentials, so it can do exactly what the principal may.
"""

from __future__ import annotations

import pathlib
from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import Request
from twisted.web.static import File

STATIC_DIRECTORY = pathlib.Path(__file__).with_name("static")
#: Only the console's own scripts, styles and API calls; never framed (clickjacking).
CONTENT_SECURITY_POLICY = (b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                           b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


def _secure(request: Request) -> None:
    request.setHeader(b"content-security-policy", CONTENT_SECURITY_POLICY)
    request.setHeader(b"x-content-type-options", b"nosniff")
    request.setHeader(b"referrer-policy", b"no-referrer")
    request.setHeader(b"x-frame-options", b"DENY")
    request.setHeader(b"cache-control", b"no-cache")


class _StaticFile(File):
    """A file of the console (never a directory listing)."""

    def directoryListing(self) -> Any:
        return self.forbidden

    def render(self, request: Request) -> Any:
        _secure(request)
        return super().render(request)


class _ConsolePage(Resource):
    """``/``: the console's single page."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self._page = (STATIC_DIRECTORY / "index.html").read_bytes()  # read once, at start-up

    def render_GET(self, request: Request) -> bytes:
        _secure(request)
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        return self._page


def add_console(root: Resource) -> None:
    """Serve the console at ``/`` and its assets under ``/static/``."""
    root.putChild(b"", _ConsolePage())
    root.putChild(b"static", _StaticFile(str(STATIC_DIRECTORY)))
