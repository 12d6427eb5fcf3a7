"""The registry client against the fake registry: tags, digests, the token dance,
verification and bounds, and its errors."""

from __future__ import annotations

import io
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cloister_cli.images.features import oci
from cloister_cli.images.features.oci import Client, FeatureFetchError, Reference
from tests.cli.images.features.conftest import make_feature
from tests.registry import FakeRegistry


def test_references_parse_as_a_feature_id_names_them() -> None:
    found = Reference.parse("ghcr.io/devcontainers/features/node:1")
    assert found == Reference("ghcr.io", "devcontainers/features/node", "1", None)
    assert Reference.parse("ghcr.io/a/b").tag == "latest"
    pinned = Reference.parse("localhost:5000/a/b@sha256:" + "0" * 64)
    assert (pinned.registry, pinned.tag, pinned.digest) == (
        "localhost:5000",
        None,
        "sha256:" + "0" * 64,
    )
    assert pinned.loopback
    assert pinned.base_url == "http://localhost:5000/v2/a/b"
    assert Reference.parse("127.0.0.1:5000/x/y:2").loopback
    assert Reference.parse("[::1]:5000/x/y:2").loopback
    assert not Reference.parse("ghcr.io/x/y:2").loopback
    assert Reference.parse("ghcr.io/x/y:2").base_url.startswith("https://ghcr.io/")


@pytest.mark.parametrize(
    "text", ["node", "ghcr.io/x/y@sha256:abc", "ghcr.io/x/Y:1", "ghcr.io/x/y:a b", "https://x/y"]
)
def test_a_malformed_reference_is_an_error_naming_it(text: str) -> None:
    with pytest.raises(FeatureFetchError, match="Feature"):
        Reference.parse(text)


@pytest.mark.parametrize("auth", [False, True])
def test_a_tag_resolves_and_its_content_is_fetched_and_verified(tmp_path: Path, auth: bool) -> None:
    folder = make_feature(tmp_path / "hello", "hello")
    with FakeRegistry(auth=auth) as registry:
        digest = registry.publish("features/hello", folder, "1", "1.0.0")
        reference = Reference.parse(f"{registry.host}/features/hello:1")
        client = Client()
        assert client.resolve(reference) == digest
        fetched = client.fetch(reference, digest)
        served = registry.served()
    assert fetched.digest == digest
    assert json.loads(fetched.annotation or "")["id"] == "hello"
    with tarfile.open(fileobj=io.BytesIO(fetched.layer)) as archive:
        names = archive.getnames()
    assert "./install.sh" in names
    if auth:
        assert "/token" in served


def test_a_pinned_digest_is_not_resolved(registry: FakeRegistry, tmp_path: Path) -> None:
    digest = registry.publish("f/x", make_feature(tmp_path / "x", "x"), "1")
    reference = Reference.parse(f"{registry.host}/f/x@{digest}")
    assert Client().resolve(reference) == digest
    assert registry.served() == []


def test_a_missing_tag_says_what_and_where(registry: FakeRegistry) -> None:
    reference = Reference.parse(f"{registry.host}/f/none:1")
    with pytest.raises(
        FeatureFetchError, match=r"cannot fetch Feature .*/f/none from .*: not found"
    ):
        Client().resolve(reference)


def test_a_registry_that_is_not_there_is_an_error_not_a_traceback() -> None:
    reference = Reference.parse("127.0.0.1:9/f/x:1")
    with pytest.raises(FeatureFetchError, match="cannot connect"):
        Client(timeout=2).resolve(reference)


def test_a_manifest_whose_content_is_not_its_digest_is_refused(
    registry: FakeRegistry, tmp_path: Path
) -> None:
    digest = registry.publish("f/x", make_feature(tmp_path / "x", "x"), "1")
    forged = registry.publish("f/x", make_feature(tmp_path / "y", "y"), "2")
    with registry.state.lock:
        registry.state.manifests[digest] = registry.state.manifests[forged]
    with pytest.raises(FeatureFetchError, match="is not sha256:"):
        Client().fetch(Reference.parse(f"{registry.host}/f/x:1"), digest)


def test_a_layer_whose_content_is_not_its_digest_is_refused(
    registry: FakeRegistry, tmp_path: Path
) -> None:
    digest = registry.publish("f/x", make_feature(tmp_path / "x", "x"), "1")
    with registry.state.lock:
        for name in registry.state.blobs:
            registry.state.blobs[name] = b"something else"
    with pytest.raises(FeatureFetchError, match="layer's content is not"):
        Client().fetch(Reference.parse(f"{registry.host}/f/x:1"), digest)


def test_a_layer_over_the_bound_is_refused(
    registry: FakeRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oci, "LAYER_LIMIT", 1000)
    digest = registry.publish_raw("f/big", b"x" * 5000, "{}", "1")
    with pytest.raises(FeatureFetchError, match="more than 1000"):
        Client().fetch(Reference.parse(f"{registry.host}/f/big:1"), digest)
    assert registry.served("/blobs/") == []  # refused by the manifest's size, not fetched


# --- the URLs a registry names: never a service of the host or its network ----------------


class _Recorder:
    """A loopback HTTP server answering every GET with *status* and *headers*; it records
    the paths it was asked (the 'victim' a hostile registry points the host at)."""

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None) -> None:
        self.paths: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                recorder.paths.append(self.path)
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value.replace("{port}", str(recorder.port)))
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Recorder:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.mark.parametrize(
    "realm",
    ["http://127.0.0.1:{victim}/admin/delete", "file:///etc/passwd", "gopher://127.0.0.1:1/x"],
)
def test_a_token_realm_elsewhere_than_https_is_never_asked(realm: str) -> None:
    with _Recorder() as victim:
        challenge = f'Bearer realm="{realm.format(victim=victim.port)}",service="x"'
        with _Recorder(401, {"WWW-Authenticate": challenge}) as registry:
            reference = Reference.parse(f"127.0.0.1:{registry.port}/f/x:1")
            with pytest.raises(FeatureFetchError, match="only https is followed"):
                Client(timeout=5).resolve(reference)
    assert victim.paths == []


def test_a_redirect_to_another_service_of_the_host_is_not_followed() -> None:
    with _Recorder() as victim:
        location = f"http://127.0.0.1:{victim.port}/containers/json"
        with _Recorder(307, {"Location": location}) as registry:
            reference = Reference.parse(f"127.0.0.1:{registry.port}/f/x:1")
            with pytest.raises(FeatureFetchError, match="only https is followed"):
                Client(timeout=5).resolve(reference)
    assert victim.paths == []


def test_redirects_within_the_loopback_registry_are_followed_and_bounded() -> None:
    with _Recorder(302, {"Location": "http://127.0.0.1:{port}/again"}) as registry:
        reference = Reference.parse(f"127.0.0.1:{registry.port}/f/x:1")
        with pytest.raises(FeatureFetchError, match=f"more than {oci.MAX_REDIRECTS} redirects"):
            Client(timeout=5).resolve(reference)
    assert len(registry.paths) == oci.MAX_REDIRECTS + 1


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("https://ghcr.io/token?scope=x", None),
        ("https://pkg-containers.githubusercontent.com/ghcr1/blobs/sha256:00", None),
        ("http://ghcr.io/token", "only https is followed"),
        ("https://localhost/token", "not to this machine"),
        ("https://x.localhost/token", "not to this machine"),
        ("https://127.0.0.1:2376/containers/json", "not to this machine"),
        ("https://[::1]/token", "not to this machine"),
        ("https://169.254.169.254/latest/meta-data/", "not to this machine"),
        ("https://10.0.0.1/token", "not to this machine"),
        ("https://192.168.1.1/token", "not to this machine"),
        ("file:///etc/passwd", "only https is followed"),
    ],
)
def test_the_urls_a_public_registry_may_send_the_host_to(url: str, problem: str | None) -> None:
    found = oci.url_problem(Reference.parse("ghcr.io/devcontainers/features/node:1"), url)
    assert (found is None) if problem is None else (problem in (found or "")), found
