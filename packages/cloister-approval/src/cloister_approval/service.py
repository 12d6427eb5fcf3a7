"""The service API: the proxy and the hostexec gateway submit requests and wait.

Authenticated by the stack credential in :mod:`cloister_approval.security`. Each call
is a long poll: the response is the human's decision, or ``timeout``. A caller that
goes away while it waits (its HTTP request is disconnected: the proxy's client hung
up) stops waiting, and the last one withdraws the held item from the approval UI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

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

T = TypeVar("T")

# Answers nobody reads: the caller has gone (the status is what a log would show).
GONE = Response(status_code=499)


async def _disconnected(request: Request) -> None:
    """Return when the caller's HTTP request goes away (ASGI ``http.disconnect``)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _captured(work: Awaitable[T]) -> T | Exception:
    # In a task group an exception would cancel the sibling and come out as a group.
    try:
        return await work
    except Exception as error:
        return error


async def until_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """*work*'s result, or None (*work* cancelled) if the caller disconnects first.

    Call it after the body was read: the next ASGI message is then the disconnect.
    """
    async with asyncio.TaskGroup() as group:
        doing = group.create_task(_captured(work))
        watching = group.create_task(_disconnected(request))
        await asyncio.wait((doing, watching), return_when=asyncio.FIRST_COMPLETED)
        doing.cancel()
        watching.cancel()
    if doing.cancelled():
        return None
    result = doing.result()
    if isinstance(result, Exception):
        raise result
    return result


async def domain_request(request: Request) -> Response:
    hub: ApprovalHub = request.app.state.hub
    asked = await read_model(request, DomainRequest)
    decision = await until_disconnected(request, hub.request_domain(asked))
    return GONE if decision is None else json_response(decision)


async def command_request(request: Request) -> Response:
    hub: ApprovalHub = request.app.state.hub
    asked = await read_model(request, CommandRequest)
    decision = await until_disconnected(request, hub.request_command(asked))
    return GONE if decision is None else json_response(decision)


ROUTES = [
    Route(SERVICE_DOMAINS_PATH, domain_request, methods=["POST"]),
    Route(SERVICE_COMMANDS_PATH, command_request, methods=["POST"]),
]
