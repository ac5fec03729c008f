"""Route matching, parameter and body validation, and error statuses of the admin API, in process."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from twisted.web.server import NOT_DONE_YET
from twisted.web.test.requesthelper import DummyRequest

from mqbroker import errors
from mqbroker.model import Principal
from mqbroker.ops.api.routing import (
    ApiCall,
    ApiResource,
    Route,
    Schemas,
    path_parameter,
    query_parameter,
    remember_principal,
    status_for,
)
from mqbroker.ops.api.schemas import COMPONENTS, ref


async def _echo(call: ApiCall) -> dict[str, Any]:
    return {"path": dict(call.path), "query": dict(call.query), "body": call.body, "who": str(call.principal)}


async def _refuse(call: ApiCall) -> None:
    raise errors.TopicAlreadyExistsError("topic 'x' already exists")


ROUTES = [
    Route(method="GET", path="/api/v1/things/{name}/parts/{number}", operation_id="getPart", summary="s", tag="t",
          handler=_echo, response={"type": "object"},
          parameters=(path_parameter("name", "n"), path_parameter("number", "n", {"type": "integer", "minimum": 0}),
                      query_parameter("deep", "d", {"type": "boolean"}))),
    Route(method="POST", path="/api/v1/things", operation_id="addThing", summary="s", tag="t", handler=_echo,
          body=ref("PartitionCount"), response={"type": "object"}, status=201),
    Route(method="DELETE", path="/api/v1/things", operation_id="dropThing", summary="s", tag="t", handler=_refuse),
]


def _request(method: str, path: str, args: dict[str, list[bytes]] | None = None, body: bytes | None = None,
             content_type: bytes = b"application/json") -> DummyRequest:
    request = DummyRequest(path.strip("/").split("/"))
    request.method = method.encode()
    request.path = path.encode()
    request.uri = path.encode()
    request.args = args or {}
    if body is not None:
        request.requestHeaders.setRawHeaders(b"content-type", [content_type])
        request.content = io.BytesIO(body)
    return request


def _serve(request: DummyRequest) -> tuple[int, Any]:
    resource = ApiResource(ROUTES, Schemas(COMPONENTS), operations=None, document=lambda: {"openapi": "3.1.0"})
    rendered = resource.render(request)
    if rendered is not NOT_DONE_YET:
        request.write(rendered)
        request.finish()
    assert request.finished
    written = b"".join(request.written)
    return request.responseCode or 200, json.loads(written) if written else None


def test_path_parameters_are_percent_decoded_and_typed() -> None:
    request = _request("GET", "/api/v1/things/a%2Fb%20c/parts/3", args={b"deep": [b"true"]})
    remember_principal(request, Principal("User", "alice", "10.0.0.1"))
    status, body = _serve(request)
    assert status == 200
    assert body == {"path": {"name": "a/b c", "number": 3}, "query": {"deep": True}, "body": None, "who": "User:alice"}


def test_a_parameter_that_breaks_its_schema_is_a_400_naming_it() -> None:
    status, body = _serve(_request("GET", "/api/v1/things/x/parts/-1", args={b"deep": [b"maybe"]}))
    assert status == 400 and body["error"]["code"] == "INVALID_REQUEST"
    assert "number" in body["error"]["message"] and "deep" in body["error"]["message"]


def test_bodies_must_be_json_and_match_their_schema() -> None:
    assert _serve(_request("POST", "/api/v1/things", body=b'{"count": 2}'))[0] == 201
    assert _serve(_request("POST", "/api/v1/things", body=b"count=2", content_type=b"text/plain"))[0] == 415
    assert _serve(_request("POST", "/api/v1/things", body=b'{"count": 0}'))[1]["error"]["code"] == "INVALID_REQUEST"
    assert _serve(_request("POST", "/api/v1/things", body=b'{"count": 2, "extra": 1}'))[0] == 400
    assert _serve(_request("POST", "/api/v1/things", body=b"\xff"))[1]["error"]["code"] == "INVALID_JSON"


def test_unknown_paths_and_methods_and_the_document() -> None:
    assert _serve(_request("GET", "/api/v1/elsewhere"))[0] == 404
    status, body = _serve(_request("PUT", "/api/v1/things", body=b"{}"))
    assert status == 405 and "POST, DELETE" in body["error"]["message"]
    assert _serve(_request("GET", "/api/openapi.json")) == (200, {"openapi": "3.1.0"})


def test_broker_errors_keep_their_name_and_code() -> None:
    status, body = _serve(_request("DELETE", "/api/v1/things"))
    assert status == 409
    assert body == {"error": {"code": "TOPIC_ALREADY_EXISTS", "error_code": 36, "retriable": False,
                              "message": "topic 'x' already exists"}}


@pytest.mark.parametrize(("error", "status"), [
    (errors.UnknownTopicOrPartitionError("x"), 404), (errors.ClusterAuthorizationError("x"), 403),
    (errors.NotControllerError("x"), 503), (errors.InvalidConfigError("x"), 400), (errors.StorageError("x"), 500),
])
def test_status_of_broker_errors(error: errors.BrokerError, status: int) -> None:
    assert status_for(error) == status


def test_a_write_route_without_a_json_body_is_refused_at_declaration() -> None:
    with pytest.raises(AssertionError, match="JSON body"):
        Route(method="POST", path="/api/v1/x", operation_id="x", summary="s", tag="t", handler=_echo)
