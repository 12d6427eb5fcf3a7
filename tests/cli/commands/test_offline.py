"""Commands that need no Docker engine, through click's runner and temporary directories.

Where a command asks Docker only which cloisters exist (``project remove``,
``worktree remove``), the engine is a fake that lists what the test says.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cloister_cli.commands.main import cli
from cloister_cli.container.cloisters import Workspace
from cloister_cli.context import Context
from cloister_cli.repo import git, projects
from cloister_cli.repo.projects import Project
from cloister_cli.session import sessions
from cloister_cli.start.worktree import make_worktree
from cloister_core.paths import CloisterPaths
from tests.cli.engine_support import INSTANCE
from tests.fake_engine import FakeEngine
from tests.git_support import hermetic_git, make_repo, run_git
from tests.waiting import free_port


def add_cloister(engine: FakeEngine, project: str, path: Path, name: str | None = None) -> None:
    labels = {
        **INSTANCE.labels,
        "org.cloister.cloister": name or project,
        "org.cloister.project": project,
        "org.cloister.path": str(path),
        "org.cloister.branch": "",
    }
    engine.add_container(INSTANCE.cloister(name or project), labels)


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeEngine]:
    fake = FakeEngine()
    monkeypatch.setattr(Context, "docker", property(lambda self: fake))
    monkeypatch.setattr(Context, "instance", property(lambda self: INSTANCE))
    yield fake
    # Whatever the command, it asked for this instance's cloisters, stopped ones too.
    for listing in fake.called("containers.list"):
        assert listing == {
            "all": True,
            "filters": {"label": ["org.cloister.cloister", INSTANCE.label_filter]},
        }


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "CLOISTER_CONFIG_DIR": str(tmp_path / "config"),
        "CLOISTER_DATA_DIR": str(tmp_path / "data"),
    }


@pytest.fixture
def paths(env: dict[str, str]) -> CloisterPaths:
    return CloisterPaths.from_env(env)


def run(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env, prog_name="cloister")


def assert_clean_error(result: Result, message: str) -> None:
    """Exit status 1 and one line, ``Error: <message>``: no traceback."""
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.output == f"Error: {message}\n"
    assert "Traceback" not in result.output


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# -- project -----------------------------------------------------------------------------


def test_project_list_when_there_are_none(env: dict[str, str]) -> None:
    result = run(env, "project", "list", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == []
    told = run(env, "project", "list")
    assert told.exit_code == 0
    assert told.output == "no projects yet: `cloister start` in a repository registers one\n"


def test_project_list(env: dict[str, str], paths: CloisterPaths, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src" / "api")
    projects.register(paths, Project("api", repo, git=True, remote="https://x.invalid/api"))
    write(paths.project_config("docs"), "refs: [/srv/manual]\n")
    result = run(env, "project", "list", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [
        {"name": "api", "root": str(repo), "remote": "https://x.invalid/api", "refs": []},
        {"name": "docs", "root": None, "remote": None, "refs": ["/srv/manual"]},
    ]
    table = run(env, "project", "list")
    assert "https://x.invalid/api" in table.output
    assert "/srv/manual" in table.output


def test_project_list_reports_a_broken_file(env: dict[str, str], paths: CloisterPaths) -> None:
    broken = write(paths.project_config("api"), "proxy:\n  alow: []\n")
    result = run(env, "project", "list")
    assert_clean_error(result, f"{broken}:2:3: unknown key 'alow' in proxy; did you mean 'allow'?")


def test_project_show_lists_merged_rules_with_their_files(
    env: dict[str, str], paths: CloisterPaths, tmp_path: Path
) -> None:
    write(paths.config_file, "proxy:\n  allow: [{domain: global.test}]\n")
    project_file = write(
        paths.project_config("api"),
        f"root: {tmp_path / 'api'}\nrefs: [/srv/docs]\nproxy:\n  deny: [{{domain: bad.test}}]\n",
    )
    decisions = write(paths.project_decisions("api"), "allow: [{pattern: '*.decided.test'}]\n")
    result = run(env, "project", "show", "api", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert {key: document[key] for key in ("name", "root", "remote", "refs", "config_file")} == {
        "name": "api",
        "root": str(tmp_path / "api"),
        "remote": None,
        "refs": ["/srv/docs"],
        "config_file": str(project_file),
    }
    assert document["rules"] == [
        {"action": "deny", "rule": "bad.test", "scope": "project", "file": str(project_file)},
        {
            "action": "allow",
            "rule": "global.test",
            "scope": "global",
            "file": str(paths.config_file),
        },
        {
            "action": "allow",
            "rule": "*.decided.test",
            "scope": "project-decisions",
            "file": str(decisions),
        },
    ]
    table = run(env, "project", "show", "api")
    assert table.exit_code == 0, table.output
    assert str(tmp_path / "api") in table.output
    for text in ("bad.test", "global.test", "*.decided.test", "project-decisions"):
        assert text in table.output


def test_project_show_does_not_write_the_default_config(
    env: dict[str, str], paths: CloisterPaths
) -> None:
    write(paths.project_config("api"), "root: /x\n")
    result = run(env, "project", "show", "api", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rules"] == []
    assert not paths.config_file.exists()


@pytest.mark.usefixtures("engine")
def test_project_remove_deletes_config_and_decisions(
    env: dict[str, str], paths: CloisterPaths
) -> None:
    config = write(paths.project_config("api"), "root: /x\n")
    decisions = write(paths.project_decisions("api"), "allow: [{domain: a.test}]\n")
    result = run(env, "project", "remove", "api")
    assert result.exit_code == 0, result.output
    assert result.output == f"deleted {config}\ndeleted {decisions}\n"
    assert not config.exists()
    assert not decisions.exists()


def test_project_remove_refuses_while_its_cloisters_exist(
    env: dict[str, str], paths: CloisterPaths, engine: FakeEngine, tmp_path: Path
) -> None:
    config = write(paths.project_config("api"), "root: /x\n")
    add_cloister(engine, "api", tmp_path / "api")
    add_cloister(engine, "web", tmp_path / "web")
    add_cloister(engine, "api", tmp_path / "wt", name="api-feature")
    result = run(env, "project", "remove", "api")
    assert_clean_error(result, "stop its cloisters first: api, api-feature")
    assert config.exists()


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("project", "remove", "nope"), "no project 'nope' (`cloister project list`)"),
        (("project", "show", "nope"), "no project 'nope' (`cloister project list`)"),
        (
            ("project", "remove", "../config"),
            "project name '../config' is not valid: use lower-case letters, digits, '.', '_'"
            " and '-', starting with a letter or digit",
        ),
        (
            ("project", "show", "../x"),
            "project name '../x' is not valid: use lower-case letters, digits, '.', '_'"
            " and '-', starting with a letter or digit",
        ),
        (
            ("project", "show", "My API"),
            "project name 'My API' is not valid: use lower-case letters, digits, '.', '_'"
            " and '-', starting with a letter or digit",
        ),
        (
            ("worktree", "list", "../x"),
            "project name '../x' is not valid: use lower-case letters, digits, '.', '_'"
            " and '-', starting with a letter or digit",
        ),
        (("worktree", "remove", "api", "feature"), "no worktree {data}/worktrees/api/feature"),
    ],
)
def test_errors_are_one_clean_line(
    env: dict[str, str], args: tuple[str, ...], message: str
) -> None:
    result = run(env, *args)
    assert_clean_error(result, message.format(data=env["CLOISTER_DATA_DIR"]))


# -- worktree ----------------------------------------------------------------------------


def test_worktree_list_on_an_empty_data_dir(env: dict[str, str], paths: CloisterPaths) -> None:
    result = run(env, "worktree", "list", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == []
    told = run(env, "worktree", "list")
    assert told.exit_code == 0
    assert told.output == "no worktrees: `cloister start -b BRANCH` in a repository makes one\n"
    assert not paths.data_dir.exists()


BRANCH = "feature/login"
CLOISTER = "api-feature-login"


@pytest.fixture
def worktree(paths: CloisterPaths, tmp_path: Path) -> tuple[Path, Path]:
    """Project api with a worktree for branch feature/login, as `start -b` leaves it:
    its directory, its files, the cloister's git directory and session record."""
    repo = make_repo(tmp_path / "src" / "api")
    project = Project("api", repo, git=True)
    projects.register(paths, project)
    directory = paths.worktree("api", "feature-login")
    make_worktree(repo, directory, BRANCH)
    workspace = Workspace(project, directory, BRANCH)
    sessions.prepare(paths, workspace, CLOISTER, home=tmp_path / "home")
    return repo, directory


def test_worktree_list(env: dict[str, str], worktree: tuple[Path, Path]) -> None:
    _, directory = worktree
    assert (directory / "README").read_text(encoding="utf-8") == "hello\n"
    listed = run(env, "worktree", "list", "--json")
    assert listed.exit_code == 0, listed.output
    row = {"project": "api", "branch": BRANCH, "path": str(directory), "dirty": False}
    assert json.loads(listed.output) == [row]
    (directory / "scratch").write_text("x", encoding="utf-8")
    assert json.loads(run(env, "worktree", "list", "api", "--json").output) == [
        {**row, "dirty": True}
    ]
    assert json.loads(run(env, "worktree", "list", "other", "--json").output) == []
    assert run(env, "worktree", "list", "other").output.startswith("no worktrees of other: ")
    table = run(env, "worktree", "list")
    assert table.exit_code == 0, table.output
    assert BRANCH in table.output
    assert "yes" in table.output


def test_a_changed_tracked_file_is_dirty(env: dict[str, str], worktree: tuple[Path, Path]) -> None:
    _, directory = worktree
    (directory / "README").write_text("changed\n", encoding="utf-8")
    assert json.loads(run(env, "worktree", "list", "--json").output)[0]["dirty"] is True
    (directory / "README").write_text("hello\n", encoding="utf-8")
    assert json.loads(run(env, "worktree", "list", "--json").output)[0]["dirty"] is False


def test_work_the_agents_synced_branch_holds_is_not_dirty(
    env: dict[str, str], worktree: tuple[Path, Path]
) -> None:
    """Compared with refs/cloister/<cloister>/<branch> (its last sync), not the human's."""
    repo, directory = worktree
    (directory / "README").write_text("agent's\n", encoding="utf-8")
    assert json.loads(run(env, "worktree", "list", "--json").output)[0]["dirty"] is True
    blob = run_git(repo, "hash-object", "-w", str(directory / "README"))
    tree = git.run(repo, "mktree", input=f"100644 blob {blob}\tREADME\n").stdout.strip()
    parent = run_git(repo, "rev-parse", BRANCH)
    commit = run_git(repo, "commit-tree", tree, "-p", parent, "-m", "the agent's")
    run_git(repo, "update-ref", f"refs/cloister/{CLOISTER}/{BRANCH}", commit)
    assert json.loads(run(env, "worktree", "list", "--json").output)[0]["dirty"] is False


def test_a_worktree_cloister_cannot_tell_about_counts_as_dirty(
    env: dict[str, str], paths: CloisterPaths, tmp_path: Path
) -> None:
    """One an older Cloister made (`git worktree add`), and one with no session record."""
    repo = make_repo(tmp_path / "src" / "api")
    projects.register(paths, Project("api", repo, git=True))
    old = paths.worktree("api", "old")
    old.parent.mkdir(parents=True)
    run_git(repo, "worktree", "add", "-q", "-b", "old", str(old))
    bare = paths.worktree("api", "bare")
    make_worktree(repo, bare, "bare")
    rows = json.loads(run(env, "worktree", "list", "--json").output)
    assert rows == [
        {"project": "api", "branch": None, "path": str(bare), "dirty": True},
        {"project": "api", "branch": None, "path": str(old), "dirty": True},
    ]


def test_worktree_list_refuses_a_bad_project_name(env: dict[str, str]) -> None:
    result = run(env, "worktree", "list", "../x")
    assert result.exit_code == 1, result.output
    assert "project name" in result.output


@pytest.mark.usefixtures("engine")
def test_worktree_remove_refuses_a_dirty_one_without_force(
    env: dict[str, str], worktree: tuple[Path, Path]
) -> None:
    repo, directory = worktree
    (directory / "scratch").write_text("x", encoding="utf-8")
    refused = run(env, "worktree", "remove", "api", BRANCH)
    assert_clean_error(
        refused,
        f"{directory} holds work its branch does not have (or Cloister cannot tell);"
        " commit it inside the cloister, or remove anyway with -f",
    )
    assert (directory / "scratch").exists()
    removed = run(env, "worktree", "remove", "api", BRANCH, "-f")
    assert removed.exit_code == 0, removed.output
    assert removed.output == (
        f"removed {directory} (the branch stays; the agent's is refs/cloister/…)\n"
    )
    assert not directory.exists()
    assert git.branch_exists(repo, BRANCH)  # the branch stays


@pytest.mark.usefixtures("engine")
def test_worktree_remove_takes_a_clean_one(
    env: dict[str, str], worktree: tuple[Path, Path]
) -> None:
    _, directory = worktree
    removed = run(env, "worktree", "remove", "api", BRANCH)
    assert removed.exit_code == 0, removed.output
    assert not directory.exists()
    assert json.loads(run(env, "worktree", "list", "--json").output) == []


@pytest.mark.usefixtures("engine")
def test_worktree_remove_makes_the_repository_forget_an_older_cloisters_worktree(
    env: dict[str, str], paths: CloisterPaths, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "src" / "api")
    projects.register(paths, Project("api", repo, git=True))
    old = paths.worktree("api", "old")
    old.parent.mkdir(parents=True)
    run_git(repo, "worktree", "add", "-q", "-b", "old", str(old))
    refused = run(env, "worktree", "remove", "api", "old")
    assert refused.exit_code == 1  # Cloister cannot tell what it holds
    assert old.is_dir()
    removed = run(env, "worktree", "remove", "api", "old", "-f")
    assert removed.exit_code == 0, removed.output
    assert not old.exists()
    listed = run_git(repo, "worktree", "list", "--porcelain").splitlines()
    assert [line for line in listed if line.startswith("worktree ")] == [f"worktree {repo}"]
    assert git.branch_exists(repo, "old")


@pytest.mark.usefixtures("engine")
def test_worktree_remove_follows_no_link_inside(
    env: dict[str, str], worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    _, directory = worktree
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("mine\n", encoding="utf-8")
    (directory / "link").symlink_to(precious)
    removed = run(env, "worktree", "remove", "api", BRANCH, "-f")
    assert removed.exit_code == 0, removed.output
    assert not directory.exists()
    assert (precious / "keep").read_text(encoding="utf-8") == "mine\n"


def test_worktree_remove_refuses_while_its_cloister_runs(
    env: dict[str, str], worktree: tuple[Path, Path], engine: FakeEngine
) -> None:
    _, directory = worktree
    add_cloister(engine, "api", directory, name="api-feature-login")
    result = run(env, "worktree", "remove", "api", "feature/login")
    assert_clean_error(result, "stop its cloister first: cloister stop api-feature-login")
    assert directory.exists()


# -- completion, config, others ------------------------------------------------------------


@pytest.mark.parametrize(
    ("shell", "registers"),
    [
        ("bash", "complete -o nosort -F _cloister_completion cloister"),
        ("zsh", "compdef _cloister_completion cloister"),
        ("fish", 'complete --no-files --command cloister --arguments "(_cloister_completion)"'),
    ],
)
def test_completion_scripts(shell: str, registers: str) -> None:
    result = CliRunner().invoke(cli, ["completion", shell], prog_name="cloister")
    assert result.exit_code == 0, result.output
    assert f"_CLOISTER_COMPLETE={shell}_complete" in result.output
    assert registers in result.output


def test_completion_answers_what_the_script_asks() -> None:
    """The script calls `cloister` back with _CLOISTER_COMPLETE set: that must complete."""
    result = CliRunner().invoke(
        cli,
        [],
        env={
            "_CLOISTER_COMPLETE": "bash_complete",
            "COMP_WORDS": "cloister pro",
            "COMP_CWORD": "1",
        },
        prog_name="cloister",
    )
    assert result.exit_code == 0, result.output
    assert result.output == "plain,project\n"


def test_completion_refuses_other_shells() -> None:
    result = CliRunner().invoke(cli, ["completion", "tcsh"], prog_name="cloister")
    assert result.exit_code == 2
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in result.output


def test_config_path_json(env: dict[str, str]) -> None:
    result = run(env, "config", "path", "--json")
    assert result.exit_code == 0, result.output
    config, data = env["CLOISTER_CONFIG_DIR"], env["CLOISTER_DATA_DIR"]
    assert json.loads(result.output) == {
        "config_dir": config,
        "config_file": f"{config}/config.yaml",
        "projects_dir": f"{config}/projects",
        "decisions_dir": f"{config}/decisions",
        "tokens_dir": f"{config}/tokens",
        "data_dir": data,
        "audit_log": f"{data}/audit.log",
        "logs_dir": f"{data}/logs",
    }


def test_approvals_with_the_hub_down(env: dict[str, str], paths: CloisterPaths) -> None:
    port = free_port()  # nothing listens there
    write(paths.config_file, f"guardian:\n  ui_port: {port}\n")
    write(paths.guardian_dir / "hub.secret", "0" * 64 + "\n")  # as `guardian start` leaves it
    result = run(env, "approvals", "list")
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: the approval hub at http://127.0.0.1:{port} is not")
    assert result.output.endswith("(`cloister guardian status`)\n")
    assert "Traceback" not in result.output


def test_stop_with_a_name_and_all_is_a_usage_error(env: dict[str, str]) -> None:
    result = run(env, "stop", "api", "--all")
    assert result.exit_code == 2
    assert "give a NAME or --all, not both" in result.output


@pytest.mark.parametrize(
    "args",
    [("start", "-d"), ("list",), ("stop", "api"), ("path", "api"), ("guardian", "status")],
    ids=" ".join,
)
def test_a_stopped_engine_is_one_clear_line(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    repo = make_repo(tmp_path / "api")
    monkeypatch.chdir(repo)
    result = run({**env, "DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}"}, *args)
    assert result.exit_code == 1, result.output
    socket_path = tmp_path / "no-engine.sock"
    assert result.output.startswith(
        f"Error: no Docker engine is reachable (unix://{socket_path}: No such file or directory)"
    ), result.output
    assert result.output.endswith("); start Docker and try again\n"), result.output
    assert result.output.count("\n") == 1


def test_a_stale_engine_socket_is_one_clear_line(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon that died leaves its socket file behind: nothing listens on it."""
    stale = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(stale))
    monkeypatch.chdir(tmp_path)
    result = run({**env, "DOCKER_HOST": f"unix://{stale}"}, "list")
    assert_clean_error(
        result,
        f"no Docker engine is reachable (unix://{stale}: Connection refused);"
        " start Docker and try again",
    )
