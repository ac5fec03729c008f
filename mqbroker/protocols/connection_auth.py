"""One client connection's authentication, as every binary front end does it.

A connection's principal comes from, in order: a SASL exchange (a mechanism is chosen, then
the client's messages are stepped through it), the verified client certificate (mutual TLS),
or anonymous access if the broker allows it. Front ends own the wire forms; this class owns
the decisions and the audit trail.
"""

from __future__ import annotations

from collections.abc import Callable

from mqbroker import errors
from mqbroker.interfaces import ISaslExchange
from mqbroker.model import PeerIdentity, Principal
from mqbroker.protocols.frontends import FrontEndSecurity


class ConnectionAuthentication:
    """Who one connection is: certificate or anonymous until a SASL exchange says otherwise."""

    def __init__(self, security: FrontEndSecurity, protocol: str, secure: bool, host: str,
                 peer_certificate: Callable[[], PeerIdentity | None]) -> None:
        self._authenticator = security.authenticator
        self._audit = security.audit
        self._protocol = protocol
        self.secure = secure
        self.host = host
        self._peer_certificate = peer_certificate
        self._principal: Principal | None = None
        self._checked_certificate = False
        self._exchange: ISaslExchange | None = None
        #: True once a SASL exchange has authenticated this connection.
        self.sasl_complete = False

    def principal(self) -> Principal | None:
        """Who this connection is so far (None: it must authenticate first)."""
        if self._principal is None and not self._checked_certificate:
            self._checked_certificate = True
            identity = self._peer_certificate()
            try:
                if identity is not None:
                    self._principal = self._authenticator.authenticate_certificate(
                        identity.subject, identity.alternative_names, self.host)
                else:
                    self._principal = self._authenticator.anonymous(self.host)
            except errors.SaslAuthenticationError:
                self._principal = None  # SASL may still authenticate this connection
        return self._principal

    def require_principal(self, what: str) -> Principal:
        """The principal for a request named ``what``; SaslAuthenticationError if there is none yet."""
        principal = self.principal()
        if principal is None:
            self._audit.authentication_failed(self._protocol, self.host, "", f"{what} before authenticating")
            raise errors.SaslAuthenticationError(
                "authenticate first: this broker does not allow anonymous access (use SASL or a client certificate)")
        return principal

    def mechanisms(self) -> list[str]:
        """The SASL mechanisms this connection may use."""
        return list(self._authenticator.mechanisms(self.secure))

    @property
    def exchanging(self) -> bool:
        """Whether a SASL exchange has started and not finished."""
        return self._exchange is not None

    def start_sasl(self, mechanism: str) -> None:
        """Begin an exchange with ``mechanism``; UnsupportedSaslMechanismError if it is not enabled here."""
        self._exchange = self._authenticator.start(mechanism, self.secure, self.host)

    def step_sasl(self, message: bytes) -> bytes:
        """One client message of the exchange; on completion the connection takes the exchange's principal."""
        if self._exchange is None:
            raise errors.IllegalSaslStateError("SaslAuthenticate before SaslHandshake")
        exchange = self._exchange
        try:
            reply = exchange.respond(message)
        except errors.BrokerError as error:
            self._exchange = None
            self._audit.authentication_failed(self._protocol, self.host, "", error.message)
            raise
        if exchange.complete:
            self._principal = exchange.principal
            self._exchange = None
            self.sasl_complete = True
        return bytes(reply)
