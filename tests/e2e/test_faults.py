"""Family 9, faults: a piece of the guardian dies, the disk fills, the engine restarts.

A cloister whose proxy, credential gateway, host executor or approval hub is gone gets a
prompt answer that says what is down (never a hang), and ``cloister guardian start``
brings the missing pieces back under the running cloister, its token unchanged: the
``$HTTPS_PROXY`` and the key it already holds work again without a restart of the
cloister. A full disk under Cloister's directories fails the command that wanted to
write, with one clear line, and leaves every decision, token and snapshot file either
absent or whole. A restart of the Docker engine (CI only) brings the guardian back, and
the cloister's container, started again, is the same cloister to the guardian.

Each module's guardian is its own (this family kills it), one per host user.

===============================================  =============================================
attack / fault                                   result
===============================================  =============================================
``test_killed_services``: the approval hub       the held request is refused at once (403,
killed (``docker kill``) while a request for an  "the approval hub could not be asked"), not
unknown name is held                             left to its timeout; so is every new unknown
                                                 name (HTTP and CONNECT) while it is down
… the proxy killed                               HTTPS and HTTP through ``$HTTPS_PROXY`` fail
                                                 at once naming the proxy; nothing reaches
                                                 the fake internet; hostexec and the
                                                 credential gateway still work
… the credential gateway killed                  the agent's API call fails at once naming
                                                 the credential gateway; hostexec still works
… the host executor killed (SIGKILL)             ``hostexec echo`` exits 1 at once: "host
                                                 executor unavailable"
… one ``cloister guardian start``                heals all four: the same container with the
                                                 same token, its proxy, API key and hostexec
                                                 work again; an unknown name is held again
``test_full_disk``: a full file system under     ``approvals allow --scope project`` and
``<config>`` and ``<data>`` (a tmpfs)            ``cloister start`` fail with one clear error,
                                                 no traceback; every decision, token and
                                                 snapshot file is absent or valid; no
                                                 temporary file is left; with space again
                                                 both work
``test_engine_restarted`` (CI only): the Docker  the guardian comes back (or ``guardian
engine stopped and started again                 status`` says which service is not running);
                                                 ``cloister list`` says the cloister exited;
                                                 started again, its container has the address
                                                 its token names: egress and hostexec work
===============================================  =============================================
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from cloister_core import stack as stack_names
from tests.cli.cli_support import (
    CloisterCli,
    HostUser,
    Result,
    docker_executable,
    guardian,
    make_repo,
    run_command,
    squash,
    unique,
)
from tests.conftest import SkipOrFail
from tests.e2e.harness import (
    ALLOWED,
    API_PORT,
    CA_FILE,
    DOMAIN,
    UPSTREAM_TIMEOUT,
    Cloister,
    FakeInternet,
    Stack,
    config_for,
    wait_for_held,
)
from tests.waiting import free_port, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

KEY = "sk-ant-api03-FAULTS-" + secrets.token_hex(16)  # the human's key, for the gateway
MAX_TIME = 10  # every attempt's --max-time: a hang shows as curl's exit 28
# The resolver's give-up on a name nobody answers for (Docker's DNS on an internal
# network: about 10 s for curl), well inside this.
NO_NAME_MAX_TIME = 40
HELD_MAX_TIME = 45  # a held client's (the proxy's own hold is 60 s)
CURL_TIMED_OUT = 28
SERVICES = ("proxy", "approval", "gateway", "credentials")
CREDENTIALS_URL = (
    f"http://{stack_names.CREDENTIALS_ALIAS}:{stack_names.CREDENTIALS_PORT}/claude/v1/models"
)


@pytest.fixture(scope="module")
def own_stack(own_stack: Stack) -> Stack:
    """The module's own guardian (it kills its pieces), with Claude's key set up."""
    setup = run_command(
        own_stack.cli.command("setup", "claude", "--method", "api-key", "--secret-stdin"),
        cwd=own_stack.cli.root,
        env=own_stack.cli.env,
        timeout=60,
        stdin=KEY,
    )
    assert setup.returncode == 0, setup.describe()
    return own_stack


# --- what the agent tries -----------------------------------------------------------------


def fetch(cloister: Cloister, url: str, *, max_time: float = MAX_TIME) -> Result:
    """curl *url* through the cloister's ``$HTTPS_PROXY``/``$HTTP_PROXY``: stdout is the
    HTTP status, then the body."""
    script = (
        f"curl --silent --show-error --max-time {max_time:g} --cacert /work/{CA_FILE}"
        f" --write-out '%{{http_code}}\\n' --output /tmp/body {url}; status=$?;"
        " cat /tmp/body 2>/dev/null; rm -f /tmp/body; exit $status"
    )
    return cloister.sh(script, timeout=max_time + 30)


def api_call(cloister: Cloister, *, max_time: float = MAX_TIME) -> Result:
    """Claude Code's model list through the credential gateway, with the cloister's token
    as the key (what the agent's ``ANTHROPIC_BASE_URL`` leads to)."""
    script = (
        f"curl --silent --show-error --noproxy '*' --max-time {max_time:g}"
        " --write-out '%{http_code}\\n' --output /dev/null"
        " -H @/dev/fd/3 -H 'anthropic-version: 2023-06-01'"
        f' {CREDENTIALS_URL} 3<<<"x-api-key: $CLOISTER_TOKEN"'
    )
    return cloister.sh(script, timeout=max_time + 30)


def api_calls_with_key(internet: FakeInternet) -> int:
    """How many calls reached the fake API with the human's key swapped in."""
    return sum(entry["headers"].get("x-api-key") == KEY for entry in internet.api_requests())


def works(cloister: Cloister) -> None:
    """The control: egress, the credential gateway (the real key arrives) and hostexec."""
    internet = cloister.stack.internet
    marker = unique("works")
    reached = fetch(cloister, f"https://{ALLOWED}/{marker}")
    assert reached.returncode == 0, reached.describe()
    assert reached.stdout.startswith("200\n"), reached.describe()
    assert internet.seen(marker)
    before = api_calls_with_key(internet)
    called = api_call(cloister)
    assert called.returncode == 0, called.describe()
    assert called.stdout == "200\n", called.describe()
    assert api_calls_with_key(internet) == before + 1
    assert cloister.ok("hostexec echo through").stdout == "through\n"


def fails_promptly(result: Result, *expected: str) -> None:
    """An attempt that failed on its own, before its --max-time, saying *expected*."""
    assert result.returncode not in (0, CURL_TIMED_OUT), result.describe()
    for text in expected:
        assert text in result.stderr, result.describe()


def kill_service(stack: Stack, service: str) -> None:
    container = stack.cli.instance.service(service)
    killed = run_command([docker_executable(), "kill", container], timeout=60)
    assert killed.returncode == 0, killed.describe()


def executor_pid(stack: Stack) -> int:
    pid = stack.cli.json("guardian", "status", "--json")["executor_pid"]
    assert isinstance(pid, int), pid
    return pid


def fresh_name(what: str) -> str:
    """A name of the fake internet no rule mentions: the proxy asks the hub about it."""
    return f"{what}-{secrets.token_hex(4)}.{DOMAIN}"


class Held:
    """A curl inside the cloister for a name the proxy holds (``docker exec`` in the
    background); its answer is read once, at its end."""

    def __init__(self, cloister: Cloister, url: str) -> None:
        script = (
            f"curl --silent --show-error --max-time {HELD_MAX_TIME} --write-out '%{{http_code}}\\n'"
            f" --output /tmp/held {url}; status=$?; cat /tmp/held; exit $status"
        )
        argv = [docker_executable(), "exec", cloister.container, "bash", "-c", script]
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def running(self) -> bool:
        return self.process.poll() is None

    def answer(self) -> tuple[int, str, str]:
        """curl's exit status, its output (the status, then the body) and its complaint."""
        stdout, stderr = self.process.communicate(timeout=HELD_MAX_TIME + 60)
        return self.process.returncode, stdout, stderr

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


@pytest.fixture
def held() -> Iterator[list[Held]]:
    """The test's background clients, ended at its end whatever happened."""
    started: list[Held] = []
    yield started
    for each in started:
        each.close()


# --- the guardian's pieces killed ---------------------------------------------------------


def test_killed_services(own_stack: Stack, held: list[Held]) -> None:
    """The hub killed during a held request; then the proxy, the credential gateway and
    the executor killed one after the other; one ``guardian start`` heals them all."""
    cloister = own_stack.cloister("faults")
    works(cloister)
    token = own_stack.cli.token(cloister.name)
    container_id = inspect_id(cloister)
    try:
        hub_killed(own_stack, cloister, held)
        proxy_killed(own_stack, cloister)
        credentials_killed(own_stack, cloister)
        executor_killed(own_stack, cloister)
    finally:
        own_stack.guardian_start()
    assert inspect_id(cloister) == container_id
    assert own_stack.cli.token(cloister.name) == token
    assert cloister.ok('printf %s "$CLOISTER_TOKEN"').stdout == token
    works(cloister)
    # The hub is back: an unknown name is held again.
    name = fresh_name("back")
    held.append(Held(cloister, f"http://{name}/"))
    wait_for_held(own_stack, f'"host": "{name}"')


def inspect_id(cloister: Cloister) -> str:
    found = run_command(
        [docker_executable(), "inspect", "--format", "{{.Id}}", cloister.container], timeout=30
    )
    assert found.returncode == 0, found.describe()
    return found.stdout.strip()


def hub_killed(stack: Stack, cloister: Cloister, held: list[Held]) -> None:
    """A held request is answered (refused) once the hub is gone; new names likewise."""
    name = fresh_name("held")
    client = Held(cloister, f"http://{name}/held")
    held.append(client)
    wait_for_held(stack, f'"host": "{name}"')
    assert client.running(), "the client did not wait for the decision"
    kill_service(stack, "approval")
    status, output, complaint = client.answer()
    assert status == 0, (status, output, complaint)  # not curl's 28: answered in time
    assert output.startswith("403\n"), output
    assert "the approval hub could not be asked" in output, output
    # New unknown names, while the hub is down: refused at once, never held.
    for url in (f"http://{fresh_name('down')}/down", f"https://{fresh_name('down')}/down"):
        refused = fetch(cloister, url)
        if url.startswith("http:"):
            assert refused.returncode == 0, refused.describe()
            assert refused.stdout.startswith("403\n"), refused.describe()
            assert "the approval hub could not be asked" in refused.stdout, refused.describe()
        else:  # curl says the tunnel was refused
            fails_promptly(refused, "403")
    assert not any(name in entry.get("host", "") for entry in cloister.stack.internet.requests())


def proxy_killed(stack: Stack, cloister: Cloister) -> None:
    kill_service(stack, "proxy")
    marker = unique("noproxy")
    # The proxy's name no longer resolves: curl says so once the resolver gives up.
    refused = fetch(cloister, f"https://{ALLOWED}/{marker}", max_time=NO_NAME_MAX_TIME)
    fails_promptly(refused, f"Could not resolve proxy: {stack_names.PROXY_ALIAS}")
    assert not stack.internet.seen(marker), "a request reached the fake internet"
    # Only the proxy is down: the key and hostexec still work.
    called = api_call(cloister)
    assert called.stdout == "200\n", called.describe()
    assert cloister.ok("hostexec echo still").stdout == "still\n"


def credentials_killed(stack: Stack, cloister: Cloister) -> None:
    kill_service(stack, "credentials")
    called = api_call(cloister, max_time=NO_NAME_MAX_TIME)
    fails_promptly(called, f"Could not resolve host: {stack_names.CREDENTIALS_ALIAS}")
    assert cloister.ok("hostexec echo still").stdout == "still\n"


def executor_killed(stack: Stack, cloister: Cloister) -> None:
    os.kill(executor_pid(stack), signal.SIGKILL)
    ran = cloister.sh("hostexec echo escaped", timeout=MAX_TIME + 30)
    assert ran.returncode == 1, ran.describe()
    assert "escaped" not in ran.stdout, ran.describe()
    assert "host executor unavailable" in ran.stderr, ran.describe()


# --- a full disk --------------------------------------------------------------------------

DISK_SIZE = "8m"  # a guardian's files fit, and a few cloisters'
PART_SIZE = "1m"  # the token files, or a few small repositories' snapshots
TEMPORARY = re.compile(r"\..*\.tmp")  # atomic_write's and the snapshot pool's


@contextlib.contextmanager
def tmpfs(path: Path, user: HostUser | None, size: str) -> Iterator[Path]:
    """A tmpfs of *size* at *path* (the user's own when given), unmounted at the end."""
    options = f"size={size},mode=0700"
    if user is not None:
        options += f",uid={user.uid},gid={user.gid}"
    mounted = run_command(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], timeout=30)
    assert mounted.returncode == 0, mounted.describe()
    try:
        yield path
    finally:
        unmounted = run_command(["umount", str(path)], timeout=60)
        if unmounted.returncode != 0:  # a process still in it: detach it now, freed after
            lazy = run_command(["umount", "--lazy", str(path)], timeout=60)
            assert lazy.returncode == 0, f"{unmounted.describe()}\n{lazy.describe()}"


def fill(root: Path) -> Path:
    """A file that takes every free byte of *root*'s file system (as root: no reserve)."""
    filler = root / ".filler"  # a dot file: no token file, to the services
    filled = run_command(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], timeout=120)
    assert filled.returncode == 1, filled.describe()
    assert "No space left on device" in filled.stderr, filled.describe()
    return filler


def whole_files(cli: CloisterCli) -> list[str]:
    """Every decision, token and snapshot file under *cli*'s directories, each checked to
    be complete and valid; AssertionError for one that is not, or for a temporary file
    left behind. The names found."""
    from ruamel.yaml import YAML

    from cloister_core.snapshots import SnapshotRecord
    from cloister_core.tokens import read_token_file

    found: list[str] = []
    for path in sorted(cli.root.rglob("*")):
        relative = str(path.relative_to(cli.root))
        assert not TEMPORARY.fullmatch(path.name), f"a temporary file is left: {relative}"
        assert "/tmp/" not in f"/{relative}/" or path.is_dir(), f"left in a scratch: {relative}"
    decisions = cli.config_dir / "decisions"
    for path in sorted([*decisions.rglob("*.yaml"), *(cli.config_dir / "projects").glob("*.yaml")]):
        document = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
        assert isinstance(document, dict), f"{path}: {document!r}"
        found.append(str(path.relative_to(cli.root)))
    for path in sorted((cli.config_dir / "tokens").glob("[!.]*")):
        read_token_file(path)  # a TokenError says what is wrong with it
        found.append(str(path.relative_to(cli.root)))
    for path in sorted((cli.data_dir / "snapshots").glob("*/records/*.json")):
        record = SnapshotRecord.model_validate_json(path.read_bytes())
        pool = path.parent.parent / "objects"
        for name in record.files:
            whole_pool_file(pool / name)
        found.append(str(path.relative_to(cli.root)))
    return found


def not_snapshots(names: list[str]) -> list[str]:
    return [name for name in names if not name.startswith("data/snapshots/")]


def whole_pool_file(path: Path) -> None:
    data = path.read_bytes()
    if path.suffix == ".pack":
        assert data.startswith(b"PACK"), path
    elif path.suffix == ".idx":
        assert data.startswith(b"\xfftOc"), path
    elif "pack" not in path.parts:
        zlib.decompress(data)  # a loose object: complete, or zlib.error


def clean_failure(result: Result) -> str:
    """A command that failed with one clear error, no traceback: its output."""
    assert result.returncode == 1, result.describe()
    assert "Traceback" not in result.output, result.describe()
    assert "No space left on device" in result.output, result.describe()
    return squash(result.output)


def new_repo(stack: Stack, parent: Path, prefix: str) -> Cloister:
    """A new repository under *parent* (off the full disk), the test CA in it, and the
    cloister it would have (not started)."""
    name = unique(prefix)
    repo = make_repo(parent / name, user=stack.user)
    (repo / CA_FILE).write_bytes(stack.internet.ca.read_bytes())
    if stack.user is not None:
        stack.user.adopt(repo)
    stack.started.append(name)
    return Cloister(stack, name, repo)


def start(cloister: Cloister) -> Result:
    return cloister.stack.cli.run("start", "-d", cwd=cloister.repo)


def test_full_disk(
    own_stack: Stack,
    docker_client: docker.DockerClient,
    tmp_path: Path,
    skip_or_fail: SkipOrFail,
    held: list[Held],
) -> None:
    """A guardian whose ``<config>`` and ``<data>`` are on a small tmpfs, and its token
    and snapshot directories on tmpfs of their own (each filled alone: the start gets as
    far as writing there), filled up."""
    if os.geteuid() != 0:
        skip_or_fail("mounting a small tmpfs (the full disk) needs root")
    user = own_stack.user
    mountpoint = tmp_path / "disk" if user is None else user.mktemp("disk")
    mountpoint.mkdir(exist_ok=True)
    repos = tmp_path / "repos" if user is None else user.mktemp("repos")
    repos.mkdir(exist_ok=True)
    ui_port = free_port()
    text = config_for(own_stack.internet, ui_port)
    with contextlib.ExitStack() as exits:
        root = exits.enter_context(tmpfs(mountpoint, user, DISK_SIZE))
        filesystems = {}
        for part in ("config/tokens", "data/snapshots"):
            (root / part).mkdir(parents=True, mode=0o700)
            filesystems[part] = exits.enter_context(tmpfs(root / part, user, PART_SIZE))
        if user is not None:
            user.adopt(root)
        cli = exits.enter_context(guardian(docker_client, root, text, skip_or_fail, user=user))
        disk = Stack(own_stack.kind, cli, own_stack.internet, user, ui_port=ui_port)
        exits.callback(disk.close)
        disk.resolve(ALLOWED)
        full_disk(disk, root, filesystems, repos, held)


def full_disk(
    disk: Stack, root: Path, parts: dict[str, Path], repos: Path, held: list[Held]
) -> None:
    first = new_repo(disk, repos, "disk")
    started = start(first)
    assert started.returncode == 0, started.describe()
    # A project already known (nothing to write for it): its start gets as far as the
    # snapshot and the token.
    known = new_repo(disk, repos, "known")
    disk.cli.write_project_config(known.name, f"root: {known.repo.resolve()}\n")
    before = whole_files(disk.cli)
    assert any("/records/" in each for each in before), before  # the first start's snapshot
    asked = fresh_name("full")
    held.append(Held(first, f"http://{asked}/"))
    item = wait_for_held(disk, f'"host": "{asked}"')

    # <config> and <data> full: the hub cannot save the project's decision, so it allows
    # the request once and says so; a start fails with one line.
    filler = fill(root)
    allowed = disk.cli.run("approvals", "allow", item["id"], "--scope", "project")
    assert allowed.returncode == 0, allowed.describe()
    assert "Traceback" not in allowed.output, allowed.describe()
    assert squash(allowed.stdout) == f"Allowed {asked} once ", allowed.describe()
    warning = squash(allowed.stderr)
    assert "could not save the decision" in warning, allowed.describe()
    assert "No space left on device" in warning, allowed.describe()
    assert whole_files(disk.cli) == before
    for cloister in (known, new_repo(disk, repos, "unknown")):
        clean_failure(start(cloister))
        # (The snapshots' own file system has room: a start's snapshot may be kept.)
        assert not_snapshots(whole_files(disk.cli)) == not_snapshots(before)
        assert cloister.name not in disk.cli.listing()
    filler.unlink()

    # Only the tokens' file system full: the start fails there, and leaves no token.
    filler = fill(parts["config/tokens"])
    clean_failure(start(known))
    assert not any(f"tokens/{known.name}" in each for each in whole_files(disk.cli))
    assert known.name not in disk.cli.listing()
    filler.unlink()

    # Only the snapshots' full: the cloister starts, without an undo, and says so.
    filler = fill(parts["data/snapshots"])
    started = start(known)
    assert started.returncode == 0, started.describe()
    said = squash(started.stderr)
    assert "No space left on device" in said, started.describe()
    assert "`cloister restore` cannot undo this session" in said, started.describe()
    whole_files(disk.cli)
    filler.unlink()

    # Space again: the decision is saved, a start keeps its snapshot and its token.
    asked = fresh_name("free")
    held.append(Held(first, f"http://{asked}/"))
    item = wait_for_held(disk, f'"host": "{asked}"')
    disk.cli.ok("approvals", "allow", item["id"], "--scope", "project")
    last = new_repo(disk, repos, "free")
    started = start(last)
    assert started.returncode == 0, started.describe()
    now = whole_files(disk.cli)
    assert any(each.endswith(f"tokens/{last.name}") for each in now), now
    assert any(f"snapshots/{last.name}/records/" in each for each in now), now
    assert any("decisions/projects/" in each for each in now), now
    for cloister in (known, last):
        status, _ = cloister.curl(f"https://{ALLOWED}/free")
        assert status == "200", cloister.name


# --- the Docker engine restarted (last: everything on the engine stops) -------------------

DOCKER_PID_FILE = Path("/var/run/docker.pid")
ENGINE_STOP_TIMEOUT = 120.0  # its containers get their stop timeout (10 s) first
ENGINE_START_TIMEOUT = 120.0
GUARDIAN_BACK_TIMEOUT = 90.0  # the services' restart policy brings them back


def test_engine_restarted(own_stack: Stack, skip_or_fail: SkipOrFail) -> None:
    """``dockerd`` stopped (SIGTERM) and started again as ``.ci/run`` starts it."""
    if not os.environ.get("CI"):
        pytest.skip(
            "restarting the Docker engine stops every container on it: only under CI, where"
            " nothing else runs there"
        )
    if os.geteuid() != 0:
        skip_or_fail("restarting the Docker engine needs root")
    cloister = own_stack.cloister("engine")
    works(cloister)
    token = own_stack.cli.token(cloister.name)
    restart_engine(skip_or_fail)
    # The session's fake internet (no restart policy) stopped with the engine: what this
    # test and the modules after it use, started again.
    start_upstream(own_stack.internet)

    status = wait_for_guardian(own_stack)
    if not status["running"]:
        # It says why: each service's state, and the executor's.
        assert {service["name"] for service in status["services"]} >= set(SERVICES), status
        own_stack.guardian_start()
    else:
        own_stack.resolve()  # the engine wrote the services' /etc/hosts afresh
    listed = own_stack.cli.listing()
    assert cloister.name in listed, listed  # the cloister is not forgotten
    if listed[cloister.name]["status"] != "running":
        # Not restarted by the engine: `cloister list` says it exited. Started again, its
        # container has the address its token names.
        assert listed[cloister.name]["status"] == "exited", listed
        again = run_command([docker_executable(), "start", cloister.container], timeout=120)
        assert again.returncode == 0, again.describe()
    assert own_stack.cli.token(cloister.name) == token
    works(cloister)


def restart_engine(skip_or_fail: SkipOrFail) -> None:
    """Stop ``dockerd`` and start it again with the same command line, in the background
    with its output in ``.ci/run``'s log; fails loudly (leaving it as it is) when it does
    not stop or does not answer again in time."""
    if not DOCKER_PID_FILE.exists():
        skip_or_fail(f"no {DOCKER_PID_FILE}: the engine is not a dockerd of this machine's")
    pid = int(DOCKER_PID_FILE.read_text(encoding="ascii").strip())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    command = [part.decode() for part in argv]
    assert Path(command[0]).name == "dockerd", command
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "cloister-ci-dockerd.log"
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not alive(pid), ENGINE_STOP_TIMEOUT, f"dockerd ({pid}) to stop")
    with log.open("ab") as output:
        # .ci/run's `setsid nohup dockerd >LOG 2>&1 </dev/null &`: --fork, so that this
        # returns at once and nothing here waits for the daemon.
        started = subprocess.run(
            [tool("setsid"), "--fork", tool("nohup"), *command],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=30,
            check=False,
        )
    assert started.returncode == 0, started
    try:
        wait_until(engine_answers, ENGINE_START_TIMEOUT, "the Docker engine to answer", 1)
    except AssertionError:
        tail = log.read_text(encoding="utf-8", errors="replace")[-4000:]
        pytest.fail(f"the Docker engine did not come back; {log} ends:\n{tail}", pytrace=False)


def start_upstream(internet: FakeInternet) -> None:
    name = internet.upstream.get_wrapped_container().id
    assert name is not None
    started = run_command([docker_executable(), "start", name], timeout=120)
    assert started.returncode == 0, started.describe()

    def listening() -> bool:
        try:
            for port in (80, 443, API_PORT):
                socket.create_connection((internet.address, port), timeout=2).close()
        except OSError:
            return False
        return True

    wait_until(listening, UPSTREAM_TIMEOUT, "the fake internet", interval=0.5)


def tool(name: str) -> str:
    found = shutil.which(name)
    assert found is not None, f"{name} is not installed"
    return found


def alive(pid: int) -> bool:
    """Whether *pid* runs (a zombie nobody reaped has stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def engine_answers() -> bool:
    return run_command([docker_executable(), "info"], timeout=30).returncode == 0


def wait_for_guardian(stack: Stack) -> dict[str, Any]:
    """``cloister guardian status --json`` once it says the guardian runs, or what it
    says when it does not within the bound."""
    last: dict[str, Any] = {}

    def probe() -> bool:
        result = stack.cli.run("guardian", "status", "--json")
        if result.returncode != 0:
            return False
        last.update(result.json())
        return bool(last["running"])

    with contextlib.suppress(AssertionError):
        wait_until(probe, GUARDIAN_BACK_TIMEOUT, "the guardian", interval=1)
    assert last, "`cloister guardian status --json` never answered"
    return last
