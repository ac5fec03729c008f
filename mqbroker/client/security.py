"""Client-side security for the native protocol: TLS settings and the SASL exchange (SCRAM, PLAIN).

``ClientSecurity`` travels from the command line (or the application) to every connection the
client opens; ``sasl_steps`` is a generator of the client's messages so that the blocking and
the Twisted clients share one exchange.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Generator
from dataclasses import dataclass

from mqbroker.security.auth import PLAIN, encode_plain
from mqbroker.client.tls import client_ssl_context
from mqbroker.errors import SaslAuthenticationError
from mqbroker.security.scram import ScramClient, ScramMechanism

DEFAULT_SASL_MECHANISM = ScramMechanism.SHA_512.value


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSecurity:
    """How a client connects: TLS (``ssl_context``) and SASL credentials, each optional.

    The blocking client uses ``ssl_context``; the Twisted client (which cannot use an ``ssl``
    context) builds its TLS options from the PEM paths ``tls_ca``, ``tls_cert``, ``tls_key``
    (``from_options`` fills both), speaking TLS whenever ``ssl_context`` is set.
    """

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @classmethod
    def from_options(
        cls,
        *,
        tls: bool = False,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        sasl_mechanism: str | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> ClientSecurity:
        """Build from command-line style options: any ``--tls-*`` turns TLS on; a username turns SASL on."""
        context = client_ssl_context(tls_ca, tls_cert, tls_key) if (tls or tls_ca or tls_cert) else None
        if username and password is None:
            raise ValueError("--username needs --password")
        mechanism = (sasl_mechanism or DEFAULT_SASL_MECHANISM).upper() if username else None
        return cls(ssl_context=context, sasl_mechanism=mechanism, username=username, password=password,
                   tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key)


def sasl_steps(security: ClientSecurity) -> Generator[bytes, bytes, None]:
    """Yield each client message; ``send`` the server's reply to it. Raises SaslAuthenticationError
    if the server's final message does not prove it knows the credential."""
    assert security.sasl_mechanism and security.username is not None and security.password is not None
    if security.sasl_mechanism == PLAIN:
        yield encode_plain(security.username, security.password)
        return
    try:
        mechanism = ScramMechanism.from_name(security.sasl_mechanism)
    except Exception:
        raise SaslAuthenticationError(f"unknown SASL mechanism {security.sasl_mechanism!r}") from None
    client = ScramClient(mechanism, security.username, security.password, os.urandom)
    server_first = yield client.first_message()
    server_final = yield client.respond(server_first)
    client.finish(server_final)
