"""cloister_cli.start.apply: what is checked between the shape's approval and the build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cloister_cli.images.shape import ShapeChangedError
from cloister_cli.start import apply
from cloister_core.devcontainer import Devcontainer, load_devcontainer


def _write(root: Path, features: dict[str, object]) -> None:
    folder = root / ".devcontainer"
    folder.mkdir(parents=True, exist_ok=True)
    document = {"image": "debian:bookworm-slim", "features": features}
    (folder / "devcontainer.json").write_text(json.dumps(document))


def _load(root: Path) -> Devcontainer:
    return load_devcontainer(
        root / ".devcontainer" / "devcontainer.json",
        project_root=root,
        home=root.parent / "home",
        environ={},
    )


def test_the_devcontainer_read_again_is_used_when_it_names_the_same_features(
    tmp_path: Path,
) -> None:
    _write(tmp_path, {"ghcr.io/devcontainers/features/node:1": {"version": "20"}})
    first = _load(tmp_path)
    assert apply.checked_devcontainer(first, lambda: _load(tmp_path)) == first


def test_features_changed_while_the_human_was_asked_stop_the_start(tmp_path: Path) -> None:
    """The Features were resolved (and their lock written) from the first read: a file
    that names others by the time it is read again is not what was approved."""
    _write(tmp_path, {"ghcr.io/devcontainers/features/node:1": {"version": "20"}})
    first = _load(tmp_path)
    _write(tmp_path, {"ghcr.io/devcontainers/features/node:1": {"version": "21"}})
    with pytest.raises(ShapeChangedError, match="changed while you were asked"):
        apply.checked_devcontainer(first, lambda: _load(tmp_path))
