"""The user and ACL calls of ``IBroker`` (tx-light): authorized on the cluster here, carried out by the security admin.

Listing needs DESCRIBE on the cluster, changing ALTER (as Kafka's DescribeAcls / CreateAcls and
its SCRAM credential APIs). The records themselves are the ``ISecurityAdmin``'s business.
"""

from __future__ import annotations

from collections.abc import Sequence

from twisted.internet.defer import Deferred, succeed

from mqbroker.core.guards import errors_as_failures, require_permission
from mqbroker.interfaces import IAuthorizer, ISecurityAdmin
from mqbroker.model import CLUSTER_RESOURCE, Operation, Principal, ResourceType
from mqbroker.security.acl import Acl
from mqbroker.security.scram import ScramMechanism, ScramUpsertion


class SecurityRequests:
    """Checks each admin call's cluster permission, then hands it to the ``ISecurityAdmin``."""

    def __init__(self, *, authorizer: IAuthorizer, admin: ISecurityAdmin) -> None:
        self._authorizer = authorizer
        self._admin = admin

    def _require(self, principal: Principal, operation: Operation) -> None:
        require_permission(self._authorizer, principal, operation, ResourceType.CLUSTER, CLUSTER_RESOURCE)

    @errors_as_failures
    def list_users(self, principal: Principal) -> Deferred[list[str]]:
        """Every user name; see ``IBroker.list_users``."""
        self._require(principal, Operation.DESCRIBE)
        return succeed(self._admin.list_users())

    @errors_as_failures
    def upsert_user(self, principal: Principal, name: str, password: str, create: bool) -> Deferred[None]:
        """Add a user or change a password; see ``IBroker.upsert_user``."""
        self._require(principal, Operation.ALTER)
        return self._admin.upsert_user(name, password, create)

    @errors_as_failures
    def remove_user(self, principal: Principal, name: str) -> Deferred[None]:
        """Delete a user; see ``IBroker.remove_user``."""
        self._require(principal, Operation.ALTER)
        return self._admin.remove_user(name)

    @errors_as_failures
    def describe_users(self, principal: Principal) -> Deferred[dict[str, dict[ScramMechanism, int]]]:
        """Every user's SCRAM mechanisms and iterations; see ``IBroker.describe_users``."""
        self._require(principal, Operation.DESCRIBE)
        return succeed(self._admin.describe_users())

    @errors_as_failures
    def alter_scram_credentials(self, principal: Principal, name: str, upsertions: Sequence[ScramUpsertion],
                                deletions: Sequence[ScramMechanism]) -> Deferred[None]:
        """Set credentials from salted passwords; see ``IBroker.alter_scram_credentials``."""
        self._require(principal, Operation.ALTER)
        return self._admin.alter_scram_credentials(name, upsertions, deletions)

    @errors_as_failures
    def list_acls(self, principal: Principal) -> Deferred[list[Acl]]:
        """Every ACL; see ``IBroker.list_acls``."""
        self._require(principal, Operation.DESCRIBE)
        return succeed(self._admin.list_acls())

    @errors_as_failures
    def add_acls(self, principal: Principal, acls: Sequence[Acl]) -> Deferred[None]:
        """Store ACLs; see ``IBroker.add_acls``."""
        self._require(principal, Operation.ALTER)
        return self._admin.add_acls(acls)

    @errors_as_failures
    def remove_acls(self, principal: Principal, acls: Sequence[Acl]) -> Deferred[None]:
        """Delete ACLs; see ``IBroker.remove_acls``."""
        self._require(principal, Operation.ALTER)
        return self._admin.remove_acls(acls)
