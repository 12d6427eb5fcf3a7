"""Dev container Features, the part that needs no network: what the CLI fetches and
installs is described, ordered, turned into environment and checked here.

``featuremeta``      :func:`parse_feature_metadata` (``devcontainer-feature.json``),
                     :func:`option_environment`, :func:`option_problems`,
                     :func:`render_feature_env`,
                     :class:`ResolvedFeature`
``featureorder``     :func:`install_order`, :func:`missing_dependencies`
``featurerequests``  :func:`feature_overrides`: a Feature's metadata through the same
                     overrides as devcontainer.json
``featurelock``      ``devcontainer-lock.json``: :func:`read_lock`, :func:`render_lock`
"""

from __future__ import annotations

from cloister_core.devcontainer.featurelock import (
    LockEntry,
    LockFile,
    lock_path_for,
    read_lock,
    render_lock,
)
from cloister_core.devcontainer.featuremeta import (
    FeatureError,
    FeatureMetadata,
    OptionSpec,
    ResolvedFeature,
    option_environment,
    option_problems,
    parse_feature_metadata,
    render_feature_env,
)
from cloister_core.devcontainer.featureorder import install_order, missing_dependencies
from cloister_core.devcontainer.featurerequests import FeatureRequests, feature_overrides

__all__ = [
    "FeatureError",
    "FeatureMetadata",
    "FeatureRequests",
    "LockEntry",
    "LockFile",
    "OptionSpec",
    "ResolvedFeature",
    "feature_overrides",
    "install_order",
    "lock_path_for",
    "missing_dependencies",
    "option_environment",
    "option_problems",
    "parse_feature_metadata",
    "read_lock",
    "render_feature_env",
    "render_lock",
]
