"""The broker's security services, wired: authenticator, authorizer, quotas, connection limits, TLS.

Users and ACLs live in the cluster metadata as generic records (kinds ``user`` and ``acl``),
seen through ``IGenericRecords``; this module keeps the in-memory ``CredentialStore`` and
``AclAuthorizer`` in step with the applied records and turns admin requests (`mqbroker users`,
`mqbroker acls`, which the broker core authorizes first) into metadata proposals
(``ISecurityAdmin``). Front ends get the connection-level part (the authenticator, the
authorizer, the quotas and ``AuthenticationAudit``) as a ``FrontEndSecurity`` from ``service.py``.
Denials and failed logins go to the audit log, namespace ``mqbroker.audit``.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
from collections.abc import Iterable
from typing import Any

from twisted.internet.defer import Deferred, gatherResults
from twisted.logger import Logger
from zope.interface import implementer

from mqbroker import errors, limits
from mqbroker.cluster.metadata import MetadataImage
from mqbroker.cluster.metadata_records import PutGenericRecord, Record
from mqbroker.config import BrokerConfig
from mqbroker.interfaces import (
    IAuthenticationAudit,
    IAuthorizer,
    IGenericRecords,
    ISecurityAdmin,
)
from mqbroker.model import CLUSTER_RESOURCE, Operation, Principal, ResourceType
from mqbroker.security.acl import Acl, AclAuthorizer, AllowEverything, Denial
from mqbroker.records.readable import SKIPPED_LOG_FORMAT, UnreadableTally
from mqbroker.security.auth import Authenticator, CredentialStore, UserRecord, check_username
from mqbroker.security.cluster_auth import read_password_file
from mqbroker.security.cluster_principals import super_users_of
from mqbroker.security.inter_broker import (
    BrokerCertificateRules,
    inter_broker_credentials,
)
from mqbroker.security.principal_mapping import PrincipalMapper
from mqbroker.security.scram import ScramMechanism, ScramUpsertion, credential_from_salted_password
from mqbroker.security.quotas import (
    ByteRateQuota,
    ConnectionLimiter,
    QuotaManager,
    QuotaScope,
    parse_quota_overrides,
)
from mqbroker.security.tls import (
    ClientAuth,
    ReloadingServerContextFactory,
    ServerTlsFiles,
)

USER_KIND = "user"
ACL_KIND = "acl"
#: The cluster's secrets (generic records of this kind): the key the unknown users' SCRAM decoys derive from.
SECRET_KIND = "secret"
DECOY_SECRET_KEY = "scram-decoy"
#: The front ends', the connectors' and share groups' own principals (reading and writing the logs they map onto):
#: never a client's.
INTERNAL_PRINCIPALS = ("Service:mqtt", "Service:amqp", "Service:connectors", "Service:shares")
#: How skipped metadata records are reported (the Raft log of cluster metadata, Kafka's name for it).
METADATA_LOG = "__cluster_metadata"

audit = Logger(namespace="mqbroker.audit")


def _rate(value: int) -> float | None:
    return float(value) if value > 0 else None


def tls_files(config: BrokerConfig) -> ServerTlsFiles | None:
    """The listeners' certificate files from the configuration (None: no TLS configured)."""
    if not config.tls_cert:
        return None
    return ServerTlsFiles(
        certificate=pathlib.Path(config.tls_cert), key=pathlib.Path(config.tls_key or config.tls_cert),
        ca=pathlib.Path(config.tls_ca) if config.tls_ca else None, client_auth=ClientAuth(config.tls_client_auth),
    )


def quota_manager(config: BrokerConfig) -> QuotaManager:
    """The ``[quotas]`` byte rates: defaults per principal and per client id, then ``overrides`` by name."""
    defaults = {
        QuotaScope.PRINCIPAL: ByteRateQuota(
            produce_bytes_per_second=_rate(config.quotas_principal_produce_bytes_per_second),
            fetch_bytes_per_second=_rate(config.quotas_principal_fetch_bytes_per_second)),
        QuotaScope.CLIENT: ByteRateQuota(
            produce_bytes_per_second=_rate(config.quotas_client_produce_bytes_per_second),
            fetch_bytes_per_second=_rate(config.quotas_client_fetch_bytes_per_second)),
    }
    manager = QuotaManager(default_principal_quota=defaults[QuotaScope.PRINCIPAL],
                           default_client_quota=defaults[QuotaScope.CLIENT])
    for override in parse_quota_overrides(config.quotas_overrides):
        quota = override.applied_to(defaults[override.scope])
        if override.scope is QuotaScope.PRINCIPAL:
            manager.set_principal_quota(override.name, quota)
        else:
            manager.set_client_quota(override.name, quota)
    return manager


@implementer(ISecurityAdmin)
class SecurityServices:
    """Everything a listener and a front end need to authenticate, authorize and throttle; the user and ACL records."""

    log = Logger()

    def __init__(self, config: BrokerConfig, records: IGenericRecords | None = None,
                 unreadable: UnreadableTally | None = None) -> None:
        """``records``: the cluster's generic records (None: a broker without users and ACLs in its metadata, in tests);
        ``unreadable`` counts the user and ACL records of the metadata that do not decode (the broker's metric)."""
        self.config = config
        self.unreadable = unreadable or UnreadableTally()
        self.store = CredentialStore(os.urandom)
        inter_broker_credentials_ = {}
        if config.security_inter_broker_password_file:
            password = read_password_file(config.security_inter_broker_password_file)
            inter_broker_credentials_ = inter_broker_credentials(config.cluster_id, config.security_inter_broker_user,
                                                                 password)
        self.authenticator = Authenticator(
            self.store, os.urandom, allow_anonymous=config.security_allow_anonymous,
            plain_without_tls=config.security_plain_without_tls,
            mapper=PrincipalMapper(config.security_principal_mapping_rules),
            broker_certificates=BrokerCertificateRules(config.security_broker_certificate_rules),
            inter_broker_username=config.security_inter_broker_user,
            inter_broker_credentials=inter_broker_credentials_,
        )
        self.acls = AclAuthorizer(super_users=[*super_users_of(config), *INTERNAL_PRINCIPALS], on_denied=audit_denial,
                                  allow_if_no_acl=config.security_allow_if_no_acl)
        self.authorizer: IAuthorizer = self.acls if config.security_authorizer == "acl" else AllowEverything()
        self.quotas = quota_manager(config)
        self._limiters: dict[str, ConnectionLimiter] = {}
        files = tls_files(config)
        self.tls = ReloadingServerContextFactory(files, on_reload_error=self._reload_failed) if files else None
        self._records = records
        if records is not None:
            records.add_record_listener(self._record_applied)
            self._image_restored(records.image)

    def limiter_for(self, listener: str) -> ConnectionLimiter:
        """The connection budget of one listener (by name: "native", "mqtt-tls", "http"...).

        Each listener has its own, so a flood of half-open HTTP requests cannot lock native clients
        out (the controller has its own too: ``controller_connections_max``)."""
        limiter = self._limiters.get(listener)
        if limiter is None:
            config = self.config
            total = config.quotas_http_connections_max if listener == "http" else config.quotas_connections_max
            limiter = self._limiters[listener] = ConnectionLimiter(
                total_max=total, per_host_max=min(total, config.quotas_connections_per_ip_max))
        return limiter


    def _reload_failed(self, error: Exception) -> None:
        self.log.error("TLS certificate files changed but cannot be used (keeping the old ones): {error}", error=error)

    # ---- the metadata image ------------------------------------------------------------------

    def _record_applied(self, image: MetadataImage, record: Record | None) -> None:
        if record is None:
            self._image_restored(image)
        elif isinstance(record, PutGenericRecord) and record.kind in (USER_KIND, ACL_KIND):
            self._apply(record.kind, record.key, record.value)
        elif isinstance(record, PutGenericRecord) and (record.kind, record.key) == (SECRET_KIND, DECOY_SECRET_KEY):
            self._use_decoy_secret(record.value)

    def _use_decoy_secret(self, value: Any) -> None:
        if isinstance(value, str):
            self.store.use_decoy_secret(base64.b64decode(value))

    def ensure_decoy_secret(self) -> Deferred[None]:
        """Make sure the cluster has a decoy secret (proposed once, by whichever broker finds none), so that
        an unknown user's SCRAM salt is the same on every broker and across restarts, as a real user's is."""
        records = self._records
        assert records is not None

        def propose_if_missing(_: object) -> Any:
            if DECOY_SECRET_KEY in records.image.generic.get(SECRET_KIND, {}):
                return None
            return self._propose(SECRET_KIND, DECOY_SECRET_KEY, base64.b64encode(os.urandom(32)).decode("ascii"))

        return records.when_caught_up().addCallback(propose_if_missing)

    def _image_restored(self, image: MetadataImage) -> None:
        self._use_decoy_secret(image.generic.get(SECRET_KIND, {}).get(DECOY_SECRET_KEY))
        self.store.load(b"[]")
        for acl in self.acls.acls():
            self.acls.remove(acl)
        for kind in (USER_KIND, ACL_KIND):
            for key, value in image.generic.get(kind, {}).items():
                self._apply(kind, key, value)

    def _apply(self, kind: str, key: str, value: Any) -> None:
        """Take a user or ACL record into the store or authorizer; one that does not decode is counted, logged
        and skipped (the metadata replay goes on)."""
        try:
            self._apply_one(kind, key, value)
        except errors.InvalidRequestError as error:
            index = self._records.image.applied_index if self._records is not None else -1
            self.log.warn(SKIPPED_LOG_FORMAT, **self.unreadable.skipped_at(
                "metadata replay", METADATA_LOG, 0, index, index, f"{kind} record {key[:80]!r}: {error.message}"))

    def _apply_one(self, kind: str, key: str, value: Any) -> None:
        if kind == USER_KIND:
            if value is None:
                if key in self.store.list():
                    self.store.remove(key)
            else:
                self.store.put(UserRecord.from_bytes(json.dumps(value).encode("utf-8")))
        else:
            acl = Acl.from_bytes(key.encode("utf-8"))
            if value is None:
                self.acls.remove(acl)
            else:
                self.acls.add(acl)

    # ---- admin: users (the broker core authorized the caller) ------------------------------------

    def check_cluster(self, principal: Principal, operation: Operation) -> None:
        """ClusterAuthorizationError unless ``principal`` may ``operation`` the cluster (the HTTP admin API)."""
        if not self.authorizer.authorize(principal, operation, ResourceType.CLUSTER, CLUSTER_RESOURCE):
            raise errors.ClusterAuthorizationError(f"{principal} may not {operation.value} the cluster")

    def upsert_user(self, name: str, password: str, create: bool) -> Deferred[None]:
        """Add a user (``create``) or change a user's password: fresh salted SCRAM credentials."""
        if name == self.config.security_inter_broker_user:
            raise errors.InvalidRequestError(
                f"{name!r} is the inter-broker user (security.inter_broker_user); its password is the broker "
                "configuration's, not a stored user's")
        scratch = CredentialStore(os.urandom)
        if name in self.store.list():
            if create:
                raise errors.DuplicateResourceError(f"user {name!r} already exists; use `mqbroker users passwd {name}`")
            scratch.put(UserRecord(name=name, credentials=()))
            record = scratch.passwd(name, password)
        elif create:
            record = scratch.add(name, password)
        else:
            raise errors.ResourceNotFoundError(f"user {name!r} does not exist; create it with `mqbroker users add`")
        return self._propose(USER_KIND, name, json.loads(record.to_bytes()))

    def remove_user(self, name: str) -> Deferred[None]:
        """Delete a user."""
        if name not in self.store.list():
            raise errors.ResourceNotFoundError(f"user {name!r} does not exist")
        return self._propose(USER_KIND, name, None)

    def alter_scram_credentials(self, name: str, upsertions: Iterable[ScramUpsertion],
                                deletions: Iterable[ScramMechanism]) -> Deferred[None]:
        """Set (mechanism, salt, iterations, salted password) credentials of a user and remove others (Kafka's
        AlterUserScramCredentials); a user left without credentials is removed."""
        record = self.store.get(check_username(name)) or UserRecord(name=name, credentials=())
        credentials = {credential.mechanism: credential for credential in record.credentials}
        for mechanism in deletions:
            if credentials.pop(mechanism, None) is None:
                raise errors.ResourceNotFoundError(f"user {name!r} has no {mechanism.value} credential to remove")
        for mechanism, salt, iterations, salted in upsertions:
            if not limits.scram_iterations_min <= iterations <= limits.scram_iterations_max:
                raise errors.UnacceptableCredentialError(
                    f"{iterations} iterations is outside {limits.scram_iterations_min}..{limits.scram_iterations_max}")
            credentials[mechanism] = credential_from_salted_password(mechanism, bytes(salt), iterations, bytes(salted))
        if not credentials:
            return self._propose(USER_KIND, name, None)
        updated = UserRecord(name=name, credentials=tuple(credentials[key] for key in ScramMechanism if key in credentials))
        return self._propose(USER_KIND, name, json.loads(updated.to_bytes()))

    def describe_users(self) -> dict[str, dict[ScramMechanism, int]]:
        """Every user with the iteration count of its SCRAM credential of each mechanism."""
        records = {name: self.store.get(name) for name in self.store.list()}
        return {name: {credential.mechanism: credential.iterations for credential in record.credentials}
                for name, record in records.items() if record is not None}

    def list_users(self) -> list[str]:
        """Every user name."""
        return self.store.list()

    # ---- admin: ACLs ---------------------------------------------------------------------------

    def add_acls(self, acls: Iterable[Acl]) -> Deferred[None]:
        """Store ACLs in the cluster metadata."""
        proposed = gatherResults([self._propose(ACL_KIND, acl.to_bytes().decode("utf-8"), acl.to_json())
                                  for acl in acls], consumeErrors=True)
        return proposed.addCallback(lambda _: None)

    def remove_acls(self, acls: Iterable[Acl]) -> Deferred[None]:
        """Delete ACLs (exact matches) from the cluster metadata."""
        proposed = gatherResults([self._propose(ACL_KIND, acl.to_bytes().decode("utf-8"), None) for acl in acls],
                                 consumeErrors=True)
        return proposed.addCallback(lambda _: None)

    def list_acls(self) -> list[Acl]:
        """Every ACL."""
        return self.acls.acls()

    def _propose(self, kind: str, key: str, value: Any) -> Deferred[None]:
        assert self._records is not None, "admin requests need the cluster metadata"
        return self._records.put_generic_record(kind, key, value)


def audit_denial(denial: Denial) -> None:
    """One audit line per refused request."""
    audit.warn(
        "DENIED principal={principal} host={host} operation={operation} resource={resource_type}:{resource_name}",
        principal=str(denial.principal), host=denial.principal.host or "-", operation=denial.operation.value,
        resource_type=denial.resource_type.value, resource_name=denial.resource_name,
    )


def audit_authentication_failure(protocol: str, host: str, who: str, reason: str) -> None:
    """One audit line per refused login."""
    audit.warn("AUTHENTICATION FAILED protocol={protocol} host={host} user={who}: {reason}",
               protocol=protocol, host=host or "-", who=who or "-", reason=reason)


@implementer(IAuthenticationAudit)
class AuthenticationAudit:
    """The front ends' view of the audit log: one line per refused login."""

    def authentication_failed(self, protocol: str, host: str, who: str, reason: str) -> None:
        """One audit line per refused login."""
        audit_authentication_failure(protocol, host, who, reason)
