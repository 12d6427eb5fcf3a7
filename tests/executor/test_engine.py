"""The executor's minimal Docker client: throwaway containers and commands in a running one.

The containers run ``debian:bookworm-slim`` as it is. :class:`ContainerSpec` names no
command (the export image has its own entrypoint), so the image's default ``bash``
runs, with nothing on its standard input; what a test wants it to do is a script
bind-mounted read-only and named by ``BASH_ENV``, which a non-interactive bash runs
first. Every container gets a name prefix and a label unique to the test, and whatever a
test starts is removed by the test (the engine removes its own; the fixture checks).
"""

from __future__ import annotations

import gc
import http.server
import json
import re
import secrets
import socketserver
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import docker.errors
import pytest
from docker.models.containers import Container

from cloister_executor.engine import (
    DEFAULT_DOCKER_HOST,
    LOG_TAIL,
    Bind,
    ContainerSpec,
    Engine,
    EngineError,
    Finished,
)
from tests.executor.conftest import TIMEOUT
from tests.waiting import wait_until

IMAGE = "debian:bookworm-slim"
LABEL = "org.cloister.test.engine"
SCRIPT = "/cloister-test/script.sh"


@pytest.fixture(scope="module")
def base_image(docker_client: docker.DockerClient) -> str:
    try:
        docker_client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{IMAGE} is not in the engine (these tests pull nothing)")
    return IMAGE


class Throwaway:
    """Specs for one test: a unique label value and name prefix, and a script."""

    def __init__(self, root: Path, client: docker.DockerClient) -> None:
        self.root = root
        self.client = client
        self.token = secrets.token_hex(6)
        self.prefix = f"cloister-test-engine-{self.token}"

    def spec(
        self, script: str, *, binds: tuple[Bind, ...] = (), **changes: object
    ) -> ContainerSpec:
        path = self.root / f"script-{secrets.token_hex(4)}.sh"
        path.write_text(script, encoding="utf-8")
        path.chmod(0o644)
        fields: dict[str, object] = {
            "image": IMAGE,
            "name_prefix": self.prefix,
            "user": "0:0",
            "binds": (Bind(str(path), SCRIPT), *binds),
            "labels": {LABEL: self.token},
            "environment": {"BASH_ENV": SCRIPT},
            "memory_bytes": 256 * 1024**2,
        }
        fields.update(changes)
        return ContainerSpec(**fields)  # type: ignore[arg-type]

    def containers(self) -> list[Container]:
        found: list[Container] = self.client.containers.list(
            all=True, filters={"label": f"{LABEL}={self.token}"}
        )
        return found


@pytest.fixture
def throwaway(
    tmp_path: Path, docker_client: docker.DockerClient, base_image: str
) -> Iterator[Throwaway]:
    del base_image
    made = Throwaway(tmp_path, docker_client)
    yield made
    left = made.containers()
    for container in left:  # only this test's label: never a container of anyone else
        container.remove(force=True)
    assert not left, f"the engine left {[c.name for c in left]} behind"


def run(engine: Engine, spec: ContainerSpec, timeout: float = 60.0) -> Finished:
    return engine.run(spec, timeout=timeout)


# --- Engine.run -------------------------------------------------------------------------------


@pytest.mark.docker
def test_run_returns_the_exit_code_and_the_last_lines(throwaway: Throwaway) -> None:
    script = 'for i in $(seq 1 50); do echo "line $i"; done\nexit 7\n'
    finished = run(Engine(None), throwaway.spec(script))
    assert finished.exit_code == 7
    assert finished.log.splitlines() == [f"line {i}" for i in range(51 - LOG_TAIL, 51)]
    assert throwaway.containers() == []


@pytest.mark.docker
def test_the_log_has_what_it_wrote_to_stderr(throwaway: Throwaway) -> None:
    finished = run(Engine(None), throwaway.spec('echo "to stderr" >&2\nexit 3\n'))
    assert finished == Finished(3, "to stderr\n")


@pytest.mark.docker
def test_run_of_a_successful_container(throwaway: Throwaway) -> None:
    finished = run(Engine(None), throwaway.spec("echo done\nexit 0\n"))
    assert finished == Finished(0, "done\n")
    assert throwaway.containers() == []


@pytest.mark.docker
def test_the_container_has_a_read_only_root_no_network_and_no_capabilities(
    throwaway: Throwaway,
) -> None:
    script = (
        "touch /root-is-writable 2>/dev/null && echo ROOT-WRITABLE\n"
        "touch /tmp/tmp-is-writable && echo tmp-writable\n"
        "ls /sys/class/net | tr '\\n' ' '; echo\n"
        "echo routes $(tail -n +2 /proc/net/route | wc -l)\n"
        "grep CapEff /proc/self/status\n"
        "(echo > /dev/tcp/1.1.1.1/53) 2>/dev/null && echo CONNECTED\n"
        "exit 0\n"
    )
    finished = run(Engine(None), throwaway.spec(script))
    assert finished.exit_code == 0, finished.log
    lines = finished.log.splitlines()
    assert "ROOT-WRITABLE" not in lines
    assert "tmp-writable" in lines  # its own tmpfs
    assert "lo " in lines  # the loopback interface only
    assert "routes 0" in lines
    assert "CapEff:\t0000000000000000" in lines
    assert "CONNECTED" not in lines


@pytest.mark.docker
def test_read_only_and_writable_binds(throwaway: Throwaway, tmp_path: Path) -> None:
    given = tmp_path / "given"
    given.mkdir()
    (given / "file").write_text("from the host\n", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    script = (
        "cat /given/file\n"
        "touch /given/new 2>/dev/null && echo GIVEN-WRITABLE\n"
        "echo written > /out/result\n"
        "exit 0\n"
    )
    binds = (Bind(str(given), "/given"), Bind(str(out), "/out", read_only=False))
    finished = run(Engine(None), throwaway.spec(script, binds=binds))
    assert finished.exit_code == 0, finished.log
    assert finished.log.splitlines() == ["from the host"]
    assert not (given / "new").exists()
    assert (out / "result").read_text(encoding="utf-8") == "written\n"


@pytest.mark.docker
def test_labels_name_and_host_config_while_it_runs(throwaway: Throwaway, tmp_path: Path) -> None:
    control = tmp_path / "control"
    control.mkdir()
    script = "for i in $(seq 1 600); do [ -e /control/go ] && exit 0; sleep 0.05; done\nexit 9\n"
    spec = throwaway.spec(
        script, binds=(Bind(str(control), "/control"),), environment={"BASH_ENV": SCRIPT, "A": "b"}
    )
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(run, Engine(None), spec)
        try:
            wait_until(lambda: bool(throwaway.containers()), TIMEOUT, "the container")
            (container,) = throwaway.containers()
            attrs = container.attrs
        finally:
            (control / "go").write_text("", encoding="utf-8")
        finished = future.result(60)
    assert finished.exit_code == 0, finished.log
    assert container.name is not None
    assert container.name.startswith(f"{throwaway.prefix}-")
    assert len(container.name) == len(throwaway.prefix) + 1 + 8  # a random suffix
    assert attrs["Config"]["Labels"][LABEL] == throwaway.token
    assert "A=b" in attrs["Config"]["Env"]
    host = attrs["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert host["Memory"] == 256 * 1024**2
    assert host["PidsLimit"] == 64
    mounts = {mount["Target"]: mount["ReadOnly"] for mount in host["Mounts"]}
    assert mounts == {SCRIPT: True, "/control": True}
    assert throwaway.containers() == []


@pytest.mark.docker
def test_two_runs_of_one_prefix_do_not_collide(throwaway: Throwaway) -> None:
    spec = throwaway.spec("exit 0\n")
    barrier = threading.Barrier(2)

    def both() -> Finished:
        barrier.wait(10)
        return run(Engine(None), spec)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: both(), range(2)))
    assert [result.exit_code for result in results] == [0, 0]


@pytest.mark.docker
def test_a_container_over_its_timeout_is_removed(throwaway: Throwaway) -> None:
    with pytest.raises(EngineError, match="took over 1s and was removed"):
        run(Engine(None), throwaway.spec("sleep 120\n"), timeout=1)
    assert throwaway.containers() == []


@pytest.mark.docker
def test_a_container_that_cannot_start_is_removed(throwaway: Throwaway) -> None:
    spec = throwaway.spec("exit 0\n", user="no-such-user-of-cloister")
    with pytest.raises(EngineError, match=f"cannot start {throwaway.prefix}-"):
        run(Engine(None), spec)
    assert throwaway.containers() == []


@pytest.mark.docker
def test_a_missing_image_is_an_engine_error(throwaway: Throwaway) -> None:
    spec = throwaway.spec("exit 0\n", image="cloister-test-no-such-image:none")
    with pytest.raises(EngineError, match=f"cannot create {throwaway.prefix}-"):
        run(Engine(None), spec)
    assert throwaway.containers() == []


@pytest.mark.docker
def test_image_exists(base_image: str) -> None:
    engine = Engine(None)
    assert engine.image_exists(base_image)
    assert not engine.image_exists("cloister-test-no-such-image:none")


# --- Engine.exec ------------------------------------------------------------------------------


@pytest.fixture
def running(throwaway: Throwaway) -> Iterator[Container]:
    """A container of this test's own, running until the test ends."""
    container: Container = throwaway.client.containers.run(
        IMAGE,
        ["sleep", "infinity"],
        detach=True,
        name=f"{throwaway.prefix}-exec",
        labels={LABEL: throwaway.token},
        network_mode="none",
        init=True,
    )
    try:
        yield container
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_exec_returns_the_exit_code(running: Container) -> None:
    assert running.name is not None
    engine = Engine(None)
    assert engine.exec(running.name, ["true"], timeout=30, workdir="/") == 0
    assert engine.exec(running.name, ["sh", "-c", "exit 5"], timeout=30, workdir="/") == 5
    # It runs there, in the directory asked for.
    code = engine.exec(
        running.name, ["sh", "-c", 'test "$(pwd)" = /tmp'], timeout=30, workdir="/tmp"
    )
    assert code == 0
    assert engine.exec(running.name, ["touch", "/tmp/made"], timeout=30, workdir="/") == 0
    assert running.exec_run(["test", "-e", "/tmp/made"]).exit_code == 0


@pytest.mark.docker
def test_exec_over_its_timeout_is_none_and_left_running(running: Container) -> None:
    assert running.name is not None
    code = Engine(None).exec(running.name, ["sleep", "60"], timeout=0.3, workdir="/")
    assert code is None
    top = running.top()
    assert any("sleep 60" in " ".join(process) for process in top["Processes"])


@pytest.mark.docker
def test_exec_in_a_container_that_is_not_there(throwaway: Throwaway) -> None:
    with pytest.raises(EngineError, match="cannot run a command in"):
        Engine(None).exec(f"{throwaway.prefix}-absent", ["true"], timeout=5, workdir="/")


# --- transports -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["tcp://127.0.0.1:2375", "ssh://user@example.invalid", "npipe:////./pipe/docker"]
)
def test_a_docker_host_that_is_not_a_unix_socket_is_an_engine_error(host: str) -> None:
    engine = Engine(host)
    assert engine.socket is None
    spec = ContainerSpec(image=IMAGE, name_prefix="cloister-test-engine", user="0:0", binds=())
    with pytest.raises(EngineError, match="is not a Unix socket"):
        engine.run(spec, timeout=5)
    with pytest.raises(EngineError, match="is not a Unix socket"):
        engine.exec("cloister-test-engine-none", ["true"], timeout=5)
    with pytest.raises(EngineError, match="is not a Unix socket"):
        engine.image_exists(IMAGE)


def test_the_default_is_the_usual_socket() -> None:
    assert Engine(None).socket == DEFAULT_DOCKER_HOST.removeprefix("unix://")
    assert Engine("unix:///run/user/1000/docker.sock").socket == "/run/user/1000/docker.sock"


def test_an_engine_that_does_not_answer_is_an_engine_error(tmp_path: Path) -> None:
    engine = Engine(f"unix://{tmp_path / 'no-engine.sock'}")
    spec = ContainerSpec(image=IMAGE, name_prefix="cloister-test-engine", user="0:0", binds=())
    with pytest.raises(EngineError, match="cannot reach the Docker engine"):
        engine.image_exists(IMAGE)
    with pytest.raises(EngineError, match="cannot reach the Docker engine"):
        engine.run(spec, timeout=5)
    with pytest.raises(EngineError, match="cannot reach the Docker engine"):
        engine.exec("cloister-test-engine-none", ["true"], timeout=5)
    # The socket of a failed connect is closed, not left to the collector (whose
    # ResourceWarning would fail the test here).
    gc.collect()


def test_the_spec_asks_for_no_network_no_capabilities_and_a_read_only_root() -> None:
    spec = ContainerSpec(
        image=IMAGE,
        name_prefix="x",
        user="1000:1000",
        binds=(Bind("/a", "/b"), Bind("/c", "/d", read_only=False)),
        labels={"k": "v"},
        environment={"E": "1"},
    )
    body = spec.body()
    assert body["NetworkDisabled"] is True
    assert body["User"] == "1000:1000"
    assert body["Env"] == ["E=1"]
    assert body["Labels"] == {"k": "v"}
    host = body["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert host["ReadonlyRootfs"] is True
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in host["Mounts"]] == [
        ("/a", "/b", True),
        ("/c", "/d", False),
    ]


# --- what the engine is asked, and its answers, without an engine --------------------------------


HANG = 0  # an answer's status: its headers, then no body


class FakeApi(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """An HTTP server on a Unix socket answering as *answers* says, by method and path
    (without the query); every request recorded as (method, path with query, content
    type, body)."""

    daemon_threads = True

    def __init__(self, path: Path, answers: dict[str, tuple[int, bytes] | None]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, str, str | None, bytes]] = []
        self.release = threading.Event()  # lets a request left hanging go
        self.broken: list[BaseException] = []  # a client that hung up (a timeout's test)
        super().__init__(str(path), _FakeApiHandler)

    def handle_error(self, request: object, client_address: object) -> None:
        """Kept, not printed: a client timing out leaves its handler writing to nobody."""
        error = sys.exc_info()[1]
        if error is not None:
            self.broken.append(error)


class _FakeApiHandler(http.server.BaseHTTPRequestHandler):
    server: FakeApi
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        self.server.asked.append((self.command, self.path, self.headers["Content-Type"], body))
        answer = self.server.answers.get(f"{self.command} {self.path.split('?')[0]}")
        if answer is None:  # hang up without an answer
            self.close_connection = True
            return
        status, content = answer
        if status == HANG:  # the headers, as the engine's wait sends them, then nothing
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.flush()
            self.server.release.wait(TIMEOUT)
            return
        self.send_response(status)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.fixture
def fake_api(tmp_path: Path) -> Iterator[FakeApi]:
    server = FakeApi(tmp_path / "engine.sock", {})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(TIMEOUT)


def _frame(stream: int, text: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(text).to_bytes(4, "big") + text


def test_a_run_asks_create_start_wait_logs_and_remove(fake_api: FakeApi) -> None:
    fake_api.answers.update(
        {
            "POST /containers/create": (201, b'{"Id": "c0ffee"}'),
            "POST /containers/c0ffee/start": (204, b""),
            "POST /containers/c0ffee/wait": (200, b'{"StatusCode": 3}'),
            "GET /containers/c0ffee/logs": (200, _frame(1, b"out\n") + _frame(2, b"err\n")),
            "DELETE /containers/c0ffee": (204, b""),
        }
    )
    spec = ContainerSpec(image="img:1", name_prefix="cloister-x", user="0:0", binds=())
    finished = Engine(f"unix://{fake_api.server_address}").run(spec, timeout=5)
    assert finished == Finished(3, "out\nerr\n")
    (create, *rest) = fake_api.asked
    method, path, content_type, body = create
    assert (method, content_type) == ("POST", "application/json")
    assert re.fullmatch(r"/containers/create\?name=cloister-x-[0-9a-f]{8}", path)
    assert json.loads(body) == spec.body()
    assert [(method, path) for method, path, _, _ in rest] == [
        ("POST", "/containers/c0ffee/start"),
        ("POST", "/containers/c0ffee/wait"),
        ("GET", f"/containers/c0ffee/logs?stdout=1&stderr=1&tail={LOG_TAIL}"),
        ("DELETE", "/containers/c0ffee?force=1"),
    ]


def test_a_refusal_says_the_engines_message_json_or_not(fake_api: FakeApi) -> None:
    engine = Engine(f"unix://{fake_api.server_address}")
    spec = ContainerSpec(image="img:1", name_prefix="cloister-x", user="0:0", binds=())
    fake_api.answers["POST /containers/create"] = (404, b'{"message": "No such image: img:1"}')
    with pytest.raises(EngineError, match=r"cannot create cloister-x-\w+: 404 No such image"):
        engine.run(spec, timeout=5)
    fake_api.answers["POST /containers/create"] = (500, b"not json\n")
    with pytest.raises(EngineError, match=r"cannot create cloister-x-\w+: 500 not json$"):
        engine.run(spec, timeout=5)
    assert {method for method, _, _, _ in fake_api.asked} == {"POST"}  # nothing to remove


def test_a_run_past_its_timeout_is_removed(fake_api: FakeApi) -> None:
    fake_api.answers.update(
        {
            "POST /containers/create": (201, b'{"Id": "c0ffee"}'),
            "POST /containers/c0ffee/start": (204, b""),
            "POST /containers/c0ffee/wait": (HANG, b""),  # never finishes
            "DELETE /containers/c0ffee": (204, b""),
        }
    )
    spec = ContainerSpec(image="img:1", name_prefix="cloister-x", user="0:0", binds=())
    with pytest.raises(EngineError, match=r"cloister-x-\w+ took over 0.2s and was removed"):
        Engine(f"unix://{fake_api.server_address}").run(spec, timeout=0.2)
    assert fake_api.asked[-1][:2] == ("DELETE", "/containers/c0ffee?force=1")


def test_an_answer_cut_short_is_an_engine_error(fake_api: FakeApi) -> None:
    engine = Engine(f"unix://{fake_api.server_address}")
    with pytest.raises(EngineError, match="cannot reach the Docker engine"):
        engine.image_exists("img:1")
    with pytest.raises(EngineError, match="cannot reach the Docker engine"):
        engine.exec("cloister-x", ["true"], timeout=5)


def test_image_and_container_names_are_one_part_of_the_path(fake_api: FakeApi) -> None:
    fake_api.answers["GET /images/registry.example/team/img:1/json"] = (200, b"{}")
    fake_api.answers["POST /containers/odd%3Fname%20/exec"] = (404, b'{"message": "gone"}')
    engine = Engine(f"unix://{fake_api.server_address}")
    assert engine.image_exists("registry.example/team/img:1")
    with pytest.raises(EngineError, match="cannot run a command in odd\\?name : 404 gone"):
        engine.exec("odd?name ", ["true"], timeout=5)
