"""Reading real-world devcontainer.json files: image or build, Features, lifecycle,
discovery, and the errors for files Cloister cannot use."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from cloister_core.cloisterenv import set_by_cloister
from cloister_core.devcontainer import (
    DevcontainerError,
    LifecycleCommand,
    MountSpec,
    find_devcontainer,
    load_devcontainer,
)
from cloister_core.devcontainer.variables import devcontainer_id
from tests.core.devcontainer.conftest import Workspace
from tests.jsonc_support import IndexCount

PYTHON = """\
// For format details, see https://aka.ms/devcontainer.json.
{
  "name": "Python 3",
  "image": "mcr.microsoft.com/devcontainers/python:1-3.12-bookworm",
  "features": {
    "ghcr.io/devcontainers/features/node:1": "lts",
    "ghcr.io/devcontainers/features/github-cli:1": {},
    "ghcr.io/devcontainers-extra/features/poetry:2": {
      "version": "1.8.3", "installCompletions": true
    },
  },
  /* Use 'postCreateCommand' to run commands after the container is created. */
  "postCreateCommand": "pip install -e .",
  "containerEnv": { "PYTHONDONTWRITEBYTECODE": "1", "APP_ROOT": "${containerWorkspaceFolder}" },
  "customizations": { "vscode": { "extensions": ["ms-python.python"] } },
  "remoteUser": "vscode",
}
"""

NODE = """\
{
  "name": "web-app",
  "build": {
    "dockerfile": "Dockerfile",
    "context": "..",
    "args": { "NODE_VERSION": "22", "USER_NAME": "${localEnv:USER}" },
    "target": "dev",
  },
  "runArgs": ["--privileged", "--network=host", "--cap-add=SYS_PTRACE", "--init"],
  "mounts": [
    "source=${localEnv:HOME}/.ssh,target=/home/node/.ssh,type=bind,consistency=cached",
    "source=web-app-npm-cache,target=/home/node/.npm,type=volume",
  ],
  "forwardPorts": [3000, 9229],
  "postCreateCommand": ["npm", "ci"],
  "postStartCommand": { "server": "npm run dev -- --host", "types": ["npx", "tsc", "--watch"] },
  "remoteUser": "node",
}
"""


def test_python_devcontainer(workspace: Workspace) -> None:
    loaded = workspace.load(PYTHON)
    assert loaded.name == "Python 3"
    assert loaded.source.kind == "image"
    assert loaded.source.image == "mcr.microsoft.com/devcontainers/python:1-3.12-bookworm"
    assert loaded.has_features
    assert [(f.id, dict(f.options), f.trusted) for f in loaded.features] == [
        ("ghcr.io/devcontainers/features/node:1", {"version": "lts"}, True),
        ("ghcr.io/devcontainers/features/github-cli:1", {}, True),
        (
            "ghcr.io/devcontainers-extra/features/poetry:2",
            {"version": "1.8.3", "installCompletions": True},
            False,
        ),
    ]
    assert [f.id for f in loaded.untrusted_features] == [
        "ghcr.io/devcontainers-extra/features/poetry:2"
    ]
    assert loaded.lifecycle == (
        LifecycleCommand("postCreateCommand", None, ("/bin/sh", "-c", "pip install -e .")),
    )
    assert loaded.container_env == {"PYTHONDONTWRITEBYTECODE": "1", "APP_ROOT": "/work"}
    assert loaded.user == "vscode"
    assert loaded.input_files() == (workspace.project / ".devcontainer/devcontainer.json",)
    assert [(o.field, o.outcome) for o in loaded.warnings] == [
        ("features['ghcr.io/devcontainers-extra/features/poetry:2']", "refused"),
        ("customizations", "ignored"),
    ]
    customizations = loaded.warnings[1]
    assert customizations.line == 15
    assert customizations.render(loaded.path).startswith(f"{loaded.path}:15: customizations ")


def test_node_devcontainer_with_build_and_dangerous_run_args(workspace: Workspace) -> None:
    workspace.write("FROM node:22 AS dev\n", ".devcontainer/Dockerfile")
    loaded = workspace.load(NODE)
    source = loaded.source
    assert source.kind == "build"
    assert source.dockerfile == (workspace.project / ".devcontainer/Dockerfile").resolve()
    assert source.context == workspace.project.resolve()
    assert dict(source.args) == {"NODE_VERSION": "22", "USER_NAME": "dev"}
    assert source.target == "dev"
    assert loaded.input_files() == (loaded.path, source.dockerfile)
    assert loaded.run_args == ()
    assert loaded.mounts == (MountSpec("volume", "web-app-npm-cache", "/home/node/.npm", False),)
    outcomes = {o.field: o.outcome for o in loaded.overrides}
    assert {key: outcomes[key] for key in outcomes if key.startswith(("runArgs", "mounts"))} == {
        "runArgs[0]": "dropped",
        "runArgs[1]": "dropped",
        "runArgs[2]": "dropped",
        "runArgs[3]": "ignored",
        "mounts[0]": "refused",
        "mounts[1]": "kept",
    }
    assert outcomes["forwardPorts"] == "ignored"
    assert loaded.lifecycle == (
        LifecycleCommand("postCreateCommand", None, ("npm", "ci")),
        LifecycleCommand("postStartCommand", "server", ("/bin/sh", "-c", "npm run dev -- --host")),
        LifecycleCommand("postStartCommand", "types", ("npx", "tsc", "--watch")),
    )
    assert len(loaded.commands("postStartCommand")) == 2
    refused = next(o for o in loaded.overrides if o.field == "mounts[0]")
    assert refused.line == 11
    assert "~/.ssh" in refused.why


def test_legacy_dockerfile_form(workspace: Workspace) -> None:
    workspace.write("FROM debian:bookworm\n", "Dockerfile")
    text = '{"dockerFile": "../Dockerfile", "context": "..", "image": "ignored:latest"}'
    loaded = workspace.load(text)
    assert loaded.source.dockerfile == (workspace.project / "Dockerfile").resolve()
    assert loaded.source.context == workspace.project.resolve()
    assert ("image", "ignored") in {(o.field, o.outcome) for o in loaded.overrides}


def test_build_context_defaults_to_the_files_directory(workspace: Workspace) -> None:
    workspace.write("FROM debian\n", ".devcontainer/Dockerfile")
    loaded = workspace.load(
        '{"build": {"dockerfile": "Dockerfile", "options": ["--network=host"]}}'
    )
    assert loaded.source.context == (workspace.project / ".devcontainer").resolve()
    options = next(o for o in loaded.overrides if o.field == "build.options")
    assert options.outcome == "dropped"


def test_root_devcontainer_json_resolves_against_the_project(workspace: Workspace) -> None:
    workspace.write("FROM debian\n", "Dockerfile")
    loaded = workspace.load('{"build": {"dockerfile": "Dockerfile"}}', ".devcontainer.json")
    assert loaded.source.dockerfile == (workspace.project / "Dockerfile").resolve()


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            '{\n  "build": {\n    "dockerfile": "Dockerfile",\n    "context": "../.."\n  }\n}',
            4,
            "build.context: '../..' is outside the project",
        ),
        (
            '{\n  "dockerFile": "../../Dockerfile"\n}',
            2,
            "dockerFile: '../../Dockerfile' is outside",
        ),
        ('{\n  "build": {"dockerfile": "Missing"}\n}', 2, "build.dockerfile: no such file"),
        ('{\n  "name": "x"\n}', None, "neither `image` nor `build.dockerfile` is given"),
        ('{\n  "build": {"args": {}}\n}', 2, "neither `image` nor `build.dockerfile`"),
    ],
    ids=["context-outside", "dockerfile-outside", "dockerfile-missing", "nothing", "build-no-file"],
)
def test_image_source_errors(
    workspace: Workspace, text: str, line: int | None, message: str
) -> None:
    workspace.write("FROM debian\n", ".devcontainer/Dockerfile")
    with pytest.raises(DevcontainerError) as caught:
        workspace.load(text)
    assert message in str(caught.value)
    assert caught.value.line == line


def test_malformed_jsonc_names_file_line_and_column(workspace: Workspace) -> None:
    text = '{\n  "image": "debian",\n  "runArgs": ["--init" "--rm"],\n}\n'
    with pytest.raises(DevcontainerError) as caught:
        workspace.load(text)
    assert str(caught.value).startswith(
        f"{workspace.project}/.devcontainer/devcontainer.json:3:24: "
    )
    assert "invalid JSON" in str(caught.value)


@pytest.mark.parametrize(
    ("fragment", "message"),
    [
        ('"image": 3', "image: expected a string, got 3"),
        ('"runArgs": "--privileged"', "runArgs: expected a list of strings, got '--privileged'"),
        ('"runArgs": ["--init", 2]', "runArgs[1]: expected a string, got 2"),
        ('"containerEnv": {"A": 1}', "containerEnv.A: expected a string, got 1"),
        ('"remoteEnv": ["A=1"]', "remoteEnv: expected an object, got ['A=1']"),
        ('"postCreateCommand": 42', "postCreateCommand: expected a command: a string"),
        ('"postStartCommand": {"a": {"b": "c"}}', "postStartCommand.a: expected a command"),
        ('"onCreateCommand": ["npm", 1]', "onCreateCommand: expected a command"),
        ('"mounts": "source=a,target=/b"', "mounts: expected a list of mounts"),
        ('"mounts": [42]', "mounts[0]: expected a mount string or object, got 42"),
        ('"features": {"ghcr.io/x/y:1": [1]}', "features['ghcr.io/x/y:1']: expected an object"),
        (
            '"features": {"ghcr.io/x/y:1": {"v": null}}',
            "features['ghcr.io/x/y:1'].v: expected a string",
        ),
        ('"privileged": "yes"', "privileged: expected true or false, got 'yes'"),
        ('"capAdd": "SYS_ADMIN"', "capAdd: expected a list of strings"),
        ('"remoteUser": 1000', "remoteUser: expected a string, got 1000"),
    ],
)
def test_wrong_types_name_the_line(workspace: Workspace, fragment: str, message: str) -> None:
    image = "" if fragment.startswith('"image"') else '"image": "debian",\n  '
    text = '{\n  "name": "x",\n  ' + image + fragment + "\n}\n"
    with pytest.raises(DevcontainerError) as caught:
        workspace.load(text)
    assert message in str(caught.value)
    line = text.splitlines().index("  " + fragment) + 1
    assert caught.value.line == line, str(caught.value)


def test_top_level_must_be_an_object(workspace: Workspace) -> None:
    with pytest.raises(
        DevcontainerError, match=r":1:1: expected a JSON object at the top, got list"
    ):
        workspace.load('["image"]')


def test_every_lifecycle_form(workspace: Workspace) -> None:
    text = """{
      "image": "debian",
      "onCreateCommand": "apt-get update && apt-get install -y make",
      "updateContentCommand": ["make", "deps"],
      "postCreateCommand": {"py": "pip install -e .", "js": ["npm", "ci"]},
      "postStartCommand": "",
      "postAttachCommand": "echo ${containerWorkspaceFolder}",
    }"""
    loaded = workspace.load(text)
    assert loaded.lifecycle == (
        LifecycleCommand(
            "onCreateCommand", None, ("/bin/sh", "-c", "apt-get update && apt-get install -y make")
        ),
        LifecycleCommand("updateContentCommand", None, ("make", "deps")),
        LifecycleCommand("postCreateCommand", "py", ("/bin/sh", "-c", "pip install -e .")),
        LifecycleCommand("postCreateCommand", "js", ("npm", "ci")),
        LifecycleCommand("postAttachCommand", None, ("/bin/sh", "-c", "echo /work")),
    )


def test_container_workspace_and_extra_blocked_paths(workspace: Workspace, tmp_path: Path) -> None:
    cloister_data = tmp_path / "cloister-data"
    text = (
        '{"image": "debian",'
        ' "containerEnv": {"SRC": "${containerWorkspaceFolder}/src"},'
        f' "mounts": ["type=bind,source={cloister_data}/tokens,target=/t"]}}'
    )
    loaded = workspace.load(
        text, container_workspace="/workspaces/app", blocked_paths=[cloister_data]
    )
    assert loaded.container_env == {"SRC": "/workspaces/app/src"}
    assert loaded.mounts == ()
    assert "Cloister's own files" in loaded.warnings[0].why


def test_trusted_features_from_config(workspace: Workspace) -> None:
    features = '{"ghcr.io/my-org/features/tool:1": {}, "ghcr.io/my-org-evil/x:1": {}}'
    text = '{"image": "debian", "features": ' + features + "}"
    loaded = workspace.load(text, trusted_features=["ghcr.io/my-org/features/"])
    assert [f.trusted for f in loaded.features] == [True, False]


def test_no_features_is_noted(workspace: Workspace) -> None:
    assert not workspace.load('{"image": "debian"}').has_features


def test_mount_spec_docker_argument() -> None:
    assert MountSpec("bind", "/a,b", "/x", True).docker_argument() == (
        'type=bind,"source=/a,b",target=/x,readonly'
    )
    assert (
        MountSpec("volume", None, "/cache", False).docker_argument() == "type=volume,target=/cache"
    )
    tmpfs = MountSpec("tmpfs", None, "/t", False, tmpfs_size=64 * 1024**2, tmpfs_mode=0o1777)
    assert tmpfs.docker_argument() == "type=tmpfs,target=/t,tmpfs-size=67108864,tmpfs-mode=1777"
    volume = MountSpec("volume", "c", "/c", False, no_copy=True)
    assert volume.docker_argument() == "type=volume,source=c,target=/c,volume-nocopy"


def test_harmless_mount_options_are_kept_in_the_spec(workspace: Workspace) -> None:
    loaded = workspace.load(
        _IMAGE + '"mounts": ["type=tmpfs,target=/t,tmpfs-size=64m,tmpfs-mode=1777",'
        ' "source=c,target=/c,type=volume,volume-nocopy=true,consistency=cached"]}'
    )
    assert loaded.mounts == (
        MountSpec("tmpfs", None, "/t", False, tmpfs_size=64 * 1024**2, tmpfs_mode=0o1777),
        MountSpec("volume", "c", "/c", False, no_copy=True),
    )


@pytest.mark.parametrize(
    ("target", "normalised"),
    [
        ("//home/cloister", "/home/cloister"),
        ("//opt/cloister/bin", "/opt/cloister/bin"),
        ("/opt/./cloister//bin/", "/opt/cloister/bin"),
        ("/x/../home/cloister/.", "/home/cloister"),
    ],
)
def test_a_kept_mounts_target_is_normalised(
    workspace: Workspace, target: str, normalised: str
) -> None:
    """What the CLI compares with its own mounts (see tests/cli/test_devoverrides.py)."""
    loaded = workspace.load(_IMAGE + f'"mounts": ["source=c,target={target},type=volume"]}}')
    assert [mount.target for mount in loaded.mounts] == [normalised]


def test_devcontainer_id_is_the_reference_clis(workspace: Workspace) -> None:
    # The reference implementation's algorithm (JSON of the sorted id labels, sha256,
    # base 32, 52 digits), run with node on these two paths.
    assert (
        devcontainer_id("/home/a/proj", "/home/a/proj/.devcontainer/devcontainer.json")
        == "1pauck26ltpr3upar1rhh2poi376ft8i2siljhdped331h1qjp37"
    )
    loaded = workspace.load(
        _IMAGE + '"mounts": ["source=cache-${devcontainerId},target=/c,type=volume"],'
        ' "containerEnv": {"ID": "${devcontainerId}"}}'
    )
    path = workspace.project / ".devcontainer" / "devcontainer.json"
    expected = devcontainer_id(str(workspace.project), str(path))
    assert re.fullmatch(r"[0-9a-v]{52}", expected)
    assert loaded.mounts == (MountSpec("volume", f"cache-{expected}", "/c", False),)
    assert loaded.container_env == {"ID": expected}
    # Stable: the same file in the same project is the same id.
    assert workspace.load(
        _IMAGE + '"containerEnv": {"ID": "${devcontainerId}"}}'
    ).container_env == {"ID": expected}


def test_a_mount_string_too_long_for_csv_is_dropped(workspace: Workspace) -> None:
    loaded = workspace.load(_IMAGE + '"mounts": ["type=tmpfs,target=/' + "a" * 140_000 + '"]}')
    (override,) = [item for item in loaded.overrides if item.field == "mounts[0]"]
    assert (override.outcome, "cannot be split" in override.why) == ("dropped", True)


@pytest.mark.parametrize("name", ["HOME", "http_proxy", "NO_PROXY", "all_proxy", "CLOISTER_X"])
def test_what_cloister_sets_is_ignored_not_kept(workspace: Workspace, name: str) -> None:
    loaded = workspace.load(_IMAGE + f'"containerEnv": {{"{name}": "x"}}}}')
    (override,) = [item for item in loaded.overrides if item.field == f"containerEnv.{name}"]
    assert override.outcome == "ignored"
    assert override.why.startswith("Cloister sets it")
    assert loaded.container_env == {}
    # The CLI's plan drops exactly these too (one list: cloister_core.cloisterenv).
    assert set_by_cloister(name) is not None
    assert set_by_cloister("PATH") is None


def test_loading_is_linear(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every override's line is looked up, never searched for: each value of the file
    is indexed once, whatever the number of overrides (counted, not timed; the figures
    are in benchmarks/bench_devcontainer_load.py)."""
    count = IndexCount(monkeypatch)
    counts = []
    for size in (500, 1000):
        count.calls = 0
        items = ", ".join(['"--privileged"'] * size)
        loaded = workspace.load(_IMAGE + f'"runArgs": [{items}]}}')
        assert len([item for item in loaded.overrides if item.field.startswith("runArgs")]) == size
        assert loaded.overrides[-1].line == 1
        counts.append(count.calls)
    assert counts[1] - counts[0] == 500  # one more indexing for each item more


# --- discovery ------------------------------------------------------------------------


def test_discovery_order(workspace: Workspace) -> None:
    project = workspace.project
    assert find_devcontainer(project) is None
    for relative in (
        ".devcontainer.json",
        ".devcontainer/devcontainer.json",
        ".devcontainer/cloister/devcontainer.json",
    ):
        workspace.write("{}", relative)
        assert find_devcontainer(project) == project / relative


def test_explicit_devcontainer(workspace: Workspace, tmp_path: Path) -> None:
    workspace.write("{}", ".devcontainer/devcontainer.json")
    other = workspace.write("{}", "ci/devcontainer.json")
    assert find_devcontainer(workspace.project, other) == other
    assert find_devcontainer(workspace.project, other.parent) == other
    with pytest.raises(DevcontainerError, match=r"missing\.json: no such file"):
        find_devcontainer(workspace.project, tmp_path / "missing.json")


_IMAGE = '{"image": "debian:bookworm", '


def test_a_file_over_one_mebibyte_is_refused(workspace: Workspace) -> None:
    padding = " " * (2 * 1024 * 1024)
    with pytest.raises(DevcontainerError, match="over 1 MiB is refused"):
        workspace.load('{"image": "debian:bookworm"}' + padding)


def test_deep_nesting_is_refused(workspace: Workspace) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(DevcontainerError, match="nested too deeply"):
        workspace.load(_IMAGE + '"customizations": ' + deep + "}")


def test_a_nul_in_a_mount_source_is_refused(workspace: Workspace) -> None:
    text = _IMAGE + '"mounts": ["type=bind,source=${localWorkspaceFolder}/data\\u0000x,target=/d"]}'
    with pytest.raises(DevcontainerError, match="NUL character"):
        workspace.load(text)


def test_not_a_regular_file(workspace: Workspace) -> None:
    with pytest.raises(DevcontainerError, match="not a regular file"):
        load_devcontainer(
            workspace.project,
            project_root=workspace.project,
            home=workspace.home,
            environ=workspace.environ,
        )


def test_escapes_in_the_files_text_are_shown_escaped(workspace: Workspace) -> None:
    hidden = "\\u001b[8m"
    text = (
        _IMAGE
        + f'"mounts": ["type=bind,source=/opt/x{hidden}hidden,target=/d"],'
        + f' "odd{hidden}key": 1,'
        + f' "containerEnv": {{"A": "${{bogus{hidden}:x}}"}}}}'
    )
    loaded = workspace.load(text)
    for override in loaded.overrides:
        for shown in (override.describe(), override.render(loaded.path), override.why):
            assert "\x1b" not in shown, shown
    assert any("\\x1b[8mhidden" in item.describe() for item in loaded.overrides)
    with pytest.raises(DevcontainerError) as raised:
        workspace.load(_IMAGE + f'"mounts": "x{hidden}y"}}')
    assert "\x1b" not in str(raised.value)
    assert "\x1b" not in raised.value.message


def test_a_socket_in_the_project_is_refused(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace.project)  # a short relative path: sockets' names are short
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("agent.sock")
        loaded = workspace.load(
            _IMAGE + '"mounts": ["type=bind,source=${localWorkspaceFolder}/agent.sock,target=/s"]}'
        )
    (override,) = [item for item in loaded.overrides if item.field == "mounts[0]"]
    assert (override.outcome, "is a socket" in override.why) == ("refused", True)
    assert loaded.mounts == ()


@pytest.mark.parametrize(
    "name",
    [
        "DATABASE_URL",
        "MONGO_URI",
        "SENTRY_DSN",
        "HTTPS_PROXY",
        "all_proxy",
        "PIP_INDEX_URL",
        "UV_INDEX",
        "NPM_CONFIG_REGISTRY",
    ],
)
def test_url_like_host_variables_are_not_read(workspace: Workspace, name: str) -> None:
    loaded = workspace.load(_IMAGE + f'"containerEnv": {{"X": "${{localEnv:{name}}}"}}}}')
    (override,) = [item for item in loaded.overrides if item.field == "containerEnv.X"]
    assert override.outcome == "refused"
    assert loaded.container_env == {}


def test_a_discovered_file_linked_outside_the_project_is_refused(
    workspace: Workspace, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "devcontainer.json").write_text('{"image": "debian:bookworm"}')
    (workspace.project / ".devcontainer").symlink_to(elsewhere)
    with pytest.raises(DevcontainerError, match="outside the project"):
        find_devcontainer(workspace.project)
    # Given explicitly, it is the user's choice.
    assert find_devcontainer(workspace.project, elsewhere) == elsewhere / "devcontainer.json"


def test_a_discovered_link_inside_the_project_is_fine(workspace: Workspace) -> None:
    workspace.write('{"image": "debian:bookworm"}', "config/devcontainer.json")
    (workspace.project / ".devcontainer.json").symlink_to(
        workspace.project / "config" / "devcontainer.json"
    )
    assert find_devcontainer(workspace.project) == workspace.project / ".devcontainer.json"


@pytest.mark.parametrize("name", ["CLOISTER", "cloister", "CLOISTER_NAME", "Cloister_Project"])
def test_cloisters_markers_are_not_set_from_the_file(workspace: Workspace, name: str) -> None:
    loaded = workspace.load(_IMAGE + f'"containerEnv": {{"{name}": "0"}}}}')
    (override,) = [item for item in loaded.overrides if item.field == f"containerEnv.{name}"]
    assert override.outcome == "ignored"
    assert loaded.container_env == {}
