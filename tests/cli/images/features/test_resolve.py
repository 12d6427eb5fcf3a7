"""Resolving a devcontainer's Features against the fake registry: local and OCI ones,
dependsOn fetched, the order, the lock file written then verified, a moved tag, the
metadata's requests, and the lock file written without following a planted link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cloister_cli.images import shape
from cloister_cli.images.features import cache, resolve
from cloister_cli.images.features.resolve import Context, FeaturesError, plan_features, write_lock
from cloister_core.devcontainer import Devcontainer, Feature, ImageSource
from cloister_core.paths import CloisterPaths
from tests.cli.images.features.conftest import make_feature
from tests.registry import FakeRegistry


def _context(tmp_path: Path, root: Path, registry: FakeRegistry | None = None) -> Context:
    trusted = (f"{registry.host}/",) if registry is not None else ()
    return Context(
        paths=CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data"),
        project_root=root,
        home=tmp_path / "home",
        environ={},
        trusted=trusted,
    )


def _devcontainer(root: Path, *features: Feature) -> Devcontainer:
    path = root / ".devcontainer" / "devcontainer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text('{"image": "debian:bookworm-slim"}')
    return Devcontainer(
        path=path,
        name=None,
        source=ImageSource("image", image="debian:bookworm-slim"),
        features=features,
        mounts=(),
        run_args=(),
        container_env={},
        remote_env={},
        user=None,
        lifecycle=(),
        overrides=(),
    )


def _oci(feature_id: str, **options: str | bool) -> Feature:
    return Feature(feature_id, options, True, "oci")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


def _publish_pair(registry: FakeRegistry, tmp_path: Path) -> tuple[str, str]:
    """``base`` (option ``flavour``) and ``app``, which depends on base with flavour=mint."""
    base = make_feature(
        tmp_path / "src" / "base",
        "base",
        options={"flavour": {"type": "string", "default": "plain"}},
        containerEnv={"BASE_HOME": "/opt/base"},
    )
    app = make_feature(
        tmp_path / "src" / "app",
        "app",
        options={"loud": {"type": "boolean", "default": False}},
        dependsOn={f"{registry.host}/f/base:1": {"flavour": "mint"}},
    )
    registry.publish("f/base", base, "1")
    registry.publish("f/app", app, "1")
    return f"{registry.host}/f/base:1", f"{registry.host}/f/app:1"


def test_features_resolve_with_dependencies_fetched_in_order_and_the_lock_is_written(
    tmp_path: Path, project: Path, registry: FakeRegistry
) -> None:
    base_id, app_id = _publish_pair(registry, tmp_path)
    local = make_feature(project / ".devcontainer" / "mine", "mine")
    devcontainer = _devcontainer(
        project,
        _oci(app_id, loud=True),
        Feature("./mine", {}, True, "local", local_path=local),
    )
    context = _context(tmp_path, project, registry)
    plan = plan_features(context, devcontainer)
    ids = [item.feature.id for item in plan.installs]
    assert set(ids) == {base_id, app_id, "./mine"}
    assert ids.index(base_id) < ids.index(app_id)  # dependsOn installs first
    by_id = {item.feature.id: item for item in plan.installs}
    assert by_id[base_id].dependency
    assert by_id[base_id].environment["FLAVOUR"] == "mint"
    assert by_id[app_id].environment["LOUD"] == "true"
    assert by_id["./mine"].folder == local
    assert by_id[base_id].container_env == {"BASE_HOME": "/opt/base"}
    assert all(item.resolved is not None for item in plan.installs)
    assert write_lock(plan, project)
    lock = json.loads((project / ".devcontainer" / "devcontainer-lock.json").read_text())
    assert set(lock["features"]) == {base_id, app_id}
    entry = lock["features"][app_id]
    assert entry["resolved"] == f"{registry.host}/f/app@{entry['integrity']}"
    assert entry["version"] == "1.0.0"

    # Verified after: nothing asked of the registry (locked and cached), nothing to write.
    registry.clear()
    again = plan_features(context, devcontainer)
    assert registry.served() == []
    assert again.lock_text is None
    assert [item.feature.id for item in again.installs] == ids
    assert all(item.cached for item in again.installs if item.feature.kind == "oci")


def test_a_moved_tag_keeps_the_locked_digest_and_a_dry_run_says_so(
    tmp_path: Path, project: Path, registry: FakeRegistry
) -> None:
    first = registry.publish("f/x", make_feature(tmp_path / "x1", "x"), "1")
    devcontainer = _devcontainer(project, _oci(f"{registry.host}/f/x:1"))
    context = _context(tmp_path, project, registry)
    write_lock(plan_features(context, devcontainer), project)
    moved = registry.publish(
        "f/x", make_feature(tmp_path / "x2", "x", script="#!/bin/sh\necho v2\n"), "1"
    )
    assert moved != first
    kept = plan_features(context, devcontainer)
    assert kept.installs[0].resolved is not None
    assert kept.installs[0].resolved.digest == first
    assert kept.lock_text is None
    shown = plan_features(context, devcontainer, dry_run=True)
    assert shown.installs[0].notes == (f"tag 1 now points to {moved}; the lock keeps {first}",)


def test_a_locked_digest_no_longer_cached_is_fetched_by_its_digest(
    tmp_path: Path, project: Path, registry: FakeRegistry
) -> None:
    first = registry.publish("f/x", make_feature(tmp_path / "x1", "x"), "1")
    devcontainer = _devcontainer(project, _oci(f"{registry.host}/f/x:1"))
    context = _context(tmp_path, project, registry)
    write_lock(plan_features(context, devcontainer), project)
    registry.publish("f/x", make_feature(tmp_path / "x2", "x", script="#!/bin/sh\n"), "1")
    cache.entry_dir(context.paths, first).joinpath("feature").rename(tmp_path / "gone")
    registry.clear()
    plan = plan_features(context, devcontainer)
    assert plan.installs[0].resolved is not None
    assert plan.installs[0].resolved.digest == first
    assert registry.served("/manifests/") == [f"/v2/f/x/manifests/{first}"]


def test_an_edited_lock_changes_the_shape(
    tmp_path: Path, project: Path, registry: FakeRegistry
) -> None:
    registry.publish("f/x", make_feature(tmp_path / "x", "x"), "1")
    devcontainer = _devcontainer(project, _oci(f"{registry.host}/f/x:1"))
    write_lock(plan_features(_context(tmp_path, project, registry), devcontainer), project)
    before = shape.read_shape(project, [])
    lock = project / ".devcontainer" / "devcontainer-lock.json"
    lock.write_text(lock.read_text().replace("sha256:", "sha256:0", 1))
    difference = shape.difference(before, shape.read_shape(project, []))
    assert "devcontainer-lock.json" in difference


def test_the_lock_is_written_in_place_of_a_planted_link_not_through_it(
    tmp_path: Path, project: Path, registry: FakeRegistry
) -> None:
    registry.publish("f/x", make_feature(tmp_path / "x", "x"), "1")
    devcontainer = _devcontainer(project, _oci(f"{registry.host}/f/x:1"))
    victim = tmp_path / "victim"
    victim.write_text("the human's")
    lock = project / ".devcontainer" / "devcontainer-lock.json"
    lock.symlink_to(victim)
    with pytest.raises(FeaturesError, match="symbolic link"):  # read: refused
        plan_features(_context(tmp_path, project, registry), devcontainer)
    lock.unlink()
    plan = plan_features(_context(tmp_path, project, registry), devcontainer)
    lock.symlink_to(victim)  # planted between the read and the write
    assert write_lock(plan, project)
    assert victim.read_text() == "the human's"
    assert not lock.is_symlink()
    assert "features" in json.loads(lock.read_text())


def test_a_planted_directory_link_on_the_way_to_the_lock_is_refused(
    tmp_path: Path, project: Path, registry: FakeRegistry
) -> None:
    registry.publish("f/x", make_feature(tmp_path / "x", "x"), "1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (project / ".devcontainer").symlink_to(elsewhere)
    devcontainer = _devcontainer(project, _oci(f"{registry.host}/f/x:1"))
    plan = plan_features(_context(tmp_path, project, registry), devcontainer)
    (elsewhere / "devcontainer-lock.json").unlink(missing_ok=True)
    with pytest.raises(FeaturesError, match="cannot write the Feature lock file"):
        write_lock(plan, project)
    assert not (elsewhere / "devcontainer-lock.json").exists()


def test_a_feature_that_cannot_be_fetched_fails_a_start_and_is_shown_by_a_dry_run(
    tmp_path: Path, project: Path
) -> None:
    devcontainer = _devcontainer(project, _oci("127.0.0.1:9/f/x:1"))
    context = _context(tmp_path, project)
    with pytest.raises(
        FeaturesError, match=r"cannot fetch Feature .*pin the Feature.*make it local"
    ):
        plan_features(context, devcontainer)
    shown = plan_features(context, devcontainer, dry_run=True)
    assert shown.installs[0].resolved is None
    assert shown.installs[0].notes[0].startswith("not fetched: cannot fetch Feature")
    assert not shown.complete


def test_a_local_feature_is_read_without_following_links(tmp_path: Path, project: Path) -> None:
    local = make_feature(project / ".devcontainer" / "mine", "mine")
    (local / "install.sh").unlink()
    secret = tmp_path / "secret.sh"
    secret.write_text("the human's")
    (local / "install.sh").symlink_to(secret)
    devcontainer = _devcontainer(project, Feature("./mine", {}, True, "local", local_path=local))
    with pytest.raises(FeaturesError, match=r"no install\.sh"):
        plan_features(_context(tmp_path, project), devcontainer)


def test_a_feature_asking_for_privileged_and_capabilities_gets_neither(
    tmp_path: Path, project: Path, registry: FakeRegistry
) -> None:
    folder = make_feature(
        tmp_path / "p", "p", privileged=True, capAdd=["SYS_PTRACE", "NET_ADMIN"], init=True
    )
    registry.publish("f/p", folder, "1")
    devcontainer = _devcontainer(project, _oci(f"{registry.host}/f/p:1"))
    plan = plan_features(_context(tmp_path, project, registry), devcontainer)
    asked = {item.field: item for item in plan.overrides}
    privileged = [item for name, item in asked.items() if name.endswith(".privileged")]
    assert privileged
    assert privileged[0].outcome == "dropped"
    assert privileged[0].field.startswith(f'features["{registry.host}/f/p:1"]')
    caps = [item for name, item in asked.items() if ".capAdd" in name]
    assert caps
    assert all(item.outcome in {"dropped", "refused"} for item in caps)
    merged = resolve.with_requests(devcontainer, plan)
    assert set(plan.overrides) <= set(merged.overrides)
    warnings = resolve.warnings_of(devcontainer, plan)
    assert any("privileged" in line and "dropped" in line for line in warnings)


@pytest.mark.parametrize("planted", ["fifo", "directory"])
def test_a_fifo_or_a_directory_at_the_lock_neither_hangs_nor_is_written_through(
    tmp_path: Path, project: Path, registry: FakeRegistry, planted: str
) -> None:
    registry.publish("f/x", make_feature(tmp_path / "x", "x"), "1")
    devcontainer = _devcontainer(project, _oci(f"{registry.host}/f/x:1"))
    lock = project / ".devcontainer" / "devcontainer-lock.json"
    make = os.mkfifo if planted == "fifo" else os.mkdir
    make(lock)
    with pytest.raises(FeaturesError, match="not a regular file"):  # read: refused at once
        plan_features(_context(tmp_path, project, registry), devcontainer)
    if planted == "directory":
        lock.rmdir()
    else:
        lock.unlink()
    plan = plan_features(_context(tmp_path, project, registry), devcontainer)
    make(lock)  # planted between the read and the write
    if planted == "fifo":
        assert write_lock(plan, project)  # replaced, never opened
        assert "features" in json.loads(lock.read_text())
    else:
        (lock / "keep").touch()
        with pytest.raises(FeaturesError, match="cannot write the Feature lock file"):
            write_lock(plan, project)
        assert list(lock.iterdir()) == [lock / "keep"]


def test_a_feature_mounting_the_projects_git_directory_gets_no_mount(
    tmp_path: Path, project: Path, registry: FakeRegistry
) -> None:
    (project / ".git" / "hooks").mkdir(parents=True)
    (project / "src").mkdir()
    mounts = [
        {"source": "${localWorkspaceFolder}/.git", "target": "/g", "type": "bind"},
        {"source": "${localWorkspaceFolder}", "target": "/all", "type": "bind"},
        {"source": "${localWorkspaceFolder}/src", "target": "/src", "type": "bind"},
    ]
    registry.publish("f/m", make_feature(tmp_path / "m", "m", mounts=mounts), "1")
    devcontainer = _devcontainer(project, _oci(f"{registry.host}/f/m:1"))
    plan = plan_features(_context(tmp_path, project, registry), devcontainer)
    decisions = [item for item in plan.overrides if ".mounts[" in item.field]
    assert [item.outcome for item in decisions] == ["refused", "refused", "kept"]
    assert "git directory" in decisions[0].why
    assert "the project itself" in decisions[1].why
    assert [mount.target for mount in plan.mounts] == ["/src"]


def test_a_local_feature_depending_on_a_local_one_installs_it_first(
    tmp_path: Path, project: Path
) -> None:
    """As the CLI's configuration dependsOn-local-simple: ``./b`` is relative to the
    devcontainer.json, needs no trust, and installs before ``./a`` with its options."""
    folder = project / ".devcontainer"
    make_feature(folder / "b", "b", options={"magic": {"type": "string", "default": "0"}})
    a = make_feature(folder / "a", "a", dependsOn={"./b": {"magic": "50"}})
    devcontainer = _devcontainer(project, Feature("./a", {}, True, "local", local_path=a))
    plan = plan_features(_context(tmp_path, project), devcontainer)
    assert [item.feature.id for item in plan.installs] == ["./b", "./a"]
    assert plan.installs[0].environment["MAGIC"] == "50"
    assert plan.installs[0].dependency


def test_a_local_dependency_outside_the_devcontainer_folder_is_refused(
    tmp_path: Path, project: Path
) -> None:
    make_feature(project / "elsewhere", "b")
    a = make_feature(project / ".devcontainer" / "a", "a", dependsOn={"../elsewhere": {}})
    devcontainer = _devcontainer(project, Feature("./a", {}, True, "local", local_path=a))
    with pytest.raises(FeaturesError, match=r"depends on '\.\./elsewhere'.*must be a folder"):
        plan_features(_context(tmp_path, project), devcontainer)


def test_an_untrusted_dependency_fails_a_start_and_a_dry_run_shows_it_refused(
    tmp_path: Path, project: Path
) -> None:
    a = make_feature(project / ".devcontainer" / "a", "a", dependsOn={"ghcr.io/someone/x/b:1": {}})
    devcontainer = _devcontainer(project, Feature("./a", {}, True, "local", local_path=a))
    with pytest.raises(FeaturesError, match="whose source nobody trusted"):
        plan_features(_context(tmp_path, project), devcontainer)
    plan = plan_features(_context(tmp_path, project), devcontainer, dry_run=True)
    shown = {item.feature.id: item for item in plan.installs}
    assert shown["./a"].resolved is not None
    refused = shown["ghcr.io/someone/x/b:1"]
    assert refused.resolved is None
    assert not refused.feature.trusted
    assert "whose source nobody trusted" in refused.notes[0]
    assert not plan.complete
