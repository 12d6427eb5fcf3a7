"""The service API: the proxy and the hostexec gateway submit requests and wait.

Authenticated by the stack credential in :mod:`cloister_approval.security`. Each call
is a long poll: the response is the human's decision, or ``timeout``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cloister_approval.http import json_response, read_model
from cloister_approval.hub import ApprovalHub
from cloister_core.hub import (
    SERVICE_COMMANDS_PATH,
    SERVICE_DOMAINS_PATH,
    CommandRequest,
    DomainRequest,
)


async def domain_request(request: Request) -> Response:
    hub: ApprovalHub = request.app.state.hub
    return json_response(await hub.request_domain(await read_model(request, DomainRequest)))


async def command_request(request: Request) -> Response:
    hub: ApprovalHub = request.app.state.hub
    return json_response(await hub.request_command(await read_model(request, CommandRequest)))


ROUTES = [
    Route(SERVICE_DOMAINS_PATH, domain_request, methods=["POST"]),
    Route(SERVICE_COMMANDS_PATH, command_request, methods=["POST"]),
]
