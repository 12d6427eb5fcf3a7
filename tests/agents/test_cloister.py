"""Issue 10 acceptance: the real agent CLIs in real cloisters, logged in by the gateway.

Driven as a person drives it: ``cloister setup`` with the key on stdin, ``cloister
start -d --agent …``, ``cloister exec NAME -- claude -p …``. The model API is a fake
served by this process on the host's address on Docker's default bridge, where an
outside service would be (never one of the guardian's own networks, which the gateway
refuses): the credential gateway forwards to it (``agents.<name>.api_base``, its
address allowed by ``proxy.allow_private_networks``, the guard the gateway shares with
the proxy). The
human's home is a fake one full of history, transcripts, logins and hooks marked
``LEAK``. Every check of "the key is nowhere" looks where a leak would be: every
process environment and every file in the cloister, ``docker inspect`` of the cloister
and of the guardian's containers, their logs, the audit log, and Cloister's own files
on the host (the stored credential is the one file that may hold it).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.agents.agent_images import AgentVersions
from tests.agents.fakeapi import FakeApiServer, serving
from tests.cli.agents.hosthome import SECRET, make_host_home
from tests.cli.cli_support import (
    CloisterCli,
    Result,
    container,
    docker_executable,
    exec_in,
    git,
    guardian,
    make_repo,
    remove_containers,
    run_command,
    unique,
)
from tests.conftest import SkipOrFail
from tests.executor.docker_support import logs_of
from tests.waiting import free_port

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

KEY = "sk-ant-api03-REAL-" + secrets.token_hex(16)  # the human's real key
CODEX_KEY = "sk-proj-REAL-" + secrets.token_hex(16)
GEMINI_KEY = "AIza-REAL-" + secrets.token_hex(16)
MADE_FILE = "fakeapi-was-here.txt"
# What the fake API has the agent run: make a file and commit it, as an agent does (the
# commit goes to the cloister's own git directory, and comes back by `cloister sync`).
AGENT_COMMAND = (
    f"echo cloister > /work/{MADE_FILE} && cd /work"
    f" && git add {MADE_FILE} && git commit -q -m 'made by the agent'"
)
RUN_TIMEOUT = 300.0


@dataclass
class Stack:
    cli: CloisterCli
    fakeapi: FakeApiServer
    home: Path
    image: str

    def requests(self, prefix: str) -> list[dict[str, Any]]:
        return [
            entry for entry in self.fakeapi.app.log.entries() if entry["path"].startswith(prefix)
        ]


def bridge_gateway(client: docker.DockerClient) -> str:
    """The host's address on Docker's default bridge: where the guardian reaches this
    process (not one of the guardian's own networks, which are never an upstream)."""
    config = client.networks.get("bridge").attrs["IPAM"]["Config"]
    address: str = config[0]["Gateway"]
    return address


def config(image: str, host: str, port: int) -> str:
    base = f"http://{host}:{port}"
    return (
        "# Written by tests/agents/test_cloister.py\n"
        f"defaults:\n  image: {image}\n  memory: 2g\n"
        f"guardian:\n  ui_port: {free_port()}\n"
        f"proxy:\n  allow_private_networks: ['{host}/32']\n"
        "agents:\n"
        f"  claude: {{api_base: '{base}'}}\n"
        f"  codex: {{api_base: '{base}'}}\n"
        f"  gemini: {{api_base: '{base}'}}\n"
    )


@pytest.fixture(scope="module")
def stack(
    docker_client: docker.DockerClient,
    tmp_path_factory: pytest.TempPathFactory,
    skip_or_fail: SkipOrFail,
    agents_image: str,
) -> Iterator[Stack]:
    """The fake API in this process, a guardian that forwards to it, and a human's home."""
    root = tmp_path_factory.mktemp("cloister-agents")
    home = make_host_home(root / "home")
    host = bridge_gateway(docker_client)
    with serving(host=host, bash_command=AGENT_COMMAND) as fake:
        text = config(agents_image, host, fake.port)
        with guardian(docker_client, root, text, skip_or_fail, home=home) as cli:
            yield Stack(cli, fake, home, agents_image)


def setup_key(cli: CloisterCli, agent: str, key: str) -> None:
    result = run_command(
        [str(cli.executable), "setup", agent, "--method", "api-key", "--secret-stdin"],
        cwd=cli.root,
        env=cli.env,
        timeout=60,
        stdin=key,
    )
    assert result.returncode == 0, result.describe()
    assert key not in result.output


def cloister_exec(cli: CloisterCli, name: str, *argv: str) -> Result:
    return cli.run("exec", name, "--", *argv, timeout=RUN_TIMEOUT)


def start(stack: Stack, project: str, agent: str) -> tuple[Path, str]:
    repository = make_repo(stack.cli.root / project)
    result = stack.cli.ok("start", "-d", "--agent", agent, cwd=repository, timeout=600)
    assert f"cloister {project} " in " ".join(result.stderr.split()), result.describe()
    return repository, project


SERVICES = ("proxy", "approval", "gateway", "credentials")


def stop(stack: Stack, name: str) -> None:
    stack.cli.run("stop", name)
    remove_containers([name])


def no_key_anywhere(stack: Stack, name: str, keys: list[str]) -> None:
    """None of *keys* in the cloister (environments, files, inspect, logs) or on the host
    outside the stored credential."""
    environments = exec_in(
        name, "for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$e\"; done 2>/dev/null"
    )
    assert "CLOISTER_TOKEN=" in environments.stdout  # it did read them
    docker_cli = docker_executable()
    inspected = subprocess.run(
        [docker_cli, "inspect", container(name)], capture_output=True, text=True, check=True
    ).stdout
    guardian_inspect = subprocess.run(
        [
            docker_cli,
            "inspect",
            *(stack.cli.instance.service(s) for s in SERVICES),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    client = docker.from_env()
    logs = "".join(
        logs_of(client.containers.get(each))
        for each in (container(name), *(stack.cli.instance.service(s) for s in SERVICES))
    )
    audit = (stack.cli.data_dir / "audit.log").read_text(encoding="utf-8")
    guardian_logs = stack.cli.run("guardian", "logs", "--tail", "500").output
    for key in keys:
        assert key not in environments.stdout
        assert key not in inspected
        assert key not in guardian_inspect
        assert key not in logs
        assert key not in audit
        assert key not in guardian_logs
    # every file of the cloister (the keys hold only [A-Za-z0-9-]: safe in the script)
    found = exec_in(
        name,
        " ".join(
            [
                "grep",
                "-rIl",
                *(f"-e {k}" for k in keys),
                "/",
                "--exclude-dir=proc",
                "--exclude-dir=sys",
                "--exclude-dir=dev",
                "2>/dev/null; true",
            ]
        ),
    )
    assert found.stdout.strip() == "", found.stdout
    holders = [
        str(path)
        for path in stack.cli.root.rglob("*")
        if path.is_file()
        and not path.is_symlink()
        and any(key.encode() in path.read_bytes() for key in keys)
    ]
    credentials = stack.cli.data_dir / "credentials"
    assert all(Path(path).parent == credentials for path in holders), holders


def test_claude_code_runs_unattended_and_never_holds_the_key(stack: Stack) -> None:
    cli = stack.cli
    setup_key(cli, "claude", KEY)
    project = unique("claude")
    repository, name = start(stack, project, "claude")
    try:
        before = len(stack.requests("/v1/messages"))
        run = cloister_exec(cli, name, "claude", "-p", "make the file")
        assert run.returncode == 0, run.describe()
        # The tool call ran unattended, in /work: the file is on the host, and its commit,
        # made in the cloister's own git directory, comes back and fast-forwards main.
        assert (repository / MADE_FILE).read_text() == "cloister\n"
        cli.ok("sync", name, cwd=repository)
        branch = git(repository, "symbolic-ref", "--short", "HEAD")
        assert git(repository, "log", "-1", "--format=%s").strip() == "made by the agent"
        assert git(repository, "rev-parse", f"refs/cloister/{name}/{branch}") == git(
            repository, "rev-parse", "HEAD"
        )
        assert git(repository, "status", "--porcelain") == ""
        messages = stack.requests("/v1/messages")[before:]
        assert len(messages) >= 2, messages
        for entry in messages:
            assert entry["headers"]["x-api-key"] == KEY  # the real key reached the API
            assert "authorization" not in entry["headers"]
        # The agent got the rules, and the uid a name whose home is the cloister's.
        rules = exec_in(name, 'cat "$CLAUDE_CONFIG_DIR/CLAUDE.md"')
        assert "Working in a cloister" in rules.stdout
        account = exec_in(name, 'whoami && getent passwd "$(id -u)" | cut -d: -f6')
        assert account.returncode == 0, account.describe()
        user, home = account.stdout.split()
        assert user == pwd.getpwuid(os.getuid()).pw_name  # the host user's name
        assert home == ("/root" if os.getuid() == 0 else "/home/cloister")
        no_key_anywhere(stack, name, [KEY])
        audit = [
            json.loads(line)
            for line in (cli.data_dir / "audit.log").read_text().splitlines()
            if '"credentials.request"' in line
        ]
        assert any(
            line["cloister"] == name and line["agent"] == "claude" and line["status"] == 200
            for line in audit
        )
    finally:
        stop(stack, name)


def test_agent_state_survives_stop_and_start_and_remove_volumes_deletes_it(stack: Stack) -> None:
    cli = stack.cli
    setup_key(cli, "claude", KEY)
    project = unique("resume")
    repository, name = start(stack, project, "claude")
    state = cli.data_dir / "agents" / project / "claude"
    try:
        first = cloister_exec(cli, name, "claude", "-p", "remember the word tangerine")
        assert first.returncode == 0, first.describe()
        transcripts = list((state / "projects").rglob("*.jsonl"))
        assert transcripts, sorted(state.rglob("*"))
        cli.ok("stop", name)
        cli.ok("start", "-d", "--agent", "claude", cwd=repository, timeout=600)
        before = len(stack.requests("/v1/messages"))
        again = cloister_exec(cli, name, "claude", "--continue", "-p", "what was the word?")
        assert again.returncode == 0, again.describe()
        resumed = stack.requests("/v1/messages")[before]
        assert "tangerine" in json.dumps(resumed["body"])  # the earlier session came back
    finally:
        stop(stack, name)
    assert state.is_dir()
    cli.ok("project", "remove", project, "--volumes")
    assert not (cli.data_dir / "agents" / project).exists()


def test_the_humans_history_and_secrets_are_not_copied_in(stack: Stack) -> None:
    project = unique("home")
    _, name = start(stack, project, "claude")
    try:
        found = exec_in(name, f"grep -rl {SECRET} /home/cloister 2>/dev/null; true")
        assert found.stdout.strip() == "", found.stdout
        listed = exec_in(name, "find /home/cloister -name 'history.jsonl' -o -name '*.jsonl'")
        assert listed.stdout.strip() == "", listed.stdout
        # what is allowlisted is copied: the human's model and theme
        settings = json.loads(exec_in(name, 'cat "$CLAUDE_CONFIG_DIR/settings.json"').stdout)
        assert settings["model"] == "claude-opus-test"
        assert settings["permissions"] == {"defaultMode": "bypassPermissions"}
    finally:
        stop(stack, name)


def test_codex_and_gemini_files_versions_and_headless_runs(
    stack: Stack, versions: AgentVersions
) -> None:
    cli = stack.cli
    setup_key(cli, "codex", CODEX_KEY)
    setup_key(cli, "gemini", GEMINI_KEY)
    project = unique("codex")
    repository, name = start(stack, project, "codex")
    try:
        for argv, version in (
            (["codex", "--version"], versions.codex),
            (["gemini", "--version"], versions.gemini_cli),
            (["claude", "--version"], versions.claude_code),
        ):
            result = cloister_exec(cli, name, *argv)
            assert result.returncode == 0, result.describe()
            assert version in result.stdout
        codex_config = tomllib.loads(exec_in(name, 'cat "$CODEX_HOME/config.toml"').stdout)
        assert codex_config["approval_policy"] == "never"
        assert codex_config["sandbox_mode"] == "danger-full-access"
        assert "Working in a cloister" in exec_in(name, 'cat "$CODEX_HOME/AGENTS.md"').stdout
        gemini = json.loads(exec_in(name, "cat ~/.gemini/settings.json").stdout)
        assert gemini["security"]["auth"]["selectedType"] == "gemini-api-key"
        assert "Working in a cloister" in exec_in(name, "cat ~/.gemini/GEMINI.md").stdout

        before = len(stack.requests("/v1/responses"))
        run = cloister_exec(cli, name, "codex", "exec", "--skip-git-repo-check", "make the file")
        assert run.returncode == 0, run.describe()
        assert (repository / MADE_FILE).read_text() == "cloister\n"
        responses = stack.requests("/v1/responses")[before:]
        assert responses
        assert all(e["headers"]["authorization"] == f"Bearer {CODEX_KEY}" for e in responses)

        (repository / MADE_FILE).unlink()
        before = len(stack.requests("/v1beta/"))
        run = cloister_exec(cli, name, "gemini", "--approval-mode=yolo", "-p", "make the file")
        assert run.returncode == 0, run.describe()
        assert (repository / MADE_FILE).read_text() == "cloister\n"
        calls = stack.requests("/v1beta/")[before:]
        assert calls
        assert all(e["headers"]["x-goog-api-key"] == GEMINI_KEY for e in calls)
        no_key_anywhere(stack, name, [CODEX_KEY, GEMINI_KEY])
    finally:
        stop(stack, name)


def test_exec_passes_the_exit_status_and_runs_where_asked(stack: Stack) -> None:
    cli = stack.cli
    project = unique("exec")
    repository, name = start(stack, project, "claude")
    (repository / "sub").mkdir()
    try:
        status = cli.run("exec", name, "--", "sh", "-c", "exit 7")
        assert status.returncode == 7
        where = cli.ok("exec", name, "-w", "sub", "--", "pwd")
        assert where.stdout.strip() == "/work/sub"
        inside = cli.ok("exec", "--", "pwd", cwd=repository / "sub")  # NAME from the directory
        assert inside.stdout.strip() == "/work/sub"
        missing = cli.fails("exec", "no-such-cloister", "--", "true")
        assert "no cloister 'no-such-cloister'" in missing.stderr
    finally:
        stop(stack, name)
    assert "no cloister" in cli.fails("exec", name, "--", "true").stderr
