"""ACL decisions: deny beats allow, prefixes, wildcards, super users, implied DESCRIBE, and an audit
hook for every denial; checked against a brute-force reading of the rules."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from zope.interface.verify import verifyObject

from mqbroker.security.acl import (
    Acl,
    AclAuthorizer,
    AllOperations,
    AllowEverything,
    Denial,
    PatternType,
    Permission,
    parse_operation,
)
from mqbroker.errors import InvalidRequestError
from mqbroker.interfaces import IAclView, IAuthorizer
from mqbroker.model import Operation, Principal, ResourceType

ALICE = Principal("User", "alice", "10.0.0.1")
BOB = Principal("User", "bob", "10.0.0.2")


def acl(principal="User:alice", name="orders", operation=Operation.READ, permission=Permission.ALLOW, **extra):
    return Acl(
        principal=principal,
        resource_type=extra.pop("resource_type", ResourceType.TOPIC),
        resource_name=name,
        operation=operation,
        permission=permission,
        **extra,
    )


def test_both_authorizers_provide_the_interface():
    assert verifyObject(IAuthorizer, AllowEverything())
    assert verifyObject(IAuthorizer, AclAuthorizer())
    assert verifyObject(IAclView, AclAuthorizer())


def test_nothing_is_allowed_without_an_acl_and_the_denial_is_audited():
    denials = []
    authorizer = AclAuthorizer(on_denied=denials.append)
    assert not authorizer.authorize(ALICE, Operation.WRITE, ResourceType.TOPIC, "orders")
    assert denials == [Denial(principal=ALICE, operation=Operation.WRITE, resource_type=ResourceType.TOPIC, resource_name="orders")]


def test_read_allowed_does_not_allow_write():
    authorizer = AclAuthorizer([acl()])
    assert authorizer.authorize(ALICE, Operation.READ, ResourceType.TOPIC, "orders")
    assert not authorizer.authorize(ALICE, Operation.WRITE, ResourceType.TOPIC, "orders")
    assert not authorizer.authorize(BOB, Operation.READ, ResourceType.TOPIC, "orders")


def test_deny_beats_allow():
    authorizer = AclAuthorizer([acl(principal="User:*", operation=AllOperations.ALL), acl(permission=Permission.DENY)])
    assert not authorizer.authorize(ALICE, Operation.READ, ResourceType.TOPIC, "orders")
    assert authorizer.authorize(BOB, Operation.READ, ResourceType.TOPIC, "orders")
    assert authorizer.authorize(ALICE, Operation.WRITE, ResourceType.TOPIC, "orders")


def test_prefixed_acl_covers_names_that_start_with_the_prefix():
    authorizer = AclAuthorizer([acl(name="orders.", pattern_type=PatternType.PREFIXED, operation=Operation.WRITE)])
    assert authorizer.authorize(ALICE, Operation.WRITE, ResourceType.TOPIC, "orders.eu")
    assert not authorizer.authorize(ALICE, Operation.WRITE, ResourceType.TOPIC, "orders")
    assert not authorizer.authorize(ALICE, Operation.WRITE, ResourceType.TOPIC, "payments.eu")


def test_wildcard_resource_and_host_rules():
    authorizer = AclAuthorizer([acl(name="*", host="10.0.0.1")])
    assert authorizer.authorize(ALICE, Operation.READ, ResourceType.TOPIC, "anything")
    moved = Principal("User", "alice", "192.168.1.1")
    assert not authorizer.authorize(moved, Operation.READ, ResourceType.TOPIC, "anything")


def test_read_write_delete_alter_imply_describe_but_deny_read_does_not_deny_describe():
    for granted in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        assert AclAuthorizer([acl(operation=granted)]).authorize(ALICE, Operation.DESCRIBE, ResourceType.TOPIC, "orders")
    authorizer = AclAuthorizer([acl(operation=Operation.DESCRIBE), acl(permission=Permission.DENY)])
    assert authorizer.authorize(ALICE, Operation.DESCRIBE, ResourceType.TOPIC, "orders")
    configs = AclAuthorizer([acl(operation=Operation.ALTER_CONFIGS)])
    assert configs.authorize(ALICE, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "orders")


def test_super_users_may_do_everything():
    authorizer = AclAuthorizer([acl(principal="User:admin", permission=Permission.DENY, operation=AllOperations.ALL)],
                               super_users=["User:admin"])
    assert authorizer.authorize(Principal("User", "admin"), Operation.DELETE, ResourceType.CLUSTER, "kafka-cluster")


def test_allow_if_no_acl_only_for_resources_without_acls():
    authorizer = AclAuthorizer([acl(principal="User:bob")], allow_if_no_acl=True)
    assert authorizer.authorize(ALICE, Operation.WRITE, ResourceType.TOPIC, "unprotected")
    assert not authorizer.authorize(ALICE, Operation.READ, ResourceType.TOPIC, "orders")


def test_resource_types_are_separate():
    authorizer = AclAuthorizer([acl(resource_type=ResourceType.GROUP, name="orders")])
    assert authorizer.authorize(ALICE, Operation.READ, ResourceType.GROUP, "orders")
    assert not authorizer.authorize(ALICE, Operation.READ, ResourceType.TOPIC, "orders")


def test_add_and_remove_and_list():
    authorizer = AclAuthorizer()
    entry = acl(name="orders.", pattern_type=PatternType.PREFIXED)
    authorizer.add(entry)
    authorizer.add(entry)
    assert authorizer.acls() == [entry]
    assert authorizer.remove(entry)
    assert not authorizer.remove(entry)
    assert not authorizer.authorize(ALICE, Operation.READ, ResourceType.TOPIC, "orders.x")


def test_acls_round_trip_through_bytes():
    entries = [acl(), acl(name="x", pattern_type=PatternType.PREFIXED, operation=AllOperations.ALL, permission=Permission.DENY)]
    assert [Acl.from_bytes(entry.to_bytes()) for entry in entries] == entries
    assert sorted(AclAuthorizer.acls_from_bytes(AclAuthorizer(entries).to_bytes()), key=str) == sorted(entries, key=str)


@pytest.mark.parametrize("data", [b"", b"[]", b"{}", b'{"principal":"alice"}', b"\xff"])
def test_malformed_acl_records_are_invalid_requests(data):
    with pytest.raises(InvalidRequestError):
        Acl.from_bytes(data)


def test_operation_names_parse_case_insensitively():
    assert parse_operation("ALL") is AllOperations.ALL
    assert parse_operation("Describe_Configs") is Operation.DESCRIBE_CONFIGS


# -- brute force -------------------------------------------------------------------------------

NAMES = ["a", "ab", "abc", "b", "*"]
PRINCIPALS = ["User:alice", "User:bob", "User:*"]
HOSTS = ["h1", "h2", "*"]
OPERATIONS = [*Operation, AllOperations.ALL]
IMPLIES = {
    Operation.DESCRIBE: {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER},
    Operation.DESCRIBE_CONFIGS: {Operation.ALTER_CONFIGS},
}

acls_strategy = st.lists(
    st.builds(
        lambda principal, host, resource_type, name, prefixed, operation, permission: Acl(
            principal=principal,
            host=host,
            resource_type=resource_type,
            resource_name=name,
            pattern_type=PatternType.PREFIXED if prefixed and name != "*" else PatternType.LITERAL,
            operation=operation,
            permission=permission,
        ),
        st.sampled_from(PRINCIPALS),
        st.sampled_from(HOSTS),
        st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
        st.sampled_from(NAMES),
        st.booleans(),
        st.sampled_from(OPERATIONS),
        st.sampled_from(list(Permission)),
    ),
    max_size=12,
)


def reference_decision(acls, super_users, principal, operation, resource_type, name):
    """The rules read literally, one ACL at a time."""
    if str(principal) in super_users:
        return True

    def covers(entry):
        if entry.resource_type is not resource_type:
            return False
        if entry.pattern_type is PatternType.PREFIXED:
            return name.startswith(entry.resource_name)
        return entry.resource_name in (name, "*")

    def applies(entry):
        return entry.principal in (str(principal), "User:*") and entry.host in (principal.host, "*")

    relevant = [entry for entry in acls if covers(entry) and applies(entry)]
    if any(e.permission is Permission.DENY and e.operation in (operation, AllOperations.ALL) for e in relevant):
        return False
    granting = {operation, AllOperations.ALL} | IMPLIES.get(operation, set())
    return any(e.permission is Permission.ALLOW and e.operation in granting for e in relevant)


@given(
    acls=acls_strategy,
    removed=st.integers(min_value=0, max_value=12),
    name=st.sampled_from(["a", "ab", "abc", "abd", "b", "ba", "c"]),
    who=st.sampled_from(["alice", "bob", "carol", "root"]),
    host=st.sampled_from(["h1", "h2"]),
    operation=st.sampled_from(list(Operation)),
    resource_type=st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
)
def test_decisions_match_a_brute_force_reference(acls, removed, name, who, host, operation, resource_type):
    super_users = {"User:root"}
    authorizer = AclAuthorizer(acls, super_users=super_users)
    kept = list(acls)
    if kept:
        victim = kept[removed % len(kept)]
        authorizer.remove(victim)
        kept = [entry for entry in kept if entry != victim]
    principal = Principal("User", who, host)
    expected = reference_decision(kept, super_users, principal, operation, resource_type, name)
    assert authorizer.authorize(principal, operation, resource_type, name) == expected
