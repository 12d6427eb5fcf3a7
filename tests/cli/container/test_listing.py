"""Listing cloisters over the engine's Unix socket, without the docker SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import pytest
from click.testing import CliRunner

from cloister_cli.commands.main import cli
from cloister_cli.container import listing
from cloister_cli.container.engine import DockerUnavailableError, EngineError, UnixEngine
from cloister_cli.container.listing import CloisterInfo
from cloister_core import stack
from tests.cli.engine_support import INSTANCE, FakeEngineApi, cloister_attrs, instance_of, serve


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "engine.sock"


@pytest.fixture
def api(socket_path: Path) -> Iterator[FakeEngineApi]:
    with serve(socket_path, FakeEngineApi()) as served:
        yield served


def other_container() -> dict[str, Any]:
    attrs = cloister_attrs("x")
    attrs.update(Id="id-other", Config={"Image": "postgres", "Labels": {"app": "db"}})
    return attrs


def test_lists_the_labelled_containers_as_the_sdk_does(
    api: FakeEngineApi, socket_path: Path
) -> None:
    api.containers = [
        cloister_attrs("web", path="/src/web", status="exited"),
        other_container(),
        cloister_attrs("api-feature", project="api", branch="feature", image="cloister-slim"),
    ]
    found = listing.list_cloisters(UnixEngine(str(socket_path)), INSTANCE)
    created = "2025-01-02T03:04:05"
    assert found == [
        CloisterInfo(
            "api-feature", "api", "feature", "/src/x", "running", "cloister-slim", created
        ),
        CloisterInfo("web", "web", None, "/src/web", "exited", "cloister:latest", created),
    ]
    listed, *inspected = api.requests
    assert listed.startswith("/containers/json?")
    query = dict(part.split("=", 1) for part in listed.split("?", 1)[1].split("&"))
    assert query["all"] == "1"
    assert json.loads(unquote_plus(query["filters"])) == {
        "label": [stack.LABEL_CLOISTER, INSTANCE.label_filter]
    }
    assert sorted(inspected) == ["/containers/id-api-feature/json", "/containers/id-web/json"]


def test_a_container_removed_between_list_and_inspect_is_left_out(
    api: FakeEngineApi, socket_path: Path
) -> None:
    api.containers = [cloister_attrs("a"), cloister_attrs("b")]
    api.vanished = {"id-a"}
    found = listing.list_cloisters(UnixEngine(str(socket_path)), INSTANCE)
    assert [info.name for info in found] == ["b"]


def test_another_instances_cloisters_are_not_listed(api: FakeEngineApi, socket_path: Path) -> None:
    other = stack.Instance("4567cdef", INSTANCE.uid + 1, Path("/other"))
    api.containers = [cloister_attrs("a"), cloister_attrs("b", instance=other)]
    assert [info.name for info in listing.list_cloisters(UnixEngine(str(socket_path)), other)] == [
        "b"
    ]


def test_an_engine_error_is_one_clean_message(api: FakeEngineApi, socket_path: Path) -> None:
    api.status = 500
    with pytest.raises(
        EngineError, match=r"answered 500 to GET /containers/json.*: engine trouble"
    ):
        listing.list_cloisters(UnixEngine(str(socket_path)), INSTANCE)


def test_connect_uses_the_socket_of_docker_host(
    api: FakeEngineApi, socket_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    engine = listing.connect()
    assert isinstance(engine, UnixEngine)
    assert engine.path == str(socket_path)


def test_connect_without_an_engine_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "none.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{missing}")
    with pytest.raises(DockerUnavailableError) as raised:
        listing.connect()
    assert str(raised.value) == (
        f"no Docker engine is reachable (unix://{missing}: No such file or directory);"
        " start Docker and try again"
    )


def test_other_transports_go_through_the_docker_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    import docker

    class Client:
        pinged = False

        def ping(self) -> bool:
            Client.pinged = True
            return True

    made: list[dict[str, Any]] = []

    def from_env(**kwargs: Any) -> Client:
        made.append(kwargs)
        return Client()

    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    monkeypatch.setattr(docker, "from_env", from_env)
    assert isinstance(listing.connect(timeout=3), Client)
    # The SDK asks the engine its API version (GET /version): that answer, no ping.
    assert made == [{"timeout": 3, "version": "auto"}]
    assert not Client.pinged


def test_an_unreachable_sdk_engine_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import docker
    import docker.errors

    def from_env(**kwargs: Any) -> Any:
        raise docker.errors.DockerException("Connection refused")

    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    monkeypatch.setattr(docker, "from_env", from_env)
    with pytest.raises(DockerUnavailableError) as raised:
        listing.connect()
    assert str(raised.value) == (
        "no Docker engine is reachable (Connection refused); start Docker and try again"
    )


@pytest.mark.parametrize(
    ("minutes", "shown"), [(0, "0m"), (59, "59m"), (60, "1h00m"), (125, "2h05m")]
)
def test_age(minutes: int, shown: str) -> None:
    created = (datetime.now(UTC) - timedelta(minutes=minutes, seconds=1)).isoformat()[:19]
    assert listing.age(created) == shown


def test_age_of_something_unreadable_is_itself() -> None:
    assert listing.age("yesterday") == "yesterday"


# -- `cloister list` ----------------------------------------------------------------------------


def run_list(socket_path: Path, *args: str) -> Any:
    return CliRunner().invoke(
        cli,
        ["list", *args],
        env={
            "DOCKER_HOST": f"unix://{socket_path}",
            "COLUMNS": "200",
            "CLOISTER_CONFIG_DIR": str(socket_path.parent / "config"),
            "CLOISTER_DATA_DIR": str(socket_path.parent / "data"),
        },
        prog_name="cloister",
    )


def test_cloister_list(api: FakeEngineApi, socket_path: Path) -> None:
    mine = instance_of(socket_path.parent)
    api.containers = [
        cloister_attrs("api", path="/src/api", instance=mine),
        cloister_attrs("web", path="/src/web"),  # another instance's
        other_container(),
    ]
    result = run_list(socket_path, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [
        {
            "name": "api",
            "project": "api",
            "branch": None,
            "path": "/src/api",
            "status": "running",
            "image": "cloister:latest",
            "created": "2025-01-02T03:04:05",
        }
    ]
    table = run_list(socket_path)
    assert table.exit_code == 0, table.output
    assert "/src/api" in table.output
    assert "postgres" not in table.output
    assert "/src/web" not in table.output


def test_cloister_list_when_there_are_none(api: FakeEngineApi, socket_path: Path) -> None:
    assert json.loads(run_list(socket_path, "--json").output) == []
    told = run_list(socket_path)
    assert told.exit_code == 0
    assert told.output == "no cloisters (`cloister start` in a repository makes one)\n"
