"""A fake OCI registry on 127.0.0.1 for the Feature tests: the distribution API as far as
Features need it (``/v2/``, manifests by tag or digest, blobs, tags/list), published as
``devcontainer features publish`` does (a manifest whose single layer is a plain tar of
the Feature's folder, ``dev.containers.metadata`` holding its devcontainer-feature.json),
and optionally the anonymous Bearer token dance.

:meth:`FakeRegistry.session` stands it in for the registries a project names: an https
request of that session is sent to it instead (the transport, below the client under
test), so a Feature id naming a public registry is served here, never over the network."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests
from requests.adapters import HTTPAdapter

MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
LAYER_TYPE = "application/vnd.devcontainers.layer.v1+tar"
CONFIG_TYPE = "application/vnd.devcontainers"
TOKEN = "fake-anonymous-token"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def feature_tar(folder: Path) -> bytes:
    """The folder as ``devcontainer features package`` tars it: ``./name`` entries."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path in sorted(folder.rglob("*")):
            info = archive.gettarinfo(str(path), "./" + path.relative_to(folder).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_file():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
    return buffer.getvalue()


def manifest_for(layer: bytes, metadata: str, name: str) -> bytes:
    document = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "digest": sha256(b""), "size": 0},
        "layers": [
            {
                "mediaType": LAYER_TYPE,
                "digest": sha256(layer),
                "size": len(layer),
                "annotations": {
                    "org.opencontainers.image.title": f"devcontainer-feature-{name}.tgz"
                },
            }
        ],
        "annotations": {
            "dev.containers.metadata": metadata,
            "com.github.package.type": "devcontainer_feature",
        },
    }
    return json.dumps(document, indent=2).encode()


@dataclass
class _State:
    blobs: dict[str, bytes] = field(default_factory=dict)
    manifests: dict[str, bytes] = field(default_factory=dict)  # by digest
    tags: dict[str, dict[str, str]] = field(default_factory=dict)  # repository -> tag -> digest
    requests: list[tuple[str, str]] = field(default_factory=list)
    auth: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeRegistry:
    """A registry serving published Features; :attr:`host` is ``127.0.0.1:<port>``."""

    def __init__(self, *, auth: bool = False) -> None:
        self.state = _State(auth=auth)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeRegistry:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def publish(self, repository: str, folder: Path, *tags: str) -> str:
        """Publish *folder* as *repository* under *tags* (a tag moves if it was there);
        the manifest's digest."""
        layer = feature_tar(folder)
        metadata = (folder / "devcontainer-feature.json").read_text()
        return self.publish_raw(repository, layer, metadata, *tags)

    def publish_raw(self, repository: str, layer: bytes, metadata: str, *tags: str) -> str:
        manifest = manifest_for(layer, metadata, repository.rsplit("/", 1)[-1])
        digest = sha256(manifest)
        with self.state.lock:
            self.state.blobs[sha256(layer)] = layer
            self.state.manifests[digest] = manifest
            for tag in tags:
                self.state.tags.setdefault(repository, {})[tag] = digest
        return digest

    def session(self) -> requests.Session:
        """A session whose every https request this registry answers (see :class:`_Routed`)."""
        session = requests.Session()
        session.mount("https://", _Routed(self.host))
        return session

    def served(self, kind: str = "") -> list[str]:
        """The paths of the GET/HEAD requests served, those containing *kind*."""
        with self.state.lock:
            return [path for _, path in self.state.requests if kind in path]

    def clear(self) -> None:
        with self.state.lock:
            self.state.requests.clear()


class _Routed(HTTPAdapter):
    """The transport of an https URL sent to the fake registry on *host* over plain http
    (path and query kept); the response says the URL that was asked, as if it had come
    from there."""

    def __init__(self, host: str) -> None:
        super().__init__()
        self._host = host

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        asked = str(request.url)
        routed = request.copy()
        routed.url = urlsplit(asked)._replace(scheme="http", netloc=self._host).geturl()
        # No proxy: the host's would not reach this machine's loopback.
        response = super().send(routed, stream, timeout, verify, cert, proxies={})
        response.url, response.request = asked, request
        return response


def _handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

        def _send(
            self, status: int, body: bytes, headers: dict[str, str] | None = None, *, head: bool
        ) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _serve(self, *, head: bool) -> None:
            url = urlsplit(self.path)
            with state.lock:
                state.requests.append((self.command, url.path))
            if url.path == "/token":
                scope = parse_qs(url.query).get("scope", [""])[0]
                body = json.dumps({"token": TOKEN, "scope": scope}).encode()
                self._send(200, body, {"Content-Type": "application/json"}, head=head)
                return
            if state.auth and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                host = self.headers.get("Host", "")
                challenge = f'Bearer realm="http://{host}/token",service="fake"'
                for _ in _repository_scope(url.path):
                    challenge += f',scope="repository:{_}:pull"'
                self._send(401, b"{}", {"WWW-Authenticate": challenge}, head=head)
                return
            if url.path in ("/v2/", "/v2"):
                self._send(200, b"{}", {"Content-Type": "application/json"}, head=head)
                return
            self._serve_v2(url.path, head=head)

        def _serve_v2(self, path: str, *, head: bool) -> None:
            for marker in ("/manifests/", "/blobs/", "/tags/list"):
                repository, found, rest = path.removeprefix("/v2/").partition(marker)
                if not found:
                    continue
                with state.lock:
                    if marker == "/manifests/":
                        digest = state.tags.get(repository, {}).get(rest, rest)
                        manifest = state.manifests.get(digest)
                        if manifest is not None and repository in state.tags:
                            headers = {
                                "Content-Type": MANIFEST_TYPE,
                                "Docker-Content-Digest": digest,
                            }
                            self._send(200, manifest, headers, head=head)
                            return
                    elif marker == "/blobs/":
                        blob = state.blobs.get(rest)
                        if blob is not None:
                            self._send(
                                200, blob, {"Content-Type": "application/octet-stream"}, head=head
                            )
                            return
                    elif repository in state.tags:
                        body = json.dumps(
                            {"name": repository, "tags": sorted(state.tags[repository])}
                        )
                        self._send(
                            200, body.encode(), {"Content-Type": "application/json"}, head=head
                        )
                        return
            self._send(404, b'{"errors": [{"code": "NOT_FOUND"}]}', head=head)

    return Handler


def _repository_scope(path: str) -> Iterator[str]:
    for marker in ("/manifests/", "/blobs/", "/tags/list"):
        repository, found, _ = path.removeprefix("/v2/").partition(marker)
        if found:
            yield repository
            return
