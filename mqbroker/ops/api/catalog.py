"""Every route of the admin API, by section, and the sections other work will add.

A new feature adds its routes in a module of its own (``<feature>_routes.py`` with a
``ROUTES`` tuple, its schemas in ``schemas.COMPONENTS``), lists them in ``_MODULE_ROUTES``
and turns its ``SECTIONS`` entry to present. The integration tests then refuse to pass until
every new route is exercised (``tests/integration/test_admin_api.py`` walks the document).
"""

from __future__ import annotations

from typing import Any

from mqbroker import __version__
from mqbroker.ops.api import (
    cluster_routes,
    connector_routes,
    group_routes,
    protocol_routes,
    record_routes,
    security_routes,
    share_routes,
    topic_routes,
)
from mqbroker.ops.api.openapi import openapi_document
from mqbroker.ops.api.routing import ApiCall, ApiResource, Route, Schemas
from mqbroker.ops.api.schemas import COMPONENTS, ref

#: (name, path prefix, present): what ``GET /api/v1`` lists. Transactions' routes are still to come.
SECTIONS = (
    ("cluster", "/api/v1/cluster", True),
    ("brokers", "/api/v1/brokers", True),
    ("topics", "/api/v1/topics", True),
    ("consumer groups", "/api/v1/groups", True),
    ("MQTT", "/api/v1/mqtt", True),
    ("AMQP", "/api/v1/amqp", True),
    ("users", "/api/v1/users", True),
    ("ACLs", "/api/v1/acls", True),
    ("share groups", "/api/v1/share-groups", True),
    ("push subscriptions", "/api/v1/subscriptions", True),
    ("connectors", "/api/v1/connectors", True),
    ("transactions", "/api/v1/transactions", False),
)


async def index(call: ApiCall) -> dict[str, Any]:
    """The API's sections, those not yet present included."""
    return {"version": __version__, "node_id": call.operations.node_id,
            "sections": [{"name": name, "path": path, "present": present} for name, path, present in SECTIONS]}


_MODULE_ROUTES = (
    cluster_routes.ROUTES,
    topic_routes.ROUTES,
    record_routes.ROUTES,
    group_routes.ROUTES,
    protocol_routes.ROUTES,
    security_routes.ROUTES,
    share_routes.ROUTES,
    connector_routes.ROUTES,
)

ROUTES: tuple[Route, ...] = (
    Route(method="GET", path="/api/v1", operation_id="getIndex", tag="cluster", handler=index,
          summary="The API's sections (those not yet present listed too)", response=ref("Index")),
    *(route for routes in _MODULE_ROUTES for route in routes),
)


def api_resource(operations: Any) -> ApiResource:
    """The ``/api`` resource serving every route over ``operations`` (an ``AdminOperations``) and the document."""
    document = openapi_document(ROUTES)
    return ApiResource(ROUTES, Schemas(COMPONENTS), operations, lambda: document)
