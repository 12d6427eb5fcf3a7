"""The human's page: server-rendered (Jinja2, autoescaped) and live through SSE.

``GET /`` renders everything pending and the recent decisions. ``GET /api/v1/events``
is a Server-Sent Events stream of the hub's changes; each event carries its JSON and,
for the page, the same item rendered by the same template, so the browser never
builds HTML from data. ``GET /fragments/pending`` and ``/fragments/decisions``
re-render the lists (after a (re)connect). Static files are served from the package: no CDN.

Pending requests are shown by cloister (a heading per cloister, with its project), oldest
first: an arriving item comes as its cloister's group holding just that item, which the
page adds whole or merges into the group it already shows.
"""

from __future__ import annotations

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

from cloister_approval.broadcast import CLOSED, Event
from cloister_approval.hub import ApprovalHub
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


def _context(hub: ApprovalHub) -> dict[str, Any]:
    pending = hub.pending().model_dump(mode="json")
    items = [{**item, "kind": "domain"} for item in pending["domains"]]
    items += [{**item, "kind": "command"} for item in pending["commands"]]
    items.sort(key=lambda item: datetime.fromisoformat(item["created_at"]))
    return {
        "domains": pending["domains"],
        "commands": pending["commands"],
        "groups": _groups(items),
        "decisions": [decision.model_dump(mode="json") for decision in hub.recent()],
        "count": hub.pending_count(),
    }


async def page(request: Request) -> Response:
    renderer: Renderer = request.app.state.renderer
    return HTMLResponse(renderer.render("index.html", **_context(request.app.state.hub)))


async def pending_fragment(request: Request) -> Response:
    renderer: Renderer = request.app.state.renderer
    return HTMLResponse(renderer.render("_pending.html", **_context(request.app.state.hub)))


async def decisions_fragment(request: Request) -> Response:
    renderer: Renderer = request.app.state.renderer
    return HTMLResponse(renderer.render("_decisions.html", **_context(request.app.state.hub)))


async def events(request: Request) -> Response:
    hub: ApprovalHub = request.app.state.hub
    renderer: Renderer = request.app.state.renderer

    async def stream() -> AsyncIterator[ServerSentEvent]:
        with hub.events() as queue:
            yield ServerSentEvent(data=json.dumps({"pending": hub.pending_count()}), event="hello")
            while True:
                event = await queue.get()
                if event is CLOSED:
                    return  # too slow to keep up; the page reconnects and re-reads
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
        Route("/fragments/pending", pending_fragment, methods=["GET"]),
        Route("/fragments/decisions", decisions_fragment, methods=["GET"]),
        Route("/api/v1/events", events, methods=["GET"]),
        Mount("/static", app=static, name="static"),
    ]
