"""The human's JSON API under ``/api/v1`` (the UI uses it; so does ``cloister approvals``).

Every route but ``/health`` needs the hub secret or the browser cookie
(:mod:`cloister_approval.security`); refusals are raised and answered by
:mod:`cloister_approval.handlers`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cloister_approval.http import json_response, read_model
from cloister_approval.hub import ApprovalHub
from cloister_approval.models import CommandDecisionIn, DomainDecisionIn
from cloister_core.hubauth import HEALTH_PATH
from cloister_core.names import validate_name


def _hub(request: Request) -> ApprovalHub:
    hub: ApprovalHub = request.app.state.hub
    return hub


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "pending": _hub(request).pending_count()})


async def pending(request: Request) -> Response:
    return json_response(_hub(request).pending())


async def decide_domain(request: Request) -> Response:
    decision = await read_model(request, DomainDecisionIn)
    out = await _hub(request).decide_domain(request.path_params["item_id"], decision)
    return json_response(out)


async def decide_command(request: Request) -> Response:
    decision = await read_model(request, CommandDecisionIn)
    out = await _hub(request).decide_command(request.path_params["item_id"], decision)
    return json_response(out)


async def decisions(request: Request) -> Response:
    return json_response(_hub(request).recent())


async def undo(request: Request) -> Response:
    return json_response(await _hub(request).undo(request.path_params["decision_id"]))


async def effective_rules(request: Request) -> Response:
    project = validate_name(request.path_params["project"], what="project name")
    return json_response(_hub(request).effective_rules(project))


ROUTES = [
    Route(HEALTH_PATH, health, methods=["GET"]),
    Route("/api/v1/pending", pending, methods=["GET"]),
    Route("/api/v1/domains/{item_id:str}/decision", decide_domain, methods=["POST"]),
    Route("/api/v1/commands/{item_id:str}/decision", decide_command, methods=["POST"]),
    Route("/api/v1/decisions", decisions, methods=["GET"]),
    Route("/api/v1/decisions/{decision_id:str}/undo", undo, methods=["POST"]),
    Route("/api/v1/projects/{project:str}/rules", effective_rules, methods=["GET"]),
]
