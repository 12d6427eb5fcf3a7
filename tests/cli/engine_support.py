"""A Docker engine API on a Unix socket, serving the few calls listing makes.

``GET /containers/json`` answers the containers of a :class:`tests.fake_engine.FakeEngine`
that ``all`` and the ``label`` filter select, ``GET /containers/{id}/json`` their inspect
document; every request is recorded. Enough for :mod:`cloister_cli.container.listing` and what
uses it, with no engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import docker.errors

from cloister_core import stack
from cloister_core.paths import CloisterPaths
from tests.fake_engine import FakeContainer, FakeEngine, inspect_document

# The instance of the tests' fake engines unless one is given.
INSTANCE = stack.Instance("0123abcd", os.getuid(), Path("/data"))


def instance_of(root: Path) -> stack.Instance:
    """The instance of ``CLOISTER_CONFIG_DIR=root/config CLOISTER_DATA_DIR=root/data``."""
    return stack.Instance.of(CloisterPaths(root / "config", root / "data"), os.getuid())


def cloister_attrs(
    name: str,
    *,
    instance: stack.Instance = INSTANCE,
    project: str | None = None,
    path: str = "/src/x",
    branch: str = "",
    status: str = "running",
    image: str = "cloister:latest",
    created: str = "2025-01-02T03:04:05.123456789Z",
) -> dict[str, Any]:
    """An inspect document of cloister *name*, as the engine writes it."""
    labels = {
        **instance.labels,
        stack.LABEL_CLOISTER: name,
        stack.LABEL_PROJECT: project or name,
        stack.LABEL_PATH: path,
        stack.LABEL_BRANCH: branch,
    }
    return inspect_document(
        instance.cloister(name),
        labels,
        status=status,
        image=image,
        created=created,
        id=f"id-{name}",
    )


class FakeEngineApi:
    """The engine's HTTP API in front of a :class:`FakeEngine` holding *containers*."""

    def __init__(self, containers: list[dict[str, Any]] | None = None) -> None:
        self.engine = FakeEngine()
        self.containers = containers or []
        self.vanished: set[str] = set()  # listed, then 404 when inspected
        self.requests: list[str] = []
        self.status = 200  # answered to every request when not 200

    @property
    def containers(self) -> list[dict[str, Any]]:
        """The inspect documents of the engine's containers."""
        return [container.attrs for container in self.engine.containers.by_name.values()]

    @containers.setter
    def containers(self, documents: list[dict[str, Any]]) -> None:
        self.engine.containers.by_name.clear()
        for attrs in documents:
            self.engine.add(FakeContainer(attrs))

    def answer(self, target: str) -> tuple[int, Any]:
        self.requests.append(target)
        if self.status != 200:
            return self.status, {"message": "engine trouble"}
        url = urlsplit(target)
        if url.path == "/containers/json":
            query = parse_qs(url.query)
            filters = json.loads(query.get("filters", ["{}"])[0])
            listed = self.engine.containers.list(
                all=query.get("all") == ["1"],
                filters={"label": filters.get("label", [])},  # the only one answered; others pass
            )
            return 200, [{"Id": container.id} for container in listed]
        inspected = url.path.removeprefix("/containers/").removesuffix("/json")
        if url.path == f"/containers/{inspected}/json" and inspected not in self.vanished:
            with contextlib.suppress(docker.errors.NotFound):
                return 200, self.engine.containers.get(inspected).attrs
        return 404, {"message": "No such container"}


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    api: FakeEngineApi


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        status, document = self.server.api.answer(self.path)
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def serve(socket_path: Path, api: FakeEngineApi) -> Iterator[FakeEngineApi]:
    """*api* answering on *socket_path* until the block ends."""
    server = _Server(str(socket_path), _Handler)
    server.api = api
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
