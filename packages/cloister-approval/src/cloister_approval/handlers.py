"""Exception handlers, registered once in ``create_app``: a refusal is JSON everywhere.

The routes raise; nothing catches in an endpoint. The most specific handler wins
(Starlette looks exceptions up along their class hierarchy), so an invalid host or
command or name is a 400 while any other :class:`CloisterError` (a config file that
does not parse, read for a view) is a 422 that says file and line. A bad login link
gets the login page (401).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from cloister_approval.errors import HubError
from cloister_approval.http import error_response
from cloister_approval.login import bad_ticket
from cloister_core.errors import (
    CloisterError,
    CloisterNameError,
    InvalidCommandError,
    InvalidHostError,
)
from cloister_core.hubauth import TicketError


async def hub_error(request: Request, error: Exception) -> Response:
    if not isinstance(error, HubError):  # registered for HubError only
        raise error
    return error_response(error.message, error.status, error.detail)


async def bad_input(request: Request, error: Exception) -> Response:
    return error_response(str(error), 400)


async def unprocessable(request: Request, error: Exception) -> Response:
    return error_response(str(error), 422)


HANDLERS: Mapping[Any, Callable[[Request, Exception], Any]] = {
    HubError: hub_error,
    InvalidHostError: bad_input,
    InvalidCommandError: bad_input,
    CloisterNameError: bad_input,
    TicketError: bad_ticket,
    CloisterError: unprocessable,
}
