"""Users and ACLs through the broker API: the core authorizes on the cluster, the security admin proposes records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mqbroker import errors
from mqbroker.cluster.metadata_records import PutGenericRecord
from mqbroker.model import Operation, Principal, ResourceType
from mqbroker.security.acl import Acl, AclAuthorizer, Permission
from mqbroker.security.scram import ScramMechanism, salted_password
from mqbroker.security.service import ACL_KIND, USER_KIND
from tests.fakes import BrokerRig, FakeClusterView, build_broker, fired

ADMIN = Principal("User", "admin")
ALICE = Principal("User", "alice")
ORDERS_WRITE = Acl(principal="User:alice", resource_type=ResourceType.TOPIC, resource_name="orders",
                   operation=Operation.WRITE, permission=Permission.ALLOW)


def _broker(tmp_path: Path) -> BrokerRig:
    return build_broker(tmp_path, FakeClusterView(), authorizer=AclAuthorizer(super_users=["User:admin"]))


def test_a_user_is_added_as_a_metadata_record_without_its_password_and_then_listed(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    fired(rig.broker.upsert_user(ADMIN, "bob", "bob-password", True))
    [record] = [r for r in rig.cluster.proposed if isinstance(r, PutGenericRecord)]
    assert (record.kind, record.key) == (USER_KIND, "bob") and "bob-password" not in json.dumps(record.value)
    assert fired(rig.broker.list_users(ADMIN)) == ["bob"]
    fired(rig.broker.remove_user(ADMIN, "bob"))
    assert fired(rig.broker.list_users(ADMIN)) == []


def test_adding_an_existing_user_or_changing_a_missing_one_is_refused_with_what_to_do(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    fired(rig.broker.upsert_user(ADMIN, "bob", "pw", True))
    with pytest.raises(errors.DuplicateResourceError, match="users passwd"):
        fired(rig.broker.upsert_user(ADMIN, "bob", "pw", True))
    with pytest.raises(errors.ResourceNotFoundError, match="users add"):
        fired(rig.broker.upsert_user(ADMIN, "carol", "pw", False))


def test_acls_are_stored_listed_and_removed_exactly(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    fired(rig.broker.add_acls(ADMIN, [ORDERS_WRITE]))
    assert fired(rig.broker.list_acls(ADMIN)) == [ORDERS_WRITE]
    assert [r.kind for r in rig.cluster.proposed if isinstance(r, PutGenericRecord)] == [ACL_KIND]
    fired(rig.broker.remove_acls(ADMIN, [ORDERS_WRITE]))
    assert fired(rig.broker.list_acls(ADMIN)) == []


def test_salted_credentials_are_set_described_and_removed_through_the_broker(tmp_path: Path) -> None:
    rig = _broker(tmp_path)
    salted = salted_password(ScramMechanism.SHA_256, "s3cret", b"salt", 4096)
    fired(rig.broker.alter_scram_credentials(ADMIN, "carol", [(ScramMechanism.SHA_256, b"salt", 4096, salted)], []))
    assert fired(rig.broker.describe_users(ADMIN)) == {"carol": {ScramMechanism.SHA_256: 4096}}
    fired(rig.broker.alter_scram_credentials(ADMIN, "carol", [], [ScramMechanism.SHA_256]))
    assert fired(rig.broker.describe_users(ADMIN)) == {}


@pytest.mark.parametrize("call", [
    lambda broker: broker.list_users(ALICE),
    lambda broker: broker.upsert_user(ALICE, "bob", "pw", True),
    lambda broker: broker.remove_user(ALICE, "bob"),
    lambda broker: broker.list_acls(ALICE),
    lambda broker: broker.add_acls(ALICE, [ORDERS_WRITE]),
    lambda broker: broker.remove_acls(ALICE, [ORDERS_WRITE]),
    lambda broker: broker.describe_users(ALICE),
    lambda broker: broker.alter_scram_credentials(ALICE, "bob", [], [ScramMechanism.SHA_256]),
], ids=["list_users", "upsert_user", "remove_user", "list_acls", "add_acls", "remove_acls", "describe_users",
        "alter_scram_credentials"])
def test_every_admin_call_needs_the_cluster_permission_and_proposes_nothing_without_it(tmp_path: Path,
                                                                                      call: object) -> None:
    rig = _broker(tmp_path)
    before = list(rig.cluster.proposed)
    with pytest.raises(errors.ClusterAuthorizationError):
        fired(call(rig.broker))  # type: ignore[operator]
    assert rig.cluster.proposed == before
