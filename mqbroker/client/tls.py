"""TLS settings for the blocking client (plain sockets, no Twisted): an ``ssl.SSLContext``."""

from __future__ import annotations

import pathlib
import ssl


def client_ssl_context(
    ca: pathlib.Path | str | None = None,
    certificate: pathlib.Path | str | None = None,
    key: pathlib.Path | str | None = None,
    *,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """TLS 1.2+ with the server's certificate and hostname verified (against ``ca``, else the system
    store); ``certificate``/``key`` are the client's own, for brokers that require mutual TLS."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca) if ca else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    if certificate is not None:
        context.load_cert_chain(str(certificate), str(key) if key else None)
    return context
