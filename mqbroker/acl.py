"""Authorization. Until ACLs land, every principal may do everything (the embedded default)."""

from __future__ import annotations

from zope.interface import implementer

from mqbroker.interfaces import IAuthorizer
from mqbroker.model import Operation, Principal, ResourceType


@implementer(IAuthorizer)
class AllowEverything:
    """The authorizer of an unsecured broker: allows every operation."""

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, resource_name: str) -> bool:
        """Always True."""
        return True
