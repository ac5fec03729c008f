"""Admin API: SCRAM users and ACLs (the same operations as `mqbroker users` and `mqbroker acls`)."""

from __future__ import annotations

from typing import Any

from mqbroker import errors
from mqbroker.ops.api.routing import ApiCall, Route, path_parameter, query_parameter
from mqbroker.limits import username_length_max
from mqbroker.ops.api.schemas import COMPONENTS, array_of, printable_name, ref
from mqbroker.security.acl import Acl

TAG = "security"
USER = path_parameter("name", "the user name", printable_name(username_length_max))
#: The fields of an ACL, each also a query parameter of the delete route.
ACL_FIELDS = tuple(COMPONENTS["Acl"]["properties"])


def acl_of(fields: dict[str, Any]) -> Acl:
    """The ACL named by ``fields`` (validated against the Acl schema already)."""
    return Acl.from_json(fields)


async def list_users(call: ApiCall) -> list[dict[str, str]]:
    """Every SCRAM user (names only; credentials never leave the broker)."""
    return [{"name": name} for name in await call.operations.users(call.principal)]


async def add_user(call: ApiCall) -> dict[str, str]:
    """Create a user with SCRAM-SHA-256 and -512 credentials."""
    await call.operations.upsert_user(call.principal, call.body["name"], call.body["password"], True)
    return {"name": call.body["name"]}


async def change_password(call: ApiCall) -> None:
    """Give a user a new password."""
    await call.operations.upsert_user(call.principal, call.path["name"], call.body["password"], False)


async def remove_user(call: ApiCall) -> None:
    """Delete a user."""
    await call.operations.remove_user(call.principal, call.path["name"])


async def list_acls(call: ApiCall) -> list[dict[str, str]]:
    """Every ACL."""
    return [acl.to_json() for acl in await call.operations.acls(call.principal)]


async def add_acls(call: ApiCall) -> dict[str, Any]:
    """Store ACLs."""
    acls = [acl_of(fields) for fields in call.body["acls"]]
    await call.operations.add_acls(call.principal, acls)
    return {"acls": [acl.to_json() for acl in acls]}


async def remove_acl(call: ApiCall) -> None:
    """Delete one ACL (an exact match)."""
    acl = acl_of(dict(call.query))
    if acl not in await call.operations.acls(call.principal):
        raise errors.ResourceNotFoundError(f"no such ACL: {acl.to_json()}")
    await call.operations.remove_acls(call.principal, [acl])


ROUTES = (
    Route(method="GET", path="/api/v1/users", operation_id="listUsers", tag=TAG, handler=list_users,
          summary="SCRAM users", response=array_of("User")),
    Route(method="POST", path="/api/v1/users", operation_id="createUser", tag=TAG, handler=add_user,
          summary="Create a SCRAM user", body=ref("NewUser"), response=ref("User"), status=201,
          error_statuses=(409,)),
    Route(method="PUT", path="/api/v1/users/{name}/password", operation_id="changePassword", tag=TAG,
          handler=change_password, summary="Set a user's password", parameters=(USER,), body=ref("Password"),
          error_statuses=(404,)),
    Route(method="DELETE", path="/api/v1/users/{name}", operation_id="deleteUser", tag=TAG, handler=remove_user,
          summary="Delete a user", parameters=(USER,), error_statuses=(404,)),
    Route(method="GET", path="/api/v1/acls", operation_id="listAcls", tag=TAG, handler=list_acls,
          summary="ACLs", response=array_of("Acl")),
    Route(method="POST", path="/api/v1/acls", operation_id="createAcls", tag=TAG, handler=add_acls,
          summary="Add ACLs", body=ref("AclList"), response=ref("AclList"), status=201),
    Route(method="DELETE", path="/api/v1/acls", operation_id="deleteAcl", tag=TAG, handler=remove_acl,
          summary="Delete one ACL, named by all its fields", error_statuses=(404,),
          parameters=tuple(query_parameter(name, f"the ACL's {name.replace('_', ' ')}",
                                           COMPONENTS["Acl"]["properties"][name], required=True)
                           for name in ACL_FIELDS)),
)
