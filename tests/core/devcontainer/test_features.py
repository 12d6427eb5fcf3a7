"""Feature ids: their kind, which are trusted, what a refusal says; the loader's Features."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from cloister_core.config.models import GlobalConfig
from cloister_core.devcontainer import (
    DevcontainerError,
    FeatureIdError,
    OciReference,
    is_trusted,
    parse_oci_reference,
)
from cloister_core.devcontainer.features import resolve_local_feature

from .conftest import Workspace

MINE = ("ghcr.io/my-org/features/", "ghcr.io/friend/tool")
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("feature", "trusted"),
    [
        ("ghcr.io/devcontainers/features/node:1", True),
        ("GHCR.IO/devcontainers/features/python", True),
        ("ghcr.io/devcontainers/features/", False),  # the prefix alone names nothing
        ("ghcr.io/devcontainers/features-evil/x:1", False),
        ("ghcr.io/devcontainers/features/../../evil/x", False),
        ("https://ghcr.io/devcontainers/features/x.tgz", False),
        ("ghcr.io/my-org/features/lint:2", True),
        ("ghcr.io/friend/tool:3", True),
        ("ghcr.io/friend/tool@sha256:abc", True),
        ("ghcr.io/friend/toolbox:1", False),  # an entry without "/" is one Feature
        ("./local-feature", False),
        ("node", False),  # the retired short names
    ],
)
def test_is_trusted(feature: str, trusted: bool) -> None:
    assert is_trusted(feature, MINE) is trusted


def test_a_pinned_entry_trusts_that_version_only() -> None:
    pinned = (f"ghcr.io/friend/tool@{DIGEST}",)
    assert is_trusted(f"ghcr.io/friend/tool@{DIGEST}", pinned)
    assert not is_trusted("ghcr.io/friend/tool:1", pinned)
    assert not is_trusted(f"ghcr.io/friend/tool@sha256:{'cd' * 32}", pinned)


def test_config_section() -> None:
    config = GlobalConfig.model_validate({"devcontainer": {"trusted_features": list(MINE)}})
    assert config.devcontainer.trusted_features == MINE
    assert GlobalConfig().devcontainer.trusted_features == ()
    assert (
        GlobalConfig.model_validate({"devcontainer": {"trusted_features": None}}) == GlobalConfig()
    )


@pytest.mark.parametrize("entry", ["", "ghcr.io/a b", "https://example.com/f.tgz"])
def test_config_refuses_what_is_no_feature_reference(entry: str) -> None:
    with pytest.raises(ValidationError, match="not a Feature id or prefix"):
        GlobalConfig.model_validate({"devcontainer": {"trusted_features": [entry]}})


@pytest.mark.parametrize(
    ("feature", "expected", "text"),
    [
        (
            "ghcr.io/devcontainers/features/node:1",
            OciReference("ghcr.io", "devcontainers/features", "node", "1", None),
            "ghcr.io/devcontainers/features/node:1",
        ),
        (
            "ghcr.io/devcontainers/features/node",
            OciReference("ghcr.io", "devcontainers/features", "node", "latest", None),
            "ghcr.io/devcontainers/features/node:latest",
        ),
        (
            "GHCR.io/Codspace/DependsOn/A",  # compared in lower case, as the CLI does
            OciReference("ghcr.io", "codspace/dependson", "a", "latest", None),
            "ghcr.io/codspace/dependson/a:latest",
        ),
        (
            f"ghcr.io/x/y@{DIGEST}",
            OciReference("ghcr.io", "x", "y", None, DIGEST),
            f"ghcr.io/x/y@{DIGEST}",
        ),
        (
            "localhost:5000/team/features/lint:1.2.3",
            OciReference("localhost:5000", "team/features", "lint", "1.2.3", None),
            "localhost:5000/team/features/lint:1.2.3",
        ),
        (
            "ghcr.io/devcontainers-contrib/features/poetry:2",  # moved: the CLI redirects it
            OciReference("ghcr.io", "devcontainers-extra/features", "poetry", "2", None),
            "ghcr.io/devcontainers-extra/features/poetry:2",
        ),
        (
            "[::1]:5000/a/b",
            OciReference("[::1]:5000", "a", "b", "latest", None),
            "[::1]:5000/a/b:latest",
        ),
    ],
)
def test_oci_references(feature: str, expected: OciReference, text: str) -> None:
    reference = parse_oci_reference(feature)
    assert reference == expected
    assert str(reference) == text
    assert reference.resource == f"{expected.registry}/{expected.namespace}/{expected.name}"


@pytest.mark.parametrize(
    ("registry", "loopback"),
    [
        ("localhost:5000", True),
        ("127.0.0.1:5000", True),
        ("[::1]:5000", True),
        ("ghcr.io", False),
        ("localhost.evil.example:5000", False),
    ],
)
def test_loopback_registries(registry: str, loopback: bool) -> None:
    assert parse_oci_reference(f"{registry}/a/b:1").loopback is loopback


@pytest.mark.parametrize(
    ("feature", "says"),
    [
        ("https://example.com/devcontainer-feature-x.tgz", "tarball URL"),
        ("node", "ghcr.io/devcontainers/features/node:1"),
        ("golang", "ghcr.io/devcontainers/features/go:1"),
        ("fish", "not a Feature reference"),
        ("devcontainers/features/node@v1", "retired GitHub-release form"),
        ("ghcr.io/node", "the namespace is missing"),
        ("ghcr.io/x/Bad Name:1", "not a repository path"),
        ("ghcr.io/x/y@sha256:abc", "not a digest"),
        ("ghcr.io/x/y:-bad", "not a tag"),
    ],
)
def test_refused_ids_say_what_to_do(feature: str, says: str) -> None:
    with pytest.raises(FeatureIdError) as caught:
        parse_oci_reference(feature)
    assert says in str(caught.value)


def test_local_features_must_be_under_dot_devcontainer(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / ".devcontainer" / "mine").mkdir(parents=True)
    (project / ".devcontainer" / "mine" / "devcontainer-feature.json").write_text("{}")
    (project / "elsewhere").mkdir()
    (project / "elsewhere" / "devcontainer-feature.json").write_text("{}")
    (project / ".devcontainer" / "link").symlink_to(project / "elsewhere")
    config = project / ".devcontainer" / "devcontainer.json"
    assert resolve_local_feature("./mine", config, project) == project / ".devcontainer/mine"
    root_config = project / ".devcontainer.json"
    assert resolve_local_feature("./.devcontainer/mine", root_config, project).name == "mine"
    for feature, says in [
        ("../elsewhere", "must be a folder under"),
        ("./link", "must be a folder under"),  # a link is followed before the check
        ("./", "must be a folder under"),  # .devcontainer itself
        ("/etc", "not an absolute path"),
        ("./missing", "no such folder"),
    ]:
        with pytest.raises(FeatureIdError) as caught:
            resolve_local_feature(feature, config, project)
        assert says in str(caught.value), feature


def _feature_folder(workspace: Workspace, name: str) -> Path:
    folder = workspace.project / ".devcontainer" / name
    folder.mkdir(parents=True)
    (folder / "devcontainer-feature.json").write_text(json.dumps({"id": name}))
    (folder / "install.sh").write_text("#!/bin/sh\n")
    return folder


def test_loader_reads_each_kind(workspace: Workspace) -> None:
    folder = _feature_folder(workspace, "tools")
    text = """{
  "image": "debian",
  "features": {
    "ghcr.io/devcontainers/features/node:1": "lts",
    "./tools": {"level": 3, "fast": true},
    "ghcr.io/someone/features/x:1": {},
    "https://example.com/devcontainer-feature-x.tgz": {},
    "../../escape": {},
    "ghcr.io/devcontainers/features/go:1": false
  },
  "overrideFeatureInstallOrder": ["./tools", "ghcr.io/devcontainers/features/node"]
}
"""
    loaded = workspace.load(text)
    assert [(f.id, f.kind, f.trusted, f.local_path, f.line) for f in loaded.features] == [
        ("ghcr.io/devcontainers/features/node:1", "oci", True, None, 4),
        ("./tools", "local", True, folder, 5),
        ("ghcr.io/someone/features/x:1", "oci", False, None, 6),
    ]
    assert dict(loaded.features[0].options) == {"version": "lts"}
    assert dict(loaded.features[1].options) == {"level": "3", "fast": True}
    assert [f.id for f in loaded.untrusted_features] == ["ghcr.io/someone/features/x:1"]
    assert loaded.override_feature_order == ("./tools", "ghcr.io/devcontainers/features/node")
    found = {item.field: item for item in loaded.overrides}
    assert found["overrideFeatureInstallOrder"].outcome == "kept"
    assert found["features['ghcr.io/devcontainers/features/go:1']"].outcome == "ignored"
    refused = {item.field: item.why for item in loaded.refused_features}
    assert sorted(refused) == [
        "features['../../escape']",
        "features['ghcr.io/someone/features/x:1']",
        "features['https://example.com/devcontainer-feature-x.tgz']",
    ]
    untrusted = refused["features['ghcr.io/someone/features/x:1']"]
    # What to do: trust it (its prefix is named), pin it, make it local, or a cloister-only file.
    for words in (
        "'ghcr.io/someone/features/'",
        "devcontainer.trusted_features",
        "pin it",
        "make it local",
        ".devcontainer/cloister/devcontainer.json",
    ):
        assert words in untrusted, words
    assert "asks" not in untrusted  # nothing asks: the start stops
    assert ".devcontainer/cloister/devcontainer.json" in refused["features['../../escape']"]
    assert {item.line for item in loaded.refused_features} == {6, 7, 8}


def test_trusted_features_from_config(workspace: Workspace) -> None:
    features = '{"ghcr.io/my-org/features/tool:1": {}, "ghcr.io/my-org-evil/x:1": {}}'
    text = '{"image": "debian", "features": ' + features + "}"
    loaded = workspace.load(text, trusted_features=["ghcr.io/my-org/features/"])
    assert [f.trusted for f in loaded.features] == [True, False]
    assert [item.field for item in loaded.refused_features] == [
        "features['ghcr.io/my-org-evil/x:1']"
    ]


def test_no_features(workspace: Workspace) -> None:
    loaded = workspace.load('{"image": "debian"}')
    assert not loaded.has_features
    assert loaded.override_feature_order == ()
    assert loaded.refused_features == ()


def test_feature_order_must_be_strings(workspace: Workspace) -> None:
    with pytest.raises(DevcontainerError, match=r"overrideFeatureInstallOrder\[0\]: expected"):
        workspace.load('{"image": "debian", "overrideFeatureInstallOrder": [1]}')


def test_a_tarball_url_in_the_order_is_ignored_saying_why(workspace: Workspace) -> None:
    """Its Feature is refused, so the entry names nothing installed (the CLI's own test
    configuration overrideFeatureInstallOrder-image-with-v2 has one)."""
    url = "https://example.com/devcontainer-feature-x.tgz"
    document = {"image": "debian", "overrideFeatureInstallOrder": ["./tools", url]}
    loaded = workspace.load(json.dumps(document))
    assert loaded.override_feature_order == ("./tools", url)
    found = {item.field: item for item in loaded.overrides}
    assert found["overrideFeatureInstallOrder[1]"].outcome == "ignored"
    assert "names no Feature Cloister installs" in found["overrideFeatureInstallOrder[1]"].why


def test_at_most_a_hundred_features_are_read(workspace: Workspace) -> None:
    hundred: dict[str, object] = {f"./f{index}": {} for index in range(100)}
    loaded = workspace.load(json.dumps({"image": "debian", "features": hundred}))
    assert len(loaded.refused_features) == 100  # no such folders
    many: dict[str, object] = {f"./f{index}": {} for index in range(101)}
    with pytest.raises(DevcontainerError, match="101 Features; at most 100 are read"):
        workspace.load(json.dumps({"image": "debian", "features": many}))
