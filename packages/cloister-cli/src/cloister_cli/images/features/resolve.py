"""A devcontainer's Features made ready to install: each one's content, metadata and
digest, the ``dependsOn`` closure, the install order, the lock file and the requests of
their metadata (through the same overrides as devcontainer.json).

A local Feature (a folder under ``.devcontainer/``) is read from the project as hostile
(no link followed, only regular files), its digest a sha256 over its entries. An OCI
Feature is the lock file's digest when the lock names it (nothing is asked of the
registry: a moved tag does not move the lock; only a dry run looks, to say so), else
its tag resolved now; its content comes from the cache, else from the registry.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from cloister_cli.images.features import cache
from cloister_cli.images.features.oci import Client, FeatureFetchError, Reference
from cloister_cli.images.projectimages.context import OVERLAY_MODE, read_file, scan
from cloister_cli.images.projectimages.model import Entry, ProjectImageError
from cloister_core import beneath
from cloister_core.devcontainer import Devcontainer, Feature, MountSpec, Override
from cloister_core.devcontainer.blocked import BlockedPaths
from cloister_core.devcontainer.featuremeta import OptionValue
from cloister_core.devcontainer.features import (
    FeatureIdError,
    is_local_id,
    is_trusted,
    resolve_local_feature,
)
from cloister_core.devcontainer.featureset import (
    FeatureError,
    FeatureMetadata,
    LockEntry,
    LockFile,
    ResolvedFeature,
    feature_overrides,
    install_order,
    lock_path_for,
    missing_dependencies,
    option_environment,
    parse_feature_metadata,
    read_lock,
    render_lock,
)
from cloister_core.devcontainer.variables import Variables
from cloister_core.errors import CloisterError
from cloister_core.paths import CloisterPaths
from cloister_core.printable import printable

if TYPE_CHECKING:
    from cloister_cli.context import Context as CliContext

METADATA_FILE = "devcontainer-feature.json"
METADATA_LIMIT = 1024 * 1024
MAX_FEATURES = 100  # with dependencies: a loop of dependsOn must end somewhere


class FeaturesError(CloisterError):
    """Features that cannot be installed; the message says which and what to do."""


@dataclass(frozen=True, slots=True)
class Installed:
    """One Feature, ready to install (or, in a dry run, shown as it would be)."""

    resolved: ResolvedFeature | None  # None: not fetched (a dry run only)
    feature: Feature
    folder: Path | None  # its content: the cache's folder or the project's
    entries: tuple[Entry, ...]  # that folder's, as hashed and sent
    resolved_as: str  # registry/path@sha256:… or the local folder
    cached: bool  # an OCI Feature already in the cache (nothing fetched)
    environment: Mapping[str, str]  # its options as the install script sees them
    notes: tuple[str, ...] = ()  # "tag now points to …", "not fetched: …"
    dependency: bool = False  # added by another Feature's dependsOn
    container_env: Mapping[str, str] = field(default_factory=dict)  # kept: ENV after it


@dataclass(frozen=True, slots=True)
class FeaturePlan:
    """The Features of a devcontainer in install order, and what their metadata asks."""

    installs: tuple[Installed, ...]
    lock: LockFile
    lock_text: str | None  # the lock file to write (first use, a new Feature); None: as is
    mounts: tuple[MountSpec, ...]
    container_env: Mapping[str, str]  # kept, in install order (ENV in the image)
    overrides: tuple[Override, ...]

    @property
    def complete(self) -> bool:
        return all(item.resolved is not None for item in self.installs)


@dataclass(frozen=True, slots=True)
class Context:
    """What resolving needs of the start: paths, the host's variables, trust."""

    paths: CloisterPaths
    project_root: Path
    home: Path
    environ: Mapping[str, str]
    trusted: Sequence[str] = ()
    blocked_paths: Sequence[Path] = ()
    container_workspace: str = "/work"


def plan_features(
    context: Context,
    devcontainer: Devcontainer,
    *,
    client: Client | None = None,
    dry_run: bool = False,
) -> FeaturePlan:
    """Resolve *devcontainer*'s Features. A dry run plans what cannot be fetched as
    "not fetched: <why>" and says where a locked tag moved; a start raises."""
    if not dry_run:
        check_refused(devcontainer)
    lock_path = lock_path_for(devcontainer.path)
    try:
        lock = read_lock(lock_path)
    except FeatureError as error:
        raise FeaturesError(str(error)) from None
    own = client is None
    client = client or Client()
    try:
        resolver = _Resolver(
            context, lock, client, devcontainer_path=devcontainer.path, dry_run=dry_run
        )
        items = [resolver.one(feature) for feature in devcontainer.features]
        items += resolver.dependencies(items)
    finally:
        if own:
            client.close()
    resolved = [item.resolved for item in items if item.resolved is not None]
    by_identity = {id(item.resolved): item for item in items if item.resolved is not None}
    try:
        ordered = install_order(resolved, devcontainer.override_feature_order)
    except FeatureError as error:
        if not dry_run or len(resolved) == len(items):
            raise FeaturesError(str(error)) from None
        # A dry run missing a dependency (not fetched, refused) cannot order the ones
        # that need it: listed as written, the missing one says why.
        ordered = resolved
    installs: list[Installed] = []
    variables = Variables(
        environ=context.environ,
        local_workspace=str(context.project_root),
        container_workspace=context.container_workspace,
    )
    blocked = BlockedPaths(context.home, context.blocked_paths)
    mounts: list[MountSpec] = []
    environment: dict[str, str] = {}
    overrides: list[Override] = []
    for each in ordered:
        requests = feature_overrides(each, variables=variables, blocked=blocked)
        installs.append(replace(by_identity[id(each)], container_env=requests.container_env))
        mounts += requests.mounts
        environment.update(requests.container_env)
        overrides += requests.overrides
    installs += [item for item in items if item.resolved is None]
    entries = dict(lock.entries)
    entries.update(resolver.new_entries)
    lock_text = None
    if resolver.new_entries:
        lock_text = render_lock(dict(sorted(entries.items())))
    return FeaturePlan(
        tuple(installs),
        lock,
        lock_text,
        tuple(mounts),
        environment,
        tuple(overrides),
    )


def refusal(devcontainer: Devcontainer | None) -> str | None:
    """Why a start stops on *devcontainer*'s Features: those the loader refused
    (untrusted, a URL, a retired short name, outside ``.devcontainer/``), even when it
    refused them all (none is left to install); None when it refused none."""
    if devcontainer is None or not devcontainer.refused_features:
        return None
    shown = "; ".join(item.render(devcontainer.path) for item in devcontainer.refused_features)
    return f"cannot install these Features: {shown}"


def check_refused(devcontainer: Devcontainer) -> None:
    """Stop on a Feature the loader refused (:func:`refusal`)."""
    why = refusal(devcontainer)
    if why is not None:
        raise FeaturesError(why)


def with_requests(devcontainer: Devcontainer, plan: FeaturePlan) -> Devcontainer:
    """*devcontainer* with its Features' kept mounts and their decisions added (their
    ``containerEnv`` is in the image: see :mod:`cloister_cli.images.features.layers`)."""
    return replace(
        devcontainer,
        mounts=(*devcontainer.mounts, *plan.mounts),
        overrides=(*devcontainer.overrides, *plan.overrides),
    )


def write_lock(plan: FeaturePlan, project_root: Path) -> bool:
    """Write the plan's lock file if it has one to write; whether it did.

    The directory is the agent's: the file is replaced by a rename relative to a
    directory opened beneath the project root (:func:`beneath.replace_file`), so a link
    planted at the lock's path, or on the way to it, never makes the host write elsewhere.
    """
    if plan.lock_text is None:
        return False
    path = plan.lock.path
    root, relative = _beneath(path, project_root)
    try:
        beneath.replace_file(root, relative, plan.lock_text, mode=OVERLAY_MODE)
    except OSError as error:
        raise FeaturesError(
            f"cannot write the Feature lock file {path}: {error.strerror or error}"
        ) from None
    return True


def to_write(plan: FeaturePlan | None) -> dict[Path, bytes]:
    """What :func:`write_lock` writes before the image is built (path: content): the
    overlay its plan is hashed with, so that it has the key the build will have when
    the lock is in a build context (:func:`~cloister_cli.images.projectimages.context.scan`)."""
    if plan is None or plan.lock_text is None:
        return {}
    return {plan.lock.path: plan.lock_text.encode("utf-8")}


def _beneath(path: Path, project_root: Path) -> tuple[Path, str]:
    root = Path(os.path.realpath(project_root))
    absolute = Path(os.path.normpath(path.absolute()))
    if absolute.is_relative_to(root):
        return root, absolute.relative_to(root).as_posix()
    # A devcontainer.json outside the project (--devcontainer PATH): its own directory.
    return absolute.parent, absolute.name


def local_digest(entries: Sequence[Entry]) -> str:
    """A local Feature's digest: a sha256 over its entries (name, kind, mode, content)."""
    digest = hashlib.sha256()
    for entry in entries:
        line = json.dumps([entry.kind, entry.name, entry.mode, entry.digest])
        digest.update(line.encode("utf-8", "surrogatepass") + b"\n")
    return "sha256:" + digest.hexdigest()


class _Resolver:
    def __init__(
        self,
        context: Context,
        lock: LockFile,
        client: Client,
        *,
        devcontainer_path: Path,
        dry_run: bool,
    ):
        self.context = context
        self.lock = lock
        self.client = client
        self.devcontainer_path = devcontainer_path  # what a local dependsOn is relative to
        self.dry_run = dry_run
        self.new_entries: dict[str, LockEntry] = {}

    def one(self, feature: Feature, *, dependency: bool = False) -> Installed:
        if feature.kind == "local":
            return replace(self._local(feature), dependency=dependency)
        try:
            if not feature.trusted:  # a start stopped on it already (check_refused)
                raise FeaturesError(f"Feature {printable(feature.id)!r}: nobody trusted its source")
            return self._oci(feature, dependency=dependency)
        except (FeatureFetchError, FeatureError, ProjectImageError, FeaturesError) as error:
            if not self.dry_run:
                if isinstance(error, FeatureFetchError):
                    raise FeaturesError(_what_to_do(str(error))) from None
                raise FeaturesError(str(error)) from None
            return Installed(
                None,
                feature,
                None,
                (),
                feature.id,
                False,
                {},
                (f"not fetched: {printable(str(error))}",),
                dependency,
            )

    def dependencies(self, items: list[Installed]) -> list[Installed]:
        """The Features ``dependsOn`` adds (and theirs), fetched like the others."""
        added: list[Installed] = []
        given_up: set[str] = set()  # a dry run's unfetched ones: shown once, not asked again
        while True:
            known = [item.resolved for item in (*items, *added) if item.resolved is not None]
            try:
                missing = [
                    (feature_id, options)
                    for feature_id, options in missing_dependencies(known)
                    if feature_id not in given_up
                ]
            except FeatureError as error:
                raise FeaturesError(str(error)) from None
            if not missing:
                return added
            if len(items) + len(added) + len(missing) > MAX_FEATURES:
                raise FeaturesError(f"more than {MAX_FEATURES} Features with their dependsOn")
            for feature_id, options in missing:
                try:
                    item = self.one(self.dependency(feature_id, options), dependency=True)
                except FeaturesError as error:
                    if not self.dry_run:
                        raise
                    # Shown like one that cannot be fetched: a dry run still plans.
                    refused = Feature(feature_id, dict(options), False, "oci")
                    why = (f"not installed: {printable(str(error))}",)
                    item = Installed(None, refused, None, (), feature_id, False, {}, why, True)
                if item.resolved is None:
                    given_up.add(feature_id)
                added.append(item)

    def dependency(self, feature_id: str, options: Mapping[str, OptionValue]) -> Feature:
        """The Feature a ``dependsOn`` entry names: a folder beside the others (relative
        to the devcontainer.json, as the CLI takes it), or one from a trusted source."""
        if is_local_id(feature_id):
            try:
                folder = resolve_local_feature(
                    feature_id, self.devcontainer_path, self.context.project_root
                )
            except FeatureIdError as error:
                raise FeaturesError(
                    f"a Feature depends on {printable(feature_id)!r}: {error}"
                ) from None
            return Feature(feature_id, dict(options), True, "local", folder)
        if not is_trusted(feature_id, self.context.trusted):
            raise FeaturesError(
                f"a Feature depends on {printable(feature_id)!r}, whose source nobody"
                " trusted: trust it in config.yaml (devcontainer.trusted_features),"
                " or use .devcontainer/cloister/devcontainer.json without it"
            )
        return Feature(feature_id, dict(options), True, "oci")

    def _local(self, feature: Feature) -> Installed:
        folder = feature.local_path
        if folder is None:
            raise FeaturesError(f"Feature {printable(feature.id)!r}: no folder")
        try:
            entries = scan(folder)
            text = read_file(folder / METADATA_FILE)
        except ProjectImageError as error:
            raise FeaturesError(f"local Feature {printable(feature.id)!r}: {error}") from None
        metadata = _parse(text, str(folder / METADATA_FILE))
        _check_install_script(feature, entries)
        resolved = ResolvedFeature(feature, metadata, local_digest(entries))
        return Installed(
            resolved,
            feature,
            folder,
            entries,
            str(folder),
            False,
            option_environment(metadata, feature.options),
        )

    def _oci(self, feature: Feature, *, dependency: bool) -> Installed:
        reference = Reference.parse(feature.id)
        notes: list[str] = []
        entry = self.lock.entries.get(feature.id)
        locked = _locked_digest(entry, reference) if entry is not None else None
        if locked is not None:
            digest = locked
            if self.dry_run and reference.digest is None:
                notes += self._moved(reference, digest)
        else:
            digest = self.client.resolve(reference)
        folder = cache.cached(self.context.paths, digest)
        was_cached = folder is not None
        annotation: str | None = None
        if folder is None:
            fetched = self.client.fetch(reference, digest)
            folder = cache.store(self.context.paths, fetched)
            annotation = fetched.annotation
        entries = scan(folder)
        where = f"{feature.id} {METADATA_FILE}"
        text = read_file(folder / METADATA_FILE)
        metadata = _parse(text, where)
        if annotation is not None and _differs(annotation, text):
            notes.append(
                "the manifest's dev.containers.metadata differs from the tarball's"
                f" {METADATA_FILE}: the tarball's is used"
            )
        _check_install_script(feature, entries)
        if locked is None:
            self.new_entries[feature.id] = LockEntry(
                version=metadata.version or (reference.tag or ""),
                resolved=reference.at(digest),
                integrity=digest,
                depends_on=tuple(sorted(metadata.depends_on)),
            )
        return Installed(
            ResolvedFeature(feature, metadata, digest),
            feature,
            folder,
            entries,
            reference.at(digest),
            was_cached,
            option_environment(metadata, feature.options),
            tuple(notes),
            dependency,
        )

    def _moved(self, reference: Reference, locked: str) -> list[str]:
        try:
            now = self.client.resolve(reference)
        except FeatureFetchError as error:
            return [f"where its tag points now is not known ({printable(str(error))})"]
        if now == locked:
            return []
        return [f"tag {reference.tag} now points to {now}; the lock keeps {locked}"]


def _locked_digest(entry: LockEntry, reference: Reference) -> str:
    resource, at, digest = entry.resolved.rpartition("@")
    if not at or resource.lower() != reference.resource.lower() or not digest.startswith("sha256:"):
        raise FeaturesError(
            f"the Feature lock's entry for {printable(reference.resource)!r} resolves to"
            f" {printable(entry.resolved)!r}, another Feature; remove that entry"
        )
    if reference.digest is not None and reference.digest != digest:
        raise FeaturesError(
            f"Feature {printable(reference.at(reference.digest))!r} is pinned to another digest"
            f" than its lock entry ({digest}); remove that entry"
        )
    return digest


def _parse(text: bytes, where: str) -> FeatureMetadata:
    if len(text) > METADATA_LIMIT:
        raise FeaturesError(f"{printable(where)}: more than {METADATA_LIMIT} bytes")
    try:
        return parse_feature_metadata(text.decode("utf-8"), where)
    except UnicodeDecodeError:
        raise FeaturesError(f"{printable(where)}: not UTF-8") from None
    except FeatureError as error:
        raise FeaturesError(str(error)) from None


def _differs(annotation: str, text: bytes) -> bool:
    try:
        return bool(json.loads(annotation) != json.loads(text))
    except ValueError:
        return True


def _check_install_script(feature: Feature, entries: Sequence[Entry]) -> None:
    if not any(entry.name == "install.sh" and entry.kind == "file" for entry in entries):
        raise FeaturesError(
            f"Feature {printable(feature.id)!r} has no install.sh (a regular file) at its top"
        )


def _what_to_do(error: str) -> str:
    return (
        f"{error}; pin the Feature (a devcontainer-lock.json entry or @sha256:…) once it can"
        " be fetched, make it local (a folder under .devcontainer/), or use"
        " .devcontainer/cloister/devcontainer.json without it"
    )


def for_start(
    cli: CliContext,
    root: Path,
    devcontainer: Devcontainer | None,
    environ: Mapping[str, str],
    *,
    dry_run: bool = False,
) -> FeaturePlan | None:
    """The Features of a start's devcontainer (None without any), resolved with the
    start's settings; nothing written (a start writes the lock file with
    :func:`write_lock` once the shape is checked). A start stops on a refused Feature
    (:func:`check_refused`), also when no other is left to install."""
    if devcontainer is None:
        return None
    if not dry_run:
        check_refused(devcontainer)
    if not devcontainer.has_features:
        return None
    settings = Context(
        paths=cli.paths,
        project_root=root,
        home=cli.home,
        environ=environ,
        trusted=cli.config.devcontainer.trusted_features,
        blocked_paths=(cli.paths.config_dir, cli.paths.data_dir),
    )
    return plan_features(settings, devcontainer, dry_run=dry_run)


def lock_input(devcontainer: Devcontainer | None) -> list[Path]:
    """The lock file, as a shape input, when the devcontainer has Features."""
    if devcontainer is None or not devcontainer.has_features:
        return []
    return [lock_path_for(devcontainer.path)]


def applied(
    devcontainer: Devcontainer | None, plan: FeaturePlan | None, warnings: list[str]
) -> Devcontainer | None:
    """*devcontainer* with its Features' requests (:func:`with_requests`); what they
    asked for and did not get added to *warnings*."""
    if devcontainer is None or plan is None:
        return devcontainer
    warnings.extend(warnings_of(devcontainer, plan))
    return with_requests(devcontainer, plan)


def warnings_of(devcontainer: Devcontainer, plan: FeaturePlan | None) -> list[str]:
    """A start's warnings about the Features: their requests not kept, their notes."""
    if plan is None:
        return []
    shown = [item.render(devcontainer.path) for item in plan.overrides if item.outcome != "kept"]
    shown += [f"Feature {item.feature.id}: {note}" for item in plan.installs for note in item.notes]
    return [printable(line) for line in shown]
