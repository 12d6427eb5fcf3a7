"""A Docker engine API on a Unix socket, serving the few calls listing makes.

``GET /containers/json`` answers the containers whose labels match the ``label``
filter, ``GET /containers/{id}/json`` their inspect document; every request is
recorded. Enough for :mod:`cloister_cli.listing` and what uses it, with no engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import socketserver
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cloister_core import stack
from cloister_core.paths import CloisterPaths

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
    return {
        "Id": f"id-{name}",
        "Name": f"/{instance.cloister(name)}",
        "Created": created,
        "State": {"Status": status, "Running": status == "running"},
        "Config": {
            "Image": image,
            "Labels": {
                **instance.labels,
                stack.LABEL_CLOISTER: name,
                stack.LABEL_PROJECT: project or name,
                stack.LABEL_PATH: path,
                stack.LABEL_BRANCH: branch,
            },
        },
    }


@dataclass
class FakeEngineApi:
    containers: list[dict[str, Any]] = field(default_factory=list)
    vanished: set[str] = field(default_factory=set)  # listed, then 404 when inspected
    requests: list[str] = field(default_factory=list)
    status: int = 200  # answered to every request when not 200

    def answer(self, target: str) -> tuple[int, Any]:
        self.requests.append(target)
        if self.status != 200:
            return self.status, {"message": "engine trouble"}
        url = urlsplit(target)
        if url.path == "/containers/json":
            query = parse_qs(url.query)
            wanted = json.loads(query.get("filters", ["{}"])[0]).get("label", [])
            return 200, [
                {"Id": attrs["Id"]}
                for attrs in self.containers
                if all(self._has(attrs, label) for label in wanted)
            ]
        for attrs in self.containers:
            if url.path == f"/containers/{attrs['Id']}/json" and attrs["Id"] not in self.vanished:
                return 200, attrs
        return 404, {"message": "No such container"}

    @staticmethod
    def _has(attrs: dict[str, Any], label: str) -> bool:
        key, _, value = label.partition("=")
        labels = attrs["Config"]["Labels"]
        return key in labels and (not value or labels[key] == value)


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
