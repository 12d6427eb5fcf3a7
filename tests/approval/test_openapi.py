"""The served OpenAPI document describes every route the app has."""

from __future__ import annotations

from typing import Any

from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient


def test_document_covers_every_api_route(client: TestClient, app: Starlette) -> None:
    document = client.get("/api/v1/openapi.json").json()
    assert document["openapi"] == "3.1.0"
    documented = {
        (method.upper(), path) for path, ops in document["paths"].items() for method in ops
    }
    served = {
        (method, route.path.replace(":str}", "}"))
        for route in app.routes
        if isinstance(route, Route) and route.path.startswith("/api/v1/")
        for method in route.methods or ()
        if method != "HEAD"
    }
    served -= {("GET", "/api/v1/events"), ("GET", "/api/v1/openapi.json")}
    assert served == documented


def test_schemas_resolve(client: TestClient) -> None:
    document = client.get("/api/v1/openapi.json").json()
    schemas = document["components"]["schemas"]
    refs: list[str] = []

    def collect(node: object) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                refs.append(node["$ref"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(document)
    assert refs
    for ref in refs:
        assert ref.startswith("#/components/schemas/")
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    decision = schemas["DomainDecisionIn"]
    assert decision["properties"]["scope"]["enum"] == ["once", "session", "project", "global"]
    assert decision["additionalProperties"] is False
    service = document["paths"]["/api/v1/service/domains"]["post"]
    assert service["security"] == [{"service": []}]


def test_security_is_described(client: TestClient) -> None:
    document = client.get("/api/v1/openapi.json").json()
    schemes = document["components"]["securitySchemes"]
    assert schemes["hub"] == {"type": "http", "scheme": "bearer", "description": "the hub secret"}
    assert schemes["browser"]["type"] == "http"  # a bearer token: no cookie at all
    assert schemes["browser"]["scheme"] == "bearer"
    assert paths_of(document)["/api/v1/login"]["post"]["security"] == []
    paths = document["paths"]
    assert paths["/api/v1/health"]["get"]["security"] == []
    pending = paths["/api/v1/pending"]["get"]
    assert pending["security"] == [{"hub": []}, {"browser": []}]
    assert "401" in pending["responses"]
    assert not [path for path in paths if path.startswith("/api/v1/tokens")]
    (cloister,) = paths["/api/v1/decisions"]["get"]["parameters"]
    assert (cloister["name"], cloister["in"]) == ("cloister", "query")


def paths_of(document: dict[str, Any]) -> dict[str, Any]:
    paths: dict[str, Any] = document["paths"]
    return paths
