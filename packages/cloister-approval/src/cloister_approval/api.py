"""The human's JSON API under ``/api/v1`` (the UI uses it; so does ``cloister approvals``).

Every route but ``/health`` (and ``/login``, :mod:`cloister_approval.login`) needs the
hub secret or a browser session token (:mod:`cloister_approval.security`), and every
decision names which one made it. ``?cloister=NAME`` narrows the pending items and the
decisions to one cloister. Refusals are raised and answered by
:mod:`cloister_approval.handlers`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cloister_approval.auth import HubAuth
from cloister_approval.http import json_response, read_model
from cloister_approval.hub import ApprovalHub
from cloister_approval.models import CommandDecisionIn, DomainDecisionIn, PendingOut
from cloister_approval.security import credential
from cloister_core.hubauth import HEALTH_PATH, PROOF_PATH
from cloister_core.names import validate_name


def _hub(request: Request) -> ApprovalHub:
    hub: ApprovalHub = request.app.state.hub
    return hub


async def health(request: Request) -> Response:
    # Open to every local process: it says the hub is up and nothing else (not even
    # whether the human's agents are waiting on a decision).
    return JSONResponse({"status": "ok"})


async def prove(request: Request) -> Response:
    """Open: the hub's answer to the CLI's challenge (see cloister_core.hubauth)."""
    auth: HubAuth = request.app.state.auth
    try:
        answer = auth.prove(request.query_params.get("challenge", ""))
    except ValueError as error:
        return JSONResponse({"error": str(error)}, status_code=400)
    return JSONResponse({"proof": answer}, headers={"Cache-Control": "no-store"})


def cloister_filter(request: Request) -> str | None:
    """``?cloister=NAME`` (validated), or None for every cloister."""
    name = request.query_params.get("cloister", "")
    return validate_name(name, what="cloister name") if name else None


def pending_of(hub: ApprovalHub, cloister: str | None) -> PendingOut:
    """What waits, of *cloister* only when one is given."""
    out = hub.pending()
    if cloister is None:
        return out
    return PendingOut(
        domains=[item for item in out.domains if item.cloister == cloister],
        commands=[item for item in out.commands if item.cloister == cloister],
    )


async def pending(request: Request) -> Response:
    return json_response(pending_of(_hub(request), cloister_filter(request)))


async def decide_domain(request: Request) -> Response:
    decision = await read_model(request, DomainDecisionIn)
    out = await _hub(request).decide_domain(
        request.path_params["item_id"], decision, decided_by=credential(request)
    )
    return json_response(out)


async def decide_command(request: Request) -> Response:
    decision = await read_model(request, CommandDecisionIn)
    out = await _hub(request).decide_command(
        request.path_params["item_id"], decision, decided_by=credential(request)
    )
    return json_response(out)


async def decisions(request: Request) -> Response:
    return json_response(_hub(request).recent(cloister_filter(request)))


async def undo(request: Request) -> Response:
    out = await _hub(request).undo(
        request.path_params["decision_id"], undone_by=credential(request)
    )
    return json_response(out)


async def effective_rules(request: Request) -> Response:
    project = validate_name(request.path_params["project"], what="project name")
    return json_response(_hub(request).effective_rules(project))


ROUTES = [
    Route(HEALTH_PATH, health, methods=["GET"]),
    Route(PROOF_PATH, prove, methods=["GET"]),
    Route("/api/v1/pending", pending, methods=["GET"]),
    Route("/api/v1/domains/{item_id:str}/decision", decide_domain, methods=["POST"]),
    Route("/api/v1/commands/{item_id:str}/decision", decide_command, methods=["POST"]),
    Route("/api/v1/decisions", decisions, methods=["GET"]),
    Route("/api/v1/decisions/{decision_id:str}/undo", undo, methods=["POST"]),
    Route("/api/v1/projects/{project:str}/rules", effective_rules, methods=["GET"]),
]
