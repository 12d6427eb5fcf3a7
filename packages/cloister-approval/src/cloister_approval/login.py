"""``GET /login?ticket=…``: a one-time login link turns into the browser's cookie.

``cloister guardian open`` makes the link (:mod:`cloister_core.hubauth`); the hub
checks it (:class:`~cloister_approval.auth.HubAuth`) and answers with a small page that
sets the cookie and goes on to ``/`` itself. Not a redirect: the link may arrive from a
file or another site (``guardian open`` opens a private file that leads to it, so the
ticket never shows in a process list), and a redirect chain started there would not
send the SameSite=Strict cookie to ``/``; a navigation the hub's own page starts does.
A bad, expired or used link gets the login page (401), which says how to get a new
one. So does every page without the cookie.
"""

from __future__ import annotations

import html

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from cloister_approval.auth import HubAuth
from cloister_core.hubauth import LOGIN_PARAMETER, LOGIN_PATH, TicketError

NOT_LOGGED_IN = "This browser is not logged in to the approval hub."
LOGIN_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Log in: Cloister approvals</title>
</head>
<body>
  <h1>Cloister approvals</h1>
  <p>{reason}</p>
  <p>To log in, run this on the machine the hub runs on:</p>
  <pre><code>cloister guardian open</code></pre>
  <p>It opens a one-time login link in your browser
  (<code>cloister guardian open --no-browser</code> only prints it).
  A <code>cloister-approval</code> started by hand prints its link when it starts.</p>
</body>
</html>
"""


LOGGED_IN_PAGE = b"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta http-equiv="refresh" content="0; url=/">
  <link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
  <title>Logged in: Cloister approvals</title>
</head>
<body>
  <p>Logged in. <a href="/">Open the approval UI</a>.</p>
</body>
</html>
"""


def login_page(reason: str) -> bytes:
    return LOGIN_PAGE.format(reason=html.escape(reason)).encode()


async def login(request: Request) -> Response:
    auth: HubAuth = request.app.state.auth
    value = auth.log_in(request.query_params.get(LOGIN_PARAMETER, ""))
    response = HTMLResponse(LOGGED_IN_PAGE)
    response.set_cookie(
        auth.cookie_name(request.headers.get("host", "")),
        value,
        max_age=auth.cookie_seconds,
        path="/",
        httponly=True,
        samesite="strict",
    )
    response.headers["Cache-Control"] = "no-store"
    return response


async def bad_ticket(request: Request, error: Exception) -> Response:
    """The exception handler for :class:`TicketError`: the login page, with why."""
    reason = str(error) if isinstance(error, TicketError) else NOT_LOGGED_IN
    return HTMLResponse(login_page(reason), status_code=401, headers={"Cache-Control": "no-store"})


ROUTES = [Route(LOGIN_PATH, login, methods=["GET"])]
