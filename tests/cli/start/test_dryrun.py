"""``cloister start --dry-run``: the docker run equivalent, masking, the devcontainer's
extras in the plan, and a preview that writes nothing (no engine: a fake one)."""

from __future__ import annotations

import os
import shlex
from dataclasses import replace
from pathlib import Path

import docker.errors
import pytest

from cloister_cli.container import cloisters, devoverrides
from cloister_cli.container.cloisters import ContainerPlan, Extras, Forbidden, Workspace
from cloister_cli.context import Context
from cloister_cli.images import projectimages
from cloister_cli.repo import git, gitmounts
from cloister_cli.repo.projects import Project
from cloister_cli.start import dryrun
from cloister_cli.start import plan as planning
from cloister_cli.start.worktree import make_worktree
from cloister_core.config.models import DefaultsConfig
from cloister_core.devcontainer import load_devcontainer
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from tests.cli.engine_support import INSTANCE
from tests.git_support import hermetic_git, make_repo


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


LIMITS = DefaultsConfig(memory="512m", cpus=1.5, pids=64)


def plan_for(tmp_path: Path, repo: Path, extras: Extras | None = None) -> tuple[ContainerPlan, str]:
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    workspace = Workspace(Project("api", repo, git=True), repo)
    record = cloisters.new_token(workspace, "api")
    plan = cloisters.plan(
        workspace,
        "api",
        record,
        instance=INSTANCE,
        image="cloister-slim:latest",
        limits=LIMITS,
        refs=(),
        forbidden=Forbidden.for_host(paths, tmp_path / "home"),
        git_plan=gitmounts.plan(
            repo, repository=HumanRepository.of(repo), home=tmp_path / "home", create=False
        ),
        agent_environment={"OPENAI_API_KEY": record.secret, "PLAIN": "yes"},
        accounts=(tmp_path / "passwd", tmp_path / "group"),
        extras=extras,
    )
    return plan, record.secret


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[index + 1] for index, item in enumerate(argv) if item == flag]


# -- the docker run equivalent -----------------------------------------------------------


def test_every_hardening_flag_is_in_the_command(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "api")
    plan, secret = plan_for(tmp_path, repo)
    argv = dryrun.docker_run_argv(plan.run_kwargs(), secret=secret)
    uid, gid = os.getuid(), os.getgid()
    assert argv[:3] == ["docker", "run", "--detach"]
    assert argv[-2:] == ["cloister-slim:latest", "infinity"]
    assert flag_values(argv, "--entrypoint") == ["sleep"]  # never the image's own
    assert flag_values(argv, "--cap-drop") == ["ALL"]
    assert flag_values(argv, "--security-opt") == ["no-new-privileges:true"]
    assert "--init" in argv
    assert flag_values(argv, "--network") == ["cloister-0123abcd-api"]  # its own
    assert flag_values(argv, "--user") == [f"{uid}:{gid}"]
    assert flag_values(argv, "--workdir") == ["/work"]
    assert flag_values(argv, "--memory") == ["512m"]
    assert flag_values(argv, "--cpus") == ["1.5"]
    assert flag_values(argv, "--pids-limit") == ["64"]
    assert flag_values(argv, "--hostname") == ["api"]
    assert flag_values(argv, "--tmpfs") == [f"/home/cloister:uid={uid},gid={gid},mode=0700"]
    assert f"type=bind,source={repo},target=/work" in flag_values(argv, "--mount")
    assert f"type=bind,source={tmp_path / 'passwd'},target=/etc/passwd,readonly" in flag_values(
        argv, "--mount"
    )
    assert "org.cloister.cloister=api" in flag_values(argv, "--label")
    assert len(flag_values(argv, "--mount")) == len(plan.mounts)
    assert len(flag_values(argv, "--env")) == len(plan.environment)


def test_the_limits_are_in_the_command(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "api")
    plan, secret = plan_for(tmp_path, repo)
    argv = dryrun.docker_run_argv(plan.run_kwargs(), secret=secret)
    assert flag_values(argv, "--shm-size") == ["64m"]  # defaults.shm_size
    assert "--storage-opt" not in argv
    quota = replace(plan, storage_opt={"size": "20g"})
    argv = dryrun.docker_run_argv(quota.run_kwargs(), secret=secret)
    assert flag_values(argv, "--storage-opt") == ["size=20g"]


def test_secrets_are_masked(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "api")
    plan, secret = plan_for(tmp_path, repo)
    argv = dryrun.docker_run_argv(plan.run_kwargs(), secret=secret)
    assert not any(secret in item for item in argv)
    env = dict(item.split("=", 1) for item in flag_values(argv, "--env"))
    assert env["CLOISTER_TOKEN"] == "***"
    assert env["HTTPS_PROXY"] == "http://***@cloister-guardian-proxy:3128"
    assert env["OPENAI_API_KEY"] == "***"
    assert env["PLAIN"] == "yes"
    assert env["CLOISTER_PROJECT"] == "api"


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "DB_PASSWORD", "MY_API_KEY", "SSH_KEY"])
def test_a_variable_named_like_a_secret_is_masked(name: str) -> None:
    assert dryrun.masked(name, "hunter2", "tok") == "***"


def test_an_option_the_dry_run_cannot_show_is_an_error() -> None:
    with pytest.raises(CloisterError, match="privileged"):
        dryrun.docker_run_argv({"image": "x", "privileged": True})


def test_the_command_text_splits_back_into_the_argv(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "my api")  # a space, quoted
    plan, secret = plan_for(tmp_path, repo)
    argv = dryrun.docker_run_argv(plan.run_kwargs(), secret=secret)
    assert shlex.split(dryrun.command_text(argv)) == argv
    multiline = dryrun.command_text(argv, multiline=True)
    assert "\n    --init \\\n" in multiline
    assert shlex.split(multiline.replace("\\\n", "")) == argv


# -- the devcontainer's extras -----------------------------------------------------------


def write_devcontainer(repo: Path, text: str) -> Path:
    path = repo / ".devcontainer" / "devcontainer.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_extras_join_the_plan_without_weakening_it(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "api")
    (tmp_path / "data-set").mkdir()
    (repo / "data-set").mkdir(exist_ok=True)  # a bind source: in the project, existing
    path = write_devcontainer(
        repo,
        f"""{{
          "image": "debian:bookworm-slim",
          "runArgs": ["--privileged", "--shm-size=1g", "--hostname=box", "--network=host"],
          "mounts": [
            "source=cache,target=/cache,type=volume",
            "source={repo / "data-set"},target=/data,type=bind",
            "type=tmpfs,target=/scratch",
            "source=other,target=/etc/passwd,type=volume"
          ],
          "containerEnv": {{"MODE": "dev", "HOME": "/x", "PATH": "/opt/bin:/usr/bin"}},
          "remoteEnv": {{"EXTRA": "${{containerEnv:MODE}}-1", "MODE": null}}
        }}""",
    )
    devcontainer = load_devcontainer(path, project_root=repo, home=tmp_path / "home", environ={})
    extras, notes = devoverrides.extras_for(devcontainer, project="api", image_env=None)
    assert notes == ()
    plan, _ = plan_for(tmp_path, repo, extras)
    kwargs = plan.run_kwargs()
    assert kwargs["shm_size"] == "1g"
    assert kwargs["hostname"] == "box"
    assert kwargs["network"] == "cloister-0123abcd-api"
    assert kwargs["cap_drop"] == ["ALL"]
    assert "privileged" not in kwargs
    by_target = {mount["Target"]: mount for mount in plan.mounts}
    assert by_target["/cache"]["Source"] == devoverrides.volume_name("api", "cache")  # per project
    assert by_target["/cache"]["Source"].startswith("cloister-api-cache-")
    assert by_target["/data"]["ReadOnly"] is True
    assert by_target["/scratch"]["Type"] == "tmpfs"
    # The image's /etc/passwd is Cloister's: a mount there is dropped, with a note.
    assert by_target["/etc/passwd"]["Source"] == str(tmp_path / "passwd")
    assert any("/etc/passwd dropped" in note for note in plan.notes)
    env = plan.environment
    assert env["HOME"] == "/home/cloister"
    assert env["PATH"] == "/opt/bin:/usr/bin"
    assert env["EXTRA"] == "dev-1"
    assert "MODE" not in env  # remoteEnv null unsets it


def test_remote_env_from_the_image_waits_for_the_image(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "api")
    path = write_devcontainer(
        repo,
        '{"image": "x", "remoteEnv": {"PATH": "${containerEnv:PATH}:/opt/tools"}}',
    )
    devcontainer = load_devcontainer(path, project_root=repo, home=tmp_path, environ={})
    unknown, notes = devoverrides.extras_for(devcontainer, project="api", image_env=None)
    assert "PATH" not in unknown.environment
    assert "remoteEnv.PATH not set" in notes[0]
    known, notes = devoverrides.extras_for(
        devcontainer, project="api", image_env={"PATH": "/usr/bin"}
    )
    assert known.environment["PATH"] == "/usr/bin:/opt/tools"
    assert notes == ()


# -- the preview writes nothing ----------------------------------------------------------


class _NoContainers:
    def get(self, name: str) -> None:
        raise docker.errors.NotFound(f"no container {name}")


class _Engine:
    containers = _NoContainers()

    def info(self) -> dict[str, object]:
        return {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"]]}


class _Guardian:
    def is_running(self) -> bool:
        return False


def test_a_preview_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    repo = make_repo(tmp_path / "src" / "api")
    path = write_devcontainer(
        repo,
        '{"image": "debian:bookworm-slim", "runArgs": ["--privileged"],'
        ' "postCreateCommand": "make setup", "containerEnv": {"SHOWN": "a\\u001b[8mb"}}',
    )
    context = Context(paths=paths, home=home, writes_config=False)
    context.__dict__["docker"] = _Engine()
    context.__dict__["guardian"] = _Guardian()
    image = projectimages.ImagePlan("api", "cloister-project-api:0123", "0123", False, ("b",), None)
    monkeypatch.setattr(planning, "plan_image", lambda *args: image)
    monkeypatch.setattr(planning, "image_env", lambda *args: None)
    before = sorted(str(item) for item in repo.rglob("*"))

    preview = planning.plan_start(
        context, repo, planning.StartOptions(project_name="api"), dry_run=True
    )

    assert sorted(str(item) for item in repo.rglob("*")) == before  # no pin, no placeholder
    assert not paths.config_dir.exists()
    assert not paths.data_dir.exists()
    assert preview.container.image == "cloister-project-api:0123"
    assert preview.devcontainer is not None
    assert preview.devcontainer.path == path
    assert preview.shape_difference.startswith("first start")
    text = dryrun.render(preview)
    assert "dropped  runArgs[0] '--privileged'" in text
    assert "runs     postCreateCommand: /bin/sh -c 'make setup'" in text
    assert "would ask" in text
    assert preview.secret not in text
    assert "SHOWN=a\\x1b[8mb" in text  # the agent's escape is shown, not sent
    assert "\x1b" not in text
    document = dryrun.to_json(preview)
    assert document["image"]["steps"] == ["b"]
    assert document["docker_run"][-2:] == ["cloister-project-api:0123", "infinity"]
    # The paths a start would write are the ones the plan mounts.
    sources = {mount["Source"] for mount in preview.container.mounts}
    assert str(paths.data_dir / "accounts" / "api" / "passwd") in sources
    # The cloister's own git directory, at /work/.git: the human's .git is never mounted.
    own = {mount["Target"]: mount for mount in preview.container.mounts}
    assert own["/work/.git"]["Source"] == str(paths.cloister_git_dir("api"))
    assert own["/work/.git"]["ReadOnly"] is False
    assert own["/work/.git/config"]["ReadOnly"] is True
    assert own["/opt/cloister/origin/objects"]["Source"] == str(repo / ".git" / "objects")
    assert own["/opt/cloister/origin/objects"]["ReadOnly"] is True
    assert not any(
        source.startswith(f"{repo / '.git'}/")
        for source in sources - {str(repo / ".git" / "objects")}
    )
    assert str(paths.data_dir / "markers" / "api.json") in sources
    # The protected paths (the defaults): named, the missing ones as stand-ins to be.
    protected = {item["path"]: item["stand_in"] for item in document["protected"]}
    assert protected[".devcontainer"] is False
    assert protected[".envrc"] is True
    assert "  .envrc *  (protect.paths)" in text
    assert str(repo / ".vscode" / "tasks.json") in sources


def test_url_userinfo_is_masked() -> None:
    assert dryrun.masked("MIRROR", "https://user:pass@host/x", "") == "https://***@host/x"
    assert dryrun.masked("MIRROR", "https://host/x@y", "") == "https://host/x@y"


def preview_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Context:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    context = Context(paths=paths, home=home, writes_config=False)
    context.__dict__["docker"] = _Engine()
    context.__dict__["guardian"] = _Guardian()
    image = projectimages.ImagePlan("api", "cloister-project-api:0123", "0123", False, ("b",), None)
    monkeypatch.setattr(planning, "plan_image", lambda *args: image)
    monkeypatch.setattr(planning, "image_env", lambda *args: None)
    return context


def test_a_preview_of_a_new_worktree_makes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = preview_context(tmp_path, monkeypatch)
    repo = make_repo(tmp_path / "home" / "src" / "api")
    options = planning.StartOptions(project_name="api", branch="feature/x", no_devcontainer=True)
    preview = planning.plan_start(context, repo, options, dry_run=True)
    directory = context.paths.worktree("api", "feature-x")
    assert preview.workspace.directory == directory
    assert preview.name == "api-feature-x"
    assert any("would be created first" in note for note in preview.notes)
    assert not context.paths.data_dir.exists()
    assert not context.paths.config_dir.exists()
    assert not git.branch_exists(repo, "feature/x")  # made by a start, not a preview
    targets = {mount["Target"] for mount in preview.container.mounts}
    assert "/work/.git" not in targets  # known once the worktree is made
    assert preview.container.labels["org.cloister.git-common-dir"] == str(repo / ".git")


def test_a_preview_of_an_existing_worktree_shows_the_pointer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = preview_context(tmp_path, monkeypatch)
    repo = make_repo(tmp_path / "home" / "src" / "api")
    directory = context.paths.worktree("api", "feature")
    make_worktree(repo, directory, "feature")
    options = planning.StartOptions(project_name="api", branch="feature", no_devcontainer=True)
    preview = planning.plan_start(context, repo, options, dry_run=True)
    by_target = {mount["Target"]: mount for mount in preview.container.mounts}
    assert by_target["/work/.git"]["Source"] == str(context.paths.git_pointer("api-feature"))
    assert by_target["/work/.git"]["ReadOnly"] is True
    own = by_target["/opt/cloister/git"]
    assert (own["Source"], own["ReadOnly"]) == (
        str(context.paths.cloister_git_dir("api-feature")),
        False,
    )
    assert not context.paths.git_dirs_dir.exists()  # named, not made


def test_a_preview_refuses_a_repository_in_a_forbidden_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = preview_context(tmp_path, monkeypatch)
    dotfiles = make_repo(tmp_path / "home" / ".config" / "nvim")
    options = planning.StartOptions(project_name="nvim", branch="feature", no_devcontainer=True)
    with pytest.raises(CloisterError, match="refusing to mount the repository"):
        planning.plan_start(context, dotfiles, options, dry_run=True)
