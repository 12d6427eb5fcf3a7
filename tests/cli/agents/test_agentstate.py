"""The agents' state directories: written at start as if the agent were hostile."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path

import pytest

from cloister_cli.agents import agentstate
from cloister_cli.agents.base import AgentSetupError, HomeFile, json_file, toml_file
from cloister_core.config.models import GlobalConfig, ProjectConfig
from cloister_core.credentials import store
from cloister_core.paths import CloisterPaths
from cloister_core.tokens import TokenRecord
from tests.cli.agents.hosthome import SECRET, make_host_home
from tests.tree_support import DEPTH, deep_tree

HOME = "/home/cloister"


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def record(tmp_path: Path) -> TokenRecord:
    return TokenRecord.create(cloister="api", project="api", path=tmp_path / "api")


def prepare(
    paths: CloisterPaths,
    record: TokenRecord,
    host_home: Path,
    config: GlobalConfig | None = None,
    chosen: str | None = None,
) -> agentstate.AgentPlan:
    return agentstate.prepare(
        paths,
        record=record,
        config=config or GlobalConfig(),
        project_config=ProjectConfig(),
        host_home=host_home,
        home=HOME,
        refs=["lib"],
        chosen=chosen,
    )


# -- write_home_file ---------------------------------------------------------------------


def test_a_new_file_is_written_with_its_mode(tmp_path: Path) -> None:
    assert agentstate.write_home_file(tmp_path, HomeFile("sub/dir/a.txt", b"x", 0o640))
    written = tmp_path / "sub" / "dir" / "a.txt"
    assert written.read_bytes() == b"x"
    assert stat.S_IMODE(written.stat().st_mode) == 0o640


def test_json_is_merged_onto_the_agents_own_state(tmp_path: Path) -> None:
    (tmp_path / ".claude.json").write_text(
        json.dumps({"userID": "u1", "projects": {"/work": {"history": [1]}}, "forced": False})
    )
    agentstate.write_home_file(
        tmp_path,
        json_file(".claude.json", {"forced": True, "projects": {"/work": {"trusted": True}}}),
    )
    assert json.loads((tmp_path / ".claude.json").read_text()) == {
        "userID": "u1",
        "projects": {"/work": {"history": [1], "trusted": True}},
        "forced": True,
    }


def test_toml_is_merged_too(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('model = "mine"\napproval_policy = "untrusted"\n')
    agentstate.write_home_file(tmp_path, toml_file("config.toml", {"approval_policy": "never"}))
    assert tomllib.loads((tmp_path / "config.toml").read_text()) == {
        "model": "mine",
        "approval_policy": "never",
    }


@pytest.mark.parametrize("broken", [b"{not json", b"[1, 2]", b"\xff\xfe", b"[" * 100_000])
def test_a_broken_state_file_is_replaced(tmp_path: Path, broken: bytes) -> None:
    (tmp_path / "settings.json").write_bytes(broken)
    agentstate.write_home_file(tmp_path, json_file("settings.json", {"a": 1}))
    assert json.loads((tmp_path / "settings.json").read_text()) == {"a": 1}


def test_a_link_planted_at_the_file_is_replaced_not_followed(tmp_path: Path) -> None:
    state, victim = tmp_path / "state", tmp_path / "victim.json"
    state.mkdir()
    victim.write_text('{"human": "data"}')
    (state / "settings.json").symlink_to(victim)
    agentstate.write_home_file(state, json_file("settings.json", {"a": 1}))
    assert victim.read_text() == '{"human": "data"}'
    assert not (state / "settings.json").is_symlink()
    assert json.loads((state / "settings.json").read_text()) == {"a": 1}  # not merged with it


def test_a_link_planted_on_the_way_is_refused(tmp_path: Path) -> None:
    state, elsewhere = tmp_path / "state", tmp_path / "elsewhere"
    state.mkdir()
    elsewhere.mkdir()
    (state / "sub").symlink_to(elsewhere)
    with pytest.raises(NotADirectoryError):  # O_NOFOLLOW|O_DIRECTORY on a link
        agentstate.write_home_file(state, HomeFile("sub/file", b"x"))
    assert list(elsewhere.iterdir()) == []


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "settings.json")
    # a blocking open would hang the start: replaced without reading
    agentstate.write_home_file(tmp_path, json_file("settings.json", {"a": 1}))
    assert json.loads((tmp_path / "settings.json").read_text()) == {"a": 1}


def test_a_directory_in_the_way_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "settings.json").mkdir()
    with pytest.raises(OSError, match="is a directory"):
        agentstate.write_home_file(tmp_path, json_file("settings.json", {}))


def test_a_login_file_replaces_the_copy_only_when_the_hosts_is_newer(tmp_path: Path) -> None:
    copy = tmp_path / ".credentials.json"
    copy.write_text('{"refreshed": "inside"}')
    older = copy.stat().st_mtime - 60
    written = agentstate.write_home_file(
        tmp_path, HomeFile(".credentials.json", b'{"host": 1}', host_mtime=older)
    )
    assert written is False
    assert copy.read_text() == '{"refreshed": "inside"}'
    newer = copy.stat().st_mtime + 60
    assert agentstate.write_home_file(
        tmp_path, HomeFile(".credentials.json", b'{"host": 2}', host_mtime=newer)
    )
    assert copy.read_text() == '{"host": 2}'


# -- prepare -----------------------------------------------------------------------------


def test_every_agent_gets_its_state_dir_mount_and_variables(
    paths: CloisterPaths, record: TokenRecord, tmp_path: Path
) -> None:
    store(paths, "claude", "api-key", "sk-real-key-never-inside")
    plan = prepare(paths, record, make_host_home(tmp_path / "home"))
    assert plan.warnings == ()
    targets = {mount["Target"]: mount["Source"] for mount in plan.mounts}
    assert targets == {
        f"{HOME}/.claude": str(paths.data_dir / "agents" / "api" / "claude"),
        f"{HOME}/.codex": str(paths.data_dir / "agents" / "api" / "codex"),
        f"{HOME}/.gemini": str(paths.data_dir / "agents" / "api" / "gemini"),
    }
    assert all(not mount["ReadOnly"] for mount in plan.mounts)
    env = plan.environment
    assert env["ANTHROPIC_BASE_URL"] == "http://cloister-guardian-credentials:9997/claude"
    assert env["ANTHROPIC_AUTH_TOKEN"] == record.secret
    # codex and gemini are not set up: they talk to the gateway, which says so
    assert env["OPENAI_API_KEY"] == record.secret
    assert env["GEMINI_API_KEY"] == record.secret
    state = paths.data_dir / "agents" / "api"
    assert "cloister `api`" in (state / "claude" / "CLAUDE.md").read_text()
    assert "/refs/lib" in (state / "codex" / "AGENTS.md").read_text()
    assert stat.S_IMODE(state.joinpath("claude").stat().st_mode) == 0o700


def test_the_real_key_and_the_hosts_history_never_reach_the_state_dir(
    paths: CloisterPaths, record: TokenRecord, tmp_path: Path
) -> None:
    store(paths, "claude", "api-key", "sk-real-key-never-inside")
    plan = prepare(paths, record, make_host_home(tmp_path / "home"))
    assert "sk-real-key-never-inside" not in json.dumps(plan.environment)
    for path in (paths.data_dir / "agents").rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert "sk-real-key-never-inside" not in text, path
            assert SECRET not in text, path


def test_skip_permissions_and_extra_env_come_from_the_config(
    paths: CloisterPaths, record: TokenRecord, tmp_path: Path
) -> None:
    config = GlobalConfig.model_validate(
        {"agents": {"claude": {"skip_permissions": False, "env": {"MY_FLAG": "1"}}}}
    )
    plan = prepare(paths, record, tmp_path, config)
    assert plan.environment["MY_FLAG"] == "1"
    settings = json.loads((paths.data_dir / "agents/api/claude/settings.json").read_text())
    assert settings["permissions"]["defaultMode"] == "default"


def test_a_missing_login_is_a_warning_unless_that_agent_is_chosen(
    paths: CloisterPaths, record: TokenRecord, tmp_path: Path
) -> None:
    store(paths, "codex", "existing-login", None)
    plan = prepare(paths, record, tmp_path / "empty-home")
    assert len(plan.warnings) == 1
    assert "Codex" in plan.warnings[0]
    assert "codex login" in plan.warnings[0]
    assert "CODEX_HOME" not in plan.environment
    with pytest.raises(AgentSetupError, match="codex login"):
        prepare(paths, record, tmp_path / "empty-home", chosen="codex")


def test_remove_deletes_the_projects_state_without_following_links(
    paths: CloisterPaths, record: TokenRecord, tmp_path: Path
) -> None:
    prepare(paths, record, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    (paths.data_dir / "agents/api/claude/link").symlink_to(outside)
    assert agentstate.remove(paths, "api") == paths.data_dir / "agents" / "api"
    assert not (paths.data_dir / "agents" / "api").exists()
    assert (outside / "keep").read_text() == "x"
    assert agentstate.remove(paths, "api") is None


def test_attach_argv() -> None:
    config = GlobalConfig()
    assert agentstate.attach_argv("claude", config) == ["claude"]
    assert agentstate.attach_argv("gemini", config) == ["gemini", "--approval-mode=yolo"]
    assert agentstate.attach_argv("aider", config) == ["aider"]


# -- what a hostile agent leaves in its state directory ------------------------------------


def test_a_deep_state_file_is_replaced_not_merged(tmp_path: Path) -> None:
    deep = "[" * 900 + "]" * 900
    (tmp_path / "settings.json").write_text('{"x": ' + deep + "}")
    agentstate.write_home_file(tmp_path, json_file("settings.json", {"a": 1}))
    assert json.loads((tmp_path / "settings.json").read_text()) == {"a": 1}


def test_a_deep_toml_key_does_not_break_the_start(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(".".join(["a"] * 990) + " = 1\n")
    agentstate.write_home_file(tmp_path, toml_file("config.toml", {"approval_policy": "never"}))
    assert tomllib.loads((tmp_path / "config.toml").read_text()) == {"approval_policy": "never"}


def test_merging_never_grows_a_planted_file(tmp_path: Path) -> None:
    # Pretty-printing a wide, nested document would multiply it (x900 measured).
    planted = json.dumps({"x": [[[[0] * 200_000]]], "keep": 1}, separators=(",", ":"))
    (tmp_path / ".claude.json").write_text(planted)
    agentstate.write_home_file(tmp_path, json_file(".claude.json", {"forced": True}))
    written = (tmp_path / ".claude.json").read_bytes()
    assert len(written) <= len(planted) + 64
    assert json.loads(written)["forced"] is True


def test_login_files_are_forgotten_when_the_method_is_no_longer_existing_login(
    paths: CloisterPaths, record: TokenRecord, tmp_path: Path
) -> None:
    home = make_host_home(tmp_path / "home")
    store(paths, "codex", "existing-login", None)
    prepare(paths, record, home)
    auth = paths.data_dir / "agents/api/codex/auth.json"
    assert SECRET in auth.read_text()
    store(paths, "codex", "api-key", "sk-new")
    prepare(paths, record, home)
    assert not auth.exists()


def test_a_repository_planted_in_the_state_dir_is_disarmed(
    paths: CloisterPaths, record: TokenRecord, tmp_path: Path
) -> None:
    prepare(paths, record, tmp_path)
    state = paths.data_dir / "agents/api/claude"
    (state / "projects" / "-work" / ".git" / "hooks").mkdir(parents=True)
    (state / "plugins" / "x").mkdir(parents=True)
    (state / "plugins" / "x" / ".git").write_text("gitdir: /elsewhere\n")
    assert sorted(agentstate.disarm(paths, "api")) == [
        "claude/plugins/x/.git",
        "claude/projects/-work/.git",
    ]
    assert (state / "projects" / "-work" / ".git.disabled-by-cloister" / "hooks").is_dir()
    assert not (state / "projects" / "-work" / ".git").exists()
    assert agentstate.disarm(paths, "api") == []


def test_remove_deletes_directories_the_agent_made_read_only(
    paths: CloisterPaths, record: TokenRecord, tmp_path: Path
) -> None:
    prepare(paths, record, tmp_path)
    locked = paths.data_dir / "agents/api/claude/locked"
    locked.mkdir()
    (locked / "f").write_text("x")
    locked.chmod(0o500)
    agentstate.remove(paths, "api")
    assert not (paths.data_dir / "agents" / "api").exists()


def test_a_tree_deeper_than_pythons_recursion_limit_is_disarmed_and_removed(
    paths: CloisterPaths, record: TokenRecord, tmp_path: Path
) -> None:
    prepare(paths, record, tmp_path)
    state = paths.data_dir / "agents/api/claude"
    with deep_tree(state / "projects") as bottom:
        (bottom / ".git" / "hooks").mkdir(parents=True)
        # The limit still bounds the walk: the repository is past it.
        assert agentstate.disarm_repositories(state, limit=500) == []
        assert agentstate.disarm(paths, "api") == ["claude/projects/" + "d/" * DEPTH + ".git"]
        assert (bottom / ".git.disabled-by-cloister" / "hooks").is_dir()
        bottom.chmod(0o500)
        agentstate.make_writable(paths.data_dir / "agents" / "api")
        assert stat.S_IMODE(bottom.stat().st_mode) == 0o700
        bottom.chmod(0o500)
        assert agentstate.remove(paths, "api") == paths.data_dir / "agents" / "api"
        assert not (paths.data_dir / "agents" / "api").exists()
