# -*- test-case-name: tests.unit.ops.api.test_routing -*-
"""Routes of the admin API and the Twisted resource that serves them: matching, validation, JSON, errors, audit.

A ``Route`` declares everything the OpenAPI document says about it (parameters, body and
response schemas) and the coroutine that answers it, so the document and the code cannot
drift apart: the same schemas validate every request before its handler runs. Handlers
raise ``ApiError`` for HTTP-level problems and let the broker's typed ``BrokerError``s
through; both become a JSON error body with a status from ``status_for``. Every call that
changes something (any method but GET) writes one line to the audit log (``mqbroker.audit``)
with the principal, the route and the outcome.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from jsonschema import Draft202012Validator
from twisted.internet.defer import Deferred, FirstError, gatherResults
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from mqbroker import errors
from mqbroker.errors import ErrorCode
from mqbroker.model import ANONYMOUS, Principal

audit = Logger(namespace="mqbroker.audit")
T = TypeVar("T")

#: The request attribute ``http._Authenticated`` stores the authenticated principal in.
_PRINCIPAL_ATTRIBUTE = "mqbroker_principal"
#: Set on a request whose client went away before its answer was ready.
_GONE_ATTRIBUTE = "mqbroker_client_gone"

#: HTTP status of each broker error code the admin API reports other than 400 (retriable ones: 503).
_STATUS_BY_CODE = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.RESOURCE_NOT_FOUND: 404,
    ErrorCode.GROUP_ID_NOT_FOUND: 404,
    ErrorCode.TOPIC_ALREADY_EXISTS: 409,
    ErrorCode.DUPLICATE_RESOURCE: 409,
    ErrorCode.NON_EMPTY_GROUP: 409,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: 403,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: 403,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: 403,
    ErrorCode.SASL_AUTHENTICATION_FAILED: 401,
    ErrorCode.MESSAGE_TOO_LARGE: 413,
    ErrorCode.UNKNOWN_SERVER_ERROR: 500,
    ErrorCode.STORAGE_ERROR: 500,
    ErrorCode.CORRUPT_MESSAGE: 500,
}


class ApiError(Exception):
    """An HTTP-level refusal (bad parameter, unknown route, wrong content type) with its status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def status_for(error: errors.BrokerError) -> int:
    """The HTTP status a broker error is reported with: its table entry, 503 if retriable, else 400."""
    return _STATUS_BY_CODE.get(error.code, 503 if error.retriable else 400)


def remember_principal(request: Request, principal: Principal) -> None:
    """Record who authenticated this request (the admin API acts as them)."""
    setattr(request, _PRINCIPAL_ATTRIBUTE, principal)


def principal_of(request: Request) -> Principal:
    """Who this request acts as: the authenticated principal, else anonymous from the client's address."""
    principal = getattr(request, _PRINCIPAL_ATTRIBUTE, None)
    if principal is not None:
        return principal
    host = getattr(request.getClientAddress(), "host", "")
    return Principal(ANONYMOUS.kind, ANONYMOUS.name, host)


@dataclass(frozen=True, slots=True, kw_only=True)
class Parameter:
    """A path or query parameter: its name, where it is, its JSON schema."""

    name: str
    location: str  # "path" or "query"
    schema: Mapping[str, Any]
    description: str
    required: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiCall:
    """One validated request as a handler sees it."""

    principal: Principal
    path: Mapping[str, Any]
    query: Mapping[str, Any]
    body: Any
    #: The broker operations (``operations.AdminOperations``).
    operations: Any


Handler = Callable[[ApiCall], Awaitable[Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """One operation of the API: method, path template, documentation, schemas and handler."""

    method: str
    path: str
    operation_id: str
    summary: str
    tag: str
    handler: Handler
    parameters: tuple[Parameter, ...] = ()
    #: JSON schema of the request body (None: no body).
    body: Mapping[str, Any] | None = None
    #: JSON schema of the success response body (None: 204 No Content).
    response: Mapping[str, Any] | None = None
    status: int = 200
    #: Error statuses this route documents besides 400, 401, 403 and 503 (which every route may answer).
    error_statuses: tuple[int, ...] = ()
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = re.findall(r"{(\w+)}", self.path)
        declared = {p.name for p in self.parameters if p.location == "path"}
        assert set(names) == declared, f"{self.operation_id}: path parameters {names} vs declared {declared}"
        assert self.method == "GET" or self.method == "DELETE" or self.body is not None, \
            f"{self.operation_id}: a POST/PUT/PATCH takes a JSON body (cross-site forms cannot send one)"
        regex = "^" + re.sub(r"\\{(\w+)\\}", r"(?P<\1>[^/]+)", re.escape(self.path)) + "$"
        object.__setattr__(self, "_pattern", re.compile(regex))

    @property
    def mutating(self) -> bool:
        """Whether the call changes something (and is audited)."""
        return self.method != "GET"

    def match(self, path: str) -> dict[str, str] | None:
        """The percent-decoded path parameters if ``path`` is this route's, else None."""
        found = self._pattern.match(path)
        if found is None:
            return None
        return {name: urllib.parse.unquote(value) for name, value in found.groupdict().items()}


class Schemas:
    """Validates values against the API's named component schemas (``#/components/schemas/...`` references)."""

    def __init__(self, components: Mapping[str, Any]) -> None:
        self._components = {"schemas": dict(components)}
        self._validators: dict[int, Draft202012Validator] = {}

    def errors_in(self, value: Any, schema: Mapping[str, Any]) -> list[str]:
        """What is wrong with ``value`` according to ``schema`` (empty: nothing)."""
        validator = self._validators.get(id(schema))
        if validator is None:
            validator = Draft202012Validator({**schema, "components": self._components})
            self._validators[id(schema)] = validator
        found = sorted(validator.iter_errors(value), key=lambda error: list(error.absolute_path))
        return [_describe(error) for error in found[:5]]


def _describe(error: Any) -> str:
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where or 'body'}: {error.message}"


def _parsed_parameter(parameter: Parameter, text: str) -> Any:
    """A parameter's text as the type its schema names (left as text when it does not parse)."""
    kind = parameter.schema.get("type")
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            return text
    if kind == "boolean":
        return {"true": True, "false": False}.get(text.lower(), text)
    return text


class ApiResource(Resource):
    """Serves ``routes`` under ``/api``: each request matched, validated, answered as JSON, audited if it changes state."""

    isLeaf = True
    log = Logger()

    def __init__(self, routes: Sequence[Route], schemas: Schemas, operations: Any,
                 document: Callable[[], Mapping[str, Any]]) -> None:
        super().__init__()
        self._routes = list(routes)
        self._schemas = schemas
        self._operations = operations
        self._document = document

    def render(self, request: Request) -> Any:
        """Answer one request (asynchronously: the handlers call the broker)."""
        request.setHeader(b"content-type", b"application/json")
        request.setHeader(b"cache-control", b"no-store")
        request.setHeader(b"x-content-type-options", b"nosniff")
        path = request.path.decode("utf-8", "replace")
        method = request.method.decode("ascii", "replace")
        try:
            if path == "/api/openapi.json" and method in ("GET", "HEAD"):
                return _json_bytes(self._document())
            route, path_parameters = self._find(method, path)
            call = self._call(request, route, path_parameters)
        except ApiError as error:
            return self._refuse(request, error)
        request.notifyFinish().addErrback(lambda _: setattr(request, _GONE_ATTRIBUTE, True))
        answered = Deferred.fromCoroutine(_run(route.handler, call))
        answered.addCallbacks(self._reply, self._failed, callbackArgs=(request, route, call),
                              errbackArgs=(request, route, call))
        answered.addErrback(lambda failure: self.log.failure("admin API reply failed", failure))
        return NOT_DONE_YET

    def _find(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        allowed = []
        for route in self._routes:
            parameters = route.match(path)
            if parameters is None:
                continue
            if route.method == method:
                return route, parameters
            allowed.append(route.method)
        if allowed:
            raise ApiError(405, "METHOD_NOT_ALLOWED", f"{method} is not allowed on {path}; use {', '.join(allowed)}")
        raise ApiError(404, "NOT_FOUND", f"no admin API route {path}; see /api/openapi.json")

    def _call(self, request: Request, route: Route, path_parameters: dict[str, str]) -> ApiCall:
        """Check the parameters and body against the route's schemas."""
        if getattr(request, "body_too_large", False):
            raise ApiError(413, "BODY_TOO_LARGE", "the request body is larger than the admin API accepts")
        values: dict[str, dict[str, Any]] = {"path": {}, "query": {}}
        problems: list[str] = []
        for parameter in route.parameters:
            if parameter.location == "path":
                text: str | None = path_parameters[parameter.name]
            else:
                raw = request.args.get(parameter.name.encode())
                text = raw[-1].decode("utf-8", "replace") if raw else None
            if text is None:
                if parameter.required:
                    problems.append(f"query parameter {parameter.name!r} is required")
                continue
            value = _parsed_parameter(parameter, text)
            problems += [f"{parameter.name}: {problem.partition(': ')[2]}"
                         for problem in self._schemas.errors_in(value, parameter.schema)]
            values[parameter.location][parameter.name] = value
        body = None
        if route.body is not None:
            body = self._body(request)
            problems += self._schemas.errors_in(body, route.body)
        if problems:
            raise ApiError(400, "INVALID_REQUEST", "; ".join(problems))
        return ApiCall(principal=principal_of(request), path=values["path"], query=values["query"], body=body,
                       operations=self._operations)

    def _body(self, request: Request) -> Any:
        content_type = (request.getHeader(b"content-type") or b"").split(b";")[0].strip().lower()
        if content_type != b"application/json":
            raise ApiError(415, "UNSUPPORTED_MEDIA_TYPE", "send the request body as JSON (content-type: application/json)")
        request.content.seek(0)
        try:
            return json.loads(request.content.read())
        except (ValueError, UnicodeDecodeError) as error:
            raise ApiError(400, "INVALID_JSON", f"the request body is not JSON: {error}") from None

    def _reply(self, result: Any, request: Request, route: Route, call: ApiCall) -> None:
        status = route.status if route.response is not None else 204
        if route.mutating:
            _audit(request, call.principal, status, "done")
        if not _still_open(request):
            return
        request.setResponseCode(status)
        if route.response is None:
            request.responseHeaders.removeHeader(b"content-type")
            request.finish()
            return
        request.write(_json_bytes(result))
        request.finish()

    def _failed(self, failure: Failure, request: Request, route: Route, call: ApiCall) -> None:
        if failure.check(ApiError):
            error = failure.value
            status, body = error.status, _error_body(error.code, error.message, None, False)
        elif failure.check(errors.BrokerError):
            broker_error = failure.value
            status = status_for(broker_error)
            body = _error_body(broker_error.code.name, broker_error.message, int(broker_error.code),
                               broker_error.retriable)
        else:
            self.log.failure("admin API {method} {path} failed", failure, method=route.method, path=route.path)
            status, body = 500, _error_body("UNKNOWN_SERVER_ERROR", "the broker failed to answer; see its log", -1, False)
        if route.mutating:
            _audit(request, call.principal, status, body["error"]["message"])
        if not _still_open(request):
            return
        request.setResponseCode(status)
        request.write(_json_bytes(body))
        request.finish()

    def _refuse(self, request: Request, error: ApiError) -> bytes:
        request.setResponseCode(error.status)
        if request.method not in (b"GET", b"HEAD"):
            _audit(request, principal_of(request), error.status, error.message)
        return _json_bytes(_error_body(error.code, error.message, None, False))


def _still_open(request: Request) -> bool:
    """Whether the answer can still be written (not finished, the client still there)."""
    return not request.finished and not getattr(request, _GONE_ATTRIBUTE, False)


async def _run(handler: Handler, call: ApiCall) -> Any:
    return await handler(call)


def _error_body(code: str, message: str, error_code: int | None, retriable: bool) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message, "retriable": retriable}
    if error_code is not None:
        error["error_code"] = error_code
    return {"error": error}


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _audit(request: Request, principal: Principal, status: int, outcome: str) -> None:
    """One audit line per admin call that changes (or tried to change) something."""
    audit.info("ADMIN {method} {path} principal={principal} host={host} status={status}: {outcome}",
               method=request.method.decode("ascii", "replace"), path=request.uri.decode("utf-8", "replace"),
               principal=str(principal), host=principal.host or "-", status=status, outcome=outcome)


def path_parameter(name: str, description: str, schema: Mapping[str, Any] | None = None) -> Parameter:
    """A required path parameter (a string unless ``schema`` says otherwise)."""
    return Parameter(name=name, location="path", schema=schema or {"type": "string", "minLength": 1},
                     description=description, required=True)


def query_parameter(name: str, description: str, schema: Mapping[str, Any], required: bool = False) -> Parameter:
    """A query parameter."""
    return Parameter(name=name, location="query", schema=schema, description=description, required=required)


async def gathered(coroutines: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run ``coroutines`` concurrently and return their results in order; the first failure is raised as itself."""
    try:
        return list(await gatherResults([Deferred.fromCoroutine(c) for c in coroutines], consumeErrors=True))
    except FirstError as error:
        error.subFailure.raiseException()
        raise  # unreachable: raiseException always raises
