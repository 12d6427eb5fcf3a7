"""Which dev container Features come from a trusted source.

A Feature is an install script run as root while the image is built, from wherever its
id points. The official ones (``ghcr.io/devcontainers/features/``) are trusted, and so
is what ``devcontainer.trusted_features`` in config.yaml lists. An entry ending in
``/`` is a prefix; any other entry is one Feature, in any version (``entry:1``,
``entry@sha256:…``), so ``ghcr.io/my-org`` does not also trust ``ghcr.io/my-org-evil``.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_TRUSTED_FEATURES: tuple[str, ...] = ("ghcr.io/devcontainers/features/",)


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
