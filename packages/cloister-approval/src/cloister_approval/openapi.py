"""The OpenAPI 3.1 description of the hub's API, generated from its pydantic models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cloister_approval.login import LOGIN_API_PATH
from cloister_approval.models import (
    CommandDecisionIn,
    DecisionOut,
    DomainDecisionIn,
    EffectiveRulesOut,
    ErrorOut,
    LoginIn,
    PendingOut,
    SessionOut,
)
from cloister_core.hub import (
    SERVICE_COMMANDS_PATH,
    SERVICE_DOMAINS_PATH,
    CommandDecision,
    CommandRequest,
    DomainDecision,
    DomainRequest,
)
from cloister_core.hubauth import HEALTH_PATH, PROOF_PATH

OPENAPI_PATH = "/api/v1/openapi.json"
FILTERED = frozenset({"/api/v1/pending", "/api/v1/decisions"})  # take ?cloister=NAME

# (method, path, summary, request body, response, list response?, error statuses)
Operation = tuple[
    str, str, str, type[BaseModel] | None, type[BaseModel] | None, bool, tuple[int, ...]
]
OPERATIONS: list[Operation] = [
    ("get", HEALTH_PATH, "Health (open: no credential; says nothing else)", None, None, False,
     ()),
    ("get", PROOF_PATH, "The hub proves it holds the hub secret (?challenge=HEX; open)",
     None, None, False, (400,)),
    ("post", LOGIN_API_PATH, "Trade a one-time login ticket for a browser session (open)",
     LoginIn, SessionOut, False, (400, 401)),
    ("get", "/api/v1/pending", "Everything waiting for a human (?cloister=NAME: of one)",
     None, PendingOut, False, (400,)),
    ("post", "/api/v1/domains/{item_id}/decision", "Decide a held domain",
     DomainDecisionIn, DecisionOut, False, (400, 404, 409)),
    ("post", "/api/v1/commands/{item_id}/decision", "Decide a held command",
     CommandDecisionIn, DecisionOut, False, (400, 404, 409)),
    ("get", "/api/v1/decisions", "Recent decisions, newest first (?cloister=NAME: of one)",
     None, DecisionOut, True, (400,)),
    ("post", "/api/v1/decisions/{decision_id}/undo", "Remove exactly the entry a decision wrote",
     None, DecisionOut, False, (404, 409)),
    ("get", "/api/v1/projects/{project}/rules", "Effective rules of a project, with their files",
     None, EffectiveRulesOut, False, (400, 422)),
    ("post", SERVICE_DOMAINS_PATH, "Service: hold a domain until decided (long poll)",
     DomainRequest, DomainDecision, False, (400, 401, 503)),
    ("post", SERVICE_COMMANDS_PATH, "Service: hold a command until decided (long poll)",
     CommandRequest, CommandDecision, False, (400, 401, 503)),
]  # fmt: skip


def openapi_document() -> dict[str, Any]:
    models = {model for op in OPERATIONS for model in op[3:5] if model is not None} | {ErrorOut}
    ordered = sorted(models, key=lambda model: model.__name__)
    _, schemas = models_json_schema(
        [(model, "validation") for model in ordered], ref_template="#/components/schemas/{model}"
    )
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, body, response, many, errors in OPERATIONS:
        operation: dict[str, Any] = {"summary": summary, "responses": {}}
        parameters = [
            {"name": part[1:-1], "in": "path", "required": True, "schema": {"type": "string"}}
            for part in path.split("/")
            if part.startswith("{")
        ]
        if path in FILTERED:
            parameters.append(
                {"name": "cloister", "in": "query", "required": False, "schema": {"type": "string"}}
            )
        if parameters:
            operation["parameters"] = parameters
        statuses = errors
        if path.startswith("/api/v1/service/"):
            operation["security"] = [{"service": []}]
        elif path in (HEALTH_PATH, PROOF_PATH, LOGIN_API_PATH):
            operation["security"] = []
        else:
            operation["security"] = [{"hub": []}, {"browser": []}]
            statuses = (*errors, 401)
        if body is not None:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": _ref(body)}}},
            }
        if response is None:
            operation["responses"]["200"] = {
                "description": "ok",
                "content": {"application/json": {"schema": {"type": "object"}}},
            }
        else:
            schema: dict[str, Any] = {"$ref": _ref(response)}
            if many:
                schema = {"type": "array", "items": schema}
            operation["responses"]["200"] = {
                "description": "ok",
                "content": {"application/json": {"schema": schema}},
            }
        for status in (*statuses, 403):
            operation["responses"][str(status)] = {
                "description": "error",
                "content": {"application/json": {"schema": {"$ref": _ref(ErrorOut)}}},
            }
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Cloister approval hub",
            "version": "1",
            "description": "Held domains and host commands, and the human's decisions."
            " Human routes answer only to the local UI's Host and Origin, and only with"
            " the hub secret (bearer) or a browser session token (bearer"
            " `browser-session.…`, traded for a one-time login link's ticket at"
            " POST /api/v1/login; `cloister guardian open`); no cookie is set or read."
            " Service routes need the stack's bearer credential. Health needs nothing.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {
                "service": {"type": "http", "scheme": "bearer"},
                "hub": {"type": "http", "scheme": "bearer", "description": "the hub secret"},
                "browser": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a browser session token (browser-session.…) from"
                    " POST /api/v1/login",
                },
            },
        },
    }


def _ref(model: type[BaseModel]) -> str:
    return f"#/components/schemas/{model.__name__}"


async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


ROUTES = [Route(OPENAPI_PATH, openapi, methods=["GET"])]
