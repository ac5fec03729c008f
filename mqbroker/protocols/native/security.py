"""Native protocol security: who a connection is (certificate, SASL or anonymous), the SASL APIs,
the user and ACL admin APIs (answered through the ``IBroker``, which authorizes them), and
byte-rate quotas.

A connection's principal comes from, in order: a SASL exchange (SaslHandshake then
SaslAuthenticate steps), the verified client certificate (mutual TLS), or anonymous access if
the broker allows it. Until it has one, only ApiVersions and the SASL APIs are answered; every
other request fails with SASL_AUTHENTICATION_FAILED.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from mqbroker import errors
from mqbroker.config import BrokerConfig
from mqbroker.interfaces import IBroker
from mqbroker.model import PeerIdentity, Principal, ResourceType
from mqbroker.protocols.connection_auth import ConnectionAuthentication
from mqbroker.protocols.frontends import FrontEndSecurity
from mqbroker.protocols.native import messages as m
from mqbroker.security.acl import Acl, PatternType, Permission, parse_operation
from mqbroker.security.quotas import QuotaKind

#: APIs a connection may use before it is authenticated.
UNAUTHENTICATED_APIS = frozenset({m.ApiKey.API_VERSIONS, m.ApiKey.SASL_HANDSHAKE, m.ApiKey.SASL_AUTHENTICATE})
#: APIs answered here rather than by the broker.
SECURITY_APIS = frozenset({
    m.ApiKey.SASL_HANDSHAKE, m.ApiKey.SASL_AUTHENTICATE, m.ApiKey.DESCRIBE_ACLS, m.ApiKey.CREATE_ACLS,
    m.ApiKey.DELETE_ACLS, m.ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, m.ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
})


def acl_of(binding: m.AclBinding) -> Acl:
    """The ACL a wire binding describes; InvalidRequestError for unknown names."""
    try:
        return Acl(
            principal=binding.principal, host=binding.host, resource_type=ResourceType(binding.resource_type),
            resource_name=binding.resource_name, pattern_type=PatternType(binding.pattern_type),
            operation=parse_operation(binding.operation), permission=Permission(binding.permission),
        )
    except ValueError as error:
        raise errors.InvalidRequestError(f"invalid ACL: {error}") from None


def binding_of(acl: Acl) -> m.AclBinding:
    """The wire form of an ACL."""
    return m.AclBinding(**acl.to_json())


class ConnectionSecurity:
    """One native connection's authentication state and its security APIs."""

    def __init__(self, security: FrontEndSecurity, config: BrokerConfig, secure: bool, host: str,
                 peer_certificate: Callable[[], PeerIdentity | None]) -> None:
        self._security = security
        self._config = config
        self._secure = secure
        self.authentication = ConnectionAuthentication(security, "native", secure, host, peer_certificate)

    def principal(self) -> Principal | None:
        """Who this connection is so far (None: it must authenticate first)."""
        return self.authentication.principal()

    def require_principal(self, api_key: m.ApiKey) -> Principal | None:
        """The principal for a request to ``api_key``; SaslAuthenticationError if it needs one and there is none."""
        principal = self.principal()
        if principal is not None or api_key in UNAUTHENTICATED_APIS:
            return principal
        return self.authentication.require_principal(api_key.name)  # refused (and audited)

    # ---- SASL ----------------------------------------------------------------------------------

    def handshake(self, request: m.SaslHandshakeRequest) -> m.SaslHandshakeResponse:
        """Start an exchange with the chosen mechanism."""
        self.authentication.start_sasl(request.mechanism)
        return m.SaslHandshakeResponse(mechanisms=tuple(self.authentication.mechanisms()))

    def authenticate(self, request: m.SaslAuthenticateRequest) -> m.SaslAuthenticateResponse:
        """One step of the exchange; on completion the connection takes the exchange's principal."""
        return m.SaslAuthenticateResponse(auth_bytes=self.authentication.step_sasl(request.auth_bytes))

    # ---- admin ---------------------------------------------------------------------------------

    async def handle(self, broker: IBroker, principal: Principal, request: Any) -> Any:
        """Answer one of ``SECURITY_APIS`` (the admin ones through ``broker``)."""
        if isinstance(request, m.SaslHandshakeRequest):
            return self.handshake(request)
        if isinstance(request, m.SaslAuthenticateRequest):
            return self.authenticate(request)
        if isinstance(request, m.DescribeAclsRequest):
            acls = await broker.list_acls(principal)
            return m.DescribeAclsResponse(acls=tuple(binding_of(acl) for acl in acls))
        if isinstance(request, m.CreateAclsRequest):
            await broker.add_acls(principal, [acl_of(binding) for binding in request.creations])
            return m.CreateAclsResponse()
        if isinstance(request, m.DeleteAclsRequest):
            await broker.remove_acls(principal, [acl_of(binding) for binding in request.deletions])
            return m.DeleteAclsResponse()
        if isinstance(request, m.DescribeUserScramCredentialsRequest):
            names = await broker.list_users(principal)
            return m.DescribeUserScramCredentialsResponse(users=tuple(m.DescribedUser(name=name) for name in names))
        assert isinstance(request, m.AlterUserScramCredentialsRequest), request
        return await self._alter_users(broker, principal, request)

    async def _alter_users(self, broker: IBroker, principal: Principal,
                           request: m.AlterUserScramCredentialsRequest) -> Any:
        results = []
        changes: list[tuple[str, Any]] = [
            (upsertion.name, lambda u=upsertion: broker.upsert_user(principal, u.name, u.password, bool(u.create)))
            for upsertion in request.upsertions
        ] + [(name, lambda n=name: broker.remove_user(principal, n)) for name in request.deletions]
        for name, change in changes:
            try:
                await change()
                code, message = 0, None
            except errors.BrokerError as error:
                code, message = int(error.code), error.message
            results.append(m.AlterUserResult(name=name, error_code=code, error_message=message))
        return m.AlterUserScramCredentialsResponse(results=tuple(results))

    # ---- TLS listeners in metadata --------------------------------------------------------------

    def advertise(self, response: Any) -> Any:
        """On a TLS connection, brokers are advertised at their TLS ports: each broker's native port
        plus this broker's ``native_tls_port - native_port`` (the same offset on every broker)."""
        config = self._config
        if not self._secure or not isinstance(response, (m.MetadataResponse, m.FindCoordinatorResponse)):
            return response
        offset = config.native_tls_port - config.native_port
        if isinstance(response, m.FindCoordinatorResponse):
            return dataclasses.replace(response, port=response.port + offset)
        brokers = tuple(dataclasses.replace(broker, port=broker.port + offset) for broker in response.brokers)
        return dataclasses.replace(response, brokers=brokers)

    # ---- quotas --------------------------------------------------------------------------------

    def throttle_ms(self, principal: Principal, client_id: str, request: Any, response: Any, now_ms: int) -> int:
        """Record a produce or fetch's bytes; how long to hold the reply and the connection."""
        quotas = self._security.quotas
        if not quotas.has_quotas:
            return 0
        if isinstance(request, m.ProduceRequest):
            kind = QuotaKind.PRODUCE
            byte_count = sum(len(p.records or b"") for topic in request.topics for p in topic.partitions)
        elif isinstance(response, m.FetchResponse):
            if isinstance(request, m.FetchRequest) and request.replica_id >= 0:
                return 0  # replication is not a client: followers are never throttled (as in Kafka)
            kind = QuotaKind.FETCH
            byte_count = sum(len(p.records or b"") for topic in response.topics for p in topic.partitions)
        else:
            return 0
        return quotas.record(kind, str(principal), client_id, byte_count, now_ms)
