"""What a Feature's metadata asks of the container goes through devcontainer.json's overrides."""

from __future__ import annotations

import json
from pathlib import Path

from cloister_core.devcontainer import (
    Feature,
    MountSpec,
    ResolvedFeature,
    feature_overrides,
    parse_feature_metadata,
)
from cloister_core.devcontainer.blocked import BlockedPaths
from cloister_core.devcontainer.variables import Variables

# docker-in-docker's requests (devcontainers/features, MIT), with a few a hostile one adds.
DIND = {
    "id": "docker-in-docker",
    "version": "2.12.0",
    "privileged": True,
    "init": True,
    "capAdd": ["SYS_ADMIN", "NET_ADMIN"],
    "securityOpt": ["seccomp=unconfined", "no-new-privileges"],
    "entrypoint": "/usr/local/share/docker-init.sh",
    "mounts": [
        {
            "source": "dind-var-lib-docker-${devcontainerId}",
            "target": "/var/lib/docker",
            "type": "volume",
        },
        "source=/var/run/docker.sock,target=/var/run/docker.sock,type=bind",
        "type=bind,source=${localEnv:HOME}/.ssh,target=/root/.ssh",
        "type=tmpfs,target=//work",
        "type=tmpfs,target=/a\nb",
    ],
    "containerEnv": {
        "DOCKER_BUILDKIT": "1",
        "PATH": "/usr/local/docker/bin:${PATH}",
        "HTTP_PROXY": "http://evil.example:8080",
        "CLOISTER_TOKEN": "x",
        "HOME": "/root",
        "STOLEN": "${localEnv:GITHUB_TOKEN}",
    },
}
ID = "ghcr.io/devcontainers/features/docker-in-docker:2"


def _requests(tmp_path: Path) -> tuple[Variables, BlockedPaths, ResolvedFeature]:
    home = tmp_path / "home"
    project = home / "project"
    project.mkdir(parents=True)
    variables = Variables(
        environ={"HOME": str(home), "GITHUB_TOKEN": "ghp_secret"},
        local_workspace=str(project),
        container_workspace="/work",
        devcontainer_id="0" * 52,
    )
    metadata = parse_feature_metadata(json.dumps(DIND), f"{ID} devcontainer-feature.json")
    resolved = ResolvedFeature(Feature(ID, {}, True, line=7), metadata, "sha256:" + "a" * 64)
    return variables, BlockedPaths(home), resolved


def test_a_features_requests_are_overridden(tmp_path: Path) -> None:
    variables, blocked, resolved = _requests(tmp_path)
    requests = feature_overrides(resolved, variables=variables, blocked=blocked)
    decided = {item.field: (item.outcome, item.why) for item in requests.overrides}
    prefix = f'features["{ID}"].'
    expected_outcomes = {
        "privileged": "dropped",
        "init": "ignored",
        "capAdd[0]": "dropped",
        "capAdd[1]": "dropped",
        "securityOpt[0]": "dropped",
        "securityOpt[1]": "ignored",
        "entrypoint": "dropped",
        "mounts[0]": "kept",
        "mounts[1]": "refused",
        "mounts[2]": "refused",
        "mounts[3]": "dropped",
        "mounts[4]": "dropped",
        "containerEnv.DOCKER_BUILDKIT": "kept",
        "containerEnv.PATH": "kept",
        "containerEnv.HTTP_PROXY": "ignored",
        "containerEnv.CLOISTER_TOKEN": "ignored",
        "containerEnv.HOME": "ignored",
        "containerEnv.STOLEN": "refused",
    }
    assert {field: outcome for field, (outcome, _) in decided.items()} == {
        prefix + field: outcome for field, outcome in expected_outcomes.items()
    }
    assert "root on the host" in decided[prefix + "privileged"][1]
    assert "SYS_ADMIN" in decided[prefix + "capAdd[0]"][1]
    assert "is not run" in decided[prefix + "entrypoint"][1]
    assert "hide the project" in decided[prefix + "mounts[3]"][1]  # //work is /work
    assert "proxy is the only way out" in decided[prefix + "containerEnv.HTTP_PROXY"][1]
    assert "GITHUB_TOKEN" in decided[prefix + "containerEnv.STOLEN"][1]
    # Each names the Feature's line in devcontainer.json.
    assert {item.line for item in requests.overrides} == {7}
    assert requests.mounts == (
        MountSpec("volume", "dind-var-lib-docker-" + "0" * 52, "/var/lib/docker", False),
    )
    assert requests.container_env == {
        "DOCKER_BUILDKIT": "1",
        "PATH": "/usr/local/docker/bin:${PATH}",  # the image's PATH, expanded by the build
    }
    assert "ghp_secret" not in repr(requests)


def test_a_feature_asking_for_nothing_gets_no_overrides(tmp_path: Path) -> None:
    variables, blocked, _ = _requests(tmp_path)
    metadata = parse_feature_metadata('{"id": "plain", "privileged": false}', "plain")
    resolved = ResolvedFeature(
        Feature("./plain", {}, True, "local"), metadata, "sha256:" + "b" * 64
    )
    requests = feature_overrides(resolved, variables=variables, blocked=blocked)
    assert requests.mounts == ()
    assert requests.container_env == {}
    assert [(item.field, item.outcome) for item in requests.overrides] == [
        ('features["./plain"].privileged', "ignored")
    ]
