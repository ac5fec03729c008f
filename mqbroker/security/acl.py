"""Authorization: ACLs with Kafka's semantics, and the authorizer the broker core consults.

An ACL allows or denies a principal (or ``User:*``), from a host (or ``*``), an operation (or
``all``) on a resource: a topic, group, the cluster or a transactional id, named literally,
by prefix, or ``*``; or ``read``/``write`` on an MQTT topic filter (decided by the MQTT front
end, ``mqbroker.protocols.mqtt.acl``, which this authorizer only stores and versions). Deny wins over allow; READ, WRITE, DELETE and ALTER imply DESCRIBE, and
ALTER_CONFIGS implies DESCRIBE_CONFIGS (as in Kafka). With ``AclAuthorizer`` on, whatever no
ACL allows is denied, except for super users. Lookups go through an index per resource type
(literal names in a dict, prefixes by their distinct lengths), never a scan of every ACL.
"""

from __future__ import annotations

import enum
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from zope.interface import implementer

from mqbroker.errors import InvalidRequestError
from mqbroker.interfaces import IAclView, IAuthorizer
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.security.inter_broker import BROKER

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


@implementer(IAuthorizer)
class AllowEverything:
    """The authorizer of an unsecured broker: allows every operation."""

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, resource_name: str) -> bool:
        """Always True."""
        return True


class AllOperations(enum.Enum):
    """The ACL operation that matches every operation."""

    ALL = "all"


AclOperation = Operation | AllOperations


class PatternType(enum.Enum):
    """How an ACL's resource name matches."""

    LITERAL = "literal"
    PREFIXED = "prefixed"


class Permission(enum.Enum):
    """Whether an ACL allows or denies."""

    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, slots=True, kw_only=True)
class Acl:
    """One access control entry bound to a resource pattern."""

    principal: str
    host: str = WILDCARD
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType = PatternType.LITERAL
    operation: AclOperation
    permission: Permission

    def __post_init__(self) -> None:
        kind, colon, name = self.principal.partition(":")
        if not colon or not kind or not name:
            raise InvalidRequestError(f"ACL principal {self.principal!r} must look like User:NAME or User:*")
        if not self.resource_name or not self.host:
            raise InvalidRequestError("ACL resource name and host may not be empty")
        if self.pattern_type is PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise InvalidRequestError("a prefixed ACL needs a prefix; use a literal '*' to match every name")
        if self.resource_type is ResourceType.MQTT_TOPIC:
            _check_mqtt_acl(self)

    def to_json(self) -> dict[str, str]:
        """A JSON-ready dict for cluster metadata."""
        return {
            "principal": self.principal,
            "host": self.host,
            "resource_type": self.resource_type.value,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.value,
            "operation": self.operation.value,
            "permission": self.permission.value,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Acl:
        """Rebuild an ACL written by ``to_json``; InvalidRequestError for a malformed record."""
        try:
            return cls(
                principal=str(data["principal"]),
                host=str(data["host"]),
                resource_type=ResourceType(data["resource_type"]),
                resource_name=str(data["resource_name"]),
                pattern_type=PatternType(data["pattern_type"]),
                operation=parse_operation(str(data["operation"])),
                permission=Permission(data["permission"]),
            )
        except (KeyError, ValueError, TypeError) as error:
            raise InvalidRequestError(f"malformed ACL record: {error}") from None

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes for the metadata log."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Acl:
        """Rebuild an ACL written by ``to_bytes``."""
        try:
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError) as error:
            raise InvalidRequestError(f"malformed ACL record: {error}") from None
        if not isinstance(document, dict):
            raise InvalidRequestError("malformed ACL record: not a JSON object")
        return cls.from_json(document)


#: What an MQTT topic filter ACL may name: reading (subscribing, receiving), writing (publishing) or both.
MQTT_OPERATIONS = frozenset({Operation.READ, Operation.WRITE, AllOperations.ALL})


def _check_mqtt_acl(acl: Acl) -> None:
    """An MQTT topic filter ACL: a literal, well-formed filter and read, write or all."""
    if acl.pattern_type is not PatternType.LITERAL:
        raise InvalidRequestError("an MQTT topic ACL names a topic filter ('+' and '#' are its wildcards), not a prefix")
    if acl.operation not in MQTT_OPERATIONS:
        raise InvalidRequestError(f"an MQTT topic ACL allows or denies read, write or all, not {acl.operation.value}")
    levels = acl.resource_name.split("/")
    for index, level in enumerate(levels):
        if ("#" in level and (level != "#" or index != len(levels) - 1)) or ("+" in level and level != "+"):
            raise InvalidRequestError(f"MQTT topic filter {acl.resource_name!r}: '+' must be a whole level and '#' a "
                                      "whole last level")


def parse_operation(name: str) -> AclOperation:
    """``all`` or an ``Operation`` value (case-insensitive)."""
    lowered = name.lower()
    if lowered == AllOperations.ALL.value:
        return AllOperations.ALL
    return Operation(lowered)


def _allowing_operations(operation: Operation) -> frozenset[AclOperation]:
    """The ACL operations whose ALLOW grants ``operation`` (Kafka's implied DESCRIBE rules)."""
    if operation is Operation.DESCRIBE:
        implied: set[AclOperation] = {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    elif operation is Operation.DESCRIBE_CONFIGS:
        implied = {Operation.ALTER_CONFIGS}
    else:
        implied = set()
    return frozenset(implied | {operation, AllOperations.ALL})


_ALLOWING = {operation: _allowing_operations(operation) for operation in Operation}


@dataclass(frozen=True, slots=True, kw_only=True)
class Denial:
    """What the audit log records for a refused request."""

    principal: Principal
    operation: Operation
    resource_type: ResourceType
    resource_name: str


class _ResourceIndex:
    """The ACLs of one resource type, indexed by name: literal dict plus prefixes by length."""

    def __init__(self) -> None:
        self.literal: dict[str, set[Acl]] = defaultdict(set)
        self.prefixed: dict[str, set[Acl]] = defaultdict(set)
        self._prefixes_per_length: Counter[int] = Counter()
        self.prefix_lengths: list[int] = []

    def add(self, acl: Acl) -> None:
        """Index ``acl`` under its name."""
        if acl.pattern_type is PatternType.LITERAL:
            self.literal[acl.resource_name].add(acl)
            return
        if acl.resource_name not in self.prefixed:
            self._count_prefix(len(acl.resource_name), +1)
        self.prefixed[acl.resource_name].add(acl)

    def discard(self, acl: Acl) -> bool:
        """Drop ``acl``; False if it was not indexed."""
        table = self.prefixed if acl.pattern_type is PatternType.PREFIXED else self.literal
        entries = table.get(acl.resource_name)
        if entries is None or acl not in entries:
            return False
        entries.discard(acl)
        if not entries:
            del table[acl.resource_name]
            if acl.pattern_type is PatternType.PREFIXED:
                self._count_prefix(len(acl.resource_name), -1)
        return True

    def _count_prefix(self, length: int, change: int) -> None:
        # The sorted list of lengths changes only when a length appears or disappears.
        self._prefixes_per_length[length] += change
        if self._prefixes_per_length[length] in (0, 1):
            self.prefix_lengths = sorted(length for length, count in self._prefixes_per_length.items() if count)

    def matching(self, name: str) -> Iterable[Acl]:
        """Every ACL whose resource pattern covers ``name``."""
        yield from self.literal.get(name, ())
        if name != WILDCARD:
            yield from self.literal.get(WILDCARD, ())
        for length in self.prefix_lengths:
            if length > len(name):
                break
            yield from self.prefixed.get(name[:length], ())


@implementer(IAuthorizer, IAclView)
class AclAuthorizer:
    """Allows what an ACL allows and no ACL denies; super users may do everything."""

    def __init__(
        self,
        acls: Iterable[Acl] = (),
        *,
        super_users: Iterable[str] = (),
        on_denied: Callable[[Denial], None] | None = None,
        allow_if_no_acl: bool = False,
    ) -> None:
        self._indexes = {resource_type: _ResourceIndex() for resource_type in ResourceType}
        self._super_users = frozenset(super_users)
        self._on_denied = on_denied
        self._allow_if_no_acl = allow_if_no_acl
        #: Bumped whenever an MQTT topic ACL comes or goes (the MQTT front end rebuilds its decisions then).
        self.mqtt_version = 0
        for acl in acls:
            self.add(acl)

    def add(self, acl: Acl) -> None:
        """Install an ACL (idempotent)."""
        self._indexes[acl.resource_type].add(acl)
        if acl.resource_type is ResourceType.MQTT_TOPIC:
            self.mqtt_version += 1

    def remove(self, acl: Acl) -> bool:
        """Remove an ACL; False if it was not there."""
        removed = self._indexes[acl.resource_type].discard(acl)
        if removed and acl.resource_type is ResourceType.MQTT_TOPIC:
            self.mqtt_version += 1
        return removed

    def is_super_user(self, principal: Principal) -> bool:
        """A super user or a broker: allowed everything, ACLs or not."""
        return str(principal) in self._super_users or principal.kind == BROKER

    def report_denial(self, denial: Denial) -> None:
        """Hand a refusal decided elsewhere (an MQTT topic ACL) to the audit hook."""
        if self._on_denied is not None:
            self._on_denied(denial)

    def acls(self, resource_type: ResourceType | None = None) -> list[Acl]:
        """Every ACL (of one resource type), in a stable order."""
        types = [resource_type] if resource_type else list(ResourceType)
        found = [
            acl
            for kind in types
            for table in (self._indexes[kind].literal, self._indexes[kind].prefixed)
            for entries in table.values()
            for acl in entries
        ]
        return sorted(found, key=lambda acl: acl.to_bytes())

    def authorize(self, principal: Principal, operation: Operation, resource_type: ResourceType, resource_name: str) -> bool:
        """Decide, and report a denial to the audit hook."""
        allowed = self._decide(principal, operation, resource_type, resource_name)
        if not allowed and self._on_denied is not None:
            self._on_denied(
                Denial(principal=principal, operation=operation, resource_type=resource_type, resource_name=resource_name)
            )
        return allowed

    def _decide(self, principal: Principal, operation: Operation, resource_type: ResourceType, resource_name: str) -> bool:
        identity = str(principal)
        if self.is_super_user(principal):
            return True  # brokers (a broker certificate or the inter-broker user) act for the cluster itself
        allowing = _ALLOWING[operation]
        allowed = False
        matched_any = False
        for acl in self._indexes[resource_type].matching(resource_name):
            matched_any = True
            if acl.principal not in (identity, WILDCARD_PRINCIPAL) or acl.host not in (principal.host, WILDCARD):
                continue
            if acl.permission is Permission.DENY:
                if acl.operation is operation or acl.operation is AllOperations.ALL:
                    return False
            elif acl.operation in allowing:
                allowed = True
        if not allowed and resource_type is ResourceType.CLUSTER and operation is Operation.WRITE:
            return self._may_write_some_topic(principal)  # KIP-679: topic WRITE implies idempotent writes
        return allowed or (self._allow_if_no_acl and not matched_any)

    def _may_write_some_topic(self, principal: Principal) -> bool:
        """True if an ACL allows ``principal`` to write some topic (a scan: only producer-id requests ask)."""
        identity = str(principal)
        index = self._indexes[ResourceType.TOPIC]
        return any(
            acl.permission is Permission.ALLOW and acl.operation in (Operation.WRITE, AllOperations.ALL)
            and acl.principal in (identity, WILDCARD_PRINCIPAL) and acl.host in (principal.host, WILDCARD)
            for table in (index.literal, index.prefixed) for entries in table.values() for acl in entries
        )

    def to_bytes(self) -> bytes:
        """Every ACL as one JSON document (a snapshot for the metadata image)."""
        return json.dumps([acl.to_json() for acl in self.acls()], separators=(",", ":")).encode("utf-8")

    @staticmethod
    def acls_from_bytes(data: bytes) -> list[Acl]:
        """The ACLs of a snapshot written by ``to_bytes``."""
        return [Acl.from_json(item) for item in json.loads(data)]
