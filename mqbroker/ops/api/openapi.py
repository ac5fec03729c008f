# -*- test-case-name: tests.unit.ops.api.test_openapi -*-
"""The OpenAPI 3.1 document of the admin API, built from the route declarations (served at ``/api/openapi.json``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mqbroker import __version__
from mqbroker.ops.api.routing import Route
from mqbroker.ops.api.schemas import COMPONENTS, ref

_STATUS_TEXT = {
    400: "the request is invalid (a parameter, the body, or a value the broker refused)",
    401: "authentication is required (HTTP basic auth as a broker user, or a client certificate)",
    403: "the principal is not allowed to do this",
    404: "no such resource",
    409: "the resource's state does not allow this",
    413: "the request body is too large",
    415: "the body must be JSON (content-type: application/json)",
    503: "retriable: the broker or the cluster cannot answer now (no controller, a leader moving)",
}
#: Statuses any route may answer: validation, authentication, authorization, a cluster not ready.
_COMMON_ERRORS = (400, 401, 403, 503)


def _error_response(status: int) -> dict[str, Any]:
    return {"description": _STATUS_TEXT.get(status, "an error"),
            "content": {"application/json": {"schema": ref("Error")}}}


def _operation(route: Route) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": route.operation_id, "summary": route.summary, "tags": [route.tag],
        "parameters": [{"name": p.name, "in": p.location, "required": p.required, "description": p.description,
                        "schema": dict(p.schema)} for p in route.parameters],
    }
    if route.body is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": dict(route.body)}}}
    if route.response is None:
        responses: dict[str, Any] = {"204": {"description": "done"}}
    else:
        responses = {str(route.status): {"description": "done" if route.mutating else "found",
                                         "content": {"application/json": {"schema": dict(route.response)}}}}
    statuses = set(_COMMON_ERRORS) | set(route.error_statuses)
    if route.body is not None:
        statuses |= {413, 415}
    for status in sorted(statuses):
        responses[str(status)] = _error_response(status)
    responses["default"] = {"description": "an unexpected failure (see the broker's log)",
                            "content": {"application/json": {"schema": ref("Error")}}}
    operation["responses"] = responses
    if route.mutating:
        operation["x-audited"] = True
    return operation


def openapi_document(routes: Sequence[Route]) -> dict[str, Any]:
    """The whole document: every route, the component schemas, HTTP basic auth as the security scheme."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mqbroker admin API", "version": __version__,
            "description": "Cluster, topics, partitions, records, consumer groups, share groups, push subscriptions, "
                           "connectors, MQTT, AMQP, users and ACLs. "
                           "Every call acts as the authenticated principal and is authorized by the broker; every "
                           "call that changes something is written to the audit log (x-audited). See "
                           "docs/admin-api.md.",
        },
        "paths": paths,
        "components": {"schemas": COMPONENTS,
                       "securitySchemes": {"basic": {"type": "http", "scheme": "basic",
                                                     "description": "a broker (SCRAM) user; or a client certificate "
                                                                    "over TLS. Needed only with the ACL authorizer."}}},
        "security": [{"basic": []}, {}],
    }
