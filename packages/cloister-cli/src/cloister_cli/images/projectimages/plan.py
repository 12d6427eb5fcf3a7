"""Planning a project's image: the key over every input, the steps, the builds; and
:func:`ensure_project_image`, which builds what the plan says is missing."""

from __future__ import annotations

import hashlib
import json
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import docker.errors

from cloister_cli.container.engine import Engine
from cloister_cli.images.projectimages.build import build_chain
from cloister_cli.images.projectimages.context import read_file, scan
from cloister_cli.images.projectimages.model import (
    BASE_ARG,
    CLOISTER_HOME,
    CLOISTER_LAYER,
    HOSTEXEC_SOURCE,
    KEY_LABEL,
    PROJECT_DOCKERFILE,
    PROJECT_LABEL,
    RECIPE_VERSION,
    Build,
    Entry,
    ImagePlan,
    Progress,
    ProjectImageError,
    project_tag,
)
from cloister_cli.images.projectimages.store import record_path, write_record
from cloister_cli.images.sourcetree import source_tree
from cloister_core.fileio import locked
from cloister_core.names import validate_name
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable

if TYPE_CHECKING:
    from cloister_cli.images.features.resolve import FeaturePlan
    from cloister_core.devcontainer import Devcontainer


def plan_project_image(
    client: Engine,
    paths: CloisterPaths,
    *,
    project: str,
    root: Path,
    devcontainer: Devcontainer | None,
    base_image: str,
    source: Path | None = None,
    features: FeaturePlan | None = None,
    overlay: Mapping[Path, bytes] | None = None,
) -> ImagePlan:
    """The image ``cloister start`` would run, without building anything.

    *source* is Cloister's source tree (for the ``hostexec`` client; found when None
    and needed); *features* the devcontainer's Features, resolved
    (:func:`cloister_cli.images.features.plan_features`); *overlay* the files a start
    writes before it builds (absolute path: content), hashed as if they were there
    (:func:`~cloister_cli.images.projectimages.context.scan`: a build scans again what
    is). Reads the project's files and asks the engine about images; raises
    :class:`ProjectImageError` for Features not resolved (or not fetched), a devcontainer
    image that is not on this machine, or an unusable ``.cloister/Dockerfile``.
    """
    validate_name(project, what="project")
    if devcontainer is not None and devcontainer.has_features:
        _check_features(devcontainer, features)
    project_dockerfile = _project_dockerfile(root)
    if devcontainer is None and project_dockerfile is None:
        return ImagePlan(
            project, base_image, None, True, (f"use the image {base_image} as it is",), base_image
        )
    digest = _Digest()
    digest.add("recipe", RECIPE_VERSION)
    steps: list[str] = []
    builds: list[Build] = []
    if devcontainer is None:
        start = _image_id(client, base_image)
        digest.add("base", base_image, start or "absent")
        steps.append(
            f"start from {base_image}"
            + ("" if start else " (not on this machine yet: `cloister start` builds it)")
        )
        base: str | None = base_image
    else:
        start = _plan_devcontainer(
            client,
            root,
            project=project,
            devcontainer=devcontainer,
            digest=digest,
            steps=steps,
            builds=builds,
            overlay=overlay,
        )
        # The cloister layer before the Features: the same on the same image with or
        # without them, so Docker's cache has it when Features are added or changed.
        builds.append(_cloister_layer(source, digest))
        steps.append("add the cloister layer (/usr/local/bin/hostexec, /work)")
        if features is not None and features.installs:
            as_root = start is None or _image_user(client, start) not in ("", "root", "0")
            builds.append(_features_layer(devcontainer, features, digest, as_root=as_root))
            from cloister_cli.images.features.layers import step_lines  # noqa: PLC0415

            steps += step_lines(features.installs)
        base = None
    if project_dockerfile is not None:
        context = project_dockerfile.parent
        text = read_file(project_dockerfile)
        entries = scan(context, overlay)
        digest.add("project-dockerfile", text)
        digest.add_entries("project-context", entries)
        builds.append(Build(str(PROJECT_DOCKERFILE), text, context, entries, chained=True))
        steps.append(f"build {PROJECT_DOCKERFILE} on top ({BASE_ARG}, context .cloister/)")
    key = digest.hexdigest()
    tag = project_tag(project, key)
    cached = _has_key(client, tag, key)
    steps.append(f"reuse {tag} (its inputs are unchanged)" if cached else f"tag it {tag}")
    return ImagePlan(project, tag, key, cached, tuple(steps), base, tuple(builds), start)


def ensure_project_image(
    client: Engine,
    paths: CloisterPaths,
    *,
    project: str,
    root: Path,
    devcontainer: Devcontainer | None,
    base_image: str,
    source: Path | None = None,
    progress: Progress = lambda what, line: None,
    rebuild: bool = False,
    features: FeaturePlan | None = None,
) -> ImagePlan:
    """Plan the project's image and build what is missing; the plan, ``cached`` as found.

    Without a devcontainer the base image must exist already (``cloister start`` builds
    Cloister's own agent images first). *rebuild* builds again without Docker's cache
    even when an image with the key exists. The record of the project's current image
    is written (under a lock, which ``prune`` takes too) whether anything was built or not.
    """
    record = record_path(paths, project)
    with locked(record):
        plan = plan_project_image(
            client,
            paths,
            project=project,
            root=root,
            devcontainer=devcontainer,
            base_image=base_image,
            source=source,
            features=features,
        )
        if plan.key is not None and (rebuild or not plan.cached):
            if plan.start is None and plan.builds[0].chained:
                raise ProjectImageError(
                    f"image {base_image!r} is not on this machine; `docker pull {base_image}`"
                    " or build it first"
                )
            build_chain(client, plan, progress, no_cache=rebuild)
            plan = replace(plan, cached=False)
        write_record(client, record, plan)
    return plan


# -- planning helpers ----------------------------------------------------------------


class _Digest:
    """A sha256 over labelled, length-prefixed fields (no two inputs hash alike)."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def add(self, label: str, *values: str | bytes) -> None:
        for value in (label, *values):
            data = value.encode() if isinstance(value, str) else value
            self._hash.update(len(data).to_bytes(8, "big") + data)

    def add_entries(self, label: str, entries: Sequence[Entry]) -> None:
        self.add(label, str(len(entries)))
        for entry in entries:
            self.add(entry.kind, entry.name, f"{entry.mode:o}", entry.digest)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _plan_devcontainer(
    client: Engine,
    root: Path,
    *,
    project: str,
    devcontainer: Devcontainer,
    digest: _Digest,
    steps: list[str],
    builds: list[Build],
    overlay: Mapping[Path, bytes] | None,
) -> str | None:
    """Add the devcontainer's part; the ID of the image to build on (None: built first)."""
    digest.add("devcontainer.json", read_file(devcontainer.path))
    image_source = devcontainer.source
    if image_source.kind == "image":
        name = image_source.image or ""
        found = _image_id(client, name, project)
        if found is None:
            raise ProjectImageError(
                f"image {printable(name)!r} (devcontainer.json `image`) is not on this machine"
                f" and Cloister pulls nothing: `docker pull {printable(name)}` or build it first"
            )
        digest.add("image", name, found)
        steps.append(f"start from {name} (devcontainer.json `image`)")
        return found
    if image_source.dockerfile is None or image_source.context is None:
        raise ProjectImageError(f"{devcontainer.path}: a build without a Dockerfile")
    text = read_file(image_source.dockerfile)
    entries = scan(image_source.context, overlay)
    args = dict(sorted(image_source.args.items()))
    digest.add("dockerfile", text)
    digest.add_entries("context", entries)
    digest.add("args", json.dumps(args))
    digest.add("target", image_source.target or "")
    parents = []
    for reference in from_images(text.decode("utf-8", "replace"), args):
        found = _image_id(client, reference, project) if "$" not in reference else None
        if found is None:
            # The classic builder would pull it (with the network): Cloister pulls nothing.
            raise ProjectImageError(
                f"FROM {printable(reference)}: not on this machine;"
                f" `docker pull {printable(reference)}` (or build it) first"
            )
        digest.add("from", reference, found)
        parents.append(reference)
    where = _shown(image_source.dockerfile, root)
    details = [f"target {image_source.target}"] if image_source.target else []
    details += [f"args {', '.join(args)}"] if args else []
    detail = f" ({'; '.join(details)})" if details else ""
    source_line = f" FROM {', '.join(parents)}" if parents else ""
    steps.append(
        f"build {where}{detail}{source_line}, context {_shown(image_source.context, root)}"
    )
    builds.append(
        Build(where, text, image_source.context, entries, args=args, target=image_source.target)
    )
    return None


def _check_features(devcontainer: Devcontainer, features: FeaturePlan | None) -> None:
    # The Features' code is imported only for a devcontainer that has some.
    from cloister_cli.images.features.resolve import FeaturesError, check_refused  # noqa: PLC0415

    if features is None:  # (resolving them stopped on a refused one already)
        try:
            check_refused(devcontainer)
        except FeaturesError as error:
            raise ProjectImageError(str(error)) from None
        raise ProjectImageError(
            f"{devcontainer.path}: its Features are fetched and installed by `cloister start`"
        )
    missing = [item for item in features.installs if item.resolved is None]
    if missing:
        shown = "; ".join(f"{item.feature.id}: {', '.join(item.notes)}" for item in missing)
        raise ProjectImageError(f"Features that cannot be installed: {printable(shown)}")


def _features_layer(
    devcontainer: Devcontainer, features: FeaturePlan, digest: _Digest, *, as_root: bool
) -> Build:
    from cloister_cli.images.features.layers import feature_build  # noqa: PLC0415

    build = feature_build(
        features, remote_user=devcontainer.user, home=CLOISTER_HOME, as_root=as_root
    )
    digest.add("features", build.dockerfile, str(len(features.installs)))
    for item in features.installs:
        assert item.resolved is not None  # noqa: S101 - checked above
        digest.add("feature", item.feature.id, item.resolved.digest)
        digest.add_entries("feature-content", item.entries)
    for name, content in build.generated:
        digest.add("generated", name, content)
    return build


def _cloister_layer(source: Path | None, digest: _Digest) -> Build:
    hostexec = (source or source_tree()) / HOSTEXEC_SOURCE
    try:
        client_script = hostexec.read_bytes()
    except OSError as error:
        raise ProjectImageError(f"cannot read the hostexec client: {error}") from None
    digest.add("cloister-layer", CLOISTER_LAYER, client_script)
    return Build(
        "the cloister layer",
        CLOISTER_LAYER.encode(),
        None,
        (),
        generated=(("hostexec", client_script),),
        directories=("work",),
        chained=True,
    )


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def _project_dockerfile(root: Path) -> Path | None:
    """``.cloister/Dockerfile``, if there is one; refused when it is not a plain file."""
    directory = root / PROJECT_DOCKERFILE.parent
    path = root / PROJECT_DOCKERFILE
    try:
        if not stat.S_ISDIR(directory.lstat().st_mode):
            return None  # a .cloister that is a link or a file is not Cloister's
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(mode):
        raise ProjectImageError(
            f"{path} is not a regular file (a symbolic link?); Cloister reads only a plain file"
        )
    return path


def _image_id(client: Engine, name: str, project: str | None = None) -> str | None:
    """The ID of the image *name*, None if it is not on this machine. With *project*,
    another project's own image is refused: it may hold that project's files (a
    Dockerfile's ``COPY . /src``), which this project's agent must not read."""
    try:
        image = client.images.get(name)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as error:
        raise ProjectImageError(
            f"image {printable(name)!r}: {printable(str(error.explanation or error))}"
        ) from None
    owner = (image.labels or {}).get(PROJECT_LABEL)
    if project is not None and owner is not None and owner != project:
        raise ProjectImageError(
            f"image {printable(name)!r} is project {printable(owner)!r}'s own image, which"
            f" may hold its files: project {project!r} cannot start from it"
        )
    return str(image.id) if image.id else None


def project_image_id(client: Engine, name: str, project: str) -> str | None:
    """:func:`_image_id` for another module (compose services start from images too)."""
    return _image_id(client, name, project)


def _image_user(client: Engine, image: str) -> str:
    """The user *image* ends as (``Config.User``); "?" when it cannot be known."""
    try:
        config = client.images.get(image).attrs.get("Config") or {}
    except docker.errors.DockerException:
        return "?"
    return str(config.get("User") or "")


def _has_key(client: Engine, tag: str, key: str) -> bool:
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return (image.labels or {}).get(KEY_LABEL) == key


_ARG = re.compile(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?", re.IGNORECASE)
_FROM = re.compile(r"^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE)
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")


def from_images(text: str, args: Mapping[str, str]) -> list[str]:
    """The images a Dockerfile's stages start from (not earlier stages, not scratch).

    Only to hash their IDs and show them: global ``ARG`` defaults and build args are
    substituted; a reference still holding ``$`` is hashed as written.
    """
    logical = re.sub(r"\\\r?\n", " ", text)
    known: dict[str, str] = {}
    stages: set[str] = set()
    found: list[str] = []
    seen_from = False
    for raw in logical.splitlines():
        line = raw.strip()
        argument = _ARG.match(line)
        if argument and not seen_from:
            name, default = argument.group(1), argument.group(2)
            if name in args:
                known[name] = args[name]
            elif default is not None:
                known[name] = default.strip("\"'")
            continue
        stage = _FROM.match(line)
        if not stage:
            continue
        seen_from = True

        def value(match: re.Match[str]) -> str:
            name = match.group(1) or match.group(3)
            fallback = match.group(2)
            if name in known:
                return known[name]
            return fallback if fallback is not None else match.group(0)

        reference = _VARIABLE.sub(value, stage.group(1))
        if reference.lower() not in stages and reference.lower() != "scratch":
            found.append(reference)
        if stage.group(2):
            stages.add(stage.group(2).lower())
    return found
