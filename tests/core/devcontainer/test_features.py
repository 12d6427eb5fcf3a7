"""Which Features are trusted, and the `devcontainer:` section of config.yaml."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cloister_core.config.models import GlobalConfig
from cloister_core.devcontainer import is_trusted

MINE = ("ghcr.io/my-org/features/", "ghcr.io/friend/tool")


@pytest.mark.parametrize(
    ("feature", "trusted"),
    [
        ("ghcr.io/devcontainers/features/node:1", True),
        ("GHCR.IO/devcontainers/features/python", True),
        ("ghcr.io/devcontainers/features/", False),  # the prefix alone names nothing
        ("ghcr.io/devcontainers/features-evil/x:1", False),
        ("ghcr.io/devcontainers/features/../../evil/x", False),
        ("https://ghcr.io/devcontainers/features/x.tgz", False),
        ("ghcr.io/my-org/features/lint:2", True),
        ("ghcr.io/friend/tool:3", True),
        ("ghcr.io/friend/tool@sha256:abc", True),
        ("ghcr.io/friend/toolbox:1", False),  # an entry without "/" is one Feature
        ("./local-feature", False),
        ("node", False),  # the retired short names
    ],
)
def test_is_trusted(feature: str, trusted: bool) -> None:
    assert is_trusted(feature, MINE) is trusted


def test_config_section() -> None:
    config = GlobalConfig.model_validate({"devcontainer": {"trusted_features": list(MINE)}})
    assert config.devcontainer.trusted_features == MINE
    assert GlobalConfig().devcontainer.trusted_features == ()
    assert (
        GlobalConfig.model_validate({"devcontainer": {"trusted_features": None}}) == GlobalConfig()
    )


@pytest.mark.parametrize("entry", ["", "ghcr.io/a b", "https://example.com/f.tgz"])
def test_config_refuses_what_is_no_feature_reference(entry: str) -> None:
    with pytest.raises(ValidationError, match="not a Feature id or prefix"):
        GlobalConfig.model_validate({"devcontainer": {"trusted_features": [entry]}})
