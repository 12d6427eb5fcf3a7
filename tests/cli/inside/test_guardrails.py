"""How the git guardrails join a cloister: the read-only mounts, PATH with the guarded
git first (before the image's or the devcontainer's), the protected branches, the
config (global, then the project's), and what ``start --dry-run`` shows. Pure: no engine
(a fake one for the preview); the wrapper itself is tested in test_git_wrapper.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import docker.errors
import pytest
from docker.types import Mount

from cloister_cli.container import cloisters
from cloister_cli.container.cloisters import ContainerPlan, Extras, Forbidden, Workspace
from cloister_cli.context import Context
from cloister_cli.images import projectimages
from cloister_cli.inside import guardrails as guardrails_module
from cloister_cli.inside.guardrails import (
    BIN,
    DOCKER_PATH,
    PROFILE,
    PROFILE_SNIPPET,
    PROTECTED_VARIABLE,
    WRAPPER,
    WRAPPER_DIR,
    Guardrails,
    GuardrailsError,
    guardrails_for,
)
from cloister_cli.repo import gitmounts
from cloister_cli.repo.projects import Project
from cloister_cli.start import dryrun
from cloister_cli.start import plan as planning
from cloister_core.config.models import DefaultsConfig, GitGuardrailsConfig, GlobalConfig
from cloister_core.paths import CloisterPaths
from cloister_core.repository import HumanRepository
from tests.cli.engine_support import INSTANCE
from tests.git_support import hermetic_git, make_repo

IMAGE_PATH = "/usr/local/go/bin:/home/cloister/go/bin:/usr/local/bin:/usr/bin:/bin"


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


def plan_for(
    tmp_path: Path, guardrails: Guardrails | None, extras: Extras | None = None
) -> ContainerPlan:
    repo = make_repo(tmp_path / "src" / "api")
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    workspace = Workspace(Project("api", repo, git=True), repo)
    return cloisters.plan(
        workspace,
        "api",
        cloisters.new_token(workspace, "api"),
        instance=INSTANCE,
        image="cloister-slim:latest",
        limits=DefaultsConfig(),
        refs=(),
        forbidden=Forbidden.for_host(paths, tmp_path / "home"),
        git_plan=gitmounts.plan(
            repo, repository=HumanRepository.of(repo), home=tmp_path / "home", create=False
        ),
        extras=extras,
        guardrails=guardrails,
    )


def targets(plan: ContainerPlan) -> dict[str, Mount]:
    return {str(mount["Target"]): mount for mount in plan.mounts}


# -- what the guardrails add -------------------------------------------------------------


def test_off_means_nothing_is_added(tmp_path: Path) -> None:
    assert guardrails_for(GitGuardrailsConfig(enabled=False), {"PATH": IMAGE_PATH}) is None
    plan = plan_for(tmp_path, None)
    assert "PATH" not in plan.environment
    assert PROTECTED_VARIABLE not in plan.environment
    assert not {BIN, PROFILE} & set(targets(plan))


def test_on_the_wrapper_and_the_profile_snippet_are_mounted_read_only(tmp_path: Path) -> None:
    guardrails = guardrails_for(GitGuardrailsConfig(), {"PATH": IMAGE_PATH})
    assert guardrails is not None
    plan = plan_for(tmp_path, guardrails)
    mounts = targets(plan)
    for target, source in ((BIN, WRAPPER_DIR), (PROFILE, PROFILE_SNIPPET)):
        assert mounts[target]["Type"] == "bind"
        assert mounts[target]["Source"] == str(source)
        assert mounts[target]["ReadOnly"] is True
    # Only the wrapper is in the directory that goes on PATH.
    assert sorted(item.name for item in WRAPPER_DIR.iterdir()) == ["git"]
    assert plan.environment["PATH"] == f"{BIN}:{IMAGE_PATH}"
    assert plan.environment[PROTECTED_VARIABLE] == "main master"
    assert plan.notes == ()


def test_path_is_the_images_own_after_the_wrapper() -> None:
    config = GitGuardrailsConfig(protected_branches=("main", "release/*"))
    with_path = guardrails_for(config, {"PATH": IMAGE_PATH, "LANG": "C.UTF-8"})
    assert with_path is not None
    assert with_path.environment(None) == {
        "PATH": f"{BIN}:{IMAGE_PATH}",
        PROTECTED_VARIABLE: "main release/*",
    }
    without_path = guardrails_for(config, {"LANG": "C.UTF-8"})  # Docker's default then
    assert without_path is not None
    assert without_path.environment(None)["PATH"] == f"{BIN}:{DOCKER_PATH}"
    assert without_path.notes(None) == ()
    # Already first: left as it is.
    assert with_path.environment(f"{BIN}:/usr/bin")["PATH"] == f"{BIN}:/usr/bin"
    assert guardrails_for(GitGuardrailsConfig(protected_branches=()), {}) == Guardrails(
        (), DOCKER_PATH
    )


def test_an_image_not_built_yet_shows_dockers_default_path_with_a_note(tmp_path: Path) -> None:
    guardrails = guardrails_for(GitGuardrailsConfig(), None)
    assert guardrails is not None
    plan = plan_for(tmp_path, guardrails)
    assert plan.environment["PATH"] == f"{BIN}:{DOCKER_PATH}"
    assert plan.notes == (
        f"PATH shown as {BIN} before Docker's default: the image's own PATH is known once"
        " it is built",
    )


def test_a_devcontainers_path_comes_after_the_wrapper(tmp_path: Path) -> None:
    guardrails = guardrails_for(GitGuardrailsConfig(), {"PATH": IMAGE_PATH})
    extras = Extras(
        mounts=(
            Mount("/opt/cloister", "cloister-api-tools", type="volume"),
            Mount("/etc/profile.d", str(tmp_path), type="bind", read_only=True),
            Mount("/opt/tools", "cloister-api-more", type="volume"),
        ),
        environment={"PATH": "/opt/tools/bin:/usr/bin:/bin", PROTECTED_VARIABLE: "nothing"},
    )
    plan = plan_for(tmp_path, guardrails, extras)
    assert plan.environment["PATH"] == f"{BIN}:/opt/tools/bin:/usr/bin:/bin"
    assert plan.environment[PROTECTED_VARIABLE] == "main master"
    mounts = targets(plan)
    assert mounts[BIN]["Source"] == str(WRAPPER_DIR)
    assert mounts[PROFILE]["Source"] == str(PROFILE_SNIPPET)
    assert "/opt/tools" in mounts  # beside, not over: kept
    assert "/opt/cloister" not in mounts
    assert "/etc/profile.d" not in mounts
    assert f"mount on /opt/cloister dropped: it would cover Cloister's own {BIN}" in plan.notes
    assert f"mount on /etc/profile.d dropped: it would cover Cloister's own {PROFILE}" in plan.notes
    assert (
        f"variable {PROTECTED_VARIABLE} not set from devcontainer.json: Cloister sets it"
        in plan.notes
    )


def test_a_wrapper_that_cannot_run_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "git"
    shutil.copy(guardrails_module.WRAPPER, copy)
    copy.chmod(0o644)
    monkeypatch.setattr(guardrails_module, "WRAPPER", copy)
    if os.access(copy, os.X_OK):  # root may run anything with an x bit; 0644 has none
        pytest.fail("a 0644 file is executable here")
    with pytest.raises(GuardrailsError, match=r"not executable: reinstall cloister-cli"):
        guardrails_for(GitGuardrailsConfig(), {})


# -- the profile snippet -----------------------------------------------------------------


@pytest.mark.parametrize("shell", ["dash", "bash"])
def test_the_profile_snippet_puts_the_wrapper_first_again(shell: str) -> None:
    """As /etc/profile does in a login shell: PATH set afresh, then the snippet read."""
    executable = shutil.which(shell)
    assert executable is not None
    script = (
        'PATH=/usr/local/bin:/usr/bin:/bin; . "$1"; echo "$PATH"; . "$1"; echo "$PATH";'
        f' PATH={BIN}; . "$1"; echo "$PATH"'
    )
    result = subprocess.run(
        [executable, "-c", script, shell, str(PROFILE_SNIPPET)],
        env={},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout.splitlines() == [
        f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        f"{BIN}:/usr/local/bin:/usr/bin:/bin",  # read twice: once on PATH
        BIN,
    ]


# -- no secret in a command line ---------------------------------------------------------

# A variable that holds a secret in a cloister: its token, the proxy URLs (the token is
# their password), an agent's key or token for the credential gateway.
SECRET_VARIABLE = re.compile(r"\$\{?[A-Za-z0-9_]*(?:TOKEN|PROXY|proxy|KEY|SECRET|CREDENTIAL)")


def test_what_the_guardrails_put_inside_reads_no_secret() -> None:
    """Issue 19: a cloister's processes are host processes, whose arguments every host
    user can read (/proc/PID/cmdline). The files the guardrails mount read no variable
    that holds a secret, so none can end up in the command lines they run (the wrapper
    runs git with the agent's own arguments)."""
    files = [*sorted(WRAPPER_DIR.iterdir()), PROFILE_SNIPPET]
    assert WRAPPER in files
    for path in files:
        found = SECRET_VARIABLE.findall(path.read_text(encoding="utf-8"))
        assert not found, (path, found)


# -- the config, and the dry run ---------------------------------------------------------


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


def preview(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: GlobalConfig, project: str = ""
) -> planning.StartPlan:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    if project:
        paths.project_config("api").parent.mkdir(parents=True, exist_ok=True)
        paths.project_config("api").write_text(project, encoding="utf-8")
    repo = tmp_path / "src" / "api"
    if not repo.exists():
        make_repo(repo)
    context = Context(paths=paths, home=home)
    context.__dict__["config"] = config
    context.__dict__["docker"] = _Engine()
    context.__dict__["guardian"] = _Guardian()
    image = projectimages.ImagePlan("api", "cloister-slim:latest", None, True, (), None)
    monkeypatch.setattr(planning, "plan_image", lambda *args: image)
    monkeypatch.setattr(planning, "image_env", lambda *args: {"PATH": IMAGE_PATH})
    return planning.plan_start(
        context, repo, planning.StartOptions(project_name="api"), dry_run=True
    )


def test_the_dry_run_shows_the_mounts_and_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = preview(tmp_path, monkeypatch, GlobalConfig())
    argv = dryrun.to_json(shown)["docker_run"]
    assert f"type=bind,source={WRAPPER_DIR},target={BIN},readonly" in argv
    assert f"type=bind,source={PROFILE_SNIPPET},target={PROFILE},readonly" in argv
    assert f"PATH={BIN}:{IMAGE_PATH}" in argv
    assert f"{PROTECTED_VARIABLE}=main master" in argv
    text = dryrun.render(shown)
    assert f"--env 'PATH={BIN}:{IMAGE_PATH}'" in text or f"--env PATH={BIN}:{IMAGE_PATH}" in text
    assert f"target={BIN},readonly" in text


def test_a_project_may_turn_them_off_or_protect_other_branches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    off = preview(tmp_path, monkeypatch, GlobalConfig(), "git_guardrails:\n  enabled: false\n")
    assert "PATH" not in off.container.environment
    assert BIN not in targets(off.container)
    other = preview(
        tmp_path,
        monkeypatch,
        GlobalConfig(),
        "git_guardrails:\n  protected_branches: [trunk, 'release/*']\n",
    )
    assert other.container.environment[PROTECTED_VARIABLE] == "trunk release/*"
    globally_off = GlobalConfig.model_validate({"git_guardrails": {"enabled": False}})
    assert "PATH" not in preview(tmp_path, monkeypatch, globally_off).container.environment
    back_on = preview(tmp_path, monkeypatch, globally_off, "git_guardrails:\n  enabled: true\n")
    assert back_on.container.environment[PROTECTED_VARIABLE] == "main master"
