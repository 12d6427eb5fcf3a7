"""devcontainer.json with Cloister's security overrides: discovery, parsing, decisions.

Pure: no Docker, no subprocess; the file system is read only for the file itself, the
Dockerfile's existence and where paths really lead (symbolic links). The CLI builds
and runs what :func:`load_devcontainer` returns.

``loader``     :func:`find_devcontainer`, :func:`load_devcontainer`
``model``      the frozen result (:class:`Devcontainer`, :class:`Override`, …) and the error
``jsonc``      JSON with comments, errors at file:line:column
``mounts``     ``mounts`` entries; ``blocked`` the host paths no cloister may mount
``runargs``    the ``runArgs`` allowlist and the reasons for the rest
``features``   which Features are trusted
``variables``  ``${localEnv:X}`` and the workspace variables
"""

from __future__ import annotations

from cloister_core.devcontainer.features import DEFAULT_TRUSTED_FEATURES, is_trusted
from cloister_core.devcontainer.loader import CANDIDATES, find_devcontainer, load_devcontainer
from cloister_core.devcontainer.model import (
    LIFECYCLE_STAGES,
    Devcontainer,
    DevcontainerError,
    Feature,
    ImageSource,
    LifecycleCommand,
    LifecycleStage,
    MountSpec,
    Outcome,
    Override,
)

__all__ = [
    "CANDIDATES",
    "DEFAULT_TRUSTED_FEATURES",
    "LIFECYCLE_STAGES",
    "Devcontainer",
    "DevcontainerError",
    "Feature",
    "ImageSource",
    "LifecycleCommand",
    "LifecycleStage",
    "MountSpec",
    "Outcome",
    "Override",
    "find_devcontainer",
    "is_trusted",
    "load_devcontainer",
]
