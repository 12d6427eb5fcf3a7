"""devcontainer.json with Cloister's security overrides: discovery, parsing, decisions.

Pure: no Docker, no subprocess; the file system is read only for the file itself, the
Dockerfile's existence and where paths really lead (symbolic links). The CLI builds
and runs what :func:`load_devcontainer` returns.

``loader``     :func:`find_devcontainer`, :func:`load_devcontainer`
``model``      the frozen result (:class:`Devcontainer`, :class:`Override`, …) and the error
``jsonc``      JSON with comments, errors at file:line:column
``mounts``     ``mounts`` entries; ``blocked`` the host paths no cloister may mount
``runargs``    the ``runArgs`` allowlist and the reasons for the rest
``compose``    ``dockerComposeFile``: the cloister's service and the services beside it
``composefile`` compose files read bounded, merged and interpolated, with their lines
``features``   Feature ids: their kind, whether trusted, what to do if refused
``featureset`` Features' metadata, options, install order, requests and lock file
``variables``  ``${localEnv:X}`` and the workspace variables
"""

from __future__ import annotations

from cloister_core.devcontainer.features import (
    DEFAULT_TRUSTED_FEATURES,
    FeatureIdError,
    OciReference,
    is_trusted,
    parse_oci_reference,
)
from cloister_core.devcontainer.featureset import (
    FeatureError,
    FeatureMetadata,
    FeatureRequests,
    LockEntry,
    LockFile,
    OptionSpec,
    ResolvedFeature,
    feature_overrides,
    install_order,
    lock_path_for,
    missing_dependencies,
    option_environment,
    parse_feature_metadata,
    read_lock,
    render_feature_env,
    render_lock,
)
from cloister_core.devcontainer.loader import CANDIDATES, find_devcontainer, load_devcontainer
from cloister_core.devcontainer.model import (
    LIFECYCLE_STAGES,
    ComposeService,
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
    "ComposeService",
    "Devcontainer",
    "DevcontainerError",
    "Feature",
    "FeatureError",
    "FeatureIdError",
    "FeatureMetadata",
    "FeatureRequests",
    "ImageSource",
    "LifecycleCommand",
    "LifecycleStage",
    "LockEntry",
    "LockFile",
    "MountSpec",
    "OciReference",
    "OptionSpec",
    "Outcome",
    "Override",
    "ResolvedFeature",
    "feature_overrides",
    "find_devcontainer",
    "install_order",
    "is_trusted",
    "load_devcontainer",
    "lock_path_for",
    "missing_dependencies",
    "option_environment",
    "parse_feature_metadata",
    "parse_oci_reference",
    "read_lock",
    "render_feature_env",
    "render_lock",
]
