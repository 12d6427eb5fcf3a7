"""The human's page: server-rendered (Jinja2, autoescaped) and live through SSE.

``GET /`` (and ``GET /login``, where a login link lands) is the page's shell: it holds
no data, so anyone may load it. Its script sends the browser's session token
(:mod:`cloister_approval.login`) with every request: ``GET /fragments/pending``,
``/fragments/decisions`` and ``/fragments/cloisters`` render the lists and the
cloister filter's choices (each takes ``?cloister=NAME``), and ``GET /api/v1/events``
is a Server-Sent Events stream of the hub's changes, read with ``fetch`` (an
``EventSource`` cannot send the token). Each event carries its JSON and, for the page,
the same item rendered by the same template, so the browser never builds HTML from
data. Without a valid token the shell shows the login instructions. Static files are
served from the package: no CDN.

Pending requests are shown by cloister (a heading per cloister, with its project), oldest
first: an arriving item comes as its cloister's group holding just that item, which the
page adds whole or merges into the group it already shows.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import datetime
from importlib.resources import files
from typing import Any

import jinja2
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from cloister_approval.api import cloister_filter, pending_of
from cloister_approval.auth import HubAuth, Refused
from cloister_approval.broadcast import CLOSED, Event
from cloister_approval.hub import ApprovalHub
from cloister_approval.login import NOT_LOGGED_IN
from cloister_core.hubauth import LOGIN_PATH
from cloister_core.printable import printable

PING_SECONDS = 15


def template_environment() -> jinja2.Environment:
    """Templates from the package, autoescaped."""
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("cloister_approval", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # For what a cloister chose: control and invisible characters shown as escapes.
    environment.filters["printable"] = printable
    return environment


class Renderer:
    """Renders the page and the per-item fragments."""

    def __init__(self, environment: jinja2.Environment) -> None:
        self._env = environment

    def render(self, name: str, **context: Any) -> str:
        return self._env.get_template(name).render(**context)

    def fragment_for(self, event: Event) -> str | None:
        if event.name in ("domain-added", "command-added"):
            kind = event.name.removesuffix("-added")
            return self.render(
                "_group.html", group=_groups([{**event.data["item"], "kind": kind}])[0]
            )
        if event.name == "decision":
            return self.render("_decision.html", decision=event.data["decision"])
        return None


def _groups(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*items* (each with its ``kind``) by cloister, in order of each cloister's first item."""
    groups: dict[str, dict[str, Any]] = {}
    for item in items:
        group = groups.setdefault(
            item["cloister"],
            {"cloister": item["cloister"], "project": item["project"], "requests": []},
        )
        group["requests"].append(item)
    return list(groups.values())


def _pending_context(hub: ApprovalHub, cloister: str | None) -> dict[str, Any]:
    pending = pending_of(hub, cloister).model_dump(mode="json")
    items = [{**item, "kind": "domain"} for item in pending["domains"]]
    items += [{**item, "kind": "command"} for item in pending["commands"]]
    items.sort(key=lambda item: datetime.fromisoformat(item["created_at"]))
    return {"groups": _groups(items), "cloister": cloister, "total": hub.pending_count()}


def cloister_names(hub: ApprovalHub) -> list[str]:
    """Every cloister the filter offers: those with a token, something waiting or kept."""
    pending = hub.pending()
    names = set(hub.cloisters())
    names.update(item.cloister for item in pending.domains)
    names.update(item.cloister for item in pending.commands)
    names.update(decision.cloister for decision in hub.recent())
    return sorted(names)


async def page(request: Request) -> Response:
    renderer: Renderer = request.app.state.renderer
    text = renderer.render("index.html", not_logged_in=NOT_LOGGED_IN)
    return HTMLResponse(text, headers={"Cache-Control": "no-store"})


async def pending_fragment(request: Request) -> Response:
    renderer: Renderer = request.app.state.renderer
    context = _pending_context(request.app.state.hub, cloister_filter(request))
    return HTMLResponse(renderer.render("_pending.html", **context))


async def decisions_fragment(request: Request) -> Response:
    renderer: Renderer = request.app.state.renderer
    hub: ApprovalHub = request.app.state.hub
    decisions = [
        decision.model_dump(mode="json") for decision in hub.recent(cloister_filter(request))
    ]
    return HTMLResponse(renderer.render("_decisions.html", decisions=decisions))


async def cloisters_fragment(request: Request) -> Response:
    renderer: Renderer = request.app.state.renderer
    names = cloister_names(request.app.state.hub)
    selected = cloister_filter(request)
    return HTMLResponse(renderer.render("_cloisters.html", names=names, selected=selected))


async def events(request: Request) -> Response:
    hub: ApprovalHub = request.app.state.hub
    renderer: Renderer = request.app.state.renderer
    auth: HubAuth = request.app.state.auth
    headers = dict(request.headers)

    def still_human() -> bool:
        # A browser logged out (`cloister guardian logout`) or expired while connected
        # loses its stream too; its page reconnects, gets the 401 and shows the login.
        return not isinstance(auth.authenticate(headers), Refused)

    async def stream() -> AsyncIterator[ServerSentEvent]:
        with hub.events() as queue:
            yield ServerSentEvent(data=json.dumps({"pending": hub.pending_count()}), event="hello")
            while True:
                try:
                    async with asyncio.timeout(PING_SECONDS):
                        event = await queue.get()
                except TimeoutError:
                    if not still_human():
                        return
                    continue
                if event is CLOSED or not still_human():
                    return  # too slow to keep up: the page reconnects and re-reads
                payload = dict(event.data)
                html = renderer.fragment_for(event)
                if html is not None:
                    payload["html"] = html
                yield ServerSentEvent(data=json.dumps(payload), event=event.name)

    return EventSourceResponse(stream(), ping=PING_SECONDS)


def routes() -> list[Route | Mount]:
    static = StaticFiles(directory=str(files("cloister_approval") / "static"))
    return [
        Route("/", page, methods=["GET"]),
        Route(LOGIN_PATH, page, methods=["GET"]),
        Route("/fragments/pending", pending_fragment, methods=["GET"]),
        Route("/fragments/decisions", decisions_fragment, methods=["GET"]),
        Route("/fragments/cloisters", cloisters_fragment, methods=["GET"]),
        Route("/api/v1/events", events, methods=["GET"]),
        Mount("/static", app=static, name="static"),
    ]
