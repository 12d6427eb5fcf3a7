"""The dry run's ``docker run`` is the one a start executes: for each devcontainer of the
corpus (tests/cli/fixtures/devcontainer_corpus) but those Cloister refuses,
:func:`plan_start`'s plan is carried out by :func:`apply` against the fake engine, and the
``docker run`` the dry run shows (:func:`dryrun.run_argv`) is compared with the one of the
kwargs the engine's ``containers.run`` got; the token masked on both sides (a dry run's own
token is never the start's).

The fake engine holds what a machine would: the images the corpus names, the guardian's
services (their containers, on which the cloister's network is joined); the guardian
itself is reported running and its images current (bringing it up is not under test).

The OCI Features an entry names come from the far side of the network: a fake registry
answers the Features' client (its https transport routed there, :mod:`tests.registry`),
and a Feature pinned to a digest (``@sha256:…``, the lock file) is in the Features cache
as a fetch of it left it. Each is a minimal Feature of the id named (its
devcontainer-feature.json and an install.sh); one from a source the default does not
trust is trusted in config.yaml, as its user would.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from cloister_cli.context import Context
from cloister_cli.images import shape
from cloister_cli.images.features import cache, oci, resolve
from cloister_cli.stack import doctor
from cloister_cli.start import apply, dryrun, plan
from cloister_core import stack
from cloister_core.devcontainer.features import is_trusted
from cloister_core.paths import CloisterPaths
from tests.cli.test_devcontainer_corpus import REFUSED
from tests.fake_engine import FakeContainer, FakeEngine
from tests.git_support import hermetic_git, make_repo, run_git
from tests.registry import FakeRegistry, feature_tar, manifest_for

CORPUS = Path(__file__).parents[1] / "fixtures" / "devcontainer_corpus"
ENGINE_ID = "FAKE:ENGINE"
CONFIG = """\
defaults:
  image: cloister-slim:latest
snapshots:
  enabled: false
devcontainer:
  trusted_features: {trusted}
"""


def _entries() -> list[dict[str, Any]]:
    manifest = json.loads((CORPUS / "corpus.json").read_text(encoding="utf-8"))
    entries: list[dict[str, Any]] = manifest["entries"]
    return entries


class _Engine(FakeEngine):
    """The fake engine with what a start asks besides: its identity and storage, and the
    cloister's address on its network (from the endpoint config it was run with)."""

    def info(self) -> dict[str, object]:
        return {"ID": ENGINE_ID, "Driver": "overlay2", "Architecture": "x86_64"}


class _Guardian:
    """Up, its images current: the start does not bring it up here."""

    def is_running(self) -> bool:
        return True

    def stale_images(self, *, git_only: bool = False) -> list[object]:
        return []

    def reload_proxy(self) -> None:
        pass


def _run(engine: _Engine) -> Any:
    original = engine.containers.run

    def run(image: str, **kwargs: Any) -> FakeContainer:
        made = original(image, **kwargs)
        for network, endpoint in (kwargs.get("networking_config") or {}).items():
            address = (endpoint or {}).get("ipv4_address")
            if address:  # the cloister's fixed address (a service's is the engine's)
                made.attrs["NetworkSettings"]["Networks"][network] = {"IPAddress": address}
        return made

    return run


def _no_files(self: FakeContainer, path: str) -> None:
    """An image without /etc/passwd and /etc/group: the accounts are Cloister's alone."""
    raise docker.errors.NotFound(f"no {path}")


@pytest.fixture(autouse=True)
def _hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    hermetic_git(monkeypatch)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeRegistry]:
    """The registries the corpus names, answered by a fake one: the Features' client is
    the real one, over a session whose transport reaches it."""
    with FakeRegistry() as served:
        monkeypatch.setattr(resolve, "Client", lambda: oci.Client(session=served.session()))
        yield served


def _engine(entry: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> _Engine:
    engine = _Engine()
    for image in entry["images"]:
        added = engine.add_image(image)
        if ":" not in image.rsplit("/", 1)[-1]:  # as docker takes it: alpine is alpine:latest
            added.tags.append(f"{image}:latest")
    monkeypatch.setattr(engine.containers, "run", _run(engine))
    return engine


def _context(tmp_path: Path, engine: _Engine, trusted: Sequence[str] = ()) -> Context:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    paths = CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    config = CONFIG.format(trusted=json.dumps(list(trusted)))
    (paths.config_dir / "config.yaml").write_text(config, encoding="utf-8")
    context = Context(paths=paths, home=home)
    context.__dict__["docker"] = engine
    context.__dict__["guardian"] = _Guardian()
    for service, _ in stack.CLOISTER_SERVICES:
        engine.add_container(context.instance.service(service), context.instance.labels)
    # This engine passed its start check before (the check is not under test).
    doctor.EngineRecord.read(paths).with_engine(ENGINE_ID, "2025-01-01T00:00:00Z").write(paths)
    return context


def _project(entry: dict[str, Any], parent: Path) -> Path:
    repo = make_repo(parent / "src" / entry["id"].rsplit("/", 1)[-1].lower()[:30])
    shutil.copytree(CORPUS / entry["id"], repo, dirs_exist_ok=True)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", "devcontainer")
    return repo


# The entries naming a Feature Cloister refuses whatever the config trusts (the retired
# GitHub-release form, a bare or retired short name, a tarball URL), besides ones it
# installs or alone: the start stops on it while planning, before anything is built or run.
STOPPED = {
    "cli/compose-Dockerfile-with-features",
    "cli/compose-Dockerfile-with-target",
    "cli/compose-image-with-features",
    "cli/dockerfile-with-syntax",
    "cli/dockerfile-with-target",
    "cli/image-with-local-feature",
    "cli-features/image-with-v2-tarball",
    "cli-features/oci-features-short-ids",
    "cli-features/overrideFeatureInstallOrder-image-with-v2",
}


def _named_features(
    context: Context, repo: Path, options: plan.StartOptions
) -> dict[str, str | None]:
    """The OCI Features a start of *repo* fetches, their dependencies included, each with
    the digest its id or the lock file pins (None: its tag is resolved): those a dry run
    lists unfetched while none is served nor trusted but by default."""
    features = plan.plan_start(context, repo, options, dry_run=True).image_part.features
    if features is None:
        return {}
    named: dict[str, str | None] = {}
    for item in features.installs:
        if item.resolved is None:
            locked = features.lock.entries.get(item.feature.id)
            digest = oci.Reference.parse(item.feature.id).digest
            if digest is None and locked is not None:
                digest = locked.resolved.rpartition("@")[2]
            named[item.feature.id] = digest
    return named


def _serve(
    registry: FakeRegistry, paths: CloisterPaths, feature_id: str, digest: str | None, at: Path
) -> None:
    """A minimal Feature of *feature_id*: published under its tag, or (pinned to *digest*)
    in the cache as the fetch of that digest left it."""
    reference = oci.Reference.parse(feature_id)
    name = reference.repository.rsplit("/", 1)[-1]
    folder = at / reference.repository
    folder.mkdir(parents=True, exist_ok=True)
    metadata = json.dumps({"id": name, "version": "1.0.0", "name": name})
    (folder / "devcontainer-feature.json").write_text(metadata, encoding="utf-8")
    (folder / "install.sh").write_text("#!/bin/sh\necho installed\n", encoding="utf-8")
    (folder / "install.sh").chmod(0o755)
    if digest is None:
        registry.publish(reference.repository, folder, reference.tag or "latest")
        return
    layer = feature_tar(folder)
    manifest = manifest_for(layer, metadata, name)
    cache.store(paths, oci.Fetched(reference, digest, manifest, layer, metadata))


def _machine(
    entry: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: FakeRegistry
) -> tuple[_Engine, Context, Path, plan.StartOptions]:
    """The engine, the context, the project and the start's options of *entry*, its
    Features served and the sources of those not trusted by default trusted."""
    monkeypatch.setattr(FakeContainer, "get_archive", _no_files, raising=False)
    repo = _project(entry, tmp_path)
    given = repo / entry["devcontainer"] if entry["devcontainer"] else None
    options = plan.StartOptions(devcontainer=given, assume_yes=True)
    scan = _context(tmp_path / "scan", _engine(entry, monkeypatch))
    named = _named_features(scan, repo, options)
    engine = _engine(entry, monkeypatch)
    context = _context(tmp_path, engine, [each for each in named if not is_trusted(each)])
    for feature_id, digest in named.items():
        _serve(registry, context.paths, feature_id, digest, tmp_path / "features")
    return engine, context, repo, options


@pytest.mark.parametrize(
    "entry",
    [entry for entry in _entries() if entry["id"] not in (*REFUSED, *STOPPED)],
    ids=lambda entry: str(entry["id"]),
)
def test_the_dry_runs_docker_run_is_the_one_executed(
    entry: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: FakeRegistry
) -> None:
    engine, context, repo, options = _machine(entry, tmp_path, monkeypatch, registry)
    shown = plan.plan_start(context, repo, options, dry_run=True)
    assert shown.image_part.unbuildable is None
    started = plan.plan_start(context, repo, options)
    assert isinstance(started, plan.StartPlan)
    outcome = apply.apply(context, started)
    assert outcome.created
    (executed,) = [  # the cloister's, not its compose services'
        {key: value for key, value in run.items() if key != "networking_config"}
        for run in engine.called("containers.run")
        if run["name"] == started.container.container
    ]
    assert dryrun.docker_run_argv(executed, secret=started.secret) == dryrun.run_argv(shown)


@pytest.mark.parametrize(
    "entry",
    [entry for entry in _entries() if entry["id"] in STOPPED],
    ids=lambda entry: str(entry["id"]),
)
def test_a_refused_feature_stops_the_start_before_any_docker_run(
    entry: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: FakeRegistry
) -> None:
    engine, context, repo, options = _machine(entry, tmp_path, monkeypatch, registry)
    shown = plan.plan_start(context, repo, options, dry_run=True)
    devcontainer = shown.image_part.devcontainer
    assert devcontainer is not None
    refused = [item.render(devcontainer.path) for item in devcontainer.refused_features]
    assert refused, "the dry run lists no refused Feature"
    why = f"cannot install these Features: {'; '.join(refused)}"
    # The dry run says so, and so does the image part `cloister images build` plans.
    assert f"`cloister start` would fail: {why}" in shown.warnings
    assert shown.image_part.unbuildable == why
    with pytest.raises(resolve.FeaturesError) as stopped:
        plan.plan_start(context, repo, options)
    assert str(stopped.value) == why
    assert engine.builds == []
    assert engine.called("containers.run") == []


def test_the_services_run_are_planned_from_the_devcontainer_approved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent (a cloister of the project already running) flips the compose file
    between the plan's read and the shape check: the plan saw its own version, but the
    check finds what was approved, so nobody is asked. The services that run are
    those of the read that was checked, not those of the plan's."""
    monkeypatch.setattr(FakeContainer, "get_archive", _no_files, raising=False)
    (entry,) = [each for each in _entries() if each["id"] == "cli/compose-image-without-features"]
    repo = _project(entry, tmp_path)
    compose = repo / ".devcontainer" / "docker-compose.yml"
    approved = compose.read_text(encoding="utf-8")
    flipped = approved.replace(
        "    restart: unless-stopped\n",
        "    restart: unless-stopped\n    environment:\n      INJECTED: never-approved\n",
    )
    assert flipped != approved
    engine = _engine(entry, monkeypatch)
    context = _context(tmp_path, engine)
    first = plan.plan_start(context, repo, plan.StartOptions(assume_yes=True))
    assert isinstance(first, plan.StartPlan)
    accepted, _ = apply.approve_shape(
        context, first.image_part, plan.StartOptions(assume_yes=True), []
    )
    shape.save_approved(context.paths, first.workspace.project.name, accepted)

    compose.write_text(flipped, encoding="utf-8")
    planned = plan.plan_start(context, repo, plan.StartOptions(assume_yes=False))
    assert isinstance(planned, plan.StartPlan)
    assert planned.image_part.shape_difference  # this plan would have asked
    assert [each.service.environment for each in planned.services] == [
        {"INJECTED": "never-approved"}
    ]
    compose.write_text(approved, encoding="utf-8")

    apply.apply(context, planned)  # nobody asked (no confirm): the shape is the approved one

    ran = [
        run for run in engine.called("containers.run") if run["name"] != planned.container.container
    ]
    assert [(run["name"], run["environment"]) for run in ran] == [
        (context.instance.sidecar(planned.name, "db"), {})
    ]
