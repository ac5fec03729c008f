"""The Kafka security messages: SASL, ACLs and SCRAM credentials.

Written from Kafka's published message specifications, one class per struct; the field
annotations are the wire schema and ``wire(...)`` says in which versions a field travels
(see ``mqbroker.protocols.schema``). Versions outside the ranges in ``apis.py`` are not modelled.
"""

from __future__ import annotations

from mqbroker.protocols.schema import Int8, Int16, Int32, Int64, message, wire


@message
class SaslHandshakeRequest:
    """Choose a SASL mechanism (version 1: the exchange then travels in SaslAuthenticate)."""

    mechanism: str


@message
class SaslHandshakeResponse:
    """The mechanisms the broker enables, and whether the chosen one is among them."""

    error_code: Int16
    mechanisms: tuple[str, ...]


@message
class SaslAuthenticateRequest:
    """One client message of the SASL exchange."""

    auth_bytes: bytes


@message
class SaslAuthenticateResponse:
    """The server's reply in the SASL exchange, or why authentication failed."""

    error_code: Int16
    error_message: str | None
    auth_bytes: bytes
    session_lifetime_ms: Int64 = wire(since=1, default=0)


@message
class DescribeAclsRequest:
    """List the ACLs that match a filter."""

    resource_type_filter: Int8
    resource_name_filter: str | None
    pattern_type_filter: Int8 = 3
    principal_filter: str | None
    host_filter: str | None
    operation: Int8
    permission_type: Int8


@message
class AclDescription:
    """Who may (or may not) do what from where, on the enclosing resource."""

    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@message
class DescribeAclsResource:
    """A resource pattern and its ACLs."""

    resource_type: Int8
    resource_name: str
    pattern_type: Int8 = 3
    acls: tuple[AclDescription, ...]


@message
class DescribeAclsResponse:
    """The matching ACLs, per resource pattern."""

    throttle_time_ms: Int32
    error_code: Int16
    error_message: str | None
    resources: tuple[DescribeAclsResource, ...]


@message
class AclCreation:
    """An ACL to add."""

    resource_type: Int8
    resource_name: str
    resource_pattern_type: Int8 = 3
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@message
class CreateAclsRequest:
    """Add ACLs."""

    creations: tuple[AclCreation, ...]


@message
class AclCreationResult:
    """Whether one ACL was added."""

    error_code: Int16
    error_message: str | None


@message
class CreateAclsResponse:
    """The outcome, per ACL."""

    throttle_time_ms: Int32
    results: tuple[AclCreationResult, ...]


@message
class DeleteAclsFilter:
    """A filter: every ACL it matches is removed."""

    resource_type_filter: Int8
    resource_name_filter: str | None
    pattern_type_filter: Int8 = 3
    principal_filter: str | None
    host_filter: str | None
    operation: Int8
    permission_type: Int8


@message
class DeleteAclsRequest:
    """Remove the ACLs matching each filter."""

    filters: tuple[DeleteAclsFilter, ...]


@message
class DeleteAclsMatchingAcl:
    """An ACL a filter matched and removed."""

    error_code: Int16
    error_message: str | None
    resource_type: Int8
    resource_name: str
    pattern_type: Int8 = 3
    principal: str
    host: str
    operation: Int8
    permission_type: Int8


@message
class DeleteAclsFilterResult:
    """The ACLs one filter removed, or the error."""

    error_code: Int16
    error_message: str | None
    matching_acls: tuple[DeleteAclsMatchingAcl, ...]


@message
class DeleteAclsResponse:
    """The outcome, per filter."""

    throttle_time_ms: Int32
    filter_results: tuple[DeleteAclsFilterResult, ...]


@message
class UserName:
    """A user whose SCRAM credentials are described."""

    name: str


@message
class DescribeUserScramCredentialsRequest:
    """Describe SCRAM credentials (null: every user's)."""

    users: tuple[UserName, ...] | None


@message
class CredentialInfo:
    """One SCRAM credential: its mechanism (1 SHA-256, 2 SHA-512) and iteration count."""

    mechanism: Int8
    iterations: Int32


@message
class DescribeUserScramCredentialsResult:
    """One user's SCRAM credentials, or the error describing them."""

    user: str
    error_code: Int16
    error_message: str | None
    credential_infos: tuple[CredentialInfo, ...]


@message
class DescribeUserScramCredentialsResponse:
    """The described credentials, per user."""

    throttle_time_ms: Int32
    error_code: Int16
    error_message: str | None
    results: tuple[DescribeUserScramCredentialsResult, ...]


@message
class ScramCredentialDeletion:
    """Remove one user's credential for one mechanism."""

    name: str
    mechanism: Int8


@message
class ScramCredentialUpsertion:
    """Set one user's credential for one mechanism (salted by the client)."""

    name: str
    mechanism: Int8
    iterations: Int32
    salt: bytes
    salted_password: bytes


@message
class AlterUserScramCredentialsRequest:
    """Add, replace or remove SCRAM credentials."""

    deletions: tuple[ScramCredentialDeletion, ...]
    upsertions: tuple[ScramCredentialUpsertion, ...]


@message
class AlterUserScramCredentialsResult:
    """The outcome for one user."""

    user: str
    error_code: Int16
    error_message: str | None


@message
class AlterUserScramCredentialsResponse:
    """The outcome, per user."""

    throttle_time_ms: Int32
    results: tuple[AlterUserScramCredentialsResult, ...]
