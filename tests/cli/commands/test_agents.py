"""``cloister setup``, ``cloister exec`` and ``project remove --volumes``, without an engine."""

from __future__ import annotations

import json
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from cloister_cli.commands import setup as setup_command
from cloister_cli.commands.main import cli
from cloister_cli.context import Context
from cloister_core.credentials import load
from cloister_core.paths import CloisterPaths
from tests.cli.agents.hosthome import make_host_home
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeEngine


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "CLOISTER_CONFIG_DIR": str(tmp_path / "config"),
        "CLOISTER_DATA_DIR": str(tmp_path / "data"),
        "HOME": str(tmp_path / "home"),
    }


@pytest.fixture
def paths(env: dict[str, str]) -> CloisterPaths:
    return CloisterPaths.from_env(env)


def run(env: dict[str, str], *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, prog_name="cloister", input=stdin)


# -- setup -------------------------------------------------------------------------------


def test_setup_api_key_from_stdin(env: dict[str, str], paths: CloisterPaths) -> None:
    result = run(
        env, "setup", "claude", "--method", "api-key", "--secret-stdin", stdin="sk-ant-x1\n"
    )
    assert result.exit_code == 0, result.output
    assert "sk-ant-x1" not in result.output
    record = load(paths, "claude")
    assert record is not None
    assert record.secret is not None
    assert record.secret.get_secret_value() == "sk-ant-x1"
    path = paths.data_dir / "credentials" / "claude.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert (
        not (paths.config_dir / "config.yaml").exists()
        or "sk-ant-x1" not in (paths.config_dir / "config.yaml").read_text()
    )


@pytest.mark.parametrize(
    ("stdin", "message"),
    [("", "no API key given"), ("sk ant\n", "holds spaces or control characters")],
)
def test_setup_refuses_an_empty_or_odd_secret(
    env: dict[str, str], paths: CloisterPaths, stdin: str, message: str
) -> None:
    result = run(env, "setup", "codex", "--method", "api-key", "--secret-stdin", stdin=stdin)
    assert result.exit_code == 1
    assert message in result.output
    assert load(paths, "codex") is None


def test_setup_asks_after_explaining_the_methods(
    env: dict[str, str], paths: CloisterPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(setup_command, "_is_terminal", lambda: True)
    result = run(env, "setup", "gemini", stdin="1\nAIza-secret\n")
    assert result.exit_code == 0, result.output
    explained = result.output.split("Method")[0]
    assert "1. api-key:" in explained
    assert "3. existing-login:" in explained
    assert "Weaker" in explained
    assert "AIza-secret" not in result.output
    record = load(paths, "gemini")
    assert record is not None
    assert record.method == "api-key"


def test_setup_needs_a_method_without_a_terminal(env: dict[str, str]) -> None:
    result = run(env, "setup", "claude", stdin="")
    assert result.exit_code == 2
    assert "say --method when the input is not a terminal" in result.output


def test_existing_login_needs_the_login_on_this_machine(
    env: dict[str, str], paths: CloisterPaths, tmp_path: Path
) -> None:
    result = run(env, "setup", "claude", "--method", "existing-login")
    assert result.exit_code == 1
    assert "no login in" in result.output
    assert "claude" in result.output
    make_host_home(tmp_path / "home")
    result = run(env, "setup", "claude", "--method", "existing-login")
    assert result.exit_code == 0, result.output
    assert "Weaker" in result.output
    record = load(paths, "claude")
    assert record is not None
    assert (record.method, record.secret) == ("existing-login", None)


def test_setup_list_and_remove(env: dict[str, str]) -> None:
    run(env, "setup", "claude", "--method", "oauth-token", "--secret-stdin", stdin="tok-zq9")
    listed = json.loads(run(env, "setup", "--list", "--json").output)
    assert listed == [
        {"agent": "claude", "method": "oauth-token", "api_base": "https://api.anthropic.com"},
        {"agent": "codex", "method": None, "api_base": "https://api.openai.com"},
        {
            "agent": "gemini",
            "method": None,
            "api_base": "https://generativelanguage.googleapis.com",
        },
    ]
    assert "tok-zq9" not in run(env, "setup", "--list").output
    assert run(env, "setup", "claude", "--remove").exit_code == 0
    again = run(env, "setup", "claude", "--remove")
    assert again.exit_code == 1
    assert "claude was not set up" in again.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("setup",), "name the agent"),
        (("setup", "aider"), "'aider' is not one of 'claude', 'codex', 'gemini'"),
        (("setup", "--list", "claude"), "--list takes no AGENT"),
        (("setup", "claude", "--remove", "--method", "api-key"), "--remove takes no"),
    ],
)
def test_setup_usage_errors(env: dict[str, str], args: tuple[str, ...], message: str) -> None:
    result = run(env, *args)
    assert result.exit_code == 2
    assert message in result.output


# -- exec ----------------------------------------------------------------------------------


CONTAINER = INSTANCE.cloister("api")


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeEngine:
    fake = FakeEngine()
    labels = {
        **INSTANCE.labels,
        "org.cloister.cloister": "api",
        "org.cloister.path": str(tmp_path / "api"),
        "org.cloister.project": "api",
    }
    fake.add_container(CONTAINER, labels, image="x")
    monkeypatch.setattr(Context, "docker", property(lambda self: fake))
    monkeypatch.setattr(Context, "instance", property(lambda self: INSTANCE))
    return fake


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        calls.append(argv[1:])  # without the docker executable's path
        return subprocess.CompletedProcess(argv, 5)

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/docker")
    return calls


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize(
    ("args", "argv"),
    [
        (("api", "--", "claude", "-p", "x"), ["-w", "/work", CONTAINER, "claude", "-p", "x"]),
        (("api", "-w", "src", "--", "ls", "-l"), ["-w", "/work/src", CONTAINER, "ls", "-l"]),
        (("-w", "/tmp", "api", "--", "pwd"), ["-w", "/tmp", CONTAINER, "pwd"]),
        (("api", "ls", "-l"), ["-w", "/work", CONTAINER, "ls", "-l"]),  # docker's form
    ],
)
def test_exec_argv_and_exit_status(
    env: dict[str, str], ran: list[list[str]], args: tuple[str, ...], argv: list[str]
) -> None:
    result = run(env, "exec", *args)
    assert result.exit_code == 5  # the command's own status
    assert ran == [["exec", "-i", *argv]]


def test_exec_without_a_name_uses_the_directory(
    env: dict[str, str],
    engine: FakeEngine,
    ran: list[list[str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "api" / "src" / "deep").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "api" / "src" / "deep")
    result = run(env, "exec", "--", "make")
    assert result.exit_code == 5, result.output
    assert ran == [["exec", "-i", "-w", "/work/src/deep", CONTAINER, "make"]]


@pytest.mark.parametrize(
    ("status", "message"),
    [("paused", "paused by Cloister's git guard"), ("exited", "is exited")],
)
def test_exec_refuses_a_cloister_that_is_not_running(
    env: dict[str, str], engine: FakeEngine, ran: list[list[str]], status: str, message: str
) -> None:
    engine.containers.by_name[CONTAINER].status = status
    result = run(env, "exec", "api", "--", "true")
    assert result.exit_code == 1
    assert message in result.output
    assert ran == []


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nope", "--", "true"), "no cloister 'nope'"),
        (("api", "--"), "no command to run"),
        (("a", "b", "--", "c"), "one NAME before --"),
        (("api",), "say which command to run"),
    ],
)
def test_exec_errors(
    env: dict[str, str], ran: list[list[str]], args: tuple[str, ...], message: str
) -> None:
    result = run(env, "exec", *args)
    assert result.exit_code in (1, 2)
    assert message in result.output
    assert ran == []


# -- project remove --volumes ------------------------------------------------------------


def test_project_remove_keeps_the_agent_state_unless_volumes(
    env: dict[str, str], paths: CloisterPaths, engine: FakeEngine
) -> None:
    engine.containers.by_name.clear()
    config = paths.project_config("web")
    config.parent.mkdir(parents=True)
    config.write_text("root: /x\n")
    state = paths.data_dir / "agents" / "web" / "claude"
    state.mkdir(parents=True)
    (state / "history.jsonl").write_text("{}\n")
    kept = run(env, "project", "remove", "web")
    assert kept.exit_code == 0, kept.output
    assert "--volumes deletes it" in kept.output
    assert state.exists()
    gone = run(env, "project", "remove", "web", "--volumes")  # no config left: state alone
    assert gone.exit_code == 0, gone.output
    assert not (paths.data_dir / "agents" / "web").exists()
    assert run(env, "project", "remove", "web", "--volumes").exit_code == 1
