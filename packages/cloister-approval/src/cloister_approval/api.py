"""The human's JSON API under ``/api/v1`` (the UI uses it; so does ``cloister approvals``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cloister_approval.http import error_response, json_response, read_model
from cloister_approval.hub import ApprovalHub, HubError
from cloister_approval.models import CommandDecisionIn, DomainDecisionIn, TokenIn
from cloister_core.errors import CloisterError, CloisterNameError
from cloister_core.names import validate_name


def _hub(request: Request) -> ApprovalHub:
    hub: ApprovalHub = request.app.state.hub
    return hub


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "pending": _hub(request).pending_count()})


async def pending(request: Request) -> Response:
    return json_response(_hub(request).pending())


async def decide_domain(request: Request) -> Response:
    try:
        decision = await read_model(request, DomainDecisionIn)
        out = await _hub(request).decide_domain(request.path_params["item_id"], decision)
    except HubError as error:
        return error_response(error)
    return json_response(out)


async def decide_command(request: Request) -> Response:
    try:
        decision = await read_model(request, CommandDecisionIn)
        out = await _hub(request).decide_command(request.path_params["item_id"], decision)
    except HubError as error:
        return error_response(error)
    return json_response(out)


async def decisions(request: Request) -> Response:
    return json_response(_hub(request).recent())


async def undo(request: Request) -> Response:
    try:
        out = await _hub(request).undo(request.path_params["decision_id"])
    except HubError as error:
        return error_response(error)
    return json_response(out)


async def effective_rules(request: Request) -> Response:
    project = request.path_params["project"]
    try:
        validate_name(project, what="project name")
        return json_response(_hub(request).effective_rules(project))
    except CloisterNameError as error:
        return error_response(HubError(str(error)))
    except CloisterError as error:  # a config file that does not parse: say where
        return JSONResponse({"error": str(error)}, status_code=422)


async def tokens(request: Request) -> Response:
    hub = _hub(request)
    if request.method == "POST":
        try:
            registration = await read_model(request, TokenIn)
            return json_response(hub.register(registration), status=201)
        except HubError as error:
            return error_response(error)
    return json_response(hub.token_list())


async def revoke_token(request: Request) -> Response:
    try:
        _hub(request).revoke(request.path_params["cloister"])
    except HubError as error:
        return error_response(error)
    return Response(status_code=204)


ROUTES = [
    Route("/api/v1/health", health, methods=["GET"]),
    Route("/api/v1/pending", pending, methods=["GET"]),
    Route("/api/v1/domains/{item_id:str}/decision", decide_domain, methods=["POST"]),
    Route("/api/v1/commands/{item_id:str}/decision", decide_command, methods=["POST"]),
    Route("/api/v1/decisions", decisions, methods=["GET"]),
    Route("/api/v1/decisions/{decision_id:str}/undo", undo, methods=["POST"]),
    Route("/api/v1/projects/{project:str}/rules", effective_rules, methods=["GET"]),
    Route("/api/v1/tokens", tokens, methods=["GET", "POST"]),
    Route("/api/v1/tokens/{cloister:str}", revoke_token, methods=["DELETE"]),
]
