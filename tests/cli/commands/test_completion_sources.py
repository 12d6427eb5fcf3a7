"""Shell completion of names, through the script's own protocol (``_CLOISTER_COMPLETE``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from cloister_cli.commands import completion_sources
from cloister_cli.commands.main import cli
from cloister_cli.context import Context
from cloister_cli.stack.hub_client import HubError
from cloister_core.fileio import lock_path
from cloister_core.paths import CloisterPaths
from tests.cli.engine_support import FakeEngineApi, cloister_attrs, instance_of, serve


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "CLOISTER_CONFIG_DIR": str(tmp_path / "config"),
        "CLOISTER_DATA_DIR": str(tmp_path / "data"),
        "DOCKER_HOST": f"unix://{tmp_path / 'engine.sock'}",
    }


@pytest.fixture
def paths(env: dict[str, str]) -> CloisterPaths:
    return CloisterPaths.from_env(env)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeEngineApi]:
    mine = instance_of(tmp_path)
    api = FakeEngineApi(
        [
            cloister_attrs("api", path="/src/api", instance=mine),
            cloister_attrs("api-feature", project="api", path="/wt/api-feature", instance=mine),
            cloister_attrs("web", path="/src/web", status="exited", instance=mine),
            cloister_attrs("another-users", path="/src/x"),  # not this instance's
        ]
    )
    with serve(tmp_path / "engine.sock", api) as served:
        yield served


def touch(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("", encoding="utf-8")


def complete(env: dict[str, str], line: str, style: str = "bash") -> list[str]:
    """What `cloister` offers for the last word of *line* (empty after a trailing space)."""
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    result = CliRunner().invoke(
        cli,
        [],
        env={
            **env,
            "_CLOISTER_COMPLETE": f"{style}_complete",
            "COMP_WORDS": line,
            "COMP_CWORD": str(cword),
        },
        prog_name="cloister",
    )
    assert result.exit_code == 0, result.output
    if style == "zsh":
        return result.output.splitlines()
    return [item.split(",", 1)[1] for item in result.output.splitlines() if item]


@pytest.mark.usefixtures("api")
@pytest.mark.parametrize("command", ["stop", "path"])
def test_cloister_names(env: dict[str, str], command: str) -> None:
    assert complete(env, f"cloister {command} ") == ["api", "api-feature", "web"]
    assert complete(env, f"cloister {command} api-") == ["api-feature"]


@pytest.mark.usefixtures("api")
def test_exec_completes_the_name_only(env: dict[str, str]) -> None:
    assert complete(env, "cloister exec w") == ["web"]
    assert complete(env, "cloister exec web ") == []
    assert complete(env, "cloister exec -- ") == []


@pytest.mark.usefixtures("api")
def test_zsh_shows_where_each_cloister_works(env: dict[str, str]) -> None:
    assert complete(env, "cloister stop w", style="zsh") == ["plain", "web", "/src/web"]


def test_no_engine_means_no_suggestions(env: dict[str, str]) -> None:
    assert complete(env, "cloister stop ") == []


def test_a_failing_engine_means_no_suggestions(env: dict[str, str], api: FakeEngineApi) -> None:
    api.status = 500
    assert complete(env, "cloister stop ") == []


def test_review_offers_session_records_and_cloisters(
    env: dict[str, str], paths: CloisterPaths, api: FakeEngineApi
) -> None:
    touch(paths.session_file("old-one"))
    touch(paths.sessions_dir / "Not A Name.json")
    touch(lock_path(paths.session_file("old-one")))  # update_session's lock: no name
    assert complete(env, "cloister review ") == ["api", "api-feature", "old-one", "web"]
    api.status = 500
    assert complete(env, "cloister review ") == ["old-one"]


def test_logs_offers_logs_session_records_and_cloisters(
    env: dict[str, str], paths: CloisterPaths, api: FakeEngineApi
) -> None:
    touch(paths.cloister_log("gone"))  # stopped, its record gone: the log stays
    touch(paths.session_file("old-one"))
    touch(paths.logs_dir / "Not A Name.log")
    assert complete(env, "cloister logs ") == ["api", "api-feature", "gone", "old-one", "web"]
    api.status = 500
    assert complete(env, "cloister logs ") == ["gone", "old-one"]


def test_project_names(env: dict[str, str], paths: CloisterPaths) -> None:
    assert complete(env, "cloister project show ") == []
    touch(paths.project_config("api"))
    touch(paths.project_config("web"))
    touch(paths.project_decisions("decided"))
    touch(paths.projects_dir / "notes.txt")
    touch(paths.projects_dir / "..yaml")
    assert complete(env, "cloister project show ") == ["api", "decided", "web"]
    assert complete(env, "cloister project remove a") == ["api"]
    assert complete(env, "cloister start -p w") == ["web"]
    assert complete(env, "cloister start --project ") == ["api", "decided", "web"]


def test_worktree_names(env: dict[str, str], paths: CloisterPaths) -> None:
    for directory in ("feature-login", "fix-1"):
        (paths.worktrees_dir / "api" / directory).mkdir(parents=True)
    (paths.worktrees_dir / "web" / "main").mkdir(parents=True)
    assert complete(env, "cloister worktree list ") == ["api", "web"]
    assert complete(env, "cloister worktree remove ") == ["api", "web"]
    assert complete(env, "cloister worktree remove api ") == ["feature-login", "fix-1"]
    assert complete(env, "cloister worktree remove api f") == ["feature-login", "fix-1"]
    assert complete(env, "cloister worktree remove nope ") == []
    assert complete(env, "cloister worktree remove ../api ") == []


def test_top_level_commands_carry_their_summaries(env: dict[str, str]) -> None:
    offered = complete(env, "cloister pro", style="zsh")
    assert offered == ["plain", "project", "Projects: a repository, its name, its own..."]
    ctx = click.Context(cli)
    command = cli.get_command(ctx, "project")
    assert command is not None
    assert offered[2] == command.get_short_help_str()


# -- approvals (wired into `approvals allow|deny` by their module) -----------------------------


def call(source: completion_sources.Source, incomplete: str = "") -> list[tuple[str, Any]]:
    ctx = click.Context(click.Command("allow"))
    return [(item.value, item.help) for item in source(ctx, click.Argument(["x"]), incomplete)]


def test_pending_approval_ids(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    class Hub:
        def pending(self) -> dict[str, list[dict[str, Any]]]:
            return {
                "domains": [{"id": "3f2a9c1d", "host": "docs.example.org", "port": 443}],
                "commands": [{"id": "77aa01b2", "command": "make deploy"}],
            }

    monkeypatch.setattr(Context, "hub", property(lambda self: Hub()))
    assert call(completion_sources.pending_approval_ids) == [
        ("3f2a9c1d", "domain docs.example.org:443"),
        ("77aa01b2", "command make deploy"),
    ]
    assert call(completion_sources.pending_approval_ids, "7") == [
        ("77aa01b2", "command make deploy")
    ]


def test_pending_approval_ids_with_the_hub_down(monkeypatch: pytest.MonkeyPatch) -> None:
    class Hub:
        def pending(self) -> dict[str, list[dict[str, Any]]]:
            raise HubError("the approval hub at http://127.0.0.1:9 is not reachable")

    monkeypatch.setattr(Context, "hub", property(lambda self: Hub()))
    assert call(completion_sources.pending_approval_ids) == []
