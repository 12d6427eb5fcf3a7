"""Every override: what the file asks for → what Cloister does, and the reason it gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloister_core.devcontainer import DevcontainerError, mounts
from cloister_core.devcontainer.blocked import MAX_SEARCHED_PER_LOAD, BlockedPaths
from cloister_core.devcontainer.variables import Variables
from tests.core.devcontainer.conftest import Workspace

# (fragment of devcontainer.json, the override's field, outcome, words of its reason)
OVERRIDES: list[tuple[str, str, str, str]] = [
    # runArgs: both --flag value and --flag=value; an allowlist
    ('"runArgs": ["--privileged"]', "runArgs[0]", "dropped", "root on the host"),
    ('"runArgs": ["--privileged=true"]', "runArgs[0]", "dropped", "root on the host"),
    ('"runArgs": ["--cap-add", "SYS_ADMIN"]', "runArgs[0]", "dropped", "capability SYS_ADMIN"),
    ('"runArgs": ["--cap-add=SYS_PTRACE"]', "runArgs[0]", "dropped", "capability SYS_PTRACE"),
    ('"runArgs": ["--network=host"]', "runArgs[0]", "dropped", "leaves through the proxy"),
    ('"runArgs": ["--net", "host"]', "runArgs[0]", "dropped", "guardian's internal one"),
    ('"runArgs": ["--network host"]', "runArgs[0]", "dropped", "guardian's internal one"),
    ('"runArgs": ["--pid=host"]', "runArgs[0]", "dropped", "the host's processes"),
    ('"runArgs": ["--ipc", "host"]', "runArgs[0]", "dropped", "shared memory"),
    ('"runArgs": ["--uts=host"]', "runArgs[0]", "dropped", "host name namespace"),
    ('"runArgs": ["--userns=host"]', "runArgs[0]", "dropped", "user namespace"),
    ('"runArgs": ["--device", "/dev/kvm"]', "runArgs[0]", "dropped", "a host device"),
    ('"runArgs": ["--device=/dev/fuse"]', "runArgs[0]", "dropped", "a host device"),
    ('"runArgs": ["--gpus", "all"]', "runArgs[0]", "dropped", "GPUs"),
    (
        '"runArgs": ["--add-host=host.docker.internal:host-gateway"]',
        "runArgs[0]",
        "dropped",
        "name the host",
    ),
    (
        '"runArgs": ["--security-opt", "seccomp=unconfined"]',
        "runArgs[0]",
        "dropped",
        "seccomp filter off",
    ),
    ('"runArgs": ["--security-opt=apparmor=unconfined"]', "runArgs[0]", "dropped", "AppArmor"),
    (
        '"runArgs": ["--security-opt", "seccomp:unconfined"]',
        "runArgs[0]",
        "dropped",
        "seccomp filter off",
    ),
    ('"runArgs": ["--security-opt", "no-new-privileges=false"]', "runArgs[0]", "dropped", "setuid"),
    ('"runArgs": ["--security-opt", "label=disable"]', "runArgs[0]", "dropped", "SELinux"),
    ('"runArgs": ["--security-opt", "no-new-privileges"]', "runArgs[0]", "ignored", "always on"),
    ('"runArgs": ["-v", "${localEnv:HOME}/.ssh:/root/.ssh"]', "runArgs[0]", "refused", "is ~/.ssh"),
    ('"runArgs": ["-v=~/.aws:/root/.aws:ro"]', "runArgs[0]", "refused", "is ~/.aws"),
    (
        '"runArgs": ["--volume=/var/run/docker.sock:/var/run/docker.sock"]',
        "runArgs[0]",
        "refused",
        "Docker socket",
    ),
    ('"runArgs": ["--mount", "type=bind,src=/etc,dst=/h"]', "runArgs[0]", "refused", "/etc is the"),
    ('"runArgs": ["-v", "cache:/cache"]', "runArgs[0]", "dropped", "mounts go in `mounts`"),
    ('"runArgs": ["--tmpfs", "/tmp"]', "runArgs[0]", "dropped", "mounts go in `mounts`"),
    ('"runArgs": ["--env", "A=1"]', "runArgs[0]", "dropped", "containerEnv"),
    ('"runArgs": ["--env-file", ".env"]', "runArgs[0]", "dropped", "a file on the host"),
    ('"runArgs": ["-u", "0"]', "runArgs[0]", "dropped", "your uid"),
    ('"runArgs": ["--memory=16g"]', "runArgs[0]", "dropped", "`defaults:`"),
    ('"runArgs": ["-p", "8080:8080"]', "runArgs[0]", "ignored", "no published ports"),
    ('"runArgs": ["--init"]', "runArgs[0]", "ignored", "always runs an init"),
    ('"runArgs": ["--cap-drop=ALL"]', "runArgs[0]", "ignored", "dropped already"),
    ('"runArgs": ["--shm-size=2g"]', "runArgs[0]", "kept", "harmless"),
    ('"runArgs": ["--shm-size", "512m"]', "runArgs[0]", "kept", "harmless"),
    ('"runArgs": ["--hostname", "dev"]', "runArgs[0]", "kept", "harmless"),
    ('"runArgs": ["--shm-size=lots"]', "runArgs[0]", "dropped", "not a valid value"),
    ('"runArgs": ["--new-flag", "value"]', "runArgs[0]", "dropped", "not understood"),
    ('"runArgs": ["-it"]', "runArgs[0]", "ignored", "how the container runs"),
    ('"runArgs": ["-itv", "/:/h"]', "runArgs[0]", "dropped", "not understood"),
    ('"runArgs": ["host"]', "runArgs[0]", "dropped", "not an option"),
    # the properties that mirror runArgs
    ('"privileged": true', "privileged", "dropped", "root on the host"),
    ('"privileged": false', "privileged", "ignored", "never privileged"),
    ('"capAdd": ["SYS_PTRACE"]', "capAdd[0]", "dropped", "capability SYS_PTRACE"),
    ('"securityOpt": ["seccomp=unconfined"]', "securityOpt[0]", "dropped", "seccomp filter off"),
    ('"init": true', "init", "ignored", "always runs an init"),
    # mounts: the blocked list (is, holds, inside), string and object forms
    (
        '"mounts": ["source=${localEnv:HOME}/.ssh,target=/s,type=bind"]',
        "mounts[0]",
        "refused",
        "is ~/.ssh",
    ),
    (
        '"mounts": [{"source": "${localEnv:HOME}/.aws", "target": "/a", "type": "bind"}]',
        "mounts[0]",
        "refused",
        "is ~/.aws",
    ),
    (
        '"mounts": ["type=bind,source=~/.config/gcloud,target=/g"]',
        "mounts[0]",
        "refused",
        "~/.config/gcloud is ",
    ),
    ('"mounts": ["type=bind,source=~/.gnupg,target=/g"]', "mounts[0]", "refused", "~/.gnupg is "),
    (
        '"mounts": ["type=bind,source=~/.config/gh/hosts.yml,target=/g"]',
        "mounts[0]",
        "refused",
        "is inside ~/.config/gh",
    ),
    ('"mounts": ["type=bind,source=~/.kube,target=/k"]', "mounts[0]", "refused", "~/.kube is "),
    ('"mounts": ["type=bind,source=~/.docker,target=/d"]', "mounts[0]", "refused", "~/.docker is "),
    ('"mounts": ["type=bind,source=~/.npmrc,target=/n"]', "mounts[0]", "refused", "~/.npmrc is "),
    ('"mounts": ["type=bind,source=~/.pypirc,target=/p"]', "mounts[0]", "refused", "~/.pypirc is "),
    ('"mounts": ["type=bind,source=~/.netrc,target=/n"]', "mounts[0]", "refused", "~/.netrc is "),
    ('"mounts": ["type=bind,source=~/.claude,target=/c"]', "mounts[0]", "refused", "~/.claude is "),
    (
        '"mounts": ["type=bind,source=~/.claude.json,target=/c"]',
        "mounts[0]",
        "refused",
        "~/.claude.json is ",
    ),
    ('"mounts": ["type=bind,source=~/.codex,target=/c"]', "mounts[0]", "refused", "~/.codex is "),
    ('"mounts": ["type=bind,source=~/.gemini,target=/c"]', "mounts[0]", "refused", "~/.gemini is "),
    ('"mounts": ["type=bind,source=~/.config,target=/c"]', "mounts[0]", "refused", "~/.config is "),
    (
        '"mounts": ["type=bind,source=~/.local/share,target=/c"]',
        "mounts[0]",
        "refused",
        "is inside ~/.local",
    ),
    (
        '"mounts": ["type=bind,source=${localEnv:HOME},target=/h"]',
        "mounts[0]",
        "refused",
        "is ~ (your home",
    ),
    (
        '"mounts": ["type=bind,source=${localWorkspaceFolder}/../..,target=/h"]',
        "mounts[0]",
        "refused",
        "is ~ (your home",
    ),
    (
        '"mounts": ["type=bind,source=${localEnv:HOME}/..,target=/h"]',
        "mounts[0]",
        "refused",
        "holds ~ (your home",
    ),
    (
        '"mounts": ["type=bind,source=/,target=/h"]',
        "mounts[0]",
        "refused",
        "/ is the host's whole",
    ),
    ('"mounts": ["type=bind,source=/etc,target=/h"]', "mounts[0]", "refused", "/etc is the"),
    (
        '"mounts": ["type=bind,source=/proc/1/root,target=/h"]',
        "mounts[0]",
        "refused",
        "inside /proc",
    ),
    ('"mounts": ["type=bind,source=/sys,target=/h"]', "mounts[0]", "refused", "/sys is "),
    ('"mounts": ["type=bind,source=/dev,target=/h"]', "mounts[0]", "refused", "/dev is "),
    ('"mounts": ["type=bind,source=/boot,target=/h"]', "mounts[0]", "refused", "/boot is "),
    (
        '"mounts": ["source=/var/run/docker.sock,target=/var/run/docker.sock,type=bind"]',
        "mounts[0]",
        "refused",
        "Docker socket",
    ),
    (
        '"mounts": ["source=/run/docker.sock,target=/var/run/docker.sock,type=bind"]',
        "mounts[0]",
        "refused",
        "Docker socket",
    ),
    ('"mounts": ["source=/var,target=/v,type=bind"]', "mounts[0]", "refused", "holds /var/run"),
    (
        '"mounts": ["source=${localWorkspaceFolder}/keys,target=/k,type=bind"]',
        "mounts[0]",
        "refused",
        "is ~/.ssh",
    ),
    (
        '"mounts": ["source=${localEnv:SSH_AUTH_SOCK},target=/ssh-agent,type=bind"]',
        "mounts[0]",
        "refused",
        "looks like a secret",
    ),
    (
        '"mounts": ["source=vol,target=/v,type=volume,volume-opt=o=bind"]',
        "mounts[0]",
        "refused",
        "volume driver",
    ),
    # binds outside the project: refused, blocked or not (an allowlist)
    (
        '"mounts": ["source=/opt/datasets,target=/data,type=bind,readonly"]',
        "mounts[0]",
        "refused",
        "only paths inside the project may be mounted",
    ),
    (
        '"mounts": ["source=${localEnv:HOME}/src/other,target=/o,type=bind"]',
        "mounts[0]",
        "refused",
        "list another repository in the project's `refs:` instead",
    ),
    (
        '"mounts": ["source=${localWorkspaceFolder}/../other,target=/o,type=bind"]',
        "mounts[0]",
        "refused",
        "is outside the project",
    ),
    # a link below the project root, even to the project's own files: refused
    (
        '"mounts": ["source=${localWorkspaceFolder}/data-link,target=/d,type=bind"]',
        "mounts[0]",
        "refused",
        "data-link is a symbolic link",
    ),
    (
        '"mounts": ["source=${localWorkspaceFolder}/data-link/x,target=/d,type=bind"]',
        "mounts[0]",
        "refused",
        "data-link is a symbolic link",
    ),
    (
        '"mounts": ["source=${localWorkspaceFolder}/missing,target=/d,type=bind"]',
        "mounts[0]",
        "dropped",
        "does not exist",
    ),
    # mounts that are kept: binds (inside the project) read-only, volumes and tmpfs as asked
    (
        '"mounts": ["source=${localWorkspaceFolder}/data,target=/data,type=bind"]',
        "mounts[0]",
        "kept",
        "made read-only",
    ),
    (
        '"mounts": ["source=${localWorkspaceFolder}/data,target=/data,type=bind,readonly"]',
        "mounts[0]",
        "kept",
        "read-only, as asked",
    ),
    (
        '"mounts": ["source=${localWorkspaceFolder}/data,target=/src,type=bind"]',
        "mounts[0]",
        "kept",
        "made read-only",
    ),
    (
        '"mounts": ["source=${localWorkspaceFolder},target=/src,type=bind"]',
        "mounts[0]",
        "refused",
        "is the project itself: Cloister mounts it already",
    ),
    (
        '"mounts": ["source=mods,target=${containerWorkspaceFolder}/node_modules,type=volume"]',
        "mounts[0]",
        "kept",
        "no host files",
    ),
    (
        '"mounts": [{"source": "cache", "target": "/cache", "type": "volume"}]',
        "mounts[0]",
        "kept",
        "no host files",
    ),
    ('"mounts": ["type=tmpfs,target=/scratch"]', "mounts[0]", "kept", "memory-backed"),
    # mounts that are dropped
    (
        '"mounts": ["source=relative/dir,target=/d,type=bind"]',
        "mounts[0]",
        "dropped",
        "not an absolute path",
    ),
    (
        '"mounts": ["source=cache,target=/work,type=volume"]',
        "mounts[0]",
        "dropped",
        "hide the project",
    ),
    (
        '"mounts": ["source=${devcontainerId}-cache,target=/c,type=volume"]',
        "mounts[0]",
        "kept",
        "no host files",
    ),
    (
        '"mounts": ["source=cache-${localEnv:NOPE}${nothing},target=/c,type=volume"]',
        "mounts[0]",
        "dropped",
        "${nothing}, a variable Cloister does not substitute",
    ),
    (
        '"mounts": ["source=/opt/x,target=/x,type=bind,bind-propagation=rshared"]',
        "mounts[0]",
        "refused",
        "outside the project",
    ),
    (
        '"mounts": ["source=${localWorkspaceFolder}/data,target=/x,type=bind,'
        'bind-propagation=rshared"]',
        "mounts[0]",
        "kept",
        "made read-only: a cloister writes only its project; bind-propagation ignored",
    ),
    (
        '"mounts": ["source=cache,target=/c,type=volume,consistency=delegated"]',
        "mounts[0]",
        "kept",
        "consistency ignored: a macOS speed hint",
    ),
    # harmless options: kept (the spec then has them)
    (
        '"mounts": ["type=tmpfs,target=/t,tmpfs-size=64m,tmpfs-mode=1777"]',
        "mounts[0]",
        "kept",
        "memory-backed",
    ),
    ('"mounts": ["source=cache,target=/c,volume-nocopy"]', "mounts[0]", "kept", "no host files"),
    (
        '"mounts": [{"type": "volume", "source": "c", "target": "/c", "volume-nocopy": true}]',
        "mounts[0]",
        "kept",
        "no host files",
    ),
    (
        '"mounts": ["source=c,target=/c,type=volume,volume-driver=local"]',
        "mounts[0]",
        "kept",
        "no host files",
    ),
    ('"mounts": ["type=tmpfs,target=/t,tmpfs-size=lots"]', "mounts[0]", "dropped", "not a size"),
    ('"mounts": ["type=tmpfs,target=/t,tmpfs-mode=999"]', "mounts[0]", "dropped", "octal mode"),
    (
        '"mounts": ["source=c,target=/c,tmpfs-size=1m"]',
        "mounts[0]",
        "dropped",
        "tmpfs-size is an option of a tmpfs mount",
    ),
    ('"mounts": ["type=tmpfs,target=/t,tmpfs-x=1"]', "mounts[0]", "dropped", "not understood"),
    # a volume whose driver options bind a host path: what it is, not "given twice"
    (
        '"mounts": ["type=volume,source=x,target=/y,volume-driver=local,volume-opt=type=none,'
        'volume-opt=o=bind,volume-opt=device=/"]',
        "mounts[0]",
        "refused",
        "a host bind mount in disguise (the local volume driver's volume-opt device= and"
        " o=bind): / is the host's whole file system",
    ),
    (
        '"mounts": ["type=volume,source=x,target=/y,volume-opt=device=${localEnv:HOME}/.ssh,'
        'volume-opt=o=bind"]',
        "mounts[0]",
        "refused",
        "is ~/.ssh (your SSH keys)",
    ),
    (
        '"mounts": [{"type": "volume", "source": "x", "target": "/y",'
        ' "volume-opt": ["o=bind", "device=/etc"]}]',
        "mounts[0]",
        "refused",
        "/etc is the host's system configuration",
    ),
    (
        '"mounts": ["type=volume,source=x,target=/y,volume-opt=type=tmpfs"]',
        "mounts[0]",
        "dropped",
        "passes no options to a volume driver",
    ),
    (
        '"mounts": ["type=volume,source=x,target=/y,volume-driver=sshfs"]',
        "mounts[0]",
        "dropped",
        "a volume plugin runs on the host",
    ),
    # a line break or another control character: dropped, never a traceback
    ('"mounts": ["type=tmpfs,target=/a\\nb"]', "mounts[0]", "dropped", "control character"),
    ('"mounts": ["type=tmpfs,target=/a\\rb"]', "mounts[0]", "dropped", "control character"),
    ('"mounts": ["type=tmpfs,\\u0085target=/a"]', "mounts[0]", "dropped", "control character"),
    (
        '"mounts": [{"type": "tmpfs", "target": "/a\\nb"}]',
        "mounts[0]",
        "dropped",
        "control character",
    ),
    (
        '"runArgs": ["--mount", "type=bind,source=/etc,target=/a\\nb"]',
        "runArgs[0]",
        "dropped",
        "mounts go in `mounts`",
    ),
    ('"runArgs": ["-v", "//etc:/x"]', "runArgs[0]", "refused", "is /etc"),
    ('"runArgs": ["--mount=type=bind,src=/./etc/,dst=/x"]', "runArgs[0]", "refused", "is /etc"),
    # targets are normalised before the check
    (
        '"mounts": ["source=c,target=//work,type=volume"]',
        "mounts[0]",
        "dropped",
        "hide the project",
    ),
    (
        '"mounts": ["source=c,target=/work/.,type=volume"]',
        "mounts[0]",
        "dropped",
        "hide the project",
    ),
    (
        '"mounts": ["source=c,target=/./work,type=volume"]',
        "mounts[0]",
        "dropped",
        "hide the project",
    ),
    (
        '"mounts": ["source=c,target=/x/../work,type=volume"]',
        "mounts[0]",
        "dropped",
        "hide the project",
    ),
    (
        '"mounts": ["source=c,target=/work/,type=volume"]',
        "mounts[0]",
        "dropped",
        "hide the project",
    ),
    ('"mounts": ["type=tmpfs,target=//"]', "mounts[0]", "dropped", "hide the project"),
    ('"mounts": ["source=/opt/x,target=/x,type=npipe"]', "mounts[0]", "dropped", "not supported"),
    # environment
    (
        '"containerEnv": {"NODE_ENV": "development"}',
        "containerEnv.NODE_ENV",
        "kept",
        "set in the cloister",
    ),
    (
        '"containerEnv": {"HOME": "/home/node"}',
        "containerEnv.HOME",
        "ignored",
        "Cloister sets it: the home is /home/cloister",
    ),
    ('"remoteEnv": {"HOME": null}', "remoteEnv.HOME", "ignored", "Cloister sets it"),
    (
        '"remoteEnv": {"https_proxy": "http://evil:3128"}',
        "remoteEnv.https_proxy",
        "ignored",
        "the proxy is the only way out",
    ),
    (
        '"containerEnv": {"Cloister_Token": "x"}',
        "containerEnv.Cloister_Token",
        "ignored",
        "the cloister's name, token and guardian",
    ),
    (
        '"containerEnv": {"LANG": "${localEnv:LANG}"}',
        "containerEnv.LANG",
        "kept",
        "from your environment",
    ),
    (
        '"containerEnv": {"GH": "${localEnv:GITHUB_TOKEN}"}',
        "containerEnv.GH",
        "refused",
        "looks like a secret",
    ),
    (
        '"containerEnv": {"HTTPS_PROXY": "http://elsewhere:3128"}',
        "containerEnv.HTTPS_PROXY",
        "ignored",
        "proxy",
    ),
    (
        '"remoteEnv": {"PATH": "${containerEnv:PATH}:/opt/bin"}',
        "remoteEnv.PATH",
        "kept",
        "set in the cloister",
    ),
    ('"remoteEnv": {"DEBUG": null}', "remoteEnv.DEBUG", "kept", "unset"),
    # users
    ('"remoteUser": "node"', "remoteUser", "kept", "your uid"),
    ('"remoteUser": "root"', "remoteUser", "ignored", "never runs as root"),
    ('"containerUser": "0:0"', "containerUser", "ignored", "never runs as root"),
    ('"remoteUser": "1000"', "remoteUser", "ignored", "a uid"),
    (
        '"remoteUser": "node", "containerUser": "vscode"',
        "containerUser",
        "ignored",
        "remoteUser 'node' is used",
    ),
    # host-side, ports, and what has no meaning in a cloister
    (
        '"initializeCommand": "docker login ghcr.io"',
        "initializeCommand",
        "refused",
        "runs on the host",
    ),
    (
        '"postStartCommand": "echo ${localEnv:AWS_SECRET_ACCESS_KEY}"',
        "postStartCommand",
        "refused",
        "looks like a secret",
    ),
    ('"forwardPorts": [3000, "db:5432"]', "forwardPorts", "ignored", "no published ports"),
    ('"appPort": 8080', "appPort", "ignored", "no published ports"),
    (
        '"workspaceFolder": "/workspaces/app"',
        "workspaceFolder",
        "ignored",
        "the project is at /work",
    ),
    (
        '"workspaceMount": "source=/,target=/w,type=bind"',
        "workspaceMount",
        "dropped",
        "mounts the project itself",
    ),
    ('"shutdownAction": "none"', "shutdownAction", "ignored", "cloister stop"),
    ('"hostRequirements": {"memory": "16gb"}', "hostRequirements", "ignored", "`defaults:`"),
    ('"overrideCommand": false', "overrideCommand", "ignored", "its own command"),
    ('"updateRemoteUserUID": false', "updateRemoteUserUID", "ignored", "your uid"),
    ('"customizations": {"vscode": {}}', "customizations", "ignored", "no editor"),
    ('"notAProperty": 1', "notAProperty", "ignored", "not a devcontainer.json property"),
    # Features
    (
        '"features": {"ghcr.io/devcontainers/features/go:1": {}}',
        "features['ghcr.io/devcontainers/features/go:1']",
        "kept",
        "trusted source",
    ),
    (
        '"features": {"ghcr.io/evil/features/x:1": {}}',
        "features['ghcr.io/evil/features/x:1']",
        "refused",
        "a source you have not trusted",
    ),
    (
        '"features": {"./local-feature": {}}',
        "features['./local-feature']",
        "refused",
        "no such folder",
    ),
    (
        '"features": {"ghcr.io/devcontainers/features/go:1": false}',
        "features['ghcr.io/devcontainers/features/go:1']",
        "ignored",
        "not installed",
    ),
]


@pytest.mark.parametrize(("fragment", "field", "outcome", "why"), OVERRIDES)
def test_override(workspace: Workspace, fragment: str, field: str, outcome: str, why: str) -> None:
    text = '{\n  "image": "mcr.microsoft.com/devcontainers/base:bookworm",\n  ' + fragment + "\n}\n"
    loaded = workspace.load(text)
    found = {item.field: item for item in loaded.overrides}
    assert field in found, sorted(found)
    override = found[field]
    assert (override.outcome, why in override.why) == (outcome, True), override.describe()
    assert override.line == 3
    if outcome == "kept" and field.startswith("mounts"):
        assert len(loaded.mounts) == 1
    elif field.startswith("mounts"):
        assert loaded.mounts == ()
    if field.startswith("runArgs"):
        assert bool(loaded.run_args) == (outcome == "kept")


# --- git directories: no bind mount gives a cloister the human's ---------------------------


def _git_dir(path: Path) -> Path:
    """A folder git would take for a git directory."""
    for folder in ("objects", "refs"):
        (path / folder).mkdir(parents=True)
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "config").write_text('[remote "origin"]\n\turl = https://me:tok@example.com/r\n')
    return path


@pytest.fixture
def repository(workspace: Workspace) -> Workspace:
    """The workspace's project as a git repository with a nested one and a worktree's."""
    project = workspace.project
    _git_dir(project / ".git")
    (project / ".git" / "hooks").mkdir()
    _git_dir(project / "vendor" / "lib" / ".git")
    (project / "vendor" / "lib" / "src").mkdir()
    # A worktree whose gitdir lives in the project under another name, named by a .git file.
    (project / "meta" / "wt").mkdir(parents=True)
    (project / "meta" / "wt" / "HEAD").write_text("0" * 40 + "\n")
    (project / "meta" / "wt" / "commondir").write_text("../../.git\n")
    (project / "tree").mkdir()
    (project / "tree" / ".git").write_text("gitdir: ../meta/wt\n")
    (project / "bare.git" / "sub").mkdir(parents=True)
    _git_dir(project / "bare.git")
    (project / "src" / "app").mkdir(parents=True)
    (project / "src" / "app" / "main.py").write_text("print()\n")
    (project / "deep").mkdir()
    (project / "deep" / "a" / "b" / "c").mkdir(parents=True)
    (project / "deep" / "a" / "b" / "c" / ".GIT").mkdir()  # case-folded on macOS
    (project / "ln").symlink_to(project / ".git")
    return workspace


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("${localWorkspaceFolder}", "is the project itself"),
        ("${localWorkspaceFolder}/.", "is the project itself"),
        ("${localWorkspaceFolder}/src/..", "is the project itself"),
        ("${localWorkspaceFolder}/.git", "is inside a git directory"),
        ("${localWorkspaceFolder}/.git/config", "is inside a git directory"),
        ("${localWorkspaceFolder}/.git/hooks", "is inside a git directory"),
        ("${localWorkspaceFolder}/vendor/lib/.git", "is inside a git directory"),
        ("${localWorkspaceFolder}/vendor", "vendor/lib/.git, a git directory"),
        ("${localWorkspaceFolder}/vendor/lib", "lib/.git, a git directory"),
        ("${localWorkspaceFolder}/tree", "tree/.git, a git directory"),
        ("${localWorkspaceFolder}/meta", "meta/wt, a git directory"),
        ("${localWorkspaceFolder}/meta/wt", "is or is inside a git directory"),
        ("${localWorkspaceFolder}/meta/wt/HEAD", "is or is inside a git directory"),
        ("${localWorkspaceFolder}/bare.git/sub", "is or is inside a git directory"),
        ("${localWorkspaceFolder}/deep", "c/.GIT, a git directory"),
        ("${localWorkspaceFolder}/ln", "is a symbolic link"),
        ("${localWorkspaceFolder}/ln/config", "is a symbolic link"),
    ],
)
def test_a_bind_never_gives_the_cloister_a_git_directory(
    repository: Workspace, source: str, why: str
) -> None:
    text = f'{{"image": "debian", "mounts": ["source={source},target=/g,type=bind,readonly"]}}'
    loaded = repository.load(text)
    (decision,) = [item for item in loaded.overrides if item.field == "mounts[0]"]
    assert (decision.outcome, why in decision.why) == ("refused", True), decision.describe()
    assert loaded.mounts == ()


def test_a_bind_of_a_folder_without_git_is_kept(repository: Workspace) -> None:
    text = (
        '{"image": "debian", "mounts": ["source=${localWorkspaceFolder}/src,target=/s,type=bind"]}'
    )
    loaded = repository.load(text)
    assert [(m.source, m.read_only) for m in loaded.mounts] == [
        (str(repository.project / "src"), True)
    ]


def test_a_folder_too_big_to_search_is_refused(workspace: Workspace) -> None:
    big = workspace.project / "big"
    big.mkdir()
    for index in range(mounts.MAX_SEARCHED + 1):
        (big / str(index)).touch()
    text = (
        '{"image": "debian", "mounts": ["source=${localWorkspaceFolder}/big,target=/b,type=bind"]}'
    )
    loaded = workspace.load(text)
    (decision,) = [item for item in loaded.overrides if item.field == "mounts[0]"]
    assert decision.outcome == "refused"
    assert f"more than {mounts.MAX_SEARCHED} entries" in decision.why


def test_a_folder_named_many_times_is_searched_once(workspace: Workspace) -> None:
    folder = workspace.project / "many"
    folder.mkdir()
    for index in range(1000):
        (folder / str(index)).touch()
    blocked = BlockedPaths(workspace.home)
    variables = Variables(
        environ={}, local_workspace=str(workspace.project), container_workspace="/work"
    )
    fields = {"type": "bind", "source": str(folder), "target": "/m"}
    decisions = [
        mounts.decide_mount(fields, variables=variables, blocked=blocked) for _ in range(500)
    ]
    assert {decision.outcome for decision in decisions} == {"kept"}
    assert blocked.search_left == MAX_SEARCHED_PER_LOAD - 1000


def test_all_searches_of_one_load_are_bounded(workspace: Workspace) -> None:
    blocked = BlockedPaths(workspace.home)
    blocked.search_left = 10  # as if earlier mounts had searched nearly all
    variables = Variables(
        environ={}, local_workspace=str(workspace.project), container_workspace="/work"
    )
    (workspace.project / "data" / "a").mkdir()
    (workspace.project / "data" / "b").mkdir()
    fields = {"type": "bind", "source": str(workspace.project / "data"), "target": "/d"}
    assert mounts.decide_mount(fields, variables=variables, blocked=blocked).outcome == "kept"
    blocked.search_left = 1
    fields["source"] = str(workspace.project / "data" / "a")
    (workspace.project / "data" / "a" / "x").touch()
    (workspace.project / "data" / "a" / "y").touch()
    decision = mounts.decide_mount(fields, variables=variables, blocked=blocked)
    assert (decision.outcome, "cannot tell" in decision.why) == ("refused", True)


@pytest.mark.parametrize(
    ("build", "where"),
    [
        ('{"dockerfile": "Dockerfile", "context": "../.git"}', "build.context"),
        ('{"dockerfile": "../.git/config", "context": ".."}', "build.dockerfile"),
        ('{"dockerfile": "Dockerfile", "context": "../meta/wt"}', "build.context"),
    ],
)
def test_the_image_is_never_built_from_a_git_directory(
    repository: Workspace, build: str, where: str
) -> None:
    repository.write("FROM debian\n", ".devcontainer/Dockerfile")
    with pytest.raises(DevcontainerError, match=f"{where}: .* git directory") as raised:
        repository.load(f'{{"build": {build}}}')
    assert raised.value.line == 1
