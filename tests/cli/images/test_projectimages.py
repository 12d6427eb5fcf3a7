"""Project images without an engine: the key, the cache, the refusals, the build order.

The docker SDK is faked (``tests/fake_engine.py``) where the module only asks it
questions (which images exist, with which labels) and where it hands it a build: the
fake records each build's Dockerfile, context, arguments, tag and labels, and "makes" an
image. What a real classic builder does with them is in ``test_projectimages_docker.py``.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from docker.utils.build import PatternMatcher

from cloister_cli.images import projectimages
from cloister_cli.images.features.resolve import Context as FeaturesContext
from cloister_cli.images.features.resolve import FeaturePlan, plan_features
from cloister_cli.images.projectimages import (
    BASE_ARG,
    KEY_LABEL,
    PROJECT_LABEL,
    ImagePlan,
    ProjectImage,
    ProjectImageError,
)
from cloister_cli.images.projectimages import context as tar_context
from cloister_cli.images.projectimages.context import _ignore_patterns, context_tar, scan
from cloister_cli.images.projectimages.model import Build as ImageBuild
from cloister_cli.images.projectimages.plan import from_images
from cloister_core.devcontainer import Devcontainer, Feature, load_devcontainer
from cloister_core.paths import CloisterPaths
from tests.fake_engine import FakeEngine
from tests.tree_support import DEPTH, deep_tree

REPOSITORY = Path(__file__).resolve().parents[3]
BASE = "debian:bookworm-slim"
PROJECT = "api"


@pytest.fixture
def engine() -> FakeEngine:
    fake = FakeEngine()
    fake.add_image(BASE, id="sha256:debian1")
    fake.add_image("cloister:latest", id="sha256:agent1")
    return fake


@pytest.fixture
def paths(tmp_path: Path) -> CloisterPaths:
    return CloisterPaths(config_dir=tmp_path / "config", data_dir=tmp_path / "data")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A source tree with the hostexec client (all the cloister layer reads)."""
    tree = tmp_path / "source"
    client = tree / projectimages.HOSTEXEC_SOURCE
    client.parent.mkdir(parents=True)
    client.write_bytes((REPOSITORY / projectimages.HOSTEXEC_SOURCE).read_bytes())
    return tree


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a devcontainer build and a .cloister/Dockerfile."""
    root = tmp_path / "api"
    (root / ".devcontainer").mkdir(parents=True)
    (root / ".devcontainer" / "devcontainer.json").write_text(
        json.dumps({"build": {"dockerfile": "Dockerfile", "args": {"GREETING": "hi"}}})
    )
    (root / ".devcontainer" / "Dockerfile").write_text(
        f"FROM {BASE}\nARG GREETING\nRUN echo $GREETING > /greeting\n"
    )
    (root / ".devcontainer" / "setup.sh").write_text("echo set up\n")
    (root / ".cloister").mkdir()
    (root / ".cloister" / "Dockerfile").write_text(
        f"ARG {BASE_ARG}\nFROM ${{{BASE_ARG}}}\nCOPY extra.txt /extra.txt\n"
    )
    (root / ".cloister" / "extra.txt").write_text("extra\n")
    return root


def load(root: Path, trusted: tuple[str, ...] = ()) -> Devcontainer | None:
    candidates = [root / ".devcontainer" / "devcontainer.json", root / ".devcontainer.json"]
    found = next((path for path in candidates if path.is_file()), None)
    if found is None:
        return None
    return load_devcontainer(
        found, project_root=root, home=root.parent / "home", environ={}, trusted_features=trusted
    )


def plan(engine: FakeEngine, paths: CloisterPaths, root: Path, source: Path) -> ImagePlan:
    return projectimages.plan_project_image(
        engine.client,
        paths,
        project=PROJECT,
        root=root,
        devcontainer=load(root),
        base_image="cloister:latest",
        source=source,
    )


def ensure(
    engine: FakeEngine,
    paths: CloisterPaths,
    root: Path,
    source: Path,
    *,
    rebuild: bool = False,
    progress: Callable[[str, str], None] = lambda what, line: None,
) -> ImagePlan:
    done = projectimages.ensure_project_image(
        engine.client,
        paths,
        project=PROJECT,
        root=root,
        devcontainer=load(root),
        base_image="cloister:latest",
        source=source,
        progress=progress,
        rebuild=rebuild,
    )
    assert not any(build.pull for build in engine.builds)  # the base image is the machine's
    return done


# -- plain images ------------------------------------------------------------------------


def test_without_devcontainer_or_dockerfile_the_base_image_runs_as_is(
    engine: FakeEngine, paths: CloisterPaths, tmp_path: Path, source: Path
) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    result = ensure(engine, paths, root, source)
    assert (result.tag, result.key, result.cached, result.base) == (
        "cloister:latest",
        None,
        True,
        "cloister:latest",
    )
    assert engine.builds == []
    record = projectimages.read_record(paths, PROJECT)
    assert record is not None
    assert (record["key"], record["tag"]) == (None, "cloister:latest")


def test_a_cloister_dockerfile_alone_builds_on_the_base_image(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    (project / ".devcontainer" / "devcontainer.json").unlink()
    result = ensure(engine, paths, project, source)
    assert result.base == "cloister:latest"
    (build,) = engine.builds
    assert build.args == {BASE_ARG: "sha256:agent1"}
    assert set(build.files) == {"Dockerfile", "extra.txt"}
    assert build.tag == result.tag


def test_a_missing_base_image_is_one_line(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    (project / ".devcontainer" / "devcontainer.json").unlink()
    del engine.images.by_id["sha256:agent1"]
    planned = plan(engine, paths, project, source)
    assert not planned.cached
    assert "not on this machine yet" in planned.steps[0]
    with pytest.raises(ProjectImageError, match=r"`docker pull cloister:latest` or build it"):
        ensure(engine, paths, project, source)


# -- the key ---------------------------------------------------------------------------


def _edit(path: Path, text: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    return change


def _chmod(root: Path) -> None:
    (root / ".devcontainer" / "setup.sh").chmod(0o755)


def _link(root: Path) -> None:
    (root / ".devcontainer" / "link").symlink_to("setup.sh")


def _json(root: Path) -> None:
    path = root / ".devcontainer" / "devcontainer.json"
    path.write_text(path.read_text().replace('"hi"', '"ho"'))


def _target(root: Path) -> None:
    path = root / ".devcontainer" / "devcontainer.json"
    document = json.loads(path.read_text())
    document["build"]["target"] = "dev"
    path.write_text(json.dumps(document))


def _comment_in_json(root: Path) -> None:
    path = root / ".devcontainer" / "devcontainer.json"
    path.write_text("// a comment\n" + path.read_text())


CHANGES: dict[str, Callable[[Path], None]] = {
    "the devcontainer.json": _comment_in_json,
    "a build arg": _json,
    "the target": _target,
    "the Dockerfile": _edit(Path(".devcontainer/Dockerfile"), f"FROM {BASE}\nRUN true\n"),
    "a context file": _edit(Path(".devcontainer/setup.sh"), "echo changed\n"),
    "a new context file": _edit(Path(".devcontainer/more/new.txt"), "new\n"),
    "a context file's mode": _chmod,
    "a symbolic link": _link,
    "the .cloister/Dockerfile": _edit(
        Path(".cloister/Dockerfile"), f"ARG {BASE_ARG}\nFROM ${{{BASE_ARG}}}\n"
    ),
    "a .cloister/ file": _edit(Path(".cloister/extra.txt"), "other\n"),
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_every_input_changes_the_key(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path, change: str
) -> None:
    before = plan(engine, paths, project, source)
    CHANGES[change](project)
    after = plan(engine, paths, project, source)
    assert before.key is not None
    assert after.key is not None
    assert after.key != before.key
    assert after.tag != before.tag


def test_the_base_image_and_the_hostexec_client_are_inputs(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    first = plan(engine, paths, project, source).key
    engine.add_image(BASE, id="sha256:debian2")  # debian rebuilt
    second = plan(engine, paths, project, source).key
    client = source / projectimages.HOSTEXEC_SOURCE
    client.write_bytes(client.read_bytes() + b"\n# changed\n")
    third = plan(engine, paths, project, source).key
    assert len({first, second, third}) == 3


def test_what_docker_is_not_sent_is_no_input(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    (project / ".devcontainer" / ".dockerignore").write_text("# cache\nscratch/\n")
    before = plan(engine, paths, project, source).key
    (project / ".devcontainer" / "scratch").mkdir()
    (project / ".devcontainer" / "scratch" / "junk").write_text("junk\n")
    (project / ".devcontainer" / ".git").mkdir()
    (project / ".devcontainer" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (project / "README.md").write_text("outside the contexts\n")
    assert plan(engine, paths, project, source).key == before
    ensure(engine, paths, project, source)
    sent = engine.builds[0].files
    assert "setup.sh" in sent
    assert ".dockerignore" in sent
    assert not [name for name in sent if name.startswith(("scratch", ".git"))]


def test_a_link_is_sent_as_a_link_and_never_read_through(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2\n")
    (project / ".devcontainer" / "leak").symlink_to(secret)
    before = plan(engine, paths, project, source).key
    secret.write_text("changed, but not read\n")
    assert plan(engine, paths, project, source).key == before
    ensure(engine, paths, project, source)
    assert engine.builds[0].files["leak"] == b""  # a link entry, no content


def test_a_fifo_in_the_context_does_not_block(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    os.mkfifo(project / ".devcontainer" / "pipe")
    ensure(engine, paths, project, source)
    assert "pipe" not in engine.builds[0].files


# -- the cache -------------------------------------------------------------------------------


def test_unchanged_inputs_reuse_the_image(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    first = ensure(engine, paths, project, source)
    assert not first.cached
    assert len(engine.builds) == 3
    again = ensure(engine, paths, project, source)
    assert again.cached
    assert again.key == first.key
    assert len(engine.builds) == 3  # no build call
    assert plan(engine, paths, project, source).cached
    record = projectimages.read_record(paths, PROJECT)
    assert record is not None
    assert (record["key"], record["tag"], record["image"]) == (
        first.key,
        first.tag,
        "sha256:built3",
    )


def test_a_changed_input_builds_a_new_image(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    first = ensure(engine, paths, project, source)
    _json(project)
    second = ensure(engine, paths, project, source)
    assert not second.cached
    assert second.tag != first.tag
    assert engine.builds[3].args == {"GREETING": "ho"}
    record = projectimages.read_record(paths, PROJECT)
    assert record is not None
    assert record["key"] == second.key


def test_rebuild_builds_without_dockers_cache(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    ensure(engine, paths, project, source)
    again = ensure(engine, paths, project, source, rebuild=True)
    assert not again.cached
    assert len(engine.builds) == 6
    assert all(build.nocache for build in engine.builds[3:])


def test_an_image_with_the_tag_but_another_key_is_not_reused(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    planned = plan(engine, paths, project, source)
    engine.add_image(planned.tag, id="sha256:other", labels={KEY_LABEL: "something else"})
    assert not plan(engine, paths, project, source).cached


# -- the layers --------------------------------------------------------------------------------


def test_the_layers_are_built_in_order_each_on_the_one_before(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    lines: list[tuple[str, str]] = []
    result = ensure(
        engine, paths, project, source, progress=lambda w, line: lines.append((w, line))
    )
    devcontainer, layer, own = engine.builds
    assert "RUN echo $GREETING > /greeting" in devcontainer.dockerfile
    assert devcontainer.args == {"GREETING": "hi"}
    assert (devcontainer.tag, devcontainer.labels) == (None, None)
    assert set(devcontainer.files) >= {"Dockerfile", "setup.sh", "devcontainer.json"}

    assert layer.dockerfile == projectimages.CLOISTER_LAYER
    assert layer.args == {BASE_ARG: "sha256:built1"}
    assert set(layer.files) == {"hostexec", "work"}
    assert layer.files["hostexec"] == (source / projectimages.HOSTEXEC_SOURCE).read_bytes()
    assert layer.modes["hostexec"] == 0o755
    assert (layer.tag, layer.labels) == (None, None)

    assert "COPY extra.txt /extra.txt" in own.dockerfile
    assert own.args == {BASE_ARG: "sha256:built2"}
    assert own.tag == result.tag
    assert own.labels == {KEY_LABEL: result.key, PROJECT_LABEL: PROJECT}
    assert result.tag == f"cloister-project-{PROJECT}:{result.key[:12] if result.key else ''}"

    shown = [what for what, _ in lines]
    assert shown[0].endswith("(.devcontainer/Dockerfile)")
    assert shown[-1].endswith("(.cloister/Dockerfile)")


def test_a_failing_step_shows_its_header_and_output(
    engine: FakeEngine,
    paths: CloisterPaths,
    project: Path,
    source: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (project / ".devcontainer" / "devcontainer.json").unlink()

    def failing(**kwargs: Any) -> Iterator[dict[str, Any]]:
        yield {"stream": "Step 1/2 : FROM sha256:agent1\n"}
        yield {"stream": "Step 2/2 : RUN apt-get install -y tool\n ---> Running in 1a2b\n"}
        yield {"stream": "\x1b[91mE: Unable to locate package tool\n\x1b[0m"}
        command = "/bin/sh -c apt-get install -y tool"
        yield {"error": f"The command '{command}' returned a non-zero code: 100"}

    monkeypatch.setattr(engine.client.api, "build", failing)
    lines: list[str] = []
    with pytest.raises(ProjectImageError) as raised:
        ensure(engine, paths, project, source, progress=lambda what, line: lines.append(line))
    assert str(raised.value).split("\n") == [
        "building .cloister/Dockerfile: The command '/bin/sh -c apt-get install -y tool'"
        " returned a non-zero code: 100",
        "  at Step 2/2 : RUN apt-get install -y tool",
        "  its output:",
        "  | E: Unable to locate package tool",
    ]
    assert lines[-1] == "E: Unable to locate package tool"


def test_the_steps_say_what_happens(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    _target(project)
    planned = plan(engine, paths, project, source)
    assert planned.steps == (
        f"build .devcontainer/Dockerfile (target dev; args GREETING) FROM {BASE},"
        " context .devcontainer",
        "add the cloister layer (/usr/local/bin/hostexec, /work)",
        "build .cloister/Dockerfile on top (CLOISTER_BASE, context .cloister/)",
        f"tag it {planned.tag}",
    )
    assert planned.base is None
    assert engine.builds == []  # planning builds nothing


def test_a_devcontainer_image_gets_the_cloister_layer(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    (project / ".devcontainer" / "devcontainer.json").write_text(json.dumps({"image": BASE}))
    (project / ".cloister" / "Dockerfile").unlink()
    result = ensure(engine, paths, project, source)
    (layer,) = engine.builds
    assert layer.args == {BASE_ARG: "sha256:debian1"}
    assert layer.tag == result.tag
    assert result.steps[0] == f"start from {BASE} (devcontainer.json `image`)"


def test_a_missing_devcontainer_image_says_how_to_get_it(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    (project / ".devcontainer" / "devcontainer.json").write_text(
        json.dumps({"image": "mcr.microsoft.com/devcontainers/python:3"})
    )
    with pytest.raises(ProjectImageError) as raised:
        plan(engine, paths, project, source)
    message = str(raised.value)
    assert "\n" not in message
    assert "`docker pull mcr.microsoft.com/devcontainers/python:3` or build it" in message
    assert engine.builds == []


@pytest.mark.parametrize("where", ["image", "FROM"])
def test_another_projects_own_image_is_refused(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path, where: str
) -> None:
    """It may hold that project's files (its Dockerfile's ``COPY . /src``): this
    project's agent would read them. This project's own images stay usable."""
    other = "cloister-project-secret:0123456789ab"
    engine.add_image(other, labels={PROJECT_LABEL: "secret"})
    engine.add_image("cloister-project-api:0123456789ab", labels={PROJECT_LABEL: PROJECT})
    (project / ".cloister" / "Dockerfile").unlink()
    folder = project / ".devcontainer"
    if where == "image":
        (folder / "devcontainer.json").write_text(json.dumps({"image": other}))
    else:
        (folder / "Dockerfile").write_text(f"FROM {other}\nRUN true\n")
    with pytest.raises(ProjectImageError, match=r"is project 'secret'.s own image"):
        plan(engine, paths, project, source)
    (folder / "devcontainer.json").write_text(
        json.dumps({"image": "cloister-project-api:0123456789ab"})
    )
    assert plan(engine, paths, project, source).steps[0].startswith("start from cloister-project")


def test_a_linked_cloister_dockerfile_is_refused(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.write_text("FROM scratch\n")
    (project / ".cloister" / "Dockerfile").unlink()
    (project / ".cloister" / "Dockerfile").symlink_to(outside)
    with pytest.raises(ProjectImageError, match="not a regular file"):
        plan(engine, paths, project, source)


# -- Features ----------------------------------------------------------------------------------


def _with_features(root: Path, features: dict[str, Any]) -> None:
    path = root / ".devcontainer" / "devcontainer.json"
    document = json.loads(path.read_text())
    document["features"] = features
    path.write_text(json.dumps(document))


def test_features_are_not_installed_without_being_resolved(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    _with_features(project, {"ghcr.io/devcontainers/features/node:1": {"version": "lts"}})
    with pytest.raises(ProjectImageError, match=r"installed by `cloister start`"):
        plan(engine, paths, project, source)
    assert engine.builds == []


def _local_features(root: Path, paths: CloisterPaths, **options: str | bool) -> FeaturePlan:
    folder = root / ".devcontainer" / "hello"
    folder.mkdir()
    (folder / "devcontainer-feature.json").write_text(
        json.dumps(
            {
                "id": "hello",
                "version": "1.0.0",
                "options": {"greeting": {"type": "string", "default": "hi"}},
                "containerEnv": {"HELLO_HOME": "/opt/hello", "PATH": "/opt/hello:${PATH}"},
            }
        )
    )
    (folder / "install.sh").write_text("#!/bin/sh\necho $GREETING > /hello\n")
    loaded = load(root)
    assert loaded is not None
    devcontainer = replace(
        loaded, features=(Feature("./hello", options, True, "local", local_path=folder),)
    )
    context = FeaturesContext(paths=paths, project_root=root, home=root.parent, environ={})
    return plan_features(context, devcontainer)


def test_features_are_a_build_on_the_cloister_layer(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    features = _local_features(project, paths, greeting="hello")
    loaded = load(project)
    assert loaded is not None
    done = projectimages.ensure_project_image(
        engine.client,
        paths,
        project=PROJECT,
        root=project,
        devcontainer=replace(loaded, features=(features.installs[0].feature,)),
        base_image="cloister:latest",
        source=source,
        features=features,
    )
    _, layer, installing, _ = engine.builds
    assert "COPY hostexec" in layer.dockerfile
    assert layer.args == {BASE_ARG: "sha256:built1"}
    assert installing.args == {BASE_ARG: "sha256:built2"}
    assert "USER root" in installing.dockerfile
    assert "COPY features /tmp/cloister-features" in installing.dockerfile
    assert (
        "RUN cd /tmp/cloister-features/1 && chmod +x ./install.sh && set -a"
        " && . ./devcontainer-features.env && set +a && ./install.sh"
    ) in installing.dockerfile
    assert 'ENV HELLO_HOME="/opt/hello" PATH="/opt/hello:${PATH}"\n' in installing.dockerfile
    assert b"echo $GREETING" in installing.files["features/1/install.sh"]
    assert b"GREETING=" in installing.files["features/1/devcontainer-features.env"]
    assert b"hello" in installing.files["features/1/devcontainer-features.env"]
    assert "install Feature ./hello" in " ".join(done.steps)


def test_a_features_options_and_content_are_inputs(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    def key(features: FeaturePlan) -> str | None:
        loaded = load(project)
        assert loaded is not None
        return projectimages.plan_project_image(
            engine.client,
            paths,
            project=PROJECT,
            root=project,
            devcontainer=replace(loaded, features=(features.installs[0].feature,)),
            base_image="cloister:latest",
            source=source,
            features=features,
        ).key

    first = _local_features(project, paths, greeting="hello")
    without = plan(engine, paths, project, source).key
    assert key(first) not in {None, without}
    folder = project / ".devcontainer" / "hello"
    loaded = load(project)
    assert loaded is not None
    context = FeaturesContext(paths=paths, project_root=project, home=project.parent, environ={})
    other = plan_features(
        context,
        replace(
            loaded,
            features=(Feature("./hello", {"greeting": "bye"}, True, "local", local_path=folder),),
        ),
    )
    assert key(other) != key(first)
    (folder / "install.sh").write_text("#!/bin/sh\necho changed\n")
    changed = plan_features(
        context,
        replace(
            loaded,
            features=(Feature("./hello", {"greeting": "hello"}, True, "local", local_path=folder),),
        ),
    )
    assert key(changed) != key(first)


# -- the Dockerfile's FROM lines ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "args", "expected"),
    [
        ("FROM debian:bookworm-slim\n", {}, ["debian:bookworm-slim"]),
        ("ARG V=12\nFROM node:${V} AS build\nFROM build\nFROM scratch\n", {}, ["node:12"]),
        ("ARG V=12\nFROM node:$V\n", {"V": "20"}, ["node:20"]),
        ("FROM --platform=linux/amd64 \\\n  alpine AS a\nFROM a\n", {}, ["alpine"]),
        ("FROM ${UNKNOWN:-debian}\nFROM $NOPE\n", {}, ["debian", "$NOPE"]),
    ],
)
def test_from_lines(text: str, args: dict[str, str], expected: list[str]) -> None:
    assert from_images(text, args) == expected


# -- listing and pruning -----------------------------------------------------------------------


def image(project: str, key: str, *, current: bool, tags: bool = True, used: bool = False) -> Any:
    return ProjectImage(
        project=project,
        tags=(f"cloister-project-{project}:{key}",) if tags else (),
        key=key,
        id=f"sha256:{project}{key}",
        size=1,
        created="2025-01-01T00:00:00Z",
        current=current,
        containers=("cloister-x",) if used else (),
    )


def test_prune_chooses_the_stale_and_the_orphaned() -> None:
    images = [
        image("api", "new", current=True),
        image("api", "old", current=False),
        image("api", "busy", current=False, used=True),
        image("api", "rebuilt", current=False, tags=False),
        image("gone", "k", current=True),
        image("unrecorded", "a", current=False),
    ]
    chosen = projectimages.prunable(images, lambda name: name != "gone")
    assert [(item.image.key, item.why) for item in chosen] == [
        ("old", "no longer current for api"),
        ("rebuilt", "replaced by a rebuild"),
        ("k", "project 'gone' was removed"),
    ]


def test_list_and_prune_against_the_engine(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    first = ensure(engine, paths, project, source)
    _json(project)
    second = ensure(engine, paths, project, source)
    found = projectimages.list_project_images(engine.client, paths)
    assert [(item.tag, item.current) for item in found] == [
        (second.tag, True),
        (first.tag, False),
    ]
    engine.add_container("cloister-api", image=found[0].id)
    assert projectimages.list_project_images(engine.client, paths)[0].to_json()["in_use"]
    chosen = projectimages.prunable(found, lambda name: True)
    results = projectimages.prune_project_images(engine.client, paths, chosen, lambda n: True)
    assert [(r.removed, r.failed) for r in results] == [(True, False)]
    assert [line for line in engine.log if line.startswith("rmi ")] == [f"rmi {first.tag}"]
    assert [item.tag for item in projectimages.list_project_images(engine.client, paths)] == [
        second.tag
    ]


def test_pruning_a_removed_projects_images_forgets_its_record(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    ensure(engine, paths, project, source)
    found = projectimages.list_project_images(engine.client, paths)
    chosen = projectimages.prunable(found, lambda name: False)
    projectimages.prune_project_images(engine.client, paths, chosen, lambda name: False)
    assert projectimages.read_record(paths, PROJECT) is None


def test_the_context_tar_is_what_was_hashed(project: Path) -> None:
    entries = scan(project / ".devcontainer")
    assert [entry.name for entry in entries] == ["Dockerfile", "devcontainer.json", "setup.sh"]
    build = ImageBuild("x", b"FROM scratch\n", project / ".devcontainer", entries)
    buffer = io.BytesIO()
    context_tar(build, buffer)
    with tarfile.open(fileobj=buffer) as archive:
        names = archive.getnames()
    assert names == ["Dockerfile", "devcontainer.json", "setup.sh", ".cloister-build.Dockerfile"]


def test_a_file_changed_since_the_scan_stops_the_build(project: Path) -> None:
    """The scan's digests make the image's key; the agent may write the context before
    the tar is made of it: what does not hash as scanned is never sent."""
    context = project / ".devcontainer"
    build = ImageBuild("x", b"FROM scratch\n", context, scan(context))
    (context / "setup.sh").write_text("echo SET UP\n")  # the same size, other bytes
    with pytest.raises(ProjectImageError, match=r"'[^']*/setup\.sh' changed since it was read"):
        context_tar(build, io.BytesIO())


def test_a_file_shortened_while_it_is_sent_stops_the_build(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = project / ".devcontainer"
    build = ImageBuild("x", b"FROM scratch\n", context, scan(context))
    read = tar_context._Hashing.read

    def cut_short(self: tar_context._Hashing, size: int = -1) -> bytes:
        os.truncate(context / "devcontainer.json", 0)  # once opened: its size was taken
        return read(self, size)

    monkeypatch.setattr(tar_context._Hashing, "read", cut_short)
    with pytest.raises(ProjectImageError, match=r"'[^']*/devcontainer\.json' changed since"):
        context_tar(build, io.BytesIO())


def test_a_from_image_not_on_this_machine_is_refused(
    engine: FakeEngine, project: Path, paths: CloisterPaths, source: Path
) -> None:
    (project / ".devcontainer" / "Dockerfile").write_text("FROM missing/image:1\nRUN true\n")
    with pytest.raises(ProjectImageError, match=r"FROM missing/image:1: not on this machine"):
        plan(engine, paths, project, source)


def test_builder_lines_are_never_markup(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    import sys

    from cloister_cli.commands import output

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    with output.build_progress() as progress:
        progress("img", "Step 1/2 : RUN echo [/] \x1b[8m")
    shown = capsys.readouterr().err
    assert "[/] \\x1b[8m" in shown
    assert "\x1b" not in shown
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with output.build_progress() as progress:
        progress("img", "[/] \x1b[8m [bold")  # no MarkupError


def test_the_scan_sends_what_dockers_walk_does_however_deep(project: Path) -> None:
    context = project / ".devcontainer"
    (context / ".dockerignore").write_text("cache\nlogs/*\n!logs/keep\nnode_modules\n")
    for name in ("cache/a", "logs/drop", "logs/keep", "src/main.py", "node_modules/x/y"):
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        (context / name).write_text("x\n")
    (context / "to-src").symlink_to(context / "src")
    expected = sorted(PatternMatcher([*_ignore_patterns(context)]).walk(str(context)))
    assert [entry.name for entry in scan(context)] == expected
    with deep_tree(context / "deep") as bottom:  # docker's own walk recurses: it stops here
        names = [entry.name for entry in scan(context)]
        assert str((bottom / "f").relative_to(context)) in names
        assert len(names) == len(expected) + 2 * DEPTH + 1


# -- what a start writes before it builds ------------------------------------------------


def _plan_with(
    engine: FakeEngine,
    paths: CloisterPaths,
    root: Path,
    source: Path,
    overlay: dict[Path, bytes],
) -> ImagePlan:
    return projectimages.plan_project_image(
        engine.client,
        paths,
        project=PROJECT,
        root=root,
        devcontainer=load(root),
        base_image="cloister:latest",
        source=source,
        overlay=overlay,
    )


def test_a_file_a_start_writes_into_a_context_is_hashed_as_written(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    lock = project / ".devcontainer" / "devcontainer-lock.json"
    content = b'{"features": {}}\n'
    planned = _plan_with(engine, paths, project, source, {lock: content})
    assert planned.key != plan(engine, paths, project, source).key
    other = _plan_with(engine, paths, project, source, {lock: b'{"features": {"x": {}}}\n'})
    assert other.key != planned.key  # the key covers what will be written
    lock.write_bytes(content)
    lock.chmod(0o644)
    assert plan(engine, paths, project, source).key == planned.key
    built = ensure(engine, paths, project, source)
    assert built.key == planned.key
    assert engine.builds[0].files["devcontainer-lock.json"] == content  # sent as hashed


def test_a_written_file_replaces_what_is_there_and_counts_only_where_docker_looks(
    engine: FakeEngine, paths: CloisterPaths, project: Path, source: Path
) -> None:
    context = project / ".devcontainer"
    lock = context / "devcontainer-lock.json"
    lock.symlink_to(project / "elsewhere")  # the start's rename replaces a link
    content = b"{}\n"
    planned = _plan_with(engine, paths, project, source, {lock: content})
    lock.unlink()
    lock.write_bytes(content)
    lock.chmod(0o644)
    assert plan(engine, paths, project, source).key == planned.key
    outside = {project / "README.md": b"x", project / ".devcontainer" / "gone" / "f": b"x"}
    assert _plan_with(engine, paths, project, source, outside).key == planned.key
    (context / ".dockerignore").write_text("devcontainer-lock.json\n")
    ignored = plan(engine, paths, project, source).key
    assert _plan_with(engine, paths, project, source, {lock: b"other\n"}).key == ignored
