"""Feature ids: what kind each is, whether its source is trusted, and what to do if not.

A Feature is an install script run as root while the image is built. Two kinds install:

- an OCI reference, ``<registry>/<namespace>/<name>[:<tag>|@sha256:<digest>]`` (the
  specification's grammar; compared in lower case, ``latest`` when no tag is given),
  fetched on the host, and only from a trusted source: the official
  ``ghcr.io/devcontainers/features/`` and what ``devcontainer.trusted_features`` in
  config.yaml lists. An entry ending in ``/`` is a prefix; any other entry is one Feature,
  in any version (``entry:1``, ``entry@sha256:…``), unless it names a version itself, so
  ``ghcr.io/my-org`` does not also trust ``ghcr.io/my-org-evil``;
- a local Feature, ``./name``: a folder under the project's ``.devcontainer/`` (the
  project's own code, like its Dockerfile).

A tarball URL, the retired GitHub-release form (``owner/repo/name@v1``) and the retired
short names (``node``) are refused, each with what to do instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TRUSTED_FEATURES: tuple[str, ...] = ("ghcr.io/devcontainers/features/",)
OFFICIAL_PREFIX = "ghcr.io/devcontainers/features"

_MAKE_LOCAL = 'make it local: copy its folder under .devcontainer/ and write "./<folder>"'
_CLOISTER_ONLY = (
    "or leave it out of a `.devcontainer/cloister/devcontainer.json` (read by Cloister"
    " instead of the other)"
)

# The retired short names the devcontainers CLI still maps to the official Features
# (its getBackwardCompatibleFeatureId): the name → the Feature it became.
_RETIRED_NAMES: dict[str, str] = {
    **{
        name: name
        for name in (
            "aws-cli",
            "azure-cli",
            "desktop-lite",
            "docker-in-docker",
            "docker-from-docker",
            "dotnet",
            "git",
            "git-lfs",
            "github-cli",
            "java",
            "kubectl-helm-minikube",
            "node",
            "powershell",
            "python",
            "ruby",
            "rust",
            "sshd",
            "terraform",
        )
    },
    "golang": "go",
    "common": "common-utils",
    "gradle": "java",
    "maven": "java",
    "jupyterlab": "python",
}
_PATH = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*")
_TAG = re.compile(r"[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REGISTRY = re.compile(
    r"(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9-]+)*|\[[0-9a-f:]+\])(?::[0-9]{1,5})?"
)
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
MAX_FEATURES = 100
"""The most Features a devcontainer.json may list (real ones list a few): each local one
is looked for on disk, and the file is read before the human is asked."""


class FeatureIdError(ValueError):
    """A Feature id that cannot be used; the message says what to do instead."""


@dataclass(frozen=True, slots=True)
class OciReference:
    """A parsed OCI Feature reference, lower-cased as the devcontainers CLI does.

    ``resource`` is ``registry/namespace/name``; ``path`` is ``namespace/name`` (what
    the registry's API calls the repository); exactly one of ``tag`` and ``digest``.
    """

    registry: str
    namespace: str
    name: str
    tag: str | None
    digest: str | None

    @property
    def path(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def resource(self) -> str:
        return f"{self.registry}/{self.path}"

    @property
    def version(self) -> str:
        """The tag or the digest: what the manifest is fetched by."""
        return self.digest if self.digest is not None else self.tag or "latest"

    @property
    def loopback(self) -> bool:
        """A registry on this machine (spoken to over plain http, as docker does)."""
        host = self.registry.rsplit(":", 1)[0] if not self.registry.endswith("]") else self.registry
        return host in LOOPBACK_HOSTS

    def __str__(self) -> str:
        if self.digest is not None:
            return f"{self.resource}@{self.digest}"
        return f"{self.resource}:{self.tag}"


def is_local_id(feature_id: str) -> bool:
    """Whether *feature_id* is a path (``./x``, ``../x``, ``/x``), as the CLI decides."""
    return feature_id.startswith(("./", "../", "/"))


def parse_oci_reference(feature_id: str) -> OciReference:
    """Parse an OCI Feature id; :class:`FeatureIdError` says what is wrong and what to do."""
    text = feature_id.strip().lower()
    if text.startswith(("https://", "http://")):
        raise FeatureIdError(
            "a Feature from a tarball URL is not supported (nothing pins its content):"
            f" use its OCI reference, {_MAKE_LOCAL}, {_CLOISTER_ONLY}"
        )
    if "/" not in text:
        raise _short_name(text)
    resource, tag, digest = _split_version(text)
    parts = resource.split("/")
    registry = parts[0]
    if "." not in registry and ":" not in registry and registry != "localhost":
        raise FeatureIdError(
            "the retired GitHub-release form (owner/repo/feature): use the Feature's OCI"
            f" reference, {_MAKE_LOCAL}, {_CLOISTER_ONLY}"
        )
    if len(parts) < 3:
        raise FeatureIdError(
            "an OCI Feature reference is <registry>/<namespace>/<name>: the namespace is missing"
        )
    path = "/".join(parts[1:])
    if not _REGISTRY.fullmatch(registry):
        raise FeatureIdError(f"{registry!r} is not a registry host name")
    if not _PATH.fullmatch(path):
        raise FeatureIdError(
            f"{path!r} is not a repository path (lower-case letters, digits, '.', '_', '-')"
        )
    if digest is not None and not _DIGEST.fullmatch(digest):
        raise FeatureIdError(f"{digest!r} is not a digest: expected sha256:<64 hex digits>")
    if tag is not None and not _TAG.fullmatch(tag):
        raise FeatureIdError(f"{tag!r} is not a tag")
    if parts[1] == "devcontainers-contrib":  # moved; the devcontainers CLI redirects it too
        parts[1] = "devcontainers-extra"
    return OciReference(registry, "/".join(parts[1:-1]), parts[-1], tag, digest)


def _short_name(text: str) -> FeatureIdError:
    became = _RETIRED_NAMES.get(text)
    if became is not None:
        return FeatureIdError(
            f"a retired short Feature name: write {OFFICIAL_PREFIX}/{became}:1 (what the"
            f" devcontainers CLI turns it into), {_MAKE_LOCAL}, {_CLOISTER_ONLY}"
        )
    return FeatureIdError(
        "not a Feature reference: write <registry>/<namespace>/<name>[:<tag>], or"
        f' "./{text}" for a folder under .devcontainer/'
    )


def _split_version(text: str) -> tuple[str, str | None, str | None]:
    """(resource, tag, digest): the last ``@`` starts a digest, a ``:`` after the last
    ``/`` a tag (one before it is a registry's port); neither means ``latest``."""
    at = text.rfind("@")
    if at != -1:
        return text[:at], None, text[at + 1 :]
    colon = text.rfind(":")
    if colon > text.rfind("/"):
        return text[:colon], text[colon + 1 :], None
    return text, "latest", None


def resolve_local_feature(feature_id: str, devcontainer_path: Path, project_root: Path) -> Path:
    """The folder a local Feature id names; :class:`FeatureIdError` unless it is a folder
    under the project's ``.devcontainer/`` (links resolved first: the agent writes them).

    The id is relative to the devcontainer.json's folder, as the specification says.
    """
    allowed = (project_root / ".devcontainer").resolve()
    if feature_id.startswith("/"):
        raise FeatureIdError(
            f"a local Feature is a folder under {allowed}, given relative to the"
            ' devcontainer.json ("./name"), not an absolute path'
        )
    folder = (devcontainer_path.parent / feature_id).resolve()
    if folder == allowed or not folder.is_relative_to(allowed):
        raise FeatureIdError(
            f"it resolves to {str(folder)!r}: a local Feature must be a folder under {allowed}"
            f" (move it there), {_CLOISTER_ONLY}"
        )
    if not folder.is_dir():
        raise FeatureIdError(f"no such folder: {str(folder)!r}")
    if not (folder / "devcontainer-feature.json").is_file():
        raise FeatureIdError(f"{str(folder)!r} has no devcontainer-feature.json")
    return folder


def is_trusted(feature_id: str, trusted: Sequence[str] = ()) -> bool:
    """Whether *feature_id* matches the default trusted prefix or an entry of *trusted*."""
    wanted = feature_id.strip().lower()
    if ".." in wanted or "://" in wanted:
        return False  # a path or URL that only starts like a trusted reference
    for entry in (*DEFAULT_TRUSTED_FEATURES, *trusted):
        known = entry.strip().lower()
        if not known:
            continue
        if known.endswith("/"):
            if wanted.startswith(known) and len(wanted) > len(known):
                return True
        elif wanted == known or wanted.startswith((known + ":", known + "@")):
            return True
    return False


def untrusted_reason(feature_id: str) -> str:
    """Why an OCI Feature from an untrusted source is refused, and what to do."""
    source = feature_id.strip().lower().split("@", 1)[0]
    prefix = source.rsplit("/", 1)[0] + "/" if "/" in source else source
    return (
        "a Feature from a source you have not trusted: it is neither fetched nor installed,"
        " and `cloister start` stops here. Trust it in config.yaml"
        f" (devcontainer.trusted_features: {prefix!r} for its source), or pin it: trust"
        " `<name>@sha256:<digest>` there and write the same id here (one version only),"
        f" {_MAKE_LOCAL}, {_CLOISTER_ONLY}"
    )
