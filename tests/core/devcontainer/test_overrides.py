"""Every override: what the file asks for → what Cloister does, and the reason it gives."""

from __future__ import annotations

import pytest

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
    ('"runArgs": ["--mount", "type=bind,src=/etc,dst=/h"]', "runArgs[0]", "refused", "is /etc"),
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
        "is ~/.config/gcloud",
    ),
    ('"mounts": ["type=bind,source=~/.gnupg,target=/g"]', "mounts[0]", "refused", "is ~/.gnupg"),
    (
        '"mounts": ["type=bind,source=~/.config/gh/hosts.yml,target=/g"]',
        "mounts[0]",
        "refused",
        "is inside ~/.config/gh",
    ),
    ('"mounts": ["type=bind,source=~/.kube,target=/k"]', "mounts[0]", "refused", "is ~/.kube"),
    ('"mounts": ["type=bind,source=~/.docker,target=/d"]', "mounts[0]", "refused", "is ~/.docker"),
    ('"mounts": ["type=bind,source=~/.npmrc,target=/n"]', "mounts[0]", "refused", "is ~/.npmrc"),
    ('"mounts": ["type=bind,source=~/.pypirc,target=/p"]', "mounts[0]", "refused", "is ~/.pypirc"),
    ('"mounts": ["type=bind,source=~/.netrc,target=/n"]', "mounts[0]", "refused", "is ~/.netrc"),
    ('"mounts": ["type=bind,source=~/.claude,target=/c"]', "mounts[0]", "refused", "is ~/.claude "),
    (
        '"mounts": ["type=bind,source=~/.claude.json,target=/c"]',
        "mounts[0]",
        "refused",
        "is ~/.claude.json",
    ),
    ('"mounts": ["type=bind,source=~/.codex,target=/c"]', "mounts[0]", "refused", "is ~/.codex"),
    ('"mounts": ["type=bind,source=~/.gemini,target=/c"]', "mounts[0]", "refused", "is ~/.gemini"),
    ('"mounts": ["type=bind,source=~/.config,target=/c"]', "mounts[0]", "refused", "is ~/.config "),
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
        "is / (the host's whole",
    ),
    ('"mounts": ["type=bind,source=/etc,target=/h"]', "mounts[0]", "refused", "is /etc"),
    (
        '"mounts": ["type=bind,source=/proc/1/root,target=/h"]',
        "mounts[0]",
        "refused",
        "inside /proc",
    ),
    ('"mounts": ["type=bind,source=/sys,target=/h"]', "mounts[0]", "refused", "is /sys"),
    ('"mounts": ["type=bind,source=/dev,target=/h"]', "mounts[0]", "refused", "is /dev"),
    ('"mounts": ["type=bind,source=/boot,target=/h"]', "mounts[0]", "refused", "is /boot"),
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
        '"mounts": ["source=${localWorkspaceFolder},target=/src,type=bind"]',
        "mounts[0]",
        "kept",
        "made read-only",
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
        " o=bind): / is / (the host's whole file system)",
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
        "/etc is /etc (the host's system configuration)",
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
