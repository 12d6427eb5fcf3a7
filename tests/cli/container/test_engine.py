"""The engine port: the SDK's client and the fake both have all of it; reaching the engine;
the light reader over the engine's Unix socket."""

from __future__ import annotations

import io
import json
import socket
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote_plus

import docker
import docker.errors
import pytest
from docker.models.containers import Container, ContainerCollection
from docker.models.images import Image, ImageCollection
from docker.models.networks import Network, NetworkCollection

from cloister_cli.container import engine
from cloister_cli.container.engine import DockerUnavailableError, UnixEngine
from tests.cli.engine_support import FakeEngineApi, cloister_attrs, serve
from tests.fake_engine import FakeContainer, FakeEngine


def members(protocol: type) -> set[str]:
    """The names a protocol (and the protocols it extends) declares."""
    return {
        name
        for each in protocol.__mro__
        if getattr(each, "_is_protocol", False) and each is not Protocol
        for name in {*vars(each), *getattr(each, "__annotations__", {})}
        if not name.startswith("_")
    }


def has(implementation: object, name: str) -> bool:
    """Whether *implementation* (a class, or an object) has *name*, without reading it (an
    SDK model's properties raise on a bare inspect document)."""
    kind = implementation if isinstance(implementation, type) else type(implementation)
    return hasattr(kind, name) or name in getattr(implementation, "__dict__", {})


def test_the_sdk_and_the_fake_have_every_name_of_the_port() -> None:
    fake = FakeEngine()
    # Typed as the port: mypy checks each against every signature of it.
    fake_port: engine.Engine = fake
    sdk_port: engine.Engine = docker.DockerClient(base_url="unix:///nonexistent", version="1.41")
    fake_parts: dict[type, object] = {
        engine.Engine: fake_port,
        engine.Containers: fake.containers,
        engine.Networks: fake.networks,
        engine.Images: fake.images,
        engine.Api: fake.api,
        engine.Container: fake.add(FakeContainer.of("a")),
        engine.Network: fake.add_network("n"),
        engine.Image: fake.add_image("i"),
    }
    sdk_parts: dict[type, object] = {
        engine.Engine: sdk_port,
        engine.Containers: ContainerCollection,
        engine.Networks: NetworkCollection,
        engine.Images: ImageCollection,
        engine.Api: docker.APIClient,
        engine.Container: Container(attrs={}),
        engine.Network: Network(attrs={}),
        engine.Image: Image(attrs={}),
    }
    missing = [
        f"{implementation!r} has no {name} of {protocol.__name__}"
        for parts in (fake_parts, sdk_parts)
        for protocol, implementation in parts.items()
        for name in sorted(members(protocol))
        if not has(implementation, name)
    ]
    assert missing == []
    assert "containers" in members(engine.Engine)
    assert {"logs", "remove", "labels", "attrs"} <= members(engine.Container)


def test_the_light_reader_is_a_reader(tmp_path: Path) -> None:
    reader: engine.Reader = UnixEngine(str(tmp_path / "engine.sock"))
    assert members(engine.ContainerReader) == {"list"}
    assert all(has(reader.containers, name) for name in members(engine.ContainerReader))


def test_the_fake_reads_a_file_of_a_container_as_the_engine_sends_it() -> None:
    fake = FakeEngine()
    container: engine.Container = fake.add(
        FakeContainer(FakeContainer.of("a").attrs, files={"/etc/passwd": b"root:x:0:0\n"})
    )
    chunks, stat = container.get_archive("/etc/passwd")
    assert stat == {"name": "passwd", "size": 11}
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        handle = tar.extractfile("passwd")
        assert handle is not None
        assert handle.read() == b"root:x:0:0\n"
    with pytest.raises(docker.errors.NotFound):
        container.get_archive("/etc/group")


# -- reaching the engine -------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, ""])
def test_the_default_engine_is_the_standard_socket(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("DOCKER_HOST", raising=False)
    else:
        monkeypatch.setenv("DOCKER_HOST", value)
    assert engine.docker_host() == "unix:///var/run/docker.sock"


def test_connect_asks_the_engine_its_api_version_and_no_ping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # version="auto": the SDK's GET /version is the one request that proves the engine
    # answers (a failure raises in from_env: the next tests); a ping would be a second.
    pinged: list[dict[str, Any]] = []

    class Client:
        def ping(self) -> bool:
            pinged.append({})
            return True

    made: list[dict[str, Any]] = []

    def from_env(**kwargs: Any) -> Client:
        made.append(kwargs)
        return Client()

    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    monkeypatch.setattr(docker, "from_env", from_env)
    assert isinstance(engine.connect(), Client)
    assert made == [{"timeout": 60, "version": "auto"}]
    assert pinged == []


def test_connect_without_an_engine_on_the_socket_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "none.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{missing}")
    with pytest.raises(DockerUnavailableError) as raised:
        engine.connect()
    assert str(raised.value) == (
        f"no Docker engine is reachable (unix://{missing}: No such file or directory);"
        " start Docker and try again"
    )


def test_connect_to_an_engine_that_does_not_answer_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def from_env(**kwargs: Any) -> Any:
        raise docker.errors.DockerException("Connection refused")

    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    monkeypatch.setattr(docker, "from_env", from_env)
    with pytest.raises(DockerUnavailableError) as raised:
        engine.connect()
    assert str(raised.value) == (
        "no Docker engine is reachable (Connection refused); start Docker and try again"
    )


# -- the light reader ----------------------------------------------------------------------


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "engine.sock"


@pytest.fixture
def api(socket_path: Path) -> Iterator[FakeEngineApi]:
    with serve(socket_path, FakeEngineApi()) as served:
        yield served


def test_filters_are_converted_like_the_sdk(api: FakeEngineApi, socket_path: Path) -> None:
    UnixEngine(str(socket_path)).list(filters={"label": ["a", "b"], "dangling": True})
    query = api.requests[0].split("?", 1)[1]
    assert "all=0" in query
    filters = json.loads(unquote_plus(query.split("filters=", 1)[1]))
    assert filters == {"label": ["a", "b"], "dangling": ["true"]}


def test_each_listed_container_is_inspected(api: FakeEngineApi, socket_path: Path) -> None:
    api.containers = [cloister_attrs("a")]
    (found,) = UnixEngine(str(socket_path)).list(all=True)
    assert found.attrs["Id"] == "id-a"
    assert api.requests[1:] == ["/containers/id-a/json"]


def test_the_state_may_be_a_plain_string() -> None:
    assert engine.EngineContainer({"State": "paused"}).status == "paused"
    assert engine.EngineContainer({}).labels == {}


def test_an_engine_that_goes_away_is_one_clear_error(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(stale))
    with pytest.raises(DockerUnavailableError, match=r"^no Docker engine is reachable \(unix://"):
        UnixEngine(str(stale)).list()
