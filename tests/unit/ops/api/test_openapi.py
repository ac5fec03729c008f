"""The admin API's OpenAPI document: valid, one operation id per route, every write audited and taking JSON."""

from __future__ import annotations

import pathlib

from openapi_spec_validator import validate

from mqbroker.ops.api.catalog import ROUTES, SECTIONS
from mqbroker.ops.api.openapi import openapi_document


def test_the_document_validates_as_openapi_3_1() -> None:
    validate(openapi_document(ROUTES))


def test_operation_ids_and_paths_are_unique() -> None:
    assert len({route.operation_id for route in ROUTES}) == len(ROUTES)
    assert len({(route.method, route.path) for route in ROUTES}) == len(ROUTES)


def test_every_write_is_audited_and_every_body_is_json() -> None:
    for path, methods in openapi_document(ROUTES)["paths"].items():
        for method, operation in methods.items():
            assert operation.get("x-audited", False) == (method != "get"), (method, path)
            if "requestBody" in operation:
                assert list(operation["requestBody"]["content"]) == ["application/json"]
                assert "415" in operation["responses"]


def test_sections_not_yet_built_have_no_routes_and_the_others_have() -> None:
    for name, prefix, present in SECTIONS:
        routed = any(route.path.startswith(prefix) for route in ROUTES)
        assert routed == present, name


def test_docs_admin_api_lists_every_route() -> None:
    document = (pathlib.Path(__file__).resolve().parents[4] / "docs" / "admin-api.md").read_text()
    missing = [f"{route.method} {route.path}" for route in ROUTES if f"`{route.method} {route.path}`" not in document]
    assert not missing, f"docs/admin-api.md does not list {missing}"
