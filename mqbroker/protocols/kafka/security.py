"""Kafka security: SASL on the Kafka listener, the ACL and SCRAM admin APIs, and quota throttling.

Authentication reuses the broker's authenticators (``ConnectionAuthentication``): a client
certificate or anonymous access needs no SASL; otherwise only ApiVersions, SaslHandshake and
SaslAuthenticate are answered until a SASL exchange (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
completes, and anything else is refused with ILLEGAL_SASL_STATE and the connection closed, as
Kafka does. Kafka's numeric ACL enums map onto mqbroker's ACL model; the ACL and SCRAM admin
APIs are ``IBroker`` calls, which authorize them on the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mqbroker import errors
from mqbroker.interfaces import IBroker
from mqbroker.model import Operation, PeerIdentity, Principal, ResourceType
from mqbroker.protocols.connection_auth import ConnectionAuthentication
from mqbroker.protocols.frontends import FrontEndSecurity
from mqbroker.protocols.kafka.error_codes import kafka_error
from mqbroker.protocols.kafka.messages import produce_fetch
from mqbroker.protocols.kafka.messages import security as m
from mqbroker.protocols.kafka.messages.apis import ApiKey
from mqbroker.security.acl import Acl, AllOperations, PatternType, Permission
from mqbroker.security.quotas import QuotaKind
from mqbroker.security.scram import ScramMechanism

#: APIs answered before authentication (ApiVersions is answered by the connection itself).
SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
#: APIs answered here rather than by the broker.
SECURITY_APIS = SASL_APIS | {ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS,
                             ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS}

# Kafka's numeric ACL enums (ResourceType, PatternType, AclOperation, AclPermissionType).
_ANY, _MATCH = 1, 2
RESOURCE_TYPES = {2: ResourceType.TOPIC, 3: ResourceType.GROUP, 4: ResourceType.CLUSTER, 5: ResourceType.TRANSACTIONAL_ID}
PATTERN_TYPES = {3: PatternType.LITERAL, 4: PatternType.PREFIXED}
OPERATIONS: dict[int, Any] = {2: AllOperations.ALL, 3: Operation.READ, 4: Operation.WRITE, 5: Operation.CREATE,
                              6: Operation.DELETE, 7: Operation.ALTER, 8: Operation.DESCRIBE,
                              10: Operation.DESCRIBE_CONFIGS, 11: Operation.ALTER_CONFIGS}
PERMISSIONS = {2: Permission.DENY, 3: Permission.ALLOW}
#: SCRAM mechanisms by Kafka's ScramMechanism number.
SCRAM_MECHANISMS = {1: ScramMechanism.SHA_256, 2: ScramMechanism.SHA_512}


def _number(table: dict[int, Any], value: Any) -> int:
    return next(number for number, item in table.items() if item == value)


def acl_of(resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str, operation: int,
           permission: int) -> Acl:
    """The ACL a Kafka binding describes; InvalidRequestError for values mqbroker does not model."""
    try:
        return Acl(principal=principal, host=host, resource_type=RESOURCE_TYPES[resource_type],
                   resource_name=resource_name, pattern_type=PATTERN_TYPES[pattern_type],
                   operation=OPERATIONS[operation], permission=PERMISSIONS[permission])
    except KeyError as error:
        raise errors.InvalidRequestError(f"ACL value {error} is not one mqbroker models") from None


def _matches(acl: Acl, request: m.DescribeAclsRequest | m.DeleteAclsFilter) -> bool:
    """Whether ``acl`` matches a Kafka ACL filter (ANY matches everything; MATCH also takes wildcards and prefixes).

    ACLs of resource types Kafka has no number for (MQTT topic filters) never match: Kafka clients neither see
    nor delete them."""
    if acl.resource_type not in RESOURCE_TYPES.values():
        return False
    if request.resource_type_filter != _ANY and RESOURCE_TYPES.get(request.resource_type_filter) != acl.resource_type:
        return False
    name = request.resource_name_filter
    if request.pattern_type_filter == _MATCH:
        if name is not None and not (acl.resource_name in (name, "*") or (
                acl.pattern_type is PatternType.PREFIXED and name.startswith(acl.resource_name))):
            return False
    else:
        if request.pattern_type_filter != _ANY and PATTERN_TYPES.get(request.pattern_type_filter) != acl.pattern_type:
            return False
        if name is not None and name != acl.resource_name:
            return False
    return ((request.principal_filter is None or request.principal_filter == acl.principal)
            and (request.host_filter is None or request.host_filter == acl.host)
            and (request.operation == _ANY or OPERATIONS.get(request.operation) == acl.operation)
            and (request.permission_type == _ANY or PERMISSIONS.get(request.permission_type) == acl.permission))


class KafkaSecurity:
    """One Kafka connection's authentication and its security APIs."""

    def __init__(self, security: FrontEndSecurity, broker: IBroker, secure: bool, host: str,
                 peer_certificate: Callable[[], PeerIdentity | None]) -> None:
        self._quotas = security.quotas
        self._broker = broker
        self.authentication = ConnectionAuthentication(security, "kafka", secure, host, peer_certificate)

    def principal_for(self, api_key: ApiKey) -> Principal | None:
        """The principal of a request; IllegalSaslStateError before authentication (but for the SASL APIs)."""
        principal = self.authentication.principal()
        if principal is None and api_key not in SASL_APIS:
            try:
                self.authentication.require_principal(api_key.name)
            except errors.SaslAuthenticationError:
                raise errors.IllegalSaslStateError(
                    f"{api_key.name} before authenticating: complete SaslHandshake and SaslAuthenticate first") from None
        return principal

    async def handle(self, principal: Principal | None, api_key: ApiKey, request: Any) -> Any:
        """Answer one of ``SECURITY_APIS``."""
        if api_key is ApiKey.SASL_HANDSHAKE:
            return self._handshake(request)
        if api_key is ApiKey.SASL_AUTHENTICATE:
            return self._authenticate(request)
        assert principal is not None, "admin APIs are answered only after authentication"
        handlers: dict[ApiKey, Callable[[Principal, Any], Any]] = {
            ApiKey.DESCRIBE_ACLS: self._describe_acls, ApiKey.CREATE_ACLS: self._create_acls,
            ApiKey.DELETE_ACLS: self._delete_acls, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self._describe_users,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._alter_users,
        }
        return await handlers[api_key](principal, request)

    # ---- SASL ----------------------------------------------------------------------------------

    def _handshake(self, request: m.SaslHandshakeRequest) -> m.SaslHandshakeResponse:
        mechanisms = tuple(self.authentication.mechanisms())
        if self.authentication.sasl_complete:  # re-authentication (KIP-368) is not served
            return m.SaslHandshakeResponse(error_code=int(errors.ErrorCode.ILLEGAL_SASL_STATE), mechanisms=mechanisms)
        try:
            self.authentication.start_sasl(request.mechanism)
        except errors.BrokerError as error:
            return m.SaslHandshakeResponse(error_code=kafka_error(error)[0], mechanisms=mechanisms)
        return m.SaslHandshakeResponse(error_code=0, mechanisms=mechanisms)

    def _authenticate(self, request: m.SaslAuthenticateRequest) -> m.SaslAuthenticateResponse:
        try:
            reply = self.authentication.step_sasl(request.auth_bytes)
        except errors.BrokerError as error:
            code, message = kafka_error(error)
            return m.SaslAuthenticateResponse(error_code=code, error_message=message, auth_bytes=b"")
        return m.SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=reply)

    # ---- ACLs ----------------------------------------------------------------------------------

    async def _describe_acls(self, principal: Principal, request: m.DescribeAclsRequest) -> m.DescribeAclsResponse:
        found = [acl for acl in await self._broker.list_acls(principal) if _matches(acl, request)]
        by_resource: dict[tuple[Any, str, Any], list[Acl]] = {}
        for acl in found:
            by_resource.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
        return m.DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=tuple(
            m.DescribeAclsResource(
                resource_type=_number(RESOURCE_TYPES, resource_type), resource_name=name,
                pattern_type=_number(PATTERN_TYPES, pattern_type), acls=tuple(
                    m.AclDescription(principal=acl.principal, host=acl.host,
                                     operation=_number(OPERATIONS, acl.operation),
                                     permission_type=_number(PERMISSIONS, acl.permission)) for acl in acls))
            for (resource_type, name, pattern_type), acls in by_resource.items()))

    async def _create_acls(self, principal: Principal, request: m.CreateAclsRequest) -> m.CreateAclsResponse:
        results = []
        for creation in request.creations:
            try:
                acl = acl_of(creation.resource_type, creation.resource_name, creation.resource_pattern_type,
                             creation.principal, creation.host, creation.operation, creation.permission_type)
                await self._broker.add_acls(principal, [acl])
                code, message = 0, None
            except errors.BrokerError as error:
                code, message = kafka_error(error)
            results.append(m.AclCreationResult(error_code=code, error_message=message))
        return m.CreateAclsResponse(throttle_time_ms=0, results=tuple(results))

    async def _delete_acls(self, principal: Principal, request: m.DeleteAclsRequest) -> m.DeleteAclsResponse:
        results = []
        for acl_filter in request.filters:
            try:
                matching = [acl for acl in await self._broker.list_acls(principal) if _matches(acl, acl_filter)]
                if matching:
                    await self._broker.remove_acls(principal, matching)
                results.append(m.DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=tuple(
                    m.DeleteAclsMatchingAcl(
                        error_code=0, error_message=None, resource_type=_number(RESOURCE_TYPES, acl.resource_type),
                        resource_name=acl.resource_name, pattern_type=_number(PATTERN_TYPES, acl.pattern_type),
                        principal=acl.principal, host=acl.host, operation=_number(OPERATIONS, acl.operation),
                        permission_type=_number(PERMISSIONS, acl.permission)) for acl in matching)))
            except errors.BrokerError as error:
                code, message = kafka_error(error)
                results.append(m.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=()))
        return m.DeleteAclsResponse(throttle_time_ms=0, filter_results=tuple(results))

    # ---- SCRAM credentials ---------------------------------------------------------------------

    async def _describe_users(self, principal: Principal,
                              request: m.DescribeUserScramCredentialsRequest) -> m.DescribeUserScramCredentialsResponse:
        known = await self._broker.describe_users(principal)
        # Null or empty: every user (as Kafka reads it; librdkafka sends an empty array).
        names = list(known) if not request.users else [user.name for user in request.users]
        results = []
        for name in names:
            iterations = known.get(name, {})
            present = [(mechanism, iterations[mechanism]) for mechanism in SCRAM_MECHANISMS.values()
                       if mechanism in iterations]
            if name not in known:
                code, message = int(errors.ErrorCode.RESOURCE_NOT_FOUND), f"user {name!r} has no SCRAM credentials"
            else:
                code, message = 0, None
            results.append(m.DescribeUserScramCredentialsResult(
                user=name, error_code=code, error_message=message, credential_infos=tuple(
                    m.CredentialInfo(mechanism=_number(SCRAM_MECHANISMS, mechanism), iterations=count)
                    for mechanism, count in present)))
        return m.DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                                      results=tuple(results))

    async def _alter_users(self, principal: Principal,
                           request: m.AlterUserScramCredentialsRequest) -> m.AlterUserScramCredentialsResponse:
        names = list(dict.fromkeys([item.name for item in request.deletions] + [item.name for item in request.upsertions]))
        results = []
        for name in names:
            try:
                await self._broker.alter_scram_credentials(
                    principal, name,
                    upsertions=[(self._mechanism(item.mechanism), item.salt, item.iterations, item.salted_password)
                                for item in request.upsertions if item.name == name],
                    deletions=[self._mechanism(item.mechanism) for item in request.deletions if item.name == name])
                code, message = 0, None
            except errors.BrokerError as error:
                code, message = kafka_error(error)
            results.append(m.AlterUserScramCredentialsResult(user=name, error_code=code, error_message=message))
        return m.AlterUserScramCredentialsResponse(throttle_time_ms=0, results=tuple(results))

    @staticmethod
    def _mechanism(number: int) -> ScramMechanism:
        try:
            return SCRAM_MECHANISMS[number]
        except KeyError:
            raise errors.UnsupportedSaslMechanismError(f"SCRAM mechanism {number} is unknown; use 1 (SHA-256) "
                                                       f"or 2 (SHA-512)") from None

    # ---- quotas --------------------------------------------------------------------------------

    def throttle_ms(self, principal: Principal, client_id: str, request: Any, response: Any, now_ms: int) -> int:
        """Record a produce or fetch's bytes against the quotas; how long the client must now wait."""
        if not self._quotas.has_quotas:
            return 0
        if isinstance(request, produce_fetch.ProduceRequest):
            kind = QuotaKind.PRODUCE
            byte_count = sum(len(p.records or b"") for topic in request.topic_data for p in topic.partition_data)
        elif isinstance(response, produce_fetch.FetchResponse):
            kind = QuotaKind.FETCH
            byte_count = sum(len(p.records or b"") for topic in response.responses for p in topic.partitions)
        else:
            return 0
        return self._quotas.record(kind, str(principal), client_id, byte_count, now_ms)
