"""The service API: the proxy and the hostexec gateway submit requests and wait.

Authenticated by the stack credential in :mod:`cloister_approval.security`. Each call
is a long poll: the response is the human's decision, or ``timeout``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cloister_approval.http import error_response, json_response, read_model
from cloister_approval.hub import ApprovalHub, HubError
from cloister_core.errors import InvalidCommandError, InvalidHostError
from cloister_core.hub import (
    SERVICE_COMMANDS_PATH,
    SERVICE_DOMAINS_PATH,
    CommandRequest,
    DomainRequest,
)


async def domain_request(request: Request) -> Response:
    hub: ApprovalHub = request.app.state.hub
    try:
        body = await read_model(request, DomainRequest)
        decision = await hub.request_domain(body)
    except HubError as error:
        return error_response(error)
    except InvalidHostError as error:
        return error_response(HubError(str(error)))
    return json_response(decision)


async def command_request(request: Request) -> Response:
    hub: ApprovalHub = request.app.state.hub
    try:
        body = await read_model(request, CommandRequest)
        decision = await hub.request_command(body)
    except HubError as error:
        return error_response(error)
    except InvalidCommandError as error:
        return error_response(HubError(str(error)))
    return json_response(decision)


ROUTES = [
    Route(SERVICE_DOMAINS_PATH, domain_request, methods=["POST"]),
    Route(SERVICE_COMMANDS_PATH, command_request, methods=["POST"]),
]
