"""hostexec end to end: a cloister asks, a pattern or a human decides, the host runs it.

Real images built from this tree, real networks, the real executor daemon on the host:
a miniature guardian stack as docs/architecture.md draws it for hostexec (see
``tests/executor/docker_support.py``). The test plays the human through the hub's API
on 127.0.0.1 and looks at the host directly (files, /proc) to see what really ran.

Two stacks per module: ``stack`` (commands may run a minute, a human has 30 s) and
``short_stack`` (``hostexec.timeout: 2s``, 3 s for a human) for the timeout paths.
"""

from __future__ import annotations

import base64
import json
import secrets
import shlex
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import docker.errors
import pytest

from cloister_executor.protocol import OUTPUT_CAP, ExecRequest
from tests.ci.test_docker_network import HostListener, host_primary_ipv4
from tests.executor.docker_support import (
    CLOISTER,
    GUARDIAN_ALIAS,
    HUB_ALIAS,
    HUB_PORT,
    REQUEST_PORT,
    ExecResult,
    GuardianStack,
    StackError,
    StackImages,
    StackOptions,
    build_images,
)
from tests.waiting import wait_until

if TYPE_CHECKING:
    from tests.conftest import SkipOrFail

pytestmark = pytest.mark.docker
LABELS = {"org.cloister.test": "tests/executor/test_end_to_end.py"}
GIT_PUSH = ("git", "push", "origin", "main")


# --- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def images(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
) -> StackImages:
    try:
        docker_client.images.get("debian:bookworm-slim")
    except docker.errors.ImageNotFound:
        skip_or_fail("debian:bookworm-slim is not present locally (.ci/run creates it)")
    return build_images(docker_client, tmp_path_factory.mktemp("contexts"))


def _stack(
    client: docker.DockerClient, images: StackImages, root: Path, options: StackOptions
) -> Iterator[GuardianStack]:
    stack = GuardianStack(client, images, root, options)
    try:
        try:
            stack.start()
        except StackError as error:
            pytest.fail(f"the stack did not come up: {error}", pytrace=False)
        yield stack
    finally:
        problems = stack.close()
        if problems:
            pytest.fail("cleanup failed: " + "; ".join(problems), pytrace=False)


@pytest.fixture(scope="module")
def stack(
    docker_client: docker.DockerClient,
    images: StackImages,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GuardianStack]:
    options = StackOptions(hostexec_timeout="60s", approval_timeout="30s", labels=LABELS)
    yield from _stack(docker_client, images, tmp_path_factory.mktemp("stack"), options)


@pytest.fixture(scope="module")
def short_stack(
    docker_client: docker.DockerClient,
    images: StackImages,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GuardianStack]:
    options = StackOptions(hostexec_timeout="2s", approval_timeout="3s", labels=LABELS)
    yield from _stack(docker_client, images, tmp_path_factory.mktemp("short"), options)


@pytest.fixture
def host_listener() -> Iterator[HostListener]:
    server = HostListener()
    try:
        yield server
    finally:
        server.close()


# --- helpers ---------------------------------------------------------------------------


def pending_commands(stack: GuardianStack, argv: tuple[str, ...]) -> list[dict[str, Any]]:
    """The hub's pending commands with exactly *argv* (as the human's API lists them)."""
    with stack.human() as human:
        response = human.get("/api/v1/pending")
    assert response.status_code == 200, response.text
    commands: list[dict[str, Any]] = response.json()["commands"]
    return [item for item in commands if tuple(item["argv"]) == argv]


def wait_pending(stack: GuardianStack, argv: tuple[str, ...]) -> dict[str, Any]:
    (item,) = wait_until(lambda: pending_commands(stack, argv), 20, f"{argv} to be pending")
    assert isinstance(item, dict)
    return item


def decide(stack: GuardianStack, item_id: str, body: dict[str, str]) -> None:
    with stack.human() as human:
        response = human.post(f"/api/v1/commands/{item_id}/decision", json=body)
    assert response.status_code == 200, response.text


def marker(name: str) -> Path:
    """A host path under /tmp that nothing should ever create."""
    path = Path("/tmp") / f"{name}-{secrets.token_hex(8)}"
    assert not path.exists()
    return path


def ask_executor(stack: GuardianStack, request: ExecRequest) -> dict[str, Any]:
    """One request line to the executor's Unix socket, from the host; its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(stack.executor.socket_path))
        sock.sendall(request.model_dump_json().encode() + b"\n")
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    parsed: dict[str, Any] = json.loads(answer)
    return parsed


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process *pid* holds open (``socket:[N]`` in /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def inet_inodes() -> set[int]:
    """Inodes of every TCP and UDP socket (v4 and v6) in this network namespace."""
    inodes = set()
    for table in ("tcp", "tcp6", "udp", "udp6"):
        path = Path("/proc/net") / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            inodes.add(int(line.split()[9]))
    return inodes


def unix_listeners() -> dict[int, str]:
    """Listening Unix sockets in this namespace: inode → path."""
    listeners = {}
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        # Num RefCount Protocol Flags Type St Inode [Path]; flag 0x10000 = __SO_ACCEPTCON
        if len(fields) >= 8 and int(fields[3], 16) & 0x10000:
            listeners[int(fields[6])] = fields[7]
    return listeners


def process_gone(pid: int) -> bool:
    """True if *pid* no longer runs (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in {"Z", "X"}


def probe_all(stack: GuardianStack, probes: dict[str, str]) -> dict[str, ExecResult]:
    """Run bash snippets in the cloister concurrently (each may wait for its timeout)."""
    running = {name: stack.in_cloister_background(script) for name, script in probes.items()}
    return {name: future.result(timeout=60) for name, future in running.items()}


def tcp_connect(address: str, port: int) -> str:
    """A bash snippet: connect with /dev/tcp and print what the server sends (5 s at most)."""
    return f"timeout 5 bash -c 'exec 3<>/dev/tcp/{address}/{port} && head -c 100 <&3'"


def curl(url: str) -> str:
    return f"curl --noproxy '*' -sS -m 3 {shlex.quote(url)}"


# --- 1. auto-approved commands ---------------------------------------------------------


def test_auto_approved_commands_run_on_the_host_in_the_project_directory(
    stack: GuardianStack,
) -> None:
    hi = stack.hostexec("echo", "hi")
    assert (hi.exit_code, hi.stdout, hi.stderr) == (0, b"hi\n", b""), hi

    assert stack.record is not None
    pwd = stack.hostexec("pwd")
    assert (pwd.exit_code, pwd.out, pwd.stderr) == (0, stack.record.path + "\n", b""), pwd
    assert stack.record.path == str(stack.project_dir)

    seven = stack.hostexec("sh", "-c", "exit 7")
    assert (seven.exit_code, seven.stdout, seven.stderr) == (7, b"", b""), seven

    # Both streams come back apart, with the command's own exit code.
    both = stack.hostexec("sh", "-c", "echo out; echo err >&2; exit 3")
    assert (both.exit_code, both.stdout, both.stderr) == (3, b"out\n", b"err\n"), both

    # Arguments arrive exactly as given: spaces, quotes, tabs, backslashes, non-ASCII.
    awkward = ["two  spaces", "it's", 'say "hi"', "tab\there", "back\\slash", "héllo ✓"]
    echoed = stack.hostexec("echo", *awkward)
    assert echoed.exit_code == 0, echoed
    assert echoed.out == " ".join(awkward) + "\n"


def test_patterns_are_re2_against_the_documented_quoting(stack: GuardianStack) -> None:
    # The gateway's config has ^printf '[[:alpha:]]+'\\''[[:alpha:]]+ \p{L}+'\z: RE2 syntax,
    # matched in the gateway's container against the command quoted with '\''.
    said = stack.hostexec("printf", "it's café")
    assert (said.exit_code, said.out) == (0, "it's café"), said
    digits = stack.hostexec("printf", "it's 42")  # 42 is no \p{L}
    assert digits.exit_code == 1, digits
    assert r"`printf 'it'\''s 42'` matches no auto_approve" in digits.err, digits


# --- 2. denial and the human's decisions ------------------------------------------------


def test_a_command_matching_no_pattern_is_denied_with_the_reason(stack: GuardianStack) -> None:
    result = stack.hostexec("ls", "-la")
    assert result.exit_code == 1, result
    assert result.stdout == b""
    assert result.err.startswith("hostexec: denied: "), result
    assert "`ls -la` matches no auto_approve or manual_approve pattern" in result.err
    assert pending_commands(stack, ("ls", "-la")) == []  # nobody was asked


def test_a_manual_command_waits_for_the_human_and_runs_when_approved(
    stack: GuardianStack,
) -> None:
    assert stack.record is not None
    waiting = stack.hostexec_background(*GIT_PUSH)
    item = wait_pending(stack, GIT_PUSH)
    assert item["argv"] == list(GIT_PUSH)
    assert item["cwd"] == stack.record.path
    assert item["cloister"] == CLOISTER
    assert item["command"] == "git push origin main"
    assert not waiting.done(), "hostexec must wait for the human"

    decide(stack, item["id"], {"action": "approve"})
    result = waiting.result(timeout=30)

    # It ran on the host in the project directory, which is no git repository: git's
    # own failure and exit code come back.
    on_host = subprocess.run(
        GIT_PUSH, cwd=stack.project_dir, capture_output=True, text=True, check=False
    )
    assert on_host.returncode != 0
    assert result.exit_code == on_host.returncode, result
    assert "not a git repository" in result.err, result
    assert pending_commands(stack, GIT_PUSH) == []


def test_a_manual_command_denied_by_the_human_fails_with_the_reason(
    stack: GuardianStack,
) -> None:
    argv = ("git", "push", "--force", "origin", "main")
    waiting = stack.hostexec_background(*argv)
    item = wait_pending(stack, argv)

    decide(stack, item["id"], {"action": "deny", "reason": "not on a Friday"})
    result = waiting.result(timeout=30)

    assert (result.exit_code, result.stdout) == (1, b""), result
    assert result.err == "hostexec: denied: not on a Friday\n"


def test_a_manual_command_nobody_decides_times_out(short_stack: GuardianStack) -> None:
    waiting = short_stack.hostexec_background(*GIT_PUSH)
    wait_pending(short_stack, GIT_PUSH)  # the human was asked...

    result = waiting.result(timeout=30)  # ...and did nothing for 3 s

    assert (result.exit_code, result.stdout) == (1, b""), result
    assert result.err.startswith("hostexec: not approved in time"), result
    assert result.seconds < 20, result
    assert pending_commands(short_stack, GIT_PUSH) == []  # expired at the hub too


# --- 3. injection -----------------------------------------------------------------------


def test_shell_metacharacters_in_arguments_stay_literal(stack: GuardianStack) -> None:
    touched = [marker(f"pwned{index}") for index in range(5)]
    args = [
        f"a; touch {touched[0]}",
        f"$(touch {touched[1]})",
        f"`touch {touched[2]}`",
        f"| touch {touched[3]}",
        f"&& touch {touched[4]} #",
    ]
    result = stack.hostexec("echo", *args)

    assert result.exit_code == 0, result
    assert result.out == " ".join(args) + "\n"
    assert [path for path in touched if path.exists()] == []


def test_a_shell_string_as_one_argument_runs_nothing(stack: GuardianStack) -> None:
    touched = marker("pwned2")
    result = stack.hostexec(f"sh -c 'touch {touched}'")

    # Rendered canonically it is one quoted word: no pattern matches it.
    assert result.exit_code in {1, 127}, result
    assert "denied" in result.err or "command not found" in result.err, result
    assert not touched.exists()

    # Had it been approved, the executor would look for a program of that name: no shell.
    secret = stack.executor.secret_path.read_text(encoding="ascii").strip()
    answer = ask_executor(
        stack,
        ExecRequest(secret=secret, token=stack.token, argv=(f"sh -c 'touch {touched}'",),
                    timeout_seconds=5),
    )  # fmt: skip
    assert (answer["kind"], answer["exit_code"]) == ("result", 127), answer
    assert b"command not found" in base64.b64decode(answer["stderr"])  # output is base64
    assert not touched.exists()


# --- 4. the executor is reachable by the gateway only -----------------------------------


def test_the_executor_refuses_a_wrong_secret(stack: GuardianStack) -> None:
    touched = marker("wrong-secret")
    secret = stack.executor.secret_path.read_text(encoding="ascii").strip()
    wrong = secrets.token_hex(32)
    assert wrong != secret

    refused = ask_executor(
        stack,
        ExecRequest(secret=wrong, token=stack.token, argv=("touch", str(touched)),
                    timeout_seconds=5),
    )  # fmt: skip
    assert refused == {"kind": "refusal", "reason": "wrong secret"}
    assert not touched.exists()

    unknown = ask_executor(
        stack,
        ExecRequest(secret=secret, token="0" * 64, argv=("touch", str(touched)),
                    timeout_seconds=5),
    )  # fmt: skip
    assert unknown == {"kind": "refusal", "reason": "unknown cloister token"}
    assert not touched.exists()

    # The control: with the stack's secret and a cloister's token, the same socket runs.
    answer = ask_executor(
        stack, ExecRequest(secret=secret, token=stack.token, argv=("pwd",), timeout_seconds=5)
    )
    assert (answer["kind"], answer["exit_code"]) == ("result", 0), answer
    assert base64.b64decode(answer["stdout"]) == f"{stack.project_dir}\n".encode()


def test_the_executor_listens_on_its_unix_socket_only(stack: GuardianStack) -> None:
    held = socket_inodes(stack.executor.pid)
    assert held, "the executor holds no socket at all?"
    assert held.isdisjoint(inet_inodes()), "the executor has a TCP or UDP socket"
    listening = {inode: path for inode, path in unix_listeners().items() if inode in held}
    assert list(listening.values()) == [str(stack.executor.socket_path)]
    assert stack.executor.socket_path.stat().st_mode & 0o777 == 0o600
    assert stack.executor.run_dir.stat().st_mode & 0o777 == 0o700


def test_the_cloister_reaches_the_gateway_and_nothing_else(
    stack: GuardianStack,
    host_listener: HostListener,
    docker_client: docker.DockerClient,
    skip_or_fail: SkipOrFail,
) -> None:
    assert stack.cloisternet is not None
    assert stack.control is not None
    host_ip = host_primary_ipv4(docker_client)
    if host_ip is None:
        skip_or_fail("the host has no IPv4 address outside the Docker networks")
    network_gateway = stack.cloisternet.attrs["IPAM"]["Config"][0]["Gateway"]
    assert stack.hub is not None
    stack.hub.reload()
    hub_address = stack.hub.attrs["NetworkSettings"]["Networks"][stack.control.name]["IPAddress"]
    port = host_listener.port

    results = probe_all(
        stack,
        {
            # The control: the gateway answers, by its alias, on the request port.
            "gateway": curl(f"http://{GUARDIAN_ALIAS}:{REQUEST_PORT}/healthz"),
            # No executor socket, no Docker socket.
            "mounts": "ls -d /run/cloister /var/run/docker.sock /run/docker.sock",
            # No host: not through the network's gateway address, nor its primary one.
            "host via the network gateway": tcp_connect(network_gateway, port),
            "host via its primary address": tcp_connect(host_ip, port),
            # No hub: its name does not resolve, its control address is out of reach,
            # and its published port is on the host's loopback only.
            "hub name": f"RES_OPTIONS='timeout:2 attempts:1' getent hosts {HUB_ALIAS}",
            "hub by name": curl(f"http://{HUB_ALIAS}:{HUB_PORT}/api/v1/health"),
            "hub by address": curl(f"http://{hub_address}:{HUB_PORT}/api/v1/health"),
            "hub's published port": curl(f"http://{host_ip}:{stack.hub_port}/api/v1/health"),
        },
    )

    gateway = results.pop("gateway")
    assert (gateway.exit_code, gateway.out) == (0, '{"status":"ok"}'), gateway
    for name, result in results.items():
        assert result.exit_code != 0, (name, result)
        assert result.stdout == b"", (name, result)
    assert "No such file or directory" in results["mounts"].err
    assert host_listener.peers == []
    # The controls on the host side: the listener and the hub are up and reachable there.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        assert sock.recv(100).startswith(b"cloister-ci-listener says hello")
    with stack.human() as human:
        assert human.get("/api/v1/health").status_code == 200


# --- 5. limits: time and output ---------------------------------------------------------


def test_a_command_past_its_timeout_is_killed_with_its_children(
    short_stack: GuardianStack,
) -> None:
    pid_file = short_stack.project_dir / "child.pid"
    result = short_stack.hostexec("sh", "-c", "sleep 300 & echo $! > child.pid; sleep 300")

    assert result.exit_code == 137, result
    assert "killed after 2s" in result.err, result
    assert 1.5 < result.seconds < 15, result
    child = int(pid_file.read_text())
    wait_until(lambda: process_gone(child), 10, f"the background child {child} to be gone")


def test_output_over_the_cap_is_truncated_with_a_notice(stack: GuardianStack) -> None:
    line = b"0123456789abcdefghijklmnopqrstuvwxyz\n"
    content = (line * (2_000_000 // len(line) + 1))[:2_000_000]
    (stack.project_dir / "big.txt").write_bytes(content)

    out = stack.hostexec("head", "-c", "2000000", "big.txt")
    assert out.exit_code == 0, out
    assert len(out.stdout) == OUTPUT_CAP == 1048576
    assert out.stdout == content[:OUTPUT_CAP]
    assert out.err == "hostexec: stdout was truncated (over 1 MiB)\n"

    err = stack.hostexec("sh", "-c", "head -c 2000000 big.txt >&2")
    assert err.exit_code == 0, err
    assert err.stdout == b""
    assert err.stderr == content[:OUTPUT_CAP] + b"hostexec: stderr was truncated (over 1 MiB)\n"


def test_nul_bytes_and_binary_output_arrive_unchanged(stack: GuardianStack) -> None:
    result = stack.hostexec("head", "-c", "16", "/dev/zero")
    assert result.exit_code == 0, result
    assert result.stdout == b"\0" * 16
    (stack.project_dir / "binary").write_bytes(bytes(range(256)))
    binary = stack.hostexec("head", "-c", "256", "binary")
    assert binary.stdout == bytes(range(256))


# --- 6. the audit trail -----------------------------------------------------------------


def test_the_gateway_audits_request_decision_and_completion(stack: GuardianStack) -> None:
    tag = f"audit-{secrets.token_hex(4)}"
    ran = stack.hostexec("sh", "-c", "exit 5", tag)
    assert ran.exit_code == 5, ran
    denied = stack.hostexec("ls", tag)
    assert denied.exit_code == 1, denied

    def records_after_request(argv: list[str], count: int) -> list[dict[str, Any]]:
        records = stack.gateway_audit()
        starts = [i for i, record in enumerate(records) if record.get("argv") == argv]
        following = records[starts[-1] :] if starts else []
        return following[:count] if len(following) >= count else []

    request, decision, complete = wait_until(
        lambda: records_after_request(["sh", "-c", "exit 5", tag], 3), 10, "the audit lines"
    )
    assert request["event"] == "hostexec.request"
    assert request["cloister"] == CLOISTER
    assert request["command"] == f"sh -c 'exit 5' {tag}"
    assert decision["event"] == "hostexec.decision"
    assert (decision["command"], decision["status"]) == (request["command"], "auto_approved")
    assert decision["pattern"] == "^(echo|pwd|true|sh|head)( .*)?$"
    assert complete["event"] == "hostexec.complete"
    assert complete["cloister"] == CLOISTER
    assert (complete["exit_code"], complete["timed_out"]) == (5, False)
    assert isinstance(complete["duration_ms"], float | int)
    assert 0 < complete["duration_ms"] < 10_000

    request, decision = wait_until(
        lambda: records_after_request(["ls", tag], 2), 10, "the denial's audit lines"
    )
    assert request["event"] == "hostexec.request"
    assert decision["event"] == "hostexec.decision"
    assert decision["status"] == "denied"
    assert "matches no auto_approve" in decision["reason"]

    # The token is the cloister's secret: it never appears in the audit trail.
    assert stack.token not in json.dumps(stack.gateway_audit())
