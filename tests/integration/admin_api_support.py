"""A client of the admin HTTP API for the tests: calls operations by id, checks every answer against the document."""

from __future__ import annotations

import urllib.parse
from typing import Any

import requests

from mqbroker.ops.api.routing import Schemas


class AdminApi:
    """Calls the API by ``operationId``; every response must be documented and match its schema.

    ``succeeded`` collects the operations that answered a success status: the walk over the
    document (``test_every_route_in_the_document_is_exercised``) checks that none is missing.
    """

    def __init__(self, base_url: str, auth: tuple[str, str] | None = None) -> None:
        self.base_url = base_url
        self.session = requests.Session()
        self.session.auth = auth
        self.document = self.session.get(f"{base_url}/api/openapi.json", timeout=10).json()
        self.operations = {operation["operationId"]: (method.upper(), path, operation)
                           for path, methods in self.document["paths"].items()
                           for method, operation in methods.items()}
        self.schemas = Schemas(self.document["components"]["schemas"])
        self.succeeded: set[str] = set()

    def call(self, operation_id: str, *, expect: int | None = None, json: Any = None,
             params: dict[str, Any] | None = None, **path: Any) -> requests.Response:
        """Call one operation (path parameters as keywords); assert the status if ``expect`` is given."""
        method, template, operation = self.operations[operation_id]
        url = self.base_url + template.format(**{name: urllib.parse.quote(str(value), safe="")
                                                  for name, value in path.items()})
        response = self.session.request(method, url, json=json, params=params, timeout=30)
        self.check(operation_id, operation, response)
        if expect is not None:
            assert response.status_code == expect, f"{operation_id}: {response.status_code} {response.text}"
        if 200 <= response.status_code < 300:
            self.succeeded.add(operation_id)
        return response

    def check(self, operation_id: str, operation: dict[str, Any], response: requests.Response) -> None:
        """The status is documented for the operation and the body matches the documented schema."""
        documented = operation["responses"].get(str(response.status_code))
        assert documented is not None, f"{operation_id} answered an undocumented {response.status_code}: {response.text}"
        if "content" not in documented:
            assert response.content == b"", f"{operation_id}: a {response.status_code} with a body"
            return
        schema = documented["content"]["application/json"]["schema"]
        problems = self.schemas.errors_in(response.json(), schema)
        assert not problems, f"{operation_id} answered against its schema: {problems}\n{response.text[:2000]}"

    def json(self, operation_id: str, **keywords: Any) -> Any:
        """Call and return the JSON body of a success."""
        response = self.call(operation_id, **keywords)
        assert 200 <= response.status_code < 300, f"{operation_id}: {response.status_code} {response.text}"
        return response.json()


#: The sections ``test_admin_api_queues.py`` exercises (``test_admin_api.py`` walks the others).
QUEUE_TAGS = frozenset({"share-groups", "subscriptions", "connectors"})


def operations_tagged(api: AdminApi, tags: frozenset[str]) -> set[str]:
    """The operation ids of the document whose tag is one of ``tags``."""
    return {operation_id for operation_id, (_, _, operation) in api.operations.items()
            if set(operation["tags"]) & tags}


